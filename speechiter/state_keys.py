"""The saved form of a state (speechiter.state): key names, versions, and the checks of a saved dict.

Which versions load, and how, is speechiter/state_versions.py's (the one place that knows them).
"""
from typing import Any, Dict

from speechiter.checks import check_int
from speechiter.errors import ConfigError

STATE_VERSION = 5
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5)  # see speechiter/state_versions.py
ELASTIC_VERSION = 4  # the first version whose states resume on another layout
MIX_CHANGES_VERSION = 5  # the first version whose mix states may hold where their schedule started
CURRENT = "current"  # the fingerprints of today's states (a record's ``scheme``; see state_versions.py)
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
KEY_POLICY = "steps"
KEY_GROUP = "train"  # the train group's state in a run state
KEY_SETTINGS = "settings"  # optional: absent in version 1 files
KEY_LAYOUT = "layout"  # from version 4: the layout of the state's epoch
KEY_SOURCES = "sources"  # optional: a mix's corpora, each at its own position (MixState.corpora)
KEY_SCHEDULE_START = "schedule_start"  # optional from version 5: where a mix's schedule started (MixState.start)
KEY_WORLD_SIZE = "world_size"  # from version 4: the ranks of the run that saved a run state
LOADER_KEYS = (KEY_VERSION, KEY_NAME, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_VIEW, KEY_BATCHES)
GROUP_KEYS = (KEY_VERSION, KEY_EPOCH, KEY_STEP, KEY_POLICY, KEY_ITERATORS)
RUN_KEYS = (KEY_VERSION, KEY_MODE, KEY_SEED, KEY_CONFIG, KEY_GROUP)
FLAT_RUN_KEYS = (KEY_VERSION, KEY_MODE, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_ITERATORS)  # versions 1, 2
#: the largest epoch a state may hold (the epoch seeds a 32-bit shuffle)
MAX_EPOCH = 2 ** 31 - 1
INT_KEYS = (KEY_SEED, KEY_BATCHES)
STR_KEYS = (KEY_CONFIG, KEY_MODE, KEY_NAME, KEY_VIEW, KEY_POLICY)


def check_settings(value: Any, where: str, nested: bool = False) -> Any:
    """An optional settings summary: a mapping (of mappings when ``nested``) or null."""
    if value is None:
        return None
    if not isinstance(value, dict) or nested and not all(isinstance(item, dict) for item in value.values()):
        raise ConfigError(where, "expected a mapping of " + ("iterator settings" if nested else "settings"))
    return value


def check_keys(data: Any, keys: tuple, where: str, what: str, optional: tuple = (KEY_SETTINGS,),
                elastic: tuple = (), newer: Dict[int, tuple] = None) -> Dict[str, Any]:
    """The dict ``data`` with exactly ``keys`` (and maybe ``optional``; ``elastic`` from version 4 on; the
    optional keys ``newer[v]`` from version v on), a supported version and values of the right kinds, else
    ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a state dict, got {type(data).__name__}")
    version = data.get(KEY_VERSION, STATE_VERSION)
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise ConfigError(f"{where}.{KEY_VERSION}", f"state version {version!r} is not supported (expected "
                                                    f"{', '.join(map(str, SUPPORTED_VERSIONS[:-1]))} or "
                                                    f"{SUPPORTED_VERSIONS[-1]})")
    keys = keys + (elastic if version >= ELASTIC_VERSION else ())
    optional = optional + tuple(key for since, added in (newer or {}).items() if version >= since for key in added)
    unknown = sorted(set(data) - set(keys) - set(optional))
    if unknown:
        shown = ", ".join(key if key.isidentifier() else repr(key) for key in map(str, unknown))
        raise ConfigError(where, f"unknown keys {shown}; {what} has {', '.join(keys)}"[:300])
    missing = [key for key in keys if key not in data]
    if missing:
        raise ConfigError(where, f"missing keys {', '.join(missing)}")
    fields = dict(data)
    if KEY_EPOCH in keys:
        fields[KEY_EPOCH] = check_int(data[KEY_EPOCH], f"{where}.{KEY_EPOCH}", minimum=1)
        if fields[KEY_EPOCH] > MAX_EPOCH:
            raise ConfigError(f"{where}.{KEY_EPOCH}", f"expected at most {MAX_EPOCH}, got {fields[KEY_EPOCH]}")
    if KEY_STEP in keys:
        fields[KEY_STEP] = check_int(data[KEY_STEP], f"{where}.{KEY_STEP}", minimum=0)
    if KEY_WORLD_SIZE in keys:
        fields[KEY_WORLD_SIZE] = check_int(data[KEY_WORLD_SIZE], f"{where}.{KEY_WORLD_SIZE}")
    for key in keys:
        if key in INT_KEYS + STR_KEYS and not isinstance(data[key], int if key in INT_KEYS else str):
            kind = "an integer" if key in INT_KEYS else "a string"
            raise ConfigError(f"{where}.{key}", f"expected {kind}, got {data[key]!r}"[:200])
    return fields
