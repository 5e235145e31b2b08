"""Resumable state: what a loader or a run must remember to continue exactly.

A state is a small frozen record: the epoch, the next step, the seed, and
fingerprints of the configuration and of the batching view. ``to_dict`` gives
the JSON-able form (the keys below, ``version`` 1); ``from_dict`` checks a
saved dict and raises a ConfigError naming the bad key; ``check_fits`` says
what differs from the current setup. The Python API (``Loader.state_dict``)
and the CLI (``--save_state`` / ``--resume``) share these records.
Resuming costs O(1): the plan is recomputed and cut at the step; no skipped
batch is read.
"""
import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, List, Protocol, runtime_checkable

from speechiter.checks import check_int
from speechiter.errors import ConfigError

STATE_VERSION = 1
KEY_VERSION = "version"
KEY_NAME = "iterator"
KEY_EPOCH = "epoch"
KEY_STEP = "step"
KEY_SEED = "seed"
KEY_CONFIG = "config"
KEY_VIEW = "view"
KEY_BATCHES = "batches"
KEY_MODE = "mode"
KEY_ITERATORS = "iterators"
LOADER_KEYS = (KEY_VERSION, KEY_NAME, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_VIEW, KEY_BATCHES)
RUN_KEYS = (KEY_VERSION, KEY_MODE, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_ITERATORS)


@runtime_checkable
class Stateful(Protocol):
    """Something that can save where it stands and continue from there."""

    def state_dict(self) -> Dict[str, Any]:
        """A JSON-able snapshot of where this object stands."""
        ...

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a ``state_dict()``; raise ConfigError if it does not fit."""
        ...


def fingerprint(value: Any) -> str:
    """A short stable digest of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def view_fingerprint(batches: List[List[str]]) -> str:
    """A digest of a batching view (ids and batch boundaries)."""
    digest = hashlib.blake2b(digest_size=8)
    for batch in batches:
        digest.update("\x1f".join(batch).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()


def _check_layout(data: Any, keys: tuple, where: str, what: str) -> Dict[str, Any]:
    """The dict ``data`` with exactly ``keys`` and a supported version, else ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a state dict, got {type(data).__name__}")
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise ConfigError(where, f"unknown keys {', '.join(unknown)}; {what} has {', '.join(keys)}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise ConfigError(where, f"missing keys {', '.join(missing)}")
    if data[KEY_VERSION] != STATE_VERSION:
        raise ConfigError(where, f"state version {data[KEY_VERSION]} is not supported (expected {STATE_VERSION})")
    return dict(data, **{KEY_EPOCH: check_int(data[KEY_EPOCH], f"{where}.{KEY_EPOCH}", minimum=1),
                         KEY_STEP: check_int(data[KEY_STEP], f"{where}.{KEY_STEP}", minimum=0)})


def _differences(saved: Any, current: Any, labels: Dict[str, str]) -> List[str]:
    return [f"{label}: saved {getattr(saved, key)!r}, now {getattr(current, key)!r}"
            for key, label in labels.items() if getattr(saved, key) != getattr(current, key)]


@dataclasses.dataclass(frozen=True)
class LoaderState:
    """Where one iterator's loader stands: the next batch is step ``step + 1`` of ``epoch``."""

    iterator: str  # the iterator's name, e.g. "train/sup"
    epoch: int
    step: int  # steps of the epoch already consumed
    seed: int
    config: str  # Iterator.config_fingerprint
    view: str  # Iterator.view_fingerprint()
    batches: int  # batches in the iterator's view
    version: int = STATE_VERSION

    @classmethod
    def of(cls, iterator, epoch: int, step: int) -> "LoaderState":
        return cls(iterator=iterator.name, epoch=epoch, step=step, seed=iterator.seed,
                   config=iterator.config_fingerprint, view=iterator.view_fingerprint(), batches=len(iterator.batches))

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> "LoaderState":
        return cls(**_check_layout(data, LOADER_KEYS, where, "a loader state"))

    def check_fits(self, iterator, where: str = "state") -> None:
        """Raise a ConfigError naming every difference from ``iterator``'s current setup."""
        labels = {KEY_NAME: "iterator", KEY_SEED: "seed", KEY_CONFIG: "configuration", KEY_VIEW: "batching view",
                  KEY_BATCHES: "number of batches"}
        differences = _differences(self, LoaderState.of(iterator, self.epoch, self.step), labels)
        if differences:
            raise ConfigError(where, "the state was saved with a different setup (" + "; ".join(differences) + ")")


@dataclasses.dataclass(frozen=True)
class RunState:
    """Where a CLI train run stands, with the state of each train iterator (keyed by name, "None" for one)."""

    epoch: int
    step: int
    seed: int
    config: str  # fingerprint of every iterator's configuration
    iterators: Dict[str, LoaderState]
    mode: str = "train"
    version: int = STATE_VERSION

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> "RunState":
        fields = _check_layout(data, RUN_KEYS, where, "a run state")
        iterators = fields[KEY_ITERATORS]
        if not isinstance(iterators, dict):
            raise ConfigError(f"{where}.{KEY_ITERATORS}", f"expected a mapping of iterator states, "
                                                          f"got {type(iterators).__name__}")
        fields[KEY_ITERATORS] = {str(name): LoaderState.from_dict(state, f"{where}.{KEY_ITERATORS}.{name}")
                                 for name, state in iterators.items()}
        return cls(**fields)

    def check_fits(self, current: "RunState", where: str, source: str) -> None:
        """Raise a ConfigError unless ``current`` (this run) is the run that saved this state."""
        differences = _differences(self, current, {KEY_MODE: KEY_MODE, KEY_SEED: KEY_SEED, KEY_CONFIG: KEY_CONFIG})
        if differences:
            raise ConfigError(where, f"{source} was saved by a different run ({'; '.join(differences)})")


def write_json_atomic(path: str, value: Dict[str, Any]):
    """Write JSON so that a reader never sees a half-written file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, sort_keys=True)
    os.replace(tmp, path)


def read_json(path: str, where: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError(where, f"no such state file: {path}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(where, f"cannot read state file {path}: {e}") from None
