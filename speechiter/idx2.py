"""idx2 files parsed with numpy: ids as an ``S`` array, values as byte ranges.

:func:`read_idx2_table` gives the same result and errors as
:func:`speechiter.readers.read_idx2`, without a Python string per line (see
NOTE [ Compact storage ] in plan.py). Lines it cannot prove to be plain
(leading whitespace, a line without value, a duplicate id, non-ASCII bytes
next to the separator or at the line's end, undecodable bytes) send the whole
file to ``read_idx2``, which raises its usual ``file:line`` errors or parses
it exactly.
"""
import os

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from speechiter.readers import read_idx2

# Whitespace that str.split() splits on within ASCII.
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_PAD = 64  # newline bytes after the data, so windows never run off the end
_WINDOW = 32
_ROWS = 1 << 16  # rows per vectorised block (bounds temporaries)


class _Fallback(Exception):
    """The fast parser cannot handle this file exactly."""


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
        return Idx2Table(path, np.array([uid.encode('utf-8') for uid in ids] or [b''], dtype='S')[:len(ids)], buffer, starts, ends)


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
    if _has_duplicates(ids):
        raise _Fallback  # read_idx2 names the line
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


def gather_values(buffer, starts, ends) -> np.ndarray:
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
        texts = gather_values(table.buffer, table.starts[rest], table.ends[rest]).tolist()
        try:
            out[rest] = [float(t.decode("utf-8")) for t in texts]
        except (ValueError, UnicodeDecodeError):
            ids, values = read_idx2(table.path, float)  # raises DataError naming file:line
            return np.asarray(values, dtype=np.float64)  # pragma: no cover (read_idx2 raised)
    return out


def _has_duplicates(ids: np.ndarray) -> bool:
    if len(ids) < 2 or (ids[1:] > ids[:-1]).all():  # files are usually in id order: no sort needed
        return False
    ordered = np.sort(ids)
    return bool((ordered[1:] == ordered[:-1]).any())
