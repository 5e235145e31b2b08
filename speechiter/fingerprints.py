"""Digests and readable summaries of a setup, for state files: a saved state holds both, so that a
mismatch can say ``batch_len: saved 480000, now 160000`` instead of two hashes (see speechiter.state)."""
import hashlib
import json
from typing import Any, Dict, List, Optional

import numpy as np

#: settings summaries: at most this many entries, values of at most this many JSON characters
SUMMARY_ENTRIES = 64
SUMMARY_VALUE_CHARS = 100
_str_len = getattr(np, "strings", np.char).str_len  # numpy 2's ufunc where there is one


def fingerprint(value: Any) -> str:
    """A short stable digest of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def view_fingerprint(batches: List[List[str]]) -> str:
    """A digest of a batching view (ids and batch boundaries), as states of versions 1 to 3 hold it."""
    digest = hashlib.blake2b(digest_size=8)
    for batch in batches:
        digest.update("\x1f".join(batch).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()


def batches_fingerprint(ids: np.ndarray, bounds: np.ndarray) -> str:
    """A digest of a batching view given as an ``S`` array of ids in batch order and the batch offsets. The
    ids count at the width of the longest, so the digest does not depend on how wide the array is."""
    digest = hashlib.blake2b(np.asarray(bounds, dtype="<i8").tobytes(), digest_size=8)
    width = int(_str_len(ids).max()) if len(ids) else 0
    if ids.dtype.itemsize != width:
        ids = ids.astype(f"S{max(width, 1)}")
    digest.update(b"%d:" % width)
    digest.update(memoryview(np.ascontiguousarray(ids)).cast("B"))
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


def settings_differences(saved: Optional[Dict[str, Any]], now: Optional[Dict[str, Any]]) -> List[str]:
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
