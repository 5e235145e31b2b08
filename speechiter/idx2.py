"""idx2 files: ``<id> <value>`` per line, parsed and merged.

Each non-blank line of an idx2 file (``idx2wav``, ``idx2wav_len``, ``idx2text``, ...) is ``<id> <value>``,
the value being the rest of the line after the first run of whitespace, stripped (a transcript has spaces).
Files are UTF-8; a byte-order mark at the start is dropped, and lines may end in CRLF.
:func:`read_idx2` is the line-by-line reference parser, whose errors name the file and line;
:func:`read_idx2_table` parses the same file with numpy (:mod:`speechiter.idx2_numpy`), handing any file it
cannot parse exactly to :func:`read_idx2`; :func:`read_idx2_files` reads the files given for one option as
one table, with one rule for an id listed in more than one of them. Input errors are DataErrors naming the
file (and line); callers add the utterance id and the option.
"""
from __future__ import annotations

import contextlib
import gc
import math
import os
from typing import List, Optional, Sequence, Union

import numpy as np

from speechiter.errors import DataError
from speechiter.idx2_numpy import PAD, Fallback, first_duplicate, gather_values, parse_idx2, parse_numbers
from speechiter.paths import check_regular_file

__all__ = ["read_idx2", "Idx2Table", "read_idx2_table", "read_idx2_numbers", "check_lengths", "Idx2Files",
           "read_idx2_files", "gather_values", "ON_DUPLICATE"]

PathLike = Union[str, os.PathLike]
#: what :func:`read_idx2_files` does with an id listed in more than one file
ON_DUPLICATE = ("error", "last")


# --------------------------------------------------------------------- one file, line by line


def read_idx2(path: PathLike, value_type=str):
    """Read an idx2 file into ``(ids, values)`` in file order.

    ``value_type`` converts each value; ``int`` also accepts float strings
    such as ``"123.0"`` and rounds them.

    Raises DataError naming the file (and line) for a missing or unreadable
    file, a line without a value, a duplicate id, or a value that
    ``value_type`` rejects.
    """
    path = os.fspath(path)
    _check_not_special(path)
    try:
        with open(path, encoding="utf-8-sig") as f:  # utf-8-sig: a BOM at the start is not part of the first id
            text = f.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such idx2 file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected an idx2 file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read idx2 file ({e})") from None

    with _gc_paused():
        # split("\n"), not splitlines(): the latter also splits on \x0b,
        # \x1c, \u2028 ..., which may appear inside a transcript.
        lines = text.split("\n")
        if lines and not lines[-1]:
            lines.pop()  # the final newline
        pairs = [line.split(None, 1) for line in lines]
        del lines
        if not all(len(p) == 2 for p in pairs):
            for lineno, parts in enumerate(pairs, 1):
                if len(parts) == 1:
                    raise DataError(f"{path}:{lineno}: id {parts[0]!r} has no value (expected '<id> <value>')")
            pairs = [p for p in pairs if p]  # blank lines
        ids = [p[0] for p in pairs]
        values = [p[1].rstrip() for p in pairs]
        del pairs
        if len(set(ids)) != len(ids) or "\x00" in text:
            _check_ids(path, text)
        if value_type is not str:
            convert = _int_value if value_type is int else value_type
            try:
                values = [convert(v) for v in values]
            except (ValueError, TypeError, OverflowError):
                _raise_bad_value(path, text, convert, value_type)
    return ids, values


def _check_not_special(path: str):
    # A FIFO or a device would block or never end; a missing file or a folder
    # gets read_idx2's own message.
    if os.path.exists(path) and not os.path.isdir(path):
        check_regular_file(path, "an idx2 file")


@contextlib.contextmanager
def _gc_paused():
    # Building millions of small lists triggers the cyclic GC over and over
    # (2-4x the parse time); none of them can form a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _int_value(text):
    try:
        return int(text)
    except ValueError:
        value = float(text)  # ValueError for non-numbers
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {text!r}") from None
        return round(value)


def _numbered_entries(text):
    for lineno, line in enumerate(text.split("\n"), 1):
        parts = line.split(None, 1)
        if len(parts) == 2:
            yield lineno, parts[0], parts[1].rstrip()


def _check_ids(path, text):
    first_line = {}
    for lineno, utt_id, _ in _numbered_entries(text):
        if utt_id in first_line:
            raise DataError(f"{path}:{lineno}: duplicate id {utt_id!r} (first on line {first_line[utt_id]})")
        if "\x00" in utt_id:  # numpy S arrays, which hold the ids, would drop trailing NULs
            raise DataError(f"{path}:{lineno}: id {utt_id!r} contains a NUL character")
        first_line[utt_id] = lineno


def _raise_bad_value(path, text, convert, value_type):
    name = getattr(value_type, "__name__", repr(value_type))
    for lineno, utt_id, value in _numbered_entries(text):
        try:
            convert(value)
        except (ValueError, TypeError, OverflowError):
            raise DataError(f"{path}:{lineno}: value {value!r} of id {utt_id!r} is not a valid {name}") from None
    raise AssertionError("unreachable: every value converted")  # pragma: no cover


# --------------------------------------------------------------------- one file, as arrays


class Idx2Table:
    """One idx2 file: ``ids`` (S array, file order) and each value as the
    byte range ``buffer[starts[i]:ends[i]]``."""

    def __init__(self, path: str, ids: np.ndarray, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        self.path, self.ids, self.buffer, self.starts, self.ends = path, ids, buffer, starts, ends

    def __len__(self):
        return len(self.ids)

    def numbers(self) -> np.ndarray:
        """Values as float64 (as ``float(value)``; errors as read_idx2's)."""
        try:
            return parse_numbers(self.buffer, self.starts, self.ends)
        except Fallback:
            ids, values = read_idx2(self.path, float)  # raises DataError naming file:line
            return np.asarray(values, dtype=np.float64)  # pragma: no cover (read_idx2 raised)


def read_idx2_table(path: PathLike) -> Idx2Table:
    """Parse an idx2 file with numpy (same result and errors as read_idx2)."""
    path = os.fspath(path)
    _check_not_special(path)
    try:
        return Idx2Table(path, *parse_idx2(path))
    except (Fallback, OSError):
        ids, values = read_idx2(path)  # raises the exact error, or parses what we could not
        encoded = [v.encode("utf-8") for v in values]
        ends = np.cumsum([len(v) for v in encoded], dtype=np.int64)
        starts = ends - np.array([len(v) for v in encoded], dtype=np.int64)
        buffer = np.frombuffer(b"".join(encoded) + b"\n" * PAD, dtype=np.uint8)
        id_array = np.array([uid.encode("utf-8") for uid in ids] or [b""], dtype="S")[:len(ids)]
        return Idx2Table(path, id_array, buffer, starts, ends)


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
            where = next((f"{path}:{n}" for n, line_id, _ in _numbered_entries(f.read()) if line_id == uid), path)
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
        if len(tables) == 1:
            table = tables[0]
            self.ids, self.starts, self.ends, self.file_no = table.ids, table.starts, table.ends, None
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
        values = np.concatenate(parts)
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
