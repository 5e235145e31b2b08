"""The line-by-line idx2 parser, :func:`read_idx2`: the reference the vectorised one
(:mod:`speechiter.idx2_numpy`) is checked against and falls back to, whose errors name the file and line.
See :mod:`speechiter.idx2` for the format.
"""
from __future__ import annotations

import contextlib
import gc
import math
import os
from typing import Union

from speechiter.errors import DataError
from speechiter.paths import check_regular_file

__all__ = ["read_idx2", "check_not_special", "numbered_entries"]

PathLike = Union[str, os.PathLike]


def read_idx2(path: PathLike, value_type=str):
    """Read an idx2 file into ``(ids, values)`` in file order.

    ``value_type`` converts each value; ``int`` also accepts float strings
    such as ``"123.0"`` and rounds them.

    Raises DataError naming the file (and line) for a missing or unreadable
    file, a line without a value, a duplicate id, or a value that
    ``value_type`` rejects.
    """
    path = os.fspath(path)
    check_not_special(path)
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


def check_not_special(path: str):
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


def numbered_entries(text):
    for lineno, line in enumerate(text.split("\n"), 1):
        parts = line.split(None, 1)
        if len(parts) == 2:
            yield lineno, parts[0], parts[1].rstrip()


def _check_ids(path, text):
    first_line = {}
    for lineno, utt_id, _ in numbered_entries(text):
        if utt_id in first_line:
            raise DataError(f"{path}:{lineno}: duplicate id {utt_id!r} (first on line {first_line[utt_id]})")
        if "\x00" in utt_id:  # numpy S arrays, which hold the ids, would drop trailing NULs
            raise DataError(f"{path}:{lineno}: id {utt_id!r} contains a NUL character")
        first_line[utt_id] = lineno


def _raise_bad_value(path, text, convert, value_type):
    name = getattr(value_type, "__name__", repr(value_type))
    for lineno, utt_id, value in numbered_entries(text):
        try:
            convert(value)
        except (ValueError, TypeError, OverflowError):
            raise DataError(f"{path}:{lineno}: value {value!r} of id {utt_id!r} is not a valid {name}") from None
    raise AssertionError("unreachable: every value converted")  # pragma: no cover
