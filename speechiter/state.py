"""Resumable state: what a loader, a mix, a group or a run must remember to continue exactly.

States nest by level, each a small frozen record:

- ``LoaderState``: one iterator at (epoch, step), its seed, and fingerprints of
  its configuration and batching view, with a readable summary of the settings
  (``settings``) so that a mismatch says ``batch_len: saved 480000, now 160000``
  instead of two hashes, and the layout of its epoch (NOTE [ Elastic resume ]
  in speechiter/plan/layout.py);
- ``MixState``: a mix (speechiter/iterator/mix.py) at (epoch, step), its
  schedule and where it started, and each corpus's LoaderState at that
  corpus's own position;
- ``GroupState``: a group (speechiter.group) at (epoch, step) under its
  ``steps`` policy, with each iterator's state at that iterator's own position
  (see NOTE [ Group steps ] in speechiter/plan/steps.py), checked to agree;
- ``RunState``: a CLI train run: mode, seed, the run's configuration, the
  ranks that saved it, and the train group's GroupState.

``to_dict`` gives the saved form (speechiter/state_keys.py); a saved dict of
any supported version becomes these records through speechiter/state_versions.py
only, which also computes the fingerprints an old version holds (``scheme``).
``check_setup`` says what differs from the current setup; what a resume may
change beyond the layout is opted into (``RESUME_CHANGES``: ``mix``, NOTE
[ Changed mix ] in speechiter/iterator/mix_changes.py). The Python API
(``Loader`` / ``GroupLoader.state_dict``) and the CLI (``--save_state`` /
``--resume``, speechiter/state_files.py) share these records. Resuming costs
O(1) batches: the plan is recomputed and cut at the step; no skipped batch is read.
"""
import dataclasses
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Protocol, Union, runtime_checkable

from speechiter.errors import ConfigError
from speechiter.fingerprints import settings_differences
from speechiter.plan.layout import Layout
from speechiter.plan.schedule import ScheduleStart
from speechiter.state_keys import (CURRENT, KEY_BATCHES, KEY_CONFIG, KEY_EPOCH, KEY_GROUP, KEY_ITERATORS, KEY_LAYOUT,
                                   KEY_MODE, KEY_NAME, KEY_POLICY, KEY_SCHEDULE_START, KEY_SEED, KEY_SETTINGS,
                                   KEY_SOURCES, KEY_STEP, KEY_VERSION, KEY_VIEW, KEY_WORLD_SIZE, STATE_VERSION)

__all__ = ["STATE_VERSION", "RESUME_CHANGES", "Stateful", "LoaderState", "MixState", "GroupState", "RunState",
           "check_step", "check_changes"]

#: what a resume may change when asked to (``--resume_changes``, ``load_state_dict(allow_changes=...)``):
#: a mix's weights, epoch and corpora (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py)
RESUME_CHANGES = ("mix",)


def check_changes(changes: Union[str, Iterable[str], None], where: str = "allow_changes") -> FrozenSet[str]:
    """What a resume may change beyond the layout: some of RESUME_CHANGES (a lone name or several)."""
    if changes is None:
        return frozenset()
    names = [changes] if isinstance(changes, str) else changes
    try:
        names = list(names)
    except TypeError:
        raise ConfigError(where, f"expected some of {', '.join(RESUME_CHANGES)}, got {changes!r}"[:200]) from None
    for name in names:
        if name not in RESUME_CHANGES:
            raise ConfigError(where, f"expected some of {', '.join(RESUME_CHANGES)}, got {name!r}"[:200])
    return frozenset(names)


@runtime_checkable
class Stateful(Protocol):
    """Something that can save where it stands and continue from there."""

    def state_dict(self) -> Dict[str, Any]:
        """A JSON-able snapshot of where this object stands."""
        ...

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a ``state_dict()``; raise ConfigError if it does not fit."""
        ...


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


_SETUP = {KEY_NAME: "iterator", KEY_SEED: "seed", KEY_CONFIG: "configuration", KEY_VIEW: "batching view",
          KEY_BATCHES: "number of batches"}


def setup_differences(saved: "State", iterator) -> List[str]:
    """Every difference between ``saved``'s setup and ``iterator``'s now, in ``saved``'s scheme."""
    config, settings = iterator.configuration(saved.scheme)
    view, batches = iterator.view_digest(saved.scheme)
    current = dataclasses.replace(saved, iterator=iterator.name, seed=iterator.seed, config=config, view=view,
                                  batches=batches, settings=settings)
    differences = _differences(saved, current, _SETUP)
    ngpu = iterator.layout_of(saved.epoch).ngpu
    if differences and saved.layout is not None and saved.layout.ngpu != ngpu and saved.view != view:
        differences.append(f"the batching rule depends on ngpu, saved {saved.layout.ngpu}, now {ngpu}")
    return differences


def _check_same_setup(saved: "State", iterator, where: str) -> None:
    """Raise a ConfigError naming every difference between ``saved`` and ``iterator``'s current setup."""
    differences = setup_differences(saved, iterator)
    if differences:
        raise ConfigError(where, "the state was saved with a different setup (" + "; ".join(differences) + ")")


def _saved_form(state, version_fields: Dict[str, Any]) -> Dict[str, Any]:
    if state.scheme != CURRENT:
        raise ValueError(f"a state of scheme {state.scheme} is only read, never saved")
    data = {KEY_VERSION: STATE_VERSION, KEY_NAME: state.iterator, KEY_EPOCH: state.epoch, KEY_STEP: state.step,
            KEY_SEED: state.seed, KEY_CONFIG: state.config, KEY_VIEW: state.view, KEY_BATCHES: state.batches,
            KEY_SETTINGS: state.settings, KEY_LAYOUT: state.layout.to_dict()}
    return {**data, **version_fields}


@dataclasses.dataclass(frozen=True)
class LoaderState:
    """Where one iterator's loader stands: the next batch is step ``step + 1`` of ``epoch``."""

    iterator: str  # the iterator's name, e.g. "train/sup"
    epoch: int
    step: int  # steps of the epoch already consumed
    seed: int
    config: str  # the configuration's fingerprint (speechiter.plan.options.BatchOptions)
    view: str  # the base view's fingerprint
    batches: int  # batches in that view
    settings: Optional[Dict[str, Any]] = None  # settings_summary of the configuration (None in version 1)
    layout: Optional[Layout] = None  # the layout of the epoch (None before version 4: the iterator's own)
    scheme: str = CURRENT  # how config, view and batches were computed (speechiter/state_versions.py)

    def to_dict(self) -> Dict[str, Any]:
        return _saved_form(self, {})

    def check_setup(self, iterator, where: str = "state") -> None:
        """Raise a ConfigError naming every difference from ``iterator``'s current setup."""
        _check_same_setup(self, iterator, where)
        if getattr(iterator, "mixed", False):
            raise ConfigError(f"{where}.{KEY_SOURCES}", "missing: the state was not saved by a mixed iterator")


@dataclasses.dataclass(frozen=True)
class MixState:
    """Where a mix's loader stands: step ``step`` of its ``epoch`` done; each corpus's state is at that
    corpus's own position (``corpora``; see NOTE [ Mixing corpora ] in speechiter/iterator/mix.py).
    ``schedule``: ``{"version", "batches_per_epoch", "weights": {corpus: "7/10"}}``, the schedule the
    positions follow (None where the saved settings do not say); ``start``: where that schedule began,
    None at the mix's first step (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py)."""

    iterator: str
    epoch: int
    step: int
    seed: int
    config: str  # of the mix's settings and its corpora's configurations
    view: str  # of the corpora's views
    batches: int  # the corpora's batches
    corpora: Dict[str, LoaderState]
    schedule: Optional[Dict[str, Any]] = None
    settings: Optional[Dict[str, Any]] = None
    layout: Optional[Layout] = None
    scheme: str = CURRENT
    start: Optional[ScheduleStart] = None

    def to_dict(self) -> Dict[str, Any]:
        fields = {KEY_SOURCES: {name: state.to_dict() for name, state in self.corpora.items()}}
        if self.start is not None:
            fields[KEY_SCHEDULE_START] = self.start.to_dict()
        return _saved_form(self, fields)

    def check_setup(self, mix, where: str = "state") -> None:
        """Raise a ConfigError unless this state was saved by ``mix`` as it is now: the same setup, the same
        corpora, each with the same setup and at the position the mix's (epoch, step) puts it under the
        state's schedule start."""
        _check_same_setup(self, mix, where)
        where = f"{where}.{KEY_SOURCES}"
        if not getattr(mix, "mixed", False):
            raise ConfigError(where, "saved by a mixed iterator")
        if sorted(self.corpora) != sorted(mix.names):
            raise ConfigError(where, f"saved for corpora {sorted(self.corpora)}, this mix has {sorted(mix.names)}")
        positions = mix.planner.with_start(self.start).own_positions(self.epoch, self.step)
        for name, position in positions.items():
            saved = self.corpora[name]
            saved.check_setup(mix.iterators[name], f"{where}.{name}")
            if (saved.epoch, saved.step) != position:
                raise ConfigError(f"{where}.{name}", f"at epoch {saved.epoch} step {saved.step}, but the mix's "
                                  f"epoch {self.epoch} step {self.step} puts it at epoch {position[0]} step "
                                  f"{position[1]}")


State = Union[LoaderState, MixState]


def check_step(step: int, steps: int, epoch: int, where: str) -> None:
    """A saved step is at most the epoch's number of steps (``steps``: the epoch is done)."""
    if step > steps:
        raise ConfigError(where, f"epoch {epoch} has {steps} steps, got step {step}")


@dataclasses.dataclass(frozen=True)
class GroupState:
    """Where a group stands: ``step`` steps of its ``epoch`` done under its ``steps`` policy; each
    iterator's state is at that iterator's own position (see NOTE [ Group steps ] in speechiter/plan/steps.py),
    or, with ``own_positions`` False (versions 1 and 2), at the group's."""

    epoch: int
    step: int
    steps: Optional[str]  # the policy; None in a version 1 or 2 run state (its config fingerprint holds it)
    iterators: Dict[str, State]  # by str(name): "None" for a lone iterator
    own_positions: bool = True

    def to_dict(self) -> Dict[str, Any]:
        return {KEY_VERSION: STATE_VERSION, KEY_EPOCH: self.epoch, KEY_STEP: self.step, KEY_POLICY: self.steps,
                KEY_ITERATORS: {name: state.to_dict() for name, state in self.iterators.items()}}

    def check_members(self, policy: str, iterators: Dict[str, Any], where: str = "state") -> None:
        """Raise a ConfigError unless this state was saved by a group of the same ``policy`` and iterator
        names (``{str(name): iterator}``)."""
        if self.steps is not None and self.steps != policy:
            raise ConfigError(f"{where}.{KEY_POLICY}", f"saved with steps: {self.steps}, this group has {policy}")
        if sorted(self.iterators) != sorted(iterators):
            raise ConfigError(f"{where}.{KEY_ITERATORS}", f"saved for iterators {sorted(self.iterators)}, "
                                                          f"this group has {sorted(iterators)}")

    def check_setup(self, policy: str, iterators: Dict[str, Any], where: str = "state") -> None:
        """Raise a ConfigError unless this state was saved by a group like this one: the same ``policy``
        and iterators (``{str(name): iterator}``), each with the same setup."""
        self.check_members(policy, iterators, where)
        for name, iterator in iterators.items():
            self.iterators[name].check_setup(iterator, f"{where}.{KEY_ITERATORS}.{name}")

    def check_positions(self, positions: Dict[str, tuple], steps: int, where: str = "state") -> None:
        """Raise a ConfigError unless the step is within the epoch's ``steps`` and each iterator's saved
        position is the one the group's implies (``positions``: ``{name: (epoch, step)}`` at this (epoch, step))."""
        check_step(self.step, steps, self.epoch, f"{where}.{KEY_STEP}")
        for name, saved in self.iterators.items():
            expected = positions[name] if self.own_positions else (self.epoch, self.step)
            if (saved.epoch, saved.step) != tuple(expected):
                raise ConfigError(f"{where}.{KEY_ITERATORS}.{name}", f"at epoch {saved.epoch} step {saved.step}, "
                                  f"but the group's epoch {self.epoch} step {self.step} puts it at epoch "
                                  f"{expected[0]} step {expected[1]}")


@dataclasses.dataclass(frozen=True)
class RunState:
    """Where a CLI train run stands: its mode, seed and configuration, and the train group's state."""

    seed: int
    config: str  # fingerprint of every iterator's configuration
    train: GroupState
    mode: str = "train"
    settings: Optional[Dict[str, Dict[str, Any]]] = None  # {label: settings_summary} of every iterator of the run
    world_size: Optional[int] = None  # the ranks of the run that saved it, one state file each (from version 4)
    scheme: str = CURRENT
    version: int = STATE_VERSION  # the version it was saved as (its files must agree; see state_files.py)

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
        if self.scheme != CURRENT:
            raise ValueError(f"a state of scheme {self.scheme} is only read, never saved")
        return {KEY_VERSION: STATE_VERSION, KEY_MODE: self.mode, KEY_SEED: self.seed, KEY_CONFIG: self.config,
                KEY_GROUP: self.train.to_dict(), KEY_SETTINGS: self.settings, KEY_WORLD_SIZE: self.world_size}

    def check_fits(self, current: "RunState", where: str, source: str) -> None:
        """Raise a ConfigError unless ``current`` (this run, in this state's scheme) is the run that saved
        this state (its groups are checked by GroupState)."""
        differences = _differences(self, current, {KEY_MODE: KEY_MODE, KEY_SEED: KEY_SEED, KEY_POLICY: KEY_POLICY,
                                                   KEY_CONFIG: KEY_CONFIG})
        if differences:
            raise ConfigError(where, f"{source} was saved by a different run ({'; '.join(differences)})")
