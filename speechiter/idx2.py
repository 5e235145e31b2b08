"""idx2 files: ``<id> <value>`` per line, parsed and merged.

Each non-blank line of an idx2 file (``idx2wav``, ``idx2wav_len``, ``idx2text``, ...) is ``<id> <value>``,
the value being the rest of the line after the first run of whitespace, stripped (a transcript has spaces).
Files are UTF-8; a byte-order mark at the start is dropped, and lines may end in CRLF.
:func:`read_idx2` (:mod:`speechiter.idx2_lines`) is the line-by-line reference parser, whose errors name
the file and line;
:func:`read_idx2_table` parses the same file with numpy (:mod:`speechiter.idx2_numpy`), handing any file it
cannot parse exactly to :func:`read_idx2`; :func:`read_idx2_files` reads the files given for one option as
one table, with one rule for an id listed in more than one of them. Input errors are DataErrors naming the
file (and line); callers add the utterance id and the option.
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Union

import numpy as np

from speechiter.errors import DataError
from speechiter.index import tables as cache
from speechiter.idx2_numpy import PAD, Fallback, first_duplicate, gather_values, parse_idx2, parse_numbers
from speechiter.idx2_lines import check_not_special, numbered_entries, read_idx2

__all__ = ["read_idx2", "Idx2Table", "read_idx2_table", "read_idx2_numbers", "check_lengths", "Idx2Files",
           "read_idx2_files", "gather_values", "ON_DUPLICATE"]

PathLike = Union[str, os.PathLike]
#: what :func:`read_idx2_files` does with an id listed in more than one file
ON_DUPLICATE = ("error", "last")


# --------------------------------------------------------------------- one file, as arrays


class Idx2Table:
    """One idx2 file: ``ids`` (S array, file order) and each value as the
    byte range ``buffer[starts[i]:ends[i]]``. ``ids_sorted``: True where the
    ids are known to be in id order (a cached table), else None.
    ``cache_key``: the plan cache's key of the file, or None (see
    speechiter/index/tables.py)."""

    def __init__(self, path: str, ids: np.ndarray, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 ids_sorted: Optional[bool] = None, cache_key: Optional[dict] = None):
        self.path, self.ids, self.buffer, self.starts, self.ends = path, ids, buffer, starts, ends
        self.ids_sorted, self.cache_key = ids_sorted or None, cache_key

    def __len__(self):
        return len(self.ids)

    def numbers(self) -> np.ndarray:
        """Values as float64 (as ``float(value)``; errors as read_idx2's)."""
        values = cache.load_numbers(self.cache_key)
        if values is not None and len(values) == len(self):
            return values
        try:
            values = parse_numbers(self.buffer, self.starts, self.ends)
        except Fallback:
            ids, values = read_idx2(self.path, float)  # raises DataError naming file:line
            return np.asarray(values, dtype=np.float64)  # pragma: no cover (read_idx2 raised)
        cache.save_numbers(self.cache_key, values)
        return values


def read_idx2_table(path: PathLike) -> Idx2Table:
    """Parse an idx2 file with numpy (same result and errors as read_idx2),
    or map it from the plan cache (NOTE [ Plan cache ] in speechiter/index/__init__.py)."""
    path = os.fspath(path)
    check_not_special(path)
    key = cache.source_of(path)
    hit = cache.load(key)
    if hit is not None:
        return Idx2Table(path, hit.ids, hit.buffer, hit.starts, hit.ends, hit.ids_sorted, key)
    try:
        table = Idx2Table(path, *parse_idx2(path))
    except (Fallback, OSError):
        ids, values = read_idx2(path)  # raises the exact error, or parses what we could not
        encoded = [v.encode("utf-8") for v in values]
        ends = np.cumsum([len(v) for v in encoded], dtype=np.int64)
        starts = ends - np.array([len(v) for v in encoded], dtype=np.int64)
        buffer = np.frombuffer(b"".join(encoded) + b"\n" * PAD, dtype=np.uint8)
        id_array = np.array([uid.encode("utf-8") for uid in ids] or [b""], dtype="S")[:len(ids)]
        return Idx2Table(path, id_array, buffer, starts, ends)  # not cached: its buffer is not the file
    table.cache_key = key if cache.save(key, table.ids, table.starts, table.ends) else None
    return table


def read_idx2_numbers(path: PathLike):
    """``(ids, float64 lengths)`` of a length file (``data_len``, ``idx2wav_len``).

    Every value must be a positive finite number (see :func:`check_lengths`).
    """
    table = read_idx2_table(path)
    values = table.numbers()
    check_lengths(table.path, table.ids, values)
    return table.ids, values


def check_lengths(path: PathLike, ids: np.ndarray, values: np.ndarray) -> None:
    """Raise DataError naming ``path`` and the line of the first length that
    is not a positive finite number (negative, zero, NaN, inf); ``ids`` (an
    ``S`` array) and ``values`` are its rows. ``path`` may name another source
    (no line then). Zero is an empty utterance: nothing to batch, and a
    batch_len budget would take any number of them, so it is refused too.
    """
    bad = ~(np.isfinite(values) & (values > 0))
    if not bad.any():
        return
    row, path = int(np.argmax(bad)), os.fspath(path)
    uid = ids[row].decode("utf-8") if isinstance(ids[row], bytes) else str(ids[row])
    try:  # the error path only: find the line
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            where = next((f"{path}:{n}" for n, line_id, _ in numbered_entries(f.read()) if line_id == uid), path)
    except OSError:  # lengths that come from no file (a dataset's data_len_register_fn)
        where = path
    kind = "not a number" if np.isnan(values[row]) else "not finite" if np.isinf(values[row]) else "not positive"
    raise DataError(f"{where}: length {values[row]:g} of id {uid!r} is {kind}; lengths must be positive numbers "
                    f"({int(bad.sum())} of {len(values)} lengths are not)")


# --------------------------------------------------------------------- several files of one option


class Idx2Files:
    """The idx2 files of one option as one table: row ``i`` is id ``ids[i]``
    with the value ``buffers[f][starts[i]:ends[i]]`` of ``files[f]``, where
    ``f = file_no[i]`` (``file_no`` is None when there is one file)."""

    def __init__(self, tables: List[Idx2Table], rows: Optional[np.ndarray] = None):
        self.tables = tables
        self.files = [t.path for t in tables]
        self.buffers = [t.buffer for t in tables]
        self._rows = rows  # rows of the files' concatenation; None: all, in order
        self.ids_sorted = None  # True: known to be in id order (one cached table)
        if len(tables) == 1:
            table = tables[0]
            self.ids, self.starts, self.ends, self.file_no = table.ids, table.starts, table.ends, None
            self.ids_sorted = table.ids_sorted if rows is None else None
        else:
            self.ids = np.concatenate([t.ids for t in tables])
            self.starts = np.concatenate([t.starts for t in tables])
            self.ends = np.concatenate([t.ends for t in tables])
            self.file_no = np.repeat(np.arange(len(tables), dtype=np.int32), [len(t) for t in tables])
        if rows is not None:
            self.ids, self.starts, self.ends = self.ids[rows], self.starts[rows], self.ends[rows]
            self.file_no = None if self.file_no is None else self.file_no[rows]

    def __len__(self):
        return len(self.ids)

    def take(self, rows: np.ndarray) -> "Idx2Files":
        """The rows ``rows``, in that order."""
        return Idx2Files(self.tables, rows if self._rows is None else self._rows[rows])

    def numbers(self, lengths: bool = False) -> np.ndarray:
        """Values as float64 (errors as read_idx2's); with ``lengths``, each
        file's values must be positive finite numbers (:func:`check_lengths`)."""
        parts = [t.numbers() for t in self.tables]
        if lengths:
            for table, values in zip(self.tables, parts):
                check_lengths(table.path, table.ids, values)
        values = parts[0] if len(parts) == 1 else np.concatenate(parts)  # one file: no copy (maybe mapped)
        return values if self._rows is None else values[self._rows]


def read_idx2_files(files: Sequence[PathLike], option: str, on_duplicate: str = "error") -> Idx2Files:
    """Read the idx2 files given for one option as one :class:`Idx2Files`.

    The rule for an id listed in more than one file:

    - ``on_duplicate="error"``: a DataError ``"<file>: utterance <id> is also
      listed in another <option> file (<the others>)"``, naming the first
      file (in the order given) that repeats an id of an earlier one; rows
      are the files' rows, in order.
    - ``on_duplicate="last"``: the last file that lists an id gives its
      value; ids keep the order of their first appearance (as a dict updated
      file after file).

    ``option`` names the option in messages (``main_data.feat``,
    ``data_len``). Errors within one file are those of read_idx2.
    """
    if on_duplicate not in ON_DUPLICATE:
        raise ValueError(f"on_duplicate: expected one of {', '.join(ON_DUPLICATE)}, got {on_duplicate!r}")
    files = [os.fspath(file) for file in files]
    if not files:
        raise ValueError(f"{option}: read_idx2_files needs at least one file")
    merged = Idx2Files([read_idx2_table(file) for file in files])
    if len(files) == 1:
        return merged
    duplicate = first_duplicate(merged.ids)
    if duplicate < 0:
        return merged
    if on_duplicate == "last":
        return merged.take(_last_rows(merged.ids))
    file = files[int(merged.file_no[duplicate])]
    raise DataError(f"{file}: utterance {merged.ids[duplicate].decode('utf-8')} is also listed in another "
                    f"{option} file ({', '.join(f for f in files if f != file)})")


def _last_rows(ids: np.ndarray) -> np.ndarray:
    """The last row of each id, ordered by the id's first row."""
    _, first = np.unique(ids, return_index=True)
    _, from_end = np.unique(ids[::-1], return_index=True)
    last = len(ids) - 1 - from_end
    return last[np.argsort(first)]
