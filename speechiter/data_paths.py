"""Data values: where a value of an idx2 file points, and the check before a data file is read.

A data value is a file path, relative to the idx2 file's folder or absolute,
or a URL (``s3://``, ``gs://``, ``http(s)://``; see :mod:`speechiter.io.storage`),
optionally naming an entry of a chunk file: ``chunk_000.hdf5:<key>``,
``feats.npz:<key>``, and optionally ending in a time range ``#t=<start>,<end>``
(see NOTE [ Segment values ] in speechiter/io/source.py). Values of a main_data
file named ``segments`` are Kaldi segments (see NOTE [ Kaldi segments ]).
The rules for the recipe's own paths are in speechiter/paths.py (NOTE [ Path policy ]).
"""
from __future__ import annotations

import os
import stat
from typing import Dict, Union

from speechiter.errors import DataError
from speechiter.io.kaldi_segments import is_kaldi_segments, kaldi_segment_value
from speechiter.io.pipes import is_piped
from speechiter.io.source import split_chunk_key
from speechiter.io.storage import is_url

__all__ = ["resolve_data_path", "check_data_file", "check_regular_file"]

PathLike = Union[str, os.PathLike]


def resolve_data_path(value: PathLike, idx2_path: PathLike) -> str:
    """Resolve a data value from an idx2 file against that file's folder.

    Relative file paths are joined to ``dirname(idx2_path)``; for chunk
    entries (``file.hdf5:key``, ``file.npz:key``) only the file part is
    resolved and the key (and a ``#t=`` suffix) is kept. Absolute paths and
    URLs are returned unchanged, and so is a piped command (``cmd ... |``:
    its files are the command's, read from the current folder as in Kaldi;
    see speechiter/io/pipes.py). In a file named ``segments`` a value is
    ``<recording> <start> <end>``, looked up in the wav.scp beside it; relative
    wav.scp paths resolve against the current folder, as in Kaldi.
    """
    value, idx2_path = os.fspath(value), os.fspath(idx2_path)
    if is_kaldi_segments(idx2_path):
        return kaldi_segment_value(value, idx2_path)
    if is_url(value) or is_piped(value):
        return value
    file, key = split_chunk_key(value)
    if os.path.isabs(file):
        return value
    folder = os.path.dirname(idx2_path)
    if folder not in _RELATIVE_IN:
        _RELATIVE_IN[folder] = idx2_path
    file = os.path.normpath(os.path.join(folder, file))
    return file if key is None else f"{file}:{key}"


#: {folder: idx2 file}: the folders that relative idx2 values were resolved against, in this process
#: (to explain a missing file; see check_data_file)
_RELATIVE_IN: Dict[str, str] = {}


def check_data_file(file: str) -> None:
    """Raise DataError naming ``file`` unless it is an existing regular file
    (URLs are checked when read). A missing file that a relative idx2 value
    named says the rule (against the idx2 file's folder) and the idx2 file."""
    if is_url(file):
        return
    try:
        check_regular_file(file, "a data file")
    except DataError as e:
        if os.path.lexists(file):
            raise
        raise DataError(f"{e}{_relative_value_rule(file)}") from None


def _relative_value_rule(file: str) -> str:
    idx2_of = {os.path.normpath(folder): idx2 for folder, idx2 in list(_RELATIVE_IN.items())}
    folder = os.path.dirname(os.path.normpath(file)) or "."
    while folder not in idx2_of:
        parent = os.path.dirname(folder)
        if parent == folder:
            return ""
        folder = parent
    idx2, value = idx2_of[folder], os.path.relpath(file, folder)
    here = (f"; {value} exists from the current folder, where SpeeChain reads it: write absolute paths in {idx2}"
            if os.path.exists(value) else "")
    return f" (a relative value of {idx2} is read from that file's folder{here})"


# Reading a FIFO blocks until a writer comes (forever, inline); /dev/zero never
# ends; a socket cannot be opened. So only regular files are read.
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def check_regular_file(file: str, expected: str = "a regular file") -> None:
    """Raise DataError naming ``file`` unless it exists and is a regular file
    (symbolic links are followed); call it before opening a file to read.
    ``expected`` names what the file should be (``"an idx2 file"``)."""
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        raise DataError(f"{file}: no such file") from None
    except OSError as e:
        raise DataError(f"{file}: cannot read it ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise DataError(f"{file}: is {kind}, expected {expected}")
