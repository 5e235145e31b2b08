"""The length sort in the plan cache: the sorted ids and lengths of a large dataset, mapped read-only.

The sort is a pure function of its inputs (the ids, their lengths after the dataset's length hook, the
direction), so an entry is keyed by a digest of exactly those: whatever produced them (files, data_selection,
a dataset's hooks), the same inputs find the same entry, and different inputs never do. Hashing reads the
inputs once (SHA-1 runs at about 1 GB/s; a sort of 10M ids costs ~2 s); the sorted arrays then come mapped
from the cache, shared by the ranks of a node instead of one private copy each.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Optional, Tuple

import numpy as np

from speechiter.index import store

__all__ = ["sorted_by_length"]

_CHUNK = 1 << 24  # bytes hashed per update (the GIL is released while each one runs)


def _digest(ids: np.ndarray, lengths: np.ndarray, descending: bool) -> str:
    digest = hashlib.sha1(f"{ids.dtype.str}:{len(ids)}:{descending}:".encode())
    for array in (ids, lengths):
        raw = memoryview(np.ascontiguousarray(array)).cast("B")
        for start in range(0, len(raw), _CHUNK):
            digest.update(raw[start:start + _CHUNK])
    return digest.hexdigest()


def sorted_by_length(ids: np.ndarray, lengths: np.ndarray, descending: bool,
                     order: Callable[[], np.ndarray]) -> Optional[Tuple[np.ndarray, np.ndarray, Optional[str]]]:
    """``(ids, lengths, digest)`` in the order ``order()`` gives, from the cache when an entry of these
    inputs is there (else sorted and written; digest None when it could not be); None when the cache is off
    or the dataset is below its size."""
    if not store.enabled() or len(ids) < max(1, store.min_rows()):
        return None
    lengths = np.asarray(lengths, dtype=np.float64)
    digest = _digest(ids, lengths, bool(descending))
    key = {"sort": digest, "rows": len(ids)}
    path = store.entry_path("sort", digest)
    entry = store.open_entry(path, key)
    if entry is not None:
        return entry[1]["ids"], entry[1]["lengths"], digest
    rows = order()
    sorted_ids, sorted_lengths = ids[rows], lengths[rows]
    if store.write_entry(path, key, {"ids": sorted_ids, "lengths": sorted_lengths}):
        entry = store.open_entry(path, key)  # the mapped copy: this process's private one goes
        if entry is not None:
            return entry[1]["ids"], entry[1]["lengths"], digest
    return sorted_ids, sorted_lengths, None
