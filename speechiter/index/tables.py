"""Parsed idx2 files in the plan cache: a file's ids and value ranges, and its numbers once asked for.

An entry holds what :func:`speechiter.idx2_numpy.parse_idx2` gives (ids, value starts and ends) and whether
the ids are in id order; the values stay in the idx2 file itself, mapped read-only. A length file's float64
values are a second entry, written the first time :meth:`speechiter.idx2.Idx2Table.numbers` parses them.
Both are keyed by the file's real path, size and mtime (:func:`speechiter.index.store.source_key`).
"""
from __future__ import annotations

import hashlib
from typing import Dict, NamedTuple, Optional

import numpy as np

from speechiter.index import store

__all__ = ["Cached", "source_of", "load", "save", "load_numbers", "save_numbers"]


class Cached(NamedTuple):
    """A table read from the cache (arrays mapped read-only)."""
    ids: np.ndarray
    buffer: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    ids_sorted: bool


def source_of(path: str) -> Optional[Dict]:
    """The key of ``path``'s entries, or None when the cache is off or the file cannot be stat'ed."""
    if not store.enabled():
        return None
    try:
        key = store.source_key(path)
    except OSError:
        return None
    return key if key["size"] > 0 else None


def _path(key: Dict, kind: str) -> str:
    return store.entry_path(kind, hashlib.sha1(key["path"].encode("utf-8")).hexdigest())


def load(key: Optional[Dict]) -> Optional[Cached]:
    """The cached table of the source ``key`` describes, or None (none yet, stale, truncated, foreign)."""
    if key is None:
        return None
    entry = store.open_entry(_path(key, "idx2"), key)
    if entry is None:
        return None
    header, arrays = entry
    try:
        buffer = store.Mapped.open(key["path"], 0, np.uint8, (key["size"],))
        if store.source_key(key["path"]) != key:  # replaced while we opened it
            return None
    except (OSError, ValueError):
        return None
    return Cached(arrays["ids"], buffer, arrays["starts"], arrays["ends"], bool(header.get("ids_sorted")))


def save(key: Optional[Dict], ids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Write the entry of a table parsed from the source ``key`` describes, when it has at least
    :func:`speechiter.index.store.min_rows` rows and the file has not changed since ``key`` was taken
    (nor just before: :func:`speechiter.index.store.settled`)."""
    if key is None or len(ids) < max(1, store.min_rows()) or not _unchanged(key):
        return False
    ids_sorted = bool(len(ids) < 2 or (ids[1:] > ids[:-1]).all())
    return store.write_entry(_path(key, "idx2"), key, {"ids": ids, "starts": starts, "ends": ends},
                             ids_sorted=ids_sorted)


def load_numbers(key: Optional[Dict]) -> Optional[np.ndarray]:
    """The cached float64 values of the source ``key`` describes, or None."""
    if key is None:
        return None
    entry = store.open_entry(_path(key, "num"), key)
    return None if entry is None else entry[1]["values"]


def save_numbers(key: Optional[Dict], values: np.ndarray) -> bool:
    if key is None or len(values) < max(1, store.min_rows()) or not _unchanged(key):
        return False
    return store.write_entry(_path(key, "num"), key, {"values": values})


def _unchanged(key: Dict) -> bool:
    try:
        return store.settled(key) and store.source_key(key["path"]) == key
    except OSError:
        return False
