"""Resumable state: what a loader or a run must remember to continue exactly.

A state is a small dict: the epoch, the next step, the seed, and fingerprints
of the configuration and of the batching view. Loading a state into a
different configuration raises a ConfigError that says what differs.
Resuming costs O(1): the plan is recomputed and cut at the step; no skipped
batch is read.
"""
import hashlib
import json
import os
from typing import Any, Dict, List

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
LOADER_KEYS = (KEY_VERSION, KEY_NAME, KEY_EPOCH, KEY_STEP, KEY_SEED, KEY_CONFIG, KEY_VIEW, KEY_BATCHES)


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


def identity(iterator) -> Dict[str, Any]:
    """What a saved state must match: name, seed, configuration and view."""
    return {KEY_NAME: iterator.name, KEY_SEED: iterator.seed, KEY_CONFIG: iterator.config_fingerprint,
            KEY_VIEW: iterator.view_fingerprint(), KEY_BATCHES: len(iterator.batches)}


def check_state(state: Dict[str, Any], expected: Dict[str, Any], where: str = "state"):
    """Raise a ConfigError naming every difference between ``state`` and ``expected``."""
    if not isinstance(state, dict):
        raise ConfigError(where, f"expected a state dict, got {type(state).__name__}")
    unknown = sorted(set(state) - set(LOADER_KEYS))
    if unknown:
        raise ConfigError(where, f"unknown keys {', '.join(unknown)}; a loader state has {', '.join(LOADER_KEYS)}")
    missing = [key for key in LOADER_KEYS if key not in state]
    if missing:
        raise ConfigError(where, f"missing keys {', '.join(missing)}")
    if state[KEY_VERSION] != STATE_VERSION:
        raise ConfigError(where, f"state version {state[KEY_VERSION]} is not supported (expected {STATE_VERSION})")
    labels = {KEY_NAME: "iterator", KEY_SEED: "seed", KEY_CONFIG: "configuration", KEY_VIEW: "batching view",
              KEY_BATCHES: "number of batches"}
    differences = [f"{labels[key]}: saved {state[key]!r}, now {expected[key]!r}"
                   for key in labels if key in expected and state[key] != expected[key]]
    if differences:
        raise ConfigError(where, "the state was saved with a different setup (" + "; ".join(differences) + ")")
    for key in (KEY_EPOCH, KEY_STEP):
        if isinstance(state[key], bool) or not isinstance(state[key], int) or state[key] < (1 if key == KEY_EPOCH else 0):
            raise ConfigError(f"{where}.{key}", f"expected a {'positive' if key == KEY_EPOCH else 'non-negative'} "
                                                f"integer, got {state[key]!r}")


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
