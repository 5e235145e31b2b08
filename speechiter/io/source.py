"""A data value as a typed source: which file (local path or URL), which entry, which time range.

    parse_source("rec1.flac")                  Source(file="rec1.flac")
    parse_source("s3://b/rec1.wav#t=1.5,2")    Source(file="s3://b/rec1.wav", time_range=TimeRange(1.5, 2.0))
    parse_source("pack.hdf5:utt1#t=0.5")       Source(file="pack.hdf5", key="utt1", time_range=TimeRange(0.5, None))
    parse_source("s3://b/p.pack#bytes=0-99")   Source(file="s3://b/p.pack", byte_range=ByteRange(0, 99))
    parse_source("d/t.parquet:audio#row=7")    Source(file="d/t.parquet", key="audio", row=7)
    parse_source("flac -c -d -s a.flac |")     Source(file="a.flac", pipe=Pipe(...))

The value is resolved already (see :func:`speechiter.paths.resolve_data_path`).
Every reader of :mod:`speechiter.io` starts here, as Lhotse's ``AudioSource``
does: the suffixes are split off once, in one place.

# NOTE [ Segment values ]
A data value may end in a W3C Media Fragments time range, in seconds (the
layout the importers write; see NOTE [ Segment layout ] in
speechiter/importers/writer.py)::

    rec1.flac#t=12.34,15.67      samples of [12.34 s, 15.67 s)
    rec1.flac#t=12.34            from 12.34 s to the end of the file
    pack.hdf5:rec1#t=1.5,2.5     a range of an HDF5 dataset (its sample_rate attribute gives the rate)

Which samples a range reads is NOTE [ Segment samples ] in
speechiter/io/samples.py. Only the range is read: a seek and a read, not a
decode of the file. A fragment is the last suffix of a value.

# NOTE [ Byte-range values ]
A value may name a byte range of a bigger object (a pack shard, see
speechiter/pack/), inclusive as in an HTTP Range header::

    s3://b/train-00003.pack#bytes=1048576-1203455    an encoded audio file (WAV, FLAC, ...) or a .npy
    shard-00000.pack#bytes=0-4095#t=0.5,1            a time range of the audio those bytes hold

The bytes are read (one ranged read, or a slice of a batch's coalesced read,
see speechiter/io/coalesce.py) and decoded from memory
(speechiter/io/embedded.py). The kind is told by the bytes, not the name.

A value may name a cell of a Parquet file, its column as a chunk key and its
row (from 0, in the file) as ``#row=``: ``train-00000.parquet:audio#row=17``
(NOTE [ Parquet cells ] in speechiter/io/parquet.py).

A value that ends in ``|`` (optionally followed by a time range) is a Kaldi
piped command, ``sox rec1.wav -t wav -r 8000 - |#t=1.5,2``: its source has a
``pipe`` (NOTE [ Piped values ] in speechiter/io/pipes.py) and ``file`` is
the command's input file (the command itself when it is not read natively).
"""
from __future__ import annotations

import os
import re
from typing import NamedTuple, Optional, Tuple, Union

from speechiter.errors import DataError
from speechiter.io.pipes import Pipe, parse_pipe, split_piped_value
from speechiter.io.storage import is_url

__all__ = ["NPT", "ROW_MARK", "TimeRange", "ByteRange", "Source", "parse_source", "split_time_range",
           "split_byte_range", "split_row", "split_chunk_key"]

NPT = r"[0-9]+(?:\.[0-9]*)?"  # Media Fragments npt-sec (no hh:mm:ss)
_FRAGMENT_RE = re.compile(rf"#t=(?:npt:)?({NPT})(?:,({NPT}))?$")
_BYTES_RE = re.compile(r"#bytes=([0-9]+)-([0-9]+)$")
ROW_MARK = "#row="
_ROW_RE = re.compile(r"#row=([0-9]+)$")
_MAX_BYTE = 2 ** 63 - 1  # the largest file offset (off_t, and an HTTP Range as stores parse it)
_CHUNK_RE = re.compile(r"^(.*?\.(?:hdf5|h5|npz|parquet)):(.+)$", re.IGNORECASE)


class TimeRange(NamedTuple):
    start: float  # seconds
    end: Optional[float]  # seconds; None: to the end of the file


class ByteRange(NamedTuple):
    first: int  # the first byte
    last: int  # the last byte (inclusive)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __str__(self):
        return f"#bytes={self.first}-{self.last}"


class Source(NamedTuple):
    """Where the samples of one data value are."""

    file: str  # a local path or a URL
    key: Optional[str] = None  # the entry of a chunk file (.hdf5, .h5, .npz)
    time_range: Optional[TimeRange] = None  # None: all of it
    byte_range: Optional[ByteRange] = None  # an encoded file inside ``file``; See NOTE [ Byte-range values ]
    pipe: Optional[Pipe] = None  # a piped command's output
    row: Optional[int] = None  # a Parquet file's row (``key`` its column); See NOTE [ Parquet cells ] in io/parquet.py

    @property
    def is_url(self) -> bool:
        return is_url(self.file)

    @property
    def entry(self) -> str:
        """The value without its time range: ``file``, ``file:key``, ``file#bytes=a-b`` or ``file:key#row=n``."""
        entry = self.file if self.key is None else f"{self.file}:{self.key}"
        if self.row is not None:
            entry = f"{entry}{ROW_MARK}{self.row}"
        return entry if self.byte_range is None else f"{entry}{self.byte_range}"


def parse_source(value: str) -> Source:
    """The :class:`Source` of a resolved data value. Raises DataError for an
    empty time or byte range."""
    piped = split_piped_value(value)
    if piped is not None:
        command, suffix = piped
        time_range = split_time_range(f"{command}{suffix}")[1] if suffix else None
        pipe = parse_pipe(command)
        return Source(pipe.file if pipe.native else pipe.command, time_range=time_range, pipe=pipe)
    rest, time_range, byte_range, row = value, None, None, None
    if "#" in value:  # every suffix below starts with one: most values (plain paths) skip them
        rest, time_range = split_time_range(value)
        rest, byte_range = split_byte_range(rest)
        rest, row = split_row(rest)
        if row is not None and byte_range is not None:
            raise DataError(f"{value}: a value names a byte range or a Parquet row, not both")
    file, key = split_chunk_key(rest)
    return Source(file, key, time_range, byte_range, row=row)


def split_time_range(value: str) -> Tuple[str, Optional[TimeRange]]:
    """``"a.wav#t=1.5,2"`` -> ``("a.wav", TimeRange(1.5, 2.0))``; a value with
    no ``#t=`` suffix -> ``(value, None)``. Raises DataError for an empty range."""
    match = _FRAGMENT_RE.search(value)
    if match is None:
        return value, None
    start = float(match.group(1))
    end = None if match.group(2) is None else float(match.group(2))
    if end is not None and end <= start:
        raise DataError(f"{value}: the time range ends at {end} s, not after its start ({start} s)")
    return value[:match.start()], TimeRange(start, end)


def split_byte_range(value: str) -> Tuple[str, Optional[ByteRange]]:
    """``"p.pack#bytes=0-99"`` -> ``("p.pack", ByteRange(0, 99))``; a value with
    no ``#bytes=`` suffix -> ``(value, None)``. Raises DataError for an empty range."""
    match = _BYTES_RE.search(value)
    if match is None:
        return value, None
    first, last = int(match.group(1)), int(match.group(2))
    if last > _MAX_BYTE:
        raise DataError(f"{value}: the byte range ends at byte {match.group(2)}, past what a file offset can be "
                        f"(2^63 - 1)")
    if last < first:
        raise DataError(f"{value}: the byte range ends at byte {last}, before its first byte ({first})")
    return value[:match.start()], ByteRange(first, last)


def split_row(value: str) -> Tuple[str, Optional[int]]:
    """``"t.parquet:audio#row=7"`` -> ``("t.parquet:audio", 7)``; a value with no
    ``#row=`` suffix -> ``(value, None)``."""
    match = _ROW_RE.search(value)
    if match is None:
        return value, None
    return value[:match.start()], int(match.group(1))


def split_chunk_key(value: Union[str, os.PathLike]) -> Tuple[str, Optional[str]]:
    """Split ``"file.hdf5:key"`` / ``"file.npz:key"`` into ``(file, key)``;
    any other value gives ``(value, None)``."""
    value = os.fspath(value)
    match = _CHUNK_RE.match(value)
    if match is None:
        return value, None
    return match.group(1), match.group(2)
