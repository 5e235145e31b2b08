"""Data values: where a value of an idx2 file points (the checks before a data file is read are in
speechiter/io/files.py, re-exported here).

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
from typing import Union

from speechiter.io.files import check_data_file, check_regular_file, relative_values_in
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
    relative_values_in(folder, idx2_path)
    file = os.path.normpath(os.path.join(folder, file))
    return file if key is None else f"{file}:{key}"
