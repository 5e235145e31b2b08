"""The vectorised idx2 parser: ids as an ``S`` array, values as byte ranges.

:func:`parse_idx2` parses a file without a Python string per line (see
NOTE [ Compact storage ] in ids.py). Lines it cannot prove to be plain
(a byte-order mark, leading whitespace, a line without value, a duplicate id,
non-ASCII bytes next to the separator or at the line's end, undecodable bytes) raise
:class:`Fallback`: :func:`speechiter.idx2.read_idx2_table` then sends the
whole file to :func:`speechiter.idx2.read_idx2`, which raises its usual
``file:line`` errors or parses it exactly.
"""
import os
from typing import Tuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["Fallback", "parse_idx2", "parse_numbers", "gather_values", "first_duplicate"]

# Whitespace that str.split() splits on within ASCII.
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
PAD = 64  # newline bytes after the data, so windows never run off the end
_WINDOW = 32
_ROWS = 1 << 16  # rows per vectorised block (bounds temporaries)


class Fallback(Exception):
    """The vectorised parser cannot handle this file exactly."""


def parse_idx2(path: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, buffer, starts, ends)`` of an idx2 file, or Fallback."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        raw = bytearray(size + PAD)  # zeroed lazily by the OS: no copy, no fill
        if f.readinto(memoryview(raw)[:size]) != size:
            raise Fallback
    if raw.startswith(b"\xef\xbb\xbf"):
        raise Fallback  # a byte-order mark: read_idx2 drops it
    if b"\r" in raw and raw.count(b"\r") != raw.count(b"\r\n"):
        raise Fallback  # a lone CR ends a line for read_idx2 (universal newlines), not here
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
            raise Fallback from None
    ends = np.concatenate([np.flatnonzero(data[at:at + (1 << 23)] == 10) + at for at in range(0, size, 1 << 23)]
                          or [np.zeros(0, dtype=np.int64)])
    if size and data[-1] != 10:
        ends = np.append(ends, size)
    ends = ends.astype(np.int32 if size + PAD < 2 ** 31 else np.int64)  # offsets: half the memory
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
        raise Fallback  # leading whitespace
    sep, ids = _split_ids(buffer, starts)
    if (sep >= ends).any():
        raise Fallback  # a line without value: read_idx2 names it
    values = sep + 1
    while True:
        more = _WS[buffer[values]]
        if not more.any():
            break
        values[more] += 1
    if high and ((ids.view(np.uint8) >= 128).any() or (buffer[values] >= 128).any()
                 or (buffer[ends - 1] >= 128).any()):
        raise Fallback  # non-ASCII around the separator or at the end: maybe Unicode whitespace
    if first_duplicate(ids) >= 0:
        raise Fallback  # read_idx2 names the line
    return ids, buffer, values, ends


def _split_ids(buffer, starts):
    """``(sep, ids)``: the first whitespace at or after each start, and the
    bytes before it as an ``S`` array. One window per line, as wide as the
    first line's id (plus the separator), finds both for most lines."""
    head = np.flatnonzero(_WS[buffer[int(starts[0]):int(starts[0]) + PAD]]) if len(starts) else []
    width = min(PAD, ((int(head[0]) if len(head) else _WINDOW) + 8) // 8 * 8)
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
            raise Fallback  # a control byte that is not whitespace
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


def parse_numbers(buffer, starts, ends) -> np.ndarray:
    """Values as float64 (as ``float(value)``), or Fallback for one that is not a number."""
    lengths = ends - starts
    out = np.empty(len(starts), dtype=np.float64)
    plain = np.zeros(len(starts), dtype=bool)
    if len(starts) and lengths.max() <= 15:
        width = int(lengths.max())
        digits = np.zeros(len(starts), dtype=np.int64)
        plain[:] = True
        for col in range(width):
            inside = col < lengths
            byte = buffer[np.minimum(starts + col, len(buffer) - 1)]
            is_digit = (byte >= 48) & (byte <= 57)
            plain &= is_digit | ~inside
            digits = np.where(inside, digits * 10 + (byte.astype(np.int64) - 48), digits)
        out[plain] = digits[plain]
    rest = np.flatnonzero(~plain)
    if len(rest):
        texts = gather_values(buffer, starts[rest], ends[rest]).tolist()
        try:
            out[rest] = [float(t.decode("utf-8")) for t in texts]
        except (ValueError, UnicodeDecodeError):
            raise Fallback from None
    return out


def first_duplicate(ids: np.ndarray) -> int:
    """Row of the earliest repeated id (its second occurrence), or -1."""
    if len(ids) < 2 or (ids[1:] > ids[:-1]).all():  # files are usually in id order: no sort needed
        return -1
    ordered = np.sort(ids)
    if not (ordered[1:] == ordered[:-1]).any():
        return -1
    order = np.argsort(ids, kind="stable")
    same = np.flatnonzero(ids[order[1:]] == ids[order[:-1]])
    return int(order[same + 1].min())
