"""Resumable state: what a loader or a run must remember to continue exactly.

A state is a small frozen record: the epoch, the next step, the seed, and
fingerprints of the configuration and of the batching view, with a readable
summary of the settings (``settings``, since version 2) so that a mismatch can
say ``batch_len: saved 480000, now 160000`` instead of two hashes. ``to_dict``
gives the JSON-able form (the keys below); ``from_dict`` checks a saved dict
(version 1 files, without ``settings``, still load) and raises a ConfigError
naming the bad key; ``check_fits`` says what differs from the current setup. The Python API (``Loader.state_dict``)
and the CLI (``--save_state`` / ``--resume``) share these records.
Resuming costs O(1): the plan is recomputed and cut at the step; no skipped
batch is read.
"""
import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Protocol, runtime_checkable

from speechiter.checks import check_int
from speechiter.errors import ConfigError

STATE_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)  # 1: no settings summary
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
KEY_SETTINGS = "settings"  # optional: absent in version 1 files
LOADER_KEYS = (KEY_VERSION, KEY_NAME, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_VIEW, KEY_BATCHES)
RUN_KEYS = (KEY_VERSION, KEY_MODE, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_ITERATORS)
#: the largest epoch a state may hold (the epoch seeds a 32-bit shuffle)
MAX_EPOCH = 2 ** 31 - 1
#: settings summaries: at most this many entries, values of at most this many JSON characters
SUMMARY_ENTRIES = 64
SUMMARY_VALUE_CHARS = 100


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


def settings_summary(settings: Dict[str, Any]) -> Dict[str, Any]:
    """A small readable form of an iterator's settings: ``{dotted key: JSON value}``.

    Nested mappings are flattened (``dataset_conf.main_data.feat``), the
    ``iter_conf`` options sit at top level (``batch_len``) as in the YAML conf;
    a long value, or what is left past SUMMARY_ENTRIES, becomes a digest.
    """
    flat: Dict[str, Any] = {}

    def add(key: str, value: Any) -> None:
        if isinstance(value, dict) and len(flat) + len(value) <= SUMMARY_ENTRIES:
            for name, item in value.items():
                add(f"{key}.{name}" if key else str(name), item)
        else:
            text = json.dumps(value, sort_keys=True, default=str)
            short = len(text) <= SUMMARY_VALUE_CHARS
            flat[key or "conf"] = json.loads(text) if short else f"digest {fingerprint(value)}"

    for key, value in settings.items():
        add("" if key == "iter_conf" else key, value)
    return flat


def summary_differences(saved: Dict[str, Any], now: Dict[str, Any], prefix: str = "") -> List[str]:
    """``["batch_len: saved 480000, now 160000", ...]`` between two settings summaries."""
    def shown(summary: Dict[str, Any], key: str) -> str:
        return json.dumps(summary[key], sort_keys=True) if key in summary else "unset"
    return [f"{prefix}{key}: saved {shown(saved, key)}, now {shown(now, key)}"
            for key in sorted(set(saved) | set(now)) if shown(saved, key) != shown(now, key)]


def _check_settings(value: Any, where: str, nested: bool = False) -> Any:
    """An optional settings summary: a mapping (of mappings when ``nested``) or null."""
    if value is None:
        return None
    if not isinstance(value, dict) or nested and not all(isinstance(item, dict) for item in value.values()):
        raise ConfigError(where, "expected a mapping of " + ("iterator settings" if nested else "settings"))
    return value


def _check_layout(data: Any, keys: tuple, where: str, what: str) -> Dict[str, Any]:
    """The dict ``data`` with exactly ``keys`` (and maybe ``settings``) and a supported version, else ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a state dict, got {type(data).__name__}")
    unknown = sorted(set(data) - set(keys) - {KEY_SETTINGS})
    if unknown:
        shown = ", ".join(key if key.isidentifier() else repr(key) for key in map(str, unknown))
        raise ConfigError(where, f"unknown keys {shown}; {what} has {', '.join(keys)}"[:300])
    missing = [key for key in keys if key not in data]
    if missing:
        raise ConfigError(where, f"missing keys {', '.join(missing)}")
    version = data[KEY_VERSION]
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise ConfigError(f"{where}.{KEY_VERSION}", f"state version {version!r} is not supported (expected "
                                                    f"{' or '.join(map(str, SUPPORTED_VERSIONS))})")
    epoch = check_int(data[KEY_EPOCH], f"{where}.{KEY_EPOCH}", minimum=1)
    if epoch > MAX_EPOCH:
        raise ConfigError(f"{where}.{KEY_EPOCH}", f"expected at most {MAX_EPOCH}, got {epoch}")
    for key in (KEY_SEED, KEY_CONFIG, KEY_MODE, KEY_NAME, KEY_VIEW, KEY_BATCHES):
        if key in keys and not isinstance(data[key], int if key in (KEY_SEED, KEY_BATCHES) else str):
            kind = "an integer" if key in (KEY_SEED, KEY_BATCHES) else "a string"
            raise ConfigError(f"{where}.{key}", f"expected {kind}, got {data[key]!r}"[:200])
    return dict(data, **{KEY_EPOCH: epoch, KEY_STEP: check_int(data[KEY_STEP], f"{where}.{KEY_STEP}", minimum=0)})


def _differences(saved: Any, current: Any, labels: Dict[str, str]) -> List[str]:
    """What differs, by label; a different config is told setting by setting when both have a summary
    (and then a different batching view goes without saying)."""
    found, told = [], False
    for key, label in labels.items():
        before, now = getattr(saved, key), getattr(current, key)
        if before == now or key == KEY_VIEW and told:
            continue
        if key == KEY_CONFIG:
            settings = _settings_differences(saved.settings, current.settings)
            if settings:
                found, told = found + settings, True
                continue
        found.append(f"{label}: saved {before!r}, now {now!r}")
    return found


def _settings_differences(saved: Optional[Dict[str, Any]], now: Optional[Dict[str, Any]]) -> List[str]:
    """Settings that differ; ``{label: summary}`` maps (a run's) are compared label by label."""
    if saved is None or now is None:
        return []
    if not all(isinstance(item, dict) for item in list(saved.values()) + list(now.values())):
        return summary_differences(saved, now, "configuration: ")
    found = [f"iterator {label}: {'saved, now absent' if label in saved else 'absent when saved'}"
             for label in sorted(set(saved) ^ set(now))]
    for label in sorted(set(saved) & set(now)):
        found += summary_differences(saved[label], now[label], f"configuration of {label}: ")
    return found


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
    settings: Optional[Dict[str, Any]] = None  # settings_summary of the configuration (None in version 1)
    version: int = STATE_VERSION

    @classmethod
    def of(cls, iterator, epoch: int, step: int) -> "LoaderState":
        return cls(iterator=iterator.name, epoch=epoch, step=step, seed=iterator.seed,
                   config=iterator.config_fingerprint, view=iterator.view_fingerprint(), batches=len(iterator.batches),
                   settings=getattr(iterator, "config_summary", None))

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "state") -> "LoaderState":
        fields = _check_layout(data, LOADER_KEYS, where, "a loader state")
        fields[KEY_SETTINGS] = _check_settings(fields.get(KEY_SETTINGS), f"{where}.{KEY_SETTINGS}")
        return cls(**fields)

    def check_fits(self, iterator, where: str = "state") -> None:
        """Raise a ConfigError naming every difference from ``iterator``'s current setup,
        or if the step is past the end of the epoch."""
        labels = {KEY_NAME: "iterator", KEY_SEED: "seed", KEY_CONFIG: "configuration", KEY_VIEW: "batching view",
                  KEY_BATCHES: "number of batches"}
        differences = _differences(self, LoaderState.of(iterator, self.epoch, self.step), labels)
        if differences:
            raise ConfigError(where, "the state was saved with a different setup (" + "; ".join(differences) + ")")
        check_step(self.step, len(iterator), self.epoch, f"{where}.{KEY_STEP}")


@dataclasses.dataclass(frozen=True)
class RunState:
    """Where a CLI train run stands, with the state of each train iterator (keyed by name, "None" for one)."""

    epoch: int
    step: int
    seed: int
    config: str  # fingerprint of every iterator's configuration
    iterators: Dict[str, LoaderState]
    mode: str = "train"
    settings: Optional[Dict[str, Dict[str, Any]]] = None  # {label: settings_summary} of every iterator of the run
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
        for name, state in fields[KEY_ITERATORS].items():  # the run saves one (epoch, step) for all
            for key in (KEY_EPOCH, KEY_STEP):
                if getattr(state, key) != fields[key]:
                    raise ConfigError(f"{where}.{KEY_ITERATORS}.{name}.{key}", f"is {getattr(state, key)} but the "
                                      f"run's {key} is {fields[key]}; they must be equal")
        fields[KEY_SETTINGS] = _check_settings(fields.get(KEY_SETTINGS), f"{where}.{KEY_SETTINGS}", nested=True)
        return cls(**fields)

    def check_fits(self, current: "RunState", where: str, source: str) -> None:
        """Raise a ConfigError unless ``current`` (this run) is the run that saved this state."""
        differences = _differences(self, current, {KEY_MODE: KEY_MODE, KEY_SEED: KEY_SEED, KEY_CONFIG: KEY_CONFIG})
        if differences:
            raise ConfigError(where, f"{source} was saved by a different run ({'; '.join(differences)})")


def check_step(step: int, steps: int, epoch: int, where: str) -> None:
    """A saved step is at most the epoch's number of steps (``steps``: the epoch is done)."""
    if step > steps:
        raise ConfigError(where, f"epoch {epoch} has {steps} steps, got step {step}")


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
        raise ConfigError(where, f"cannot read state file {path}: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError(where, f"cannot read state file {path}: nested too deeply") from None
