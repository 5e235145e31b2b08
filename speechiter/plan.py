"""Compact, vectorised planning: idx2 files as arrays, ids as bytes, batches as offsets.

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
  (:class:`BatchView`).

The public API still speaks lists and dicts: :class:`IdList`, :class:`Column`,
:class:`LengthMap` and :class:`BatchView` are read-only ``Sequence`` /
``Mapping`` views that decode on access.

:func:`read_idx2_table` parses an idx2 file with numpy. Lines it cannot prove
to be plain (leading whitespace, a line without value, a duplicate id,
non-ASCII bytes next to the separator or at the line's end, undecodable
bytes) send the whole file to :func:`speechiter.readers.read_idx2`, which
raises its usual ``file:line`` errors or parses it exactly.
"""
import os
from collections.abc import Mapping, Sequence
from typing import List, Optional

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from speechiter.readers import read_idx2, resolve_data_path

# Whitespace that str.split() splits on within ASCII.
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_PAD = 64  # newline bytes after the data, so windows never run off the end
_WINDOW = 32
_ROWS = 1 << 16  # rows per vectorised block (bounds temporaries)


class _Fallback(Exception):
    """The fast parser cannot handle this file exactly."""


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
    """Ids in a fixed order (row i is ``ids[i]``) with lookup by binary search."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids
        self._sorted = None

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

    def first_duplicate(self) -> int:
        """Row of the earliest repeated id (its second occurrence), or -1."""
        sorted_ids, perm = self._lookup()
        if perm is None:
            return -1
        same = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
        return int(perm[same + 1].min()) if len(same) else -1

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
    lengths (float64, aligned) or None."""

    def __init__(self, array: np.ndarray, lengths: Optional[np.ndarray]):
        super().__init__(array)
        self.lengths = lengths


class BatchView(Sequence):
    """A batching view: ``ids`` (S array) in batch order and batch offsets
    ``bounds`` (batch i is ``ids[bounds[i]:bounds[i + 1]]``). Reads as a
    list of lists of ids; compares equal to one."""

    def __init__(self, ids: np.ndarray, bounds: np.ndarray):
        self.ids = ids
        self.bounds = np.asarray(bounds, dtype=np.int64)

    def __len__(self):
        return len(self.bounds) - 1

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        if item < 0:
            item += len(self)
        if not 0 <= item < len(self):
            raise IndexError("batch index out of range")
        return decode_ids(self.ids[self.bounds[item]:self.bounds[item + 1]])

    def __iter__(self):
        flat = iter(IdList(self.ids))
        for size in self.sizes().tolist():
            yield [next(flat) for _ in range(size)]

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def take(self, batches: np.ndarray) -> "BatchView":
        """The batches at ``batches`` (indices, repeats allowed), in that order."""
        batches = np.asarray(batches, dtype=np.int64)
        sizes = self.sizes()[batches]
        bounds = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        rows = np.arange(bounds[-1], dtype=np.int64) - np.repeat(bounds[:-1] - self.bounds[batches], sizes)
        return BatchView(self.ids[rows], bounds)

    def tolist(self) -> List[List[str]]:
        return list(self)

    def __eq__(self, other):
        if isinstance(other, BatchView):
            return np.array_equal(self.bounds, other.bounds) and np.array_equal(self.ids, other.ids)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == list(b) for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self):
        return f"BatchView({len(self)} batches, {len(self.ids)} ids)"


# ------------------------------------------------------------ value columns


class Column(Mapping):
    """idx2 values aligned to an :class:`IdIndex` (row i belongs to
    ``index.ids[i]``), kept as byte ranges of the files' contents. With
    ``resolve``, values are data paths resolved against their idx2 file's
    folder when read."""

    def __init__(self, index: IdIndex, buffers, starts, ends, file_no, files, resolve: bool = False):
        self.index, self.buffers, self.starts, self.ends = index, list(buffers), starts, ends
        self.file_no, self.files, self.resolve = file_no, list(files), resolve

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
            return _gather_values(self.buffers[0], self.starts, self.ends)
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


# ----------------------------------------------------------------- parsing


class Idx2Table:
    """One idx2 file: ``ids`` (S array, file order) and each value as the
    byte range ``buffer[starts[i]:ends[i]]``."""

    def __init__(self, path: str, ids, buffer, starts, ends):
        self.path, self.ids, self.buffer, self.starts, self.ends = path, ids, buffer, starts, ends

    def __len__(self):
        return len(self.ids)

    def numbers(self) -> np.ndarray:
        """Values as float64 (as ``float(value)``; errors as read_idx2's)."""
        return _parse_numbers(self)


def read_idx2_table(path) -> Idx2Table:
    """Parse an idx2 file with numpy (same result and errors as read_idx2)."""
    path = os.fspath(path)
    try:
        return _parse(path)
    except (_Fallback, OSError):
        ids, values = read_idx2(path)  # raises the exact error, or parses what we could not
        encoded = [v.encode("utf-8") for v in values]
        ends = np.cumsum([len(v) for v in encoded], dtype=np.int64)
        starts = ends - np.array([len(v) for v in encoded], dtype=np.int64)
        buffer = np.frombuffer(b"".join(encoded) + b"\n" * _PAD, dtype=np.uint8)
        return Idx2Table(path, encode_ids(ids), buffer, starts, ends)


def read_idx2_numbers(path):
    """``(ids, float64 lengths)`` of a numeric idx2 file."""
    table = read_idx2_table(path)
    return table.ids, table.numbers()


def _parse(path: str) -> Idx2Table:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        raw = bytearray(size + _PAD)  # zeroed lazily by the OS: no copy, no fill
        if f.readinto(memoryview(raw)[:size]) != size:
            raise _Fallback
    buffer = np.frombuffer(raw, dtype=np.uint8)
    buffer[size:] = 10
    data = buffer[:size]
    words = buffer[:size // 8 * 8].view(np.uint64)
    high = bool(np.bitwise_or.reduce(words, initial=np.uint64(0)) & np.uint64(0x8080808080808080)
                or (data[size // 8 * 8:] >= 128).any())
    if high:
        try:
            data.tobytes().decode("utf-8")
        except UnicodeDecodeError:
            raise _Fallback from None
    ends = np.concatenate([np.flatnonzero(data[at:at + (1 << 23)] == 10) + at for at in range(0, size, 1 << 23)]
                          or [np.zeros(0, dtype=np.int64)])
    if size and data[-1] != 10:
        ends = np.append(ends, size)
    ends = ends.astype(np.int32 if size + _PAD < 2 ** 31 else np.int64)  # offsets: half the memory
    starts = np.zeros(len(ends), dtype=ends.dtype)
    starts[1:] = ends[:-1] + 1
    while True:  # rstrip
        strip = _WS[buffer[ends - 1]] & (ends > starts)
        if not strip.any():
            break
        ends[strip] -= 1
    if not (ends > starts).all():  # blank lines
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
    if _WS[buffer[starts]].any():
        raise _Fallback  # leading whitespace
    sep, ids = _split_ids(buffer, starts)
    if (sep >= ends).any():
        raise _Fallback  # a line without value: read_idx2 names it
    values = sep + 1
    while True:
        more = _WS[buffer[values]]
        if not more.any():
            break
        values[more] += 1
    if high and ((ids.view(np.uint8) >= 128).any() or (buffer[values] >= 128).any()
                 or (buffer[ends - 1] >= 128).any()):
        raise _Fallback  # non-ASCII around the separator or at the end: maybe Unicode whitespace
    table = Idx2Table(path, ids, buffer, values, ends)
    if IdIndex(ids).first_duplicate() >= 0:
        raise _Fallback
    return table


def _split_ids(buffer, starts):
    """``(sep, ids)``: the first whitespace at or after each start, and the
    bytes before it as an ``S`` array. One window per line, as wide as the
    first line's id (plus the separator), finds both for most lines."""
    head = np.flatnonzero(_WS[buffer[int(starts[0]):int(starts[0]) + _PAD]]) if len(starts) else []
    width = min(_PAD, ((int(head[0]) if len(head) else _WINDOW) + 8) // 8 * 8)
    sep = np.empty_like(starts)
    ids = np.empty(len(starts), dtype=f"S{width}")
    columns = np.arange(width)
    late = []
    for block in range(0, len(starts), _ROWS):
        rows = slice(block, block + _ROWS)
        window = sliding_window_view(buffer, width)[starts[rows]]
        low = window <= 32  # whitespace and control bytes; cheaper than a table lookup
        pos = low.argmax(axis=1)
        found = low[np.arange(len(pos)), pos]
        sep[rows] = starts[rows] + pos
        if not _WS[buffer[sep[rows][found]]].all():
            raise _Fallback  # a control byte that is not whitespace
        window *= columns < pos[:, None]
        ids[rows] = window.view(f"S{width}")[:, 0]
        if not found.all():
            late.append(block + np.flatnonzero(~found))
    if late:  # ids longer than the window
        late = np.concatenate(late)
        sep[late] = _first_whitespace(buffer, starts[late])
        ids = ids.astype(f"S{int((sep - starts).max())}")
        ids[late] = _gather(buffer, starts[late], sep[late] - starts[late])
    length = int((sep - starts).max(initial=1))
    return sep, (ids.astype(f"S{length}") if length < width else ids)


def _first_whitespace(buffer, starts):
    """Position of the first whitespace byte at or after each start."""
    sep = np.empty_like(starts)
    todo = np.arange(len(starts))
    offset = 0
    while len(todo):
        for block in range(0, len(todo), _ROWS):
            rows = todo[block:block + _ROWS]
            window = _WS[sliding_window_view(buffer, _WINDOW)[starts[rows] + offset]]
            found = window.any(axis=1)
            sep[rows[found]] = starts[rows[found]] + offset + window.argmax(axis=1)[found]
            todo[block:block + _ROWS][found] = -1
        todo = todo[todo >= 0]
        offset += _WINDOW
    return sep


def _gather(buffer, starts, lengths) -> np.ndarray:
    """``buffer[s:s + n]`` for each (s, n) as an S array (zero-filled)."""
    width = max(1, int(lengths.max(initial=1)))
    if width > len(buffer) - int(starts.max(initial=0)):
        return np.array([buffer[s:s + n].tobytes() for s, n in zip(starts.tolist(), lengths.tolist())],
                        dtype=f"S{width}")
    out = np.empty(len(starts), dtype=f"S{width}")
    columns = np.arange(width)
    for block in range(0, len(starts), _ROWS):
        rows = slice(block, block + _ROWS)
        matrix = sliding_window_view(buffer, width)[starts[rows]]
        matrix[columns >= lengths[rows, None]] = 0
        out[rows] = np.ascontiguousarray(matrix).view(f"S{width}")[:, 0]
    return out


def _gather_values(buffer, starts, ends) -> np.ndarray:
    lengths = ends - starts
    if lengths.max(initial=0) > 256:  # long values (transcripts): no wide matrix
        return np.array([buffer[s:e].tobytes() for s, e in zip(starts.tolist(), ends.tolist())], dtype="S")
    return _gather(buffer, starts, lengths)


def _parse_numbers(table: Idx2Table) -> np.ndarray:
    lengths = table.ends - table.starts
    out = np.empty(len(table), dtype=np.float64)
    plain = np.zeros(len(table), dtype=bool)
    if len(table) and lengths.max() <= 15:
        width = int(lengths.max())
        digits = np.zeros(len(table), dtype=np.int64)
        plain[:] = True
        for col in range(width):
            inside = col < lengths
            byte = table.buffer[np.minimum(table.starts + col, len(table.buffer) - 1)]
            is_digit = (byte >= 48) & (byte <= 57)
            plain &= is_digit | ~inside
            digits = np.where(inside, digits * 10 + (byte.astype(np.int64) - 48), digits)
        out[plain] = digits[plain]
    rest = np.flatnonzero(~plain)
    if len(rest):
        texts = _gather_values(table.buffer, table.starts[rest], table.ends[rest]).tolist()
        try:
            out[rest] = [float(t.decode("utf-8")) for t in texts]
        except (ValueError, UnicodeDecodeError):
            ids, values = read_idx2(table.path, float)  # raises DataError naming file:line
            return np.asarray(values, dtype=np.float64)  # pragma: no cover (read_idx2 raised)
    return out


# ------------------------------------------------------- batching helpers


def vectorised(fn):
    """Mark a built-in ``batches_generate_fn`` that takes the compact fast
    path (SortedIds in, BatchView out) and also accepts lists and dicts."""
    fn.vectorised = True
    return fn


def is_vectorised(iterator) -> bool:
    return bool(getattr(type(iterator).batches_generate_fn, "vectorised", False))


def lengths_of(data_index, data_len) -> np.ndarray:
    """The lengths of ``data_index`` as float64 (from SortedIds when it has them)."""
    if isinstance(data_index, SortedIds) and data_index.lengths is not None:
        return data_index.lengths
    return np.array([data_len[uid] for uid in data_index], dtype=np.float64)


def batches_from_bounds(data_index, bounds):
    """Cut ``data_index`` at ``bounds``: a BatchView for compact input, lists otherwise."""
    bounds = np.asarray(bounds, dtype=np.int64)
    if isinstance(data_index, IdList):
        return BatchView(data_index.array, bounds)
    items = list(data_index)
    return [items[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def batch_lengths(dataset, values: np.ndarray, identity) -> np.ndarray:
    """``dataset.batch_length_fn`` over ``values`` (float64).

    Tried once on the whole array; kept if it gives an array of the same
    shape that agrees with per-value calls on a sample. Otherwise it is called
    once per distinct value (ints for whole lengths, as the hook always got).
    """
    fn = dataset.batch_length_fn
    if getattr(fn, "__func__", None) is identity or len(values) == 0:
        return values

    def one(value):
        return fn(int(value) if value.is_integer() else value)

    rows = np.concatenate([np.linspace(0, len(values) - 1, 64).astype(np.int64),
                           [int(values.argmin()), int(values.argmax())]])
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(fn(values.copy()), dtype=np.float64)
        if out.shape == values.shape:
            expected = np.array([one(v) for v in values[rows].tolist()], dtype=np.float64)
            if np.array_equal(out[rows], expected):
                return out
    except Exception:  # noqa: BLE001 - a hook that is not element-wise; call it per value
        pass
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([one(v) for v in distinct.tolist()], dtype=np.float64)[inverse]
