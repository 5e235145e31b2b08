"""Resumable state: what a loader, a group or a run must remember to continue exactly.

States nest by level, each a small frozen record with a version:

- ``LoaderState``: one iterator at (epoch, step), its seed, and fingerprints of
  its configuration and batching view, with a readable summary of the settings
  (``settings``) so that a mismatch says ``batch_len: saved 480000, now 160000``
  instead of two hashes;
- ``GroupState``: a group (speechiter.group) at (epoch, step) under its
  ``steps`` policy, with each iterator's LoaderState at that iterator's own
  position (see NOTE [ Group steps ] in speechiter/group.py), checked to agree;
- ``RunState``: a CLI train run: mode, seed, the run's configuration, and the
  train group's GroupState.

``to_dict`` gives the JSON-able form (the keys below); ``from_dict`` checks a
saved dict and raises a ConfigError naming the bad key; ``check_fits`` says what
differs from the current setup. Versions: 1 has no settings summaries; 2 has a
flat run state (``epoch``, ``step``, ``iterators`` beside ``seed``); in 1 to 3
the fingerprints include the layout (ranks, ngpu), so those states resume on
the same layout only; 4 saves the layout of the epoch apart (``layout``) and
resumes on any (NOTE [ Elastic resume ] in speechiter/plan/layout.py).
All load (speechiter/state_keys.py checks a saved dict). The Python API (``Loader`` / ``GroupLoader.state_dict``) and the CLI
(``--save_state`` / ``--resume``, speechiter/state_files.py) share these
records. Resuming costs O(1) batches: the plan is recomputed and cut at the
step; no skipped batch is read.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Protocol, runtime_checkable

from speechiter.errors import ConfigError
from speechiter.fingerprints import settings_differences
from speechiter.plan.layout import Layout
from speechiter.state_keys import (ELASTIC_VERSION, FLAT_RUN_KEYS, GROUP_KEYS, KEY_BATCHES, KEY_CONFIG, KEY_EPOCH,
                                   KEY_GROUP, KEY_ITERATORS, KEY_LAYOUT, KEY_MODE, KEY_NAME, KEY_POLICY, KEY_SEED,
                                   KEY_SETTINGS, KEY_SOURCES, KEY_STEP, KEY_VERSION, KEY_VIEW, KEY_WORLD_SIZE, LOADER_KEYS,
                                   RUN_KEYS, STATE_VERSION, check_keys, check_settings)

__all__ = ["STATE_VERSION", "Stateful", "LoaderState", "GroupState", "RunState", "check_step"]


@runtime_checkable
class Stateful(Protocol):
    """Something that can save where it stands and continue from there."""

    def state_dict(self) -> Dict[str, Any]:
        """A JSON-able snapshot of where this object stands."""
        ...

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a ``state_dict()``; raise ConfigError if it does not fit."""
        ...


def _loader_states(value: Any, where: str) -> Dict[str, "LoaderState"]:
    """``{name: LoaderState}`` from a saved ``iterators`` mapping."""
    if not isinstance(value, dict):
        raise ConfigError(where, f"expected a mapping of iterator states, got {type(value).__name__}")
    return {str(name): LoaderState.from_dict(state, f"{where}.{name}") for name, state in value.items()}


def _differences(saved: Any, current: Any, labels: Dict[str, str]) -> List[str]:
    """What differs, by label. A different config is told setting by setting when both have a summary;
    a digest (config, view) goes without saying once a difference is told. A value the saved state
    does not hold (None: an older version) is not compared."""
    found, told = [], False
    for key, label in labels.items():
        before, now = getattr(saved, key), getattr(current, key)
        if before == now or before is None:
            continue
        if key == KEY_CONFIG:
            settings = settings_differences(saved.settings, current.settings)
            found, told = found + settings, told or bool(settings)
        if key in (KEY_CONFIG, KEY_VIEW) and told:
            continue
        found.append(f"{label}: saved {before!r}, now {now!r}")
        told = told or key == KEY_POLICY
    return found


@dataclasses.dataclass(frozen=True)
class LoaderState:
    """Where one iterator's loader stands: the next batch is step ``step + 1`` of ``epoch``."""

    iterator: str  # the iterator's name, e.g. "train/sup"
    epoch: int
    step: int  # steps of the epoch already consumed
    seed: int
    config: str  # Iterator.config_fingerprint (versions 1 to 3: the legacy one, with the layout)
    view: str  # Iterator.view_fingerprint(): of the base view (versions 1 to 3: of the rank's view)
    batches: int  # batches in that view
    settings: Optional[Dict[str, Any]] = None  # settings_summary of the configuration (None in version 1)
    layout: Optional[Layout] = None  # the layout of the epoch (None before version 4: the iterator's own)
    version: int = STATE_VERSION
    sources: Optional[Dict[str, "LoaderState"]] = None  # a mix's corpora (absent from the dict when None)

    @classmethod
    def of(cls, iterator, epoch: int, step: int, version: int = STATE_VERSION) -> "LoaderState":
        """``iterator``'s state at (epoch, step), with the fingerprints a state of ``version`` holds."""
        if version < ELASTIC_VERSION:  # the legacy fingerprints, with the layout
            return cls(iterator=iterator.name, epoch=epoch, step=step, seed=iterator.seed,
                       config=iterator.plan.fingerprint(legacy=True), view=iterator.view_fingerprint(legacy=True),
                       batches=len(iterator.batches), settings=iterator.plan.summary(legacy=True), version=version)
        sources = getattr(iterator, "source_states", None)
        return cls(iterator=iterator.name, epoch=epoch, step=step, seed=iterator.seed,
                   config=iterator.config_fingerprint, view=iterator.view_fingerprint(),
                   batches=iterator.base_batches(), settings=iterator.config_summary,
                   layout=iterator.layout_of(epoch), version=version, sources=sources and sources(epoch, step))

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.version < ELASTIC_VERSION:
            del data[KEY_LAYOUT]
        if self.sources is None:
            del data[KEY_SOURCES]
        else:
            data[KEY_SOURCES] = {name: state.to_dict() for name, state in self.sources.items()}
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> "LoaderState":
        fields = check_keys(data, LOADER_KEYS, where, "a loader state", optional=(KEY_SETTINGS, KEY_SOURCES),
                            elastic=(KEY_LAYOUT,))
        fields[KEY_SETTINGS] = check_settings(fields.get(KEY_SETTINGS), f"{where}.{KEY_SETTINGS}")
        if fields.get(KEY_SOURCES) is not None:
            fields[KEY_SOURCES] = _loader_states(fields[KEY_SOURCES], f"{where}.{KEY_SOURCES}")
        if KEY_LAYOUT in fields:
            fields[KEY_LAYOUT] = Layout.from_dict(fields[KEY_LAYOUT], f"{where}.{KEY_LAYOUT}")
        return cls(**fields)

    def check_setup(self, iterator, where: str = "state") -> None:
        """Raise a ConfigError naming every difference from ``iterator``'s current setup."""
        labels = {KEY_NAME: "iterator", KEY_SEED: "seed", KEY_CONFIG: "configuration", KEY_VIEW: "batching view",
                  KEY_BATCHES: "number of batches"}
        differences = _differences(self, LoaderState.of(iterator, self.epoch, self.step, self.version), labels)
        if differences and self.layout is not None and self.layout.ngpu != iterator.ngpu and (
                self.view != iterator.view_fingerprint()):
            differences.append(f"the batching rule depends on ngpu, saved {self.layout.ngpu}, now {iterator.ngpu}")
        if differences:
            raise ConfigError(where, "the state was saved with a different setup (" + "; ".join(differences) + ")")
        if hasattr(iterator, "check_sources"):
            iterator.check_sources(self.sources, self.epoch, self.step, f"{where}.{KEY_SOURCES}")

    def check_fits(self, iterator, where: str = "state") -> None:
        """check_setup, and raise a ConfigError if the step is past the end of the epoch (as the iterator
        plans it: after its ``continue_epoch`` with this state's layout)."""
        self.check_setup(iterator, where)
        check_step(self.step, iterator.epoch_len(self.epoch), self.epoch, f"{where}.{KEY_STEP}")


@dataclasses.dataclass(frozen=True)
class GroupState:
    """Where a group stands: ``step`` steps of its ``epoch`` done under its ``steps`` policy; each
    iterator's state is at that iterator's own position (see NOTE [ Group steps ] in speechiter/group.py)."""

    epoch: int
    step: int
    steps: Optional[str]  # the policy; None in a version 1 or 2 run state (its config fingerprint holds it)
    iterators: Dict[str, LoaderState]  # by str(name): "None" for a lone Iterator
    version: int = STATE_VERSION

    def to_dict(self) -> Dict[str, Any]:
        return {KEY_VERSION: self.version, KEY_EPOCH: self.epoch, KEY_STEP: self.step, KEY_POLICY: self.steps,
                KEY_ITERATORS: {name: state.to_dict() for name, state in self.iterators.items()}}

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> "GroupState":
        fields = check_keys(data, GROUP_KEYS, where, "a group state", optional=())
        fields[KEY_ITERATORS] = _loader_states(fields[KEY_ITERATORS], f"{where}.{KEY_ITERATORS}")
        return cls(**fields)

    def check_setup(self, current: "GroupState", iterators: Dict[str, Any], where: str = "state") -> None:
        """Raise a ConfigError unless this state was saved by a group like ``current``'s: the same policy
        and iterators (``{str(name): Iterator}``), each with the same setup."""
        if self.steps is not None and self.steps != current.steps:
            raise ConfigError(f"{where}.{KEY_POLICY}", f"saved with steps: {self.steps}, "
                                                       f"this group has {current.steps}")
        if sorted(self.iterators) != sorted(iterators):
            raise ConfigError(f"{where}.{KEY_ITERATORS}", f"saved for iterators {sorted(self.iterators)}, "
                                                          f"this group has {sorted(iterators)}")
        for name, iterator in iterators.items():
            self.iterators[name].check_setup(iterator, f"{where}.{KEY_ITERATORS}.{name}")

    def check_positions(self, current: "GroupState", steps: int, where: str = "state") -> None:
        """Raise a ConfigError unless the step is within the epoch's ``steps`` and each iterator's saved
        position is the one the group's implies (``current``: the group's state at this (epoch, step))."""
        check_step(self.step, steps, self.epoch, f"{where}.{KEY_STEP}")
        for name, saved in self.iterators.items():
            # version 2 saved the group's position in every iterator's state
            expected = current.iterators[name] if self.version >= 3 else self
            if (saved.epoch, saved.step) != (expected.epoch, expected.step):
                raise ConfigError(f"{where}.{KEY_ITERATORS}.{name}", f"at epoch {saved.epoch} step {saved.step}, "
                                  f"but the group's epoch {self.epoch} step {self.step} puts it at epoch "
                                  f"{expected.epoch} step {expected.step}")

    def check_fits(self, current: "GroupState", iterators: Dict[str, Any], steps: int, where: str = "state") -> None:
        """check_setup and check_positions: this state fits the group whose state at (epoch, step) is
        ``current`` and whose epoch has ``steps`` steps."""
        self.check_setup(current, iterators, where)
        self.check_positions(current, steps, where)


@dataclasses.dataclass(frozen=True)
class RunState:
    """Where a CLI train run stands: its mode, seed and configuration, and the train group's state."""

    seed: int
    config: str  # fingerprint of every iterator's configuration
    train: GroupState
    mode: str = "train"
    settings: Optional[Dict[str, Dict[str, Any]]] = None  # {label: settings_summary} of every iterator of the run
    world_size: Optional[int] = None  # the ranks of the run that saved it, one state file each (from version 4)
    version: int = STATE_VERSION

    @property
    def epoch(self) -> int:
        return self.train.epoch

    @property
    def step(self) -> int:
        return self.train.step

    @property
    def steps(self) -> Optional[str]:
        return self.train.steps

    def to_dict(self) -> Dict[str, Any]:
        data = dict(dataclasses.asdict(self), train=self.train.to_dict())
        if self.version < ELASTIC_VERSION:
            del data[KEY_WORLD_SIZE]
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> "RunState":
        flat = isinstance(data, dict) and type(data.get(KEY_VERSION)) is int and data[KEY_VERSION] in (1, 2)
        fields = check_keys(data, FLAT_RUN_KEYS if flat else RUN_KEYS, where, "a run state",
                             elastic=(KEY_WORLD_SIZE,))
        if flat:  # versions 1 and 2: the train group's fields beside the run's
            iterators = _loader_states(fields.pop(KEY_ITERATORS), f"{where}.{KEY_ITERATORS}")
            fields[KEY_GROUP] = GroupState(fields.pop(KEY_EPOCH), fields.pop(KEY_STEP), None, iterators,
                                           version=fields[KEY_VERSION])
        else:
            fields[KEY_GROUP] = GroupState.from_dict(fields[KEY_GROUP], f"{where}.{KEY_GROUP}")
        fields[KEY_SETTINGS] = check_settings(fields.get(KEY_SETTINGS), f"{where}.{KEY_SETTINGS}", nested=True)
        return cls(**fields)

    def check_fits(self, current: "RunState", where: str, source: str) -> None:
        """Raise a ConfigError unless ``current`` (this run) is the run that saved this state
        (its groups are checked by GroupState.check_fits)."""
        differences = _differences(self, current, {KEY_MODE: KEY_MODE, KEY_SEED: KEY_SEED, KEY_POLICY: KEY_POLICY,
                                                   KEY_CONFIG: KEY_CONFIG})
        if differences:
            raise ConfigError(where, f"{source} was saved by a different run ({'; '.join(differences)})")


def check_step(step: int, steps: int, epoch: int, where: str) -> None:
    """A saved step is at most the epoch's number of steps (``steps``: the epoch is done)."""
    if step > steps:
        raise ConfigError(where, f"epoch {epoch} has {steps} steps, got step {step}")
