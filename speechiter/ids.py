"""Ids and what is keyed by them, stored compactly: ids as bytes (IdIndex, IdList, SortedIds), idx2 values as
byte ranges (Column), lengths as arrays (LengthMap). The batching view built on them is
speechiter.plan.view.BatchView; the dataset and the iterator layers share these types.

# NOTE [ Compact storage ]
A corpus of 10M utterances as dicts of Python strings costs gigabytes, seconds
to build, and grows every forked worker that touches it (each access writes
the refcounts of the objects it reads, so shared pages are copied, pytorch
#13246). Here instead:

- ids are one numpy ``S`` array (UTF-8 bytes) per table; :class:`IdIndex`
  looks them up by binary search (the file order is usually sorted already,
  so no sort is needed);
- idx2 values stay in the bytes of the file they came from, as ``[start, end)``
  ranges (:class:`Column`); a value becomes a ``str`` only when read;
- a batching view is one array of ids in batch order plus batch offsets
  (:class:`speechiter.plan.view.BatchView`).

The public API still speaks lists and dicts: :class:`IdList`, :class:`Column`,
:class:`LengthMap` and :class:`BatchView` are read-only ``Sequence`` /
``Mapping`` views that decode on access.

Parsing the idx2 files into such arrays is in :mod:`speechiter.idx2`.
"""
from collections.abc import Mapping, Sequence
from typing import List, Optional

import numpy as np

from speechiter.idx2 import gather_values
from speechiter.io.shards import note_index_files
from speechiter.paths import resolve_data_path

_ROWS = 1 << 16  # ids decoded per block

# ---------------------------------------------------------------- id arrays


def encode_ids(ids) -> np.ndarray:
    """Ids (strings, an IdList or an S array) as an ``S`` array of UTF-8 bytes."""
    if isinstance(ids, IdList):
        return ids.array
    if isinstance(ids, np.ndarray) and ids.dtype.kind == "S":
        return ids
    encoded = [str(uid).encode("utf-8") for uid in ids]
    return np.array(encoded, dtype="S") if encoded else np.array([], dtype="S1")


def decode_ids(array: np.ndarray) -> List[str]:
    """An ``S`` array of ids as a list of ``str``."""
    if len(array) == 0:
        return []
    return b"\n".join(array.tolist()).decode("utf-8").split("\n")


class IdIndex:
    """Ids in a fixed order (row i is ``ids[i]``) with lookup by binary search.
    ``ids_sorted``: True where the ids are known to be in id order (saves the check)."""

    def __init__(self, ids: np.ndarray, ids_sorted: Optional[bool] = None):
        self.ids = ids
        self._sorted = (ids, None) if ids_sorted else None

    def __len__(self):
        return len(self.ids)

    def _lookup(self):
        if self._sorted is None:
            ids = self.ids
            if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
                self._sorted = (ids, None)
            else:
                perm = np.argsort(ids, kind="stable")
                self._sorted = (ids[perm], perm)
        return self._sorted

    def id_order(self) -> Optional[np.ndarray]:
        """Rows in id order (None when the ids are sorted already)."""
        return self._lookup()[1]

    def find(self, query: np.ndarray) -> np.ndarray:
        """Rows of ``query`` ids (int64), -1 where absent."""
        if len(query) == len(self.ids) and (query is self.ids or np.array_equal(query, self.ids)):
            return np.arange(len(query), dtype=np.int64)
        sorted_ids, perm = self._lookup()
        if len(sorted_ids) == 0:
            return np.full(len(query), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(sorted_ids, query), len(sorted_ids) - 1)
        hit = sorted_ids[pos] == query
        rows = pos if perm is None else perm[pos]
        return np.where(hit, rows, -1).astype(np.int64)

    def find_one(self, uid: str) -> int:
        key = uid.encode("utf-8") if isinstance(uid, str) else bytes(uid)
        sorted_ids, perm = self._lookup()
        pos = int(np.searchsorted(sorted_ids, key))
        if pos < len(sorted_ids) and sorted_ids[pos] == key:
            return int(pos if perm is None else perm[pos])
        return -1

    def take(self, rows: np.ndarray) -> "IdIndex":
        return IdIndex(self.ids[rows])


class IdList(Sequence):
    """A read-only, list-like view of an ``S`` array of ids (decodes on access).

    Compares equal to a list of the same ids; ``list(view)`` or
    :meth:`tolist` gives a real list.
    """

    def __init__(self, array: np.ndarray):
        self.array = array

    def __len__(self):
        return len(self.array)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return decode_ids(self.array[item])
        return self.array[item].decode("utf-8")

    def __iter__(self):
        for start in range(0, len(self.array), _ROWS):
            yield from decode_ids(self.array[start:start + _ROWS])

    def __contains__(self, uid):
        return isinstance(uid, str) and bool((self.array == uid.encode("utf-8")).any())

    def tolist(self) -> List[str]:
        return decode_ids(self.array)

    def __eq__(self, other):
        if isinstance(other, IdList):
            return np.array_equal(self.array, other.array)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and self.tolist() == list(other)
        return NotImplemented

    def __add__(self, other):
        return self.tolist() + list(other)

    def __radd__(self, other):
        return list(other) + self.tolist()

    def __repr__(self):
        return repr(self.tolist()) if len(self) <= 20 else f"IdList({len(self)} ids: {self[:3]!r}...)"


class SortedIds(IdList):
    """The sorted ids handed to a built-in ``batches_generate_fn``, with their
    lengths (float64, aligned) or None; ``digest``: the plan cache's key of
    the sort when it came from there (speechiter/index/sorting.py), else None."""

    def __init__(self, array: np.ndarray, lengths: Optional[np.ndarray], digest: Optional[str] = None):
        super().__init__(array)
        self.lengths, self.digest = lengths, digest


# ------------------------------------------------------------ value columns


class Column(Mapping):
    """idx2 values aligned to an :class:`IdIndex` (row i belongs to
    ``index.ids[i]``), kept as byte ranges of the files' contents. With
    ``resolve``, values are data paths resolved against their idx2 file's
    folder when read."""

    def __init__(self, index: IdIndex, buffers, starts, ends, file_no, files, resolve: bool = False):
        self.index, self.buffers, self.starts, self.ends = index, list(buffers), starts, ends
        self.file_no, self.files, self.resolve = file_no, list(files), resolve
        if resolve:
            note_index_files(self.files)

    def __setstate__(self, state):  # a worker's copy notes them too
        self.__dict__.update(state)
        if self.resolve:
            note_index_files(self.files)

    def value(self, row: int) -> str:
        file = 0 if self.file_no is None else int(self.file_no[row])
        text = self.buffers[file][self.starts[row]:self.ends[row]].tobytes().decode("utf-8")
        return resolve_data_path(text, self.files[file]) if self.resolve else text

    def file_of(self, row: int) -> str:
        return self.files[0 if self.file_no is None else int(self.file_no[row])]

    def __getitem__(self, uid):
        row = self.index.find_one(uid)
        if row < 0:
            raise KeyError(uid)
        return self.value(row)

    def __iter__(self):
        return iter(IdList(self.index.ids))

    def __len__(self):
        return len(self.index)

    def __contains__(self, uid):
        return isinstance(uid, str) and self.index.find_one(uid) >= 0

    def take(self, rows: np.ndarray, index: Optional[IdIndex] = None) -> "Column":
        return Column(index or self.index.take(rows), self.buffers, self.starts[rows], self.ends[rows],
                      None if self.file_no is None else self.file_no[rows], self.files, self.resolve)

    def raw_values(self) -> np.ndarray:
        """The unresolved values as an ``S`` array."""
        if len(self.buffers) == 1:
            return gather_values(self.buffers[0], self.starts, self.ends)
        return np.array([self.buffers[f][s:e].tobytes() for f, s, e in
                         zip(self.file_no.tolist(), self.starts.tolist(), self.ends.tolist())], dtype="S")

    def __repr__(self):
        return f"Column({len(self)} values from {', '.join(self.files)})"


class LengthMap(Mapping):
    """Lengths (float64) aligned to an :class:`IdIndex`; reads like the dict
    ``{uid: length}`` (an int where the length is whole)."""

    def __init__(self, index: IdIndex, values: np.ndarray):
        self.index, self.values = index, values

    def __getitem__(self, uid):
        row = self.index.find_one(uid)
        if row < 0:
            raise KeyError(uid)
        value = float(self.values[row])
        return int(value) if value.is_integer() else value

    def __iter__(self):
        return iter(IdList(self.index.ids))

    def __len__(self):
        return len(self.index)

    def take(self, rows: np.ndarray, index: Optional[IdIndex] = None) -> "LengthMap":
        return LengthMap(index or self.index.take(rows), self.values[rows])

    def to_dict(self):
        values = self.values.tolist()
        return dict(zip(IdList(self.index.ids), (int(v) if v.is_integer() else v for v in values)))
