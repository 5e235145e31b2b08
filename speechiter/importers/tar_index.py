"""Tar shards indexed where they lie (local or URLs, never copied): members as byte ranges, lengths from
headers. Shared by the WebDataset, Lhotse Shar and NeMo importers.

# NOTE [ Tar shards read in place ]
A tar member's data is one contiguous byte range of its shard, so an audio
member becomes the idx2wav value ``<shard>#bytes=<first>-<last>`` (NOTE
[ Byte-range values ] in speechiter/io/source.py), read by the same reader as
a pack. Indexing walks the 512-byte headers with Python's ``tarfile`` over a
file object that reads the shard in windows of :data:`WINDOW` bytes (a ranged
GET per window at a URL, ``pread`` on disk): a header, the first bytes of the
member after it (the WAV / FLAC header that gives its length) and any small
members around it (``.txt``, ``.json``) come in one read, and audio data is
skipped, never read. ``idx2wav_len`` is the header's frame count: a WAV's data
size over its frame size (:func:`speechiter.io.wav.read_wav_header`), a FLAC's
STREAMINFO total; a header that gives none (a streamed encode, another format)
is decoded whole by the reader's own decoder, so the length is what it reads.
Python's tarfile ends an archive quietly at a corrupt header past the first;
here the block where the walk stopped must be the end-of-archive marker (zero
blocks) or the end of the shard, else it is an error naming the shard and byte.

Each shard's size, and mtime (local) or ETag (a store), go in ``shards.json``
beside the idx2 files: a shard changed afterwards is an error naming it (NOTE [ Shard integrity ] in io/shards.py).
"""
from __future__ import annotations

import glob
import json
import os
import re
import tarfile
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from pathlib import Path

from speechiter.errors import DataError
from speechiter.importers.command import Parser, run_main
from speechiter.importers.utterance import InputError, Utterance, seconds_text
from speechiter.importers.writer import write_corpus
from speechiter.io.embedded import read_embedded
from speechiter.io.pread_file import PreadFile
from speechiter.io.shards import SHARDS_FILE
from speechiter.io.source import ByteRange, Source
from speechiter.io.storage import call, filesystem, is_url, read_range, redact
from speechiter.io.wav import read_wav_header

__all__ = ["WINDOW", "AUDIO_EXTENSIONS", "Member", "TarShard", "Keys", "expand_shards", "audio_length",
           "audio_utterance", "member_key", "read_text_member", "read_object", "command", "write_index"]

#: Member extensions taken as audio (any other member is not audio).
AUDIO_EXTENSIONS = ("flac", "wav")

WINDOW = 64 << 10  # bytes per read while walking headers
_HEAD = 4096  # bytes of a member read for its audio header
_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")


class Member(NamedTuple):
    name: str
    first: int  # the first byte of its data in the shard
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1


class TarShard(PreadFile):
    """A tar shard (path or URL) as a seekable file read in windows, and its members.

    ``record``: its size and mtime_ns (local) or ETag (a store), as shards.json keeps them."""

    def __init__(self, name: str, base: str = "."):
        location, relative = shard_location(name, base)
        where = redact(location)
        record = _record(location, where)
        super().__init__(record["size"])
        self.location, self.relative, self.where, self.record = location, relative, where, record
        self._start, self._buffer = 0, b""
        self.reads = 0  # requests made (ranged GETs at a URL)

    def pread(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``pos`` (fewer at the end), from the window when it holds them."""
        n = max(0, min(n, self.size - pos))
        if pos < self._start or pos + n > self._start + len(self._buffer):
            self._start, self._buffer = pos, self._fetch(pos, min(self.size, pos + max(n, WINDOW)))
        return self._buffer[pos - self._start:pos - self._start + n]

    def _fetch(self, start: int, end: int) -> bytes:
        self.reads += 1
        if is_url(self.location):
            return read_range(self.location, start, end)
        with open(self.location, "rb", buffering=0) as f:
            return os.pread(f.fileno(), end - start, start)

    # -- the members
    def members(self) -> Iterator[Member]:
        """Regular-file members in order; raises InputError for a corrupt header."""
        try:
            archive = tarfile.open(fileobj=self, mode="r:")
            for info in archive:
                if info.isfile():
                    yield Member(info.name, info.offset_data, info.size)
            end = archive.offset
        except tarfile.TarError as e:  # the header at the start, or a pax / GNU header, is corrupt
            raise InputError(f"{self.where}: not a readable tar archive ({e}) near byte {self.tell()}") from None
        if end < self.size and any(self.pread(end, 512)):
            raise InputError(f"{self.where}: corrupt tar header at byte {end} (bad checksum or not a tar "
                             f"header); the members after it cannot be found")

    def member_bytes(self, member: Member) -> bytes:
        return self.pread(member.first, member.size)

    def value(self, member: Member) -> str:
        return f"{self.location}{ByteRange(member.first, member.last)}"


def _record(location: str, where: str) -> dict:
    if not is_url(location):
        try:
            st = os.stat(location)
        except FileNotFoundError:
            raise InputError(f"{where}: no such shard") from None
        except OSError as e:
            raise InputError(f"{where}: cannot read the shard ({e.strerror or e})") from None
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    fs = filesystem(location)
    try:
        info = call(location, lambda: fs.info(location), "read the shard's size")
    except DataError as e:
        raise InputError(f"{where}: no such shard" if "no such" in str(e) else str(e)) from None
    etag = info.get("ETag") or info.get("etag")
    return {"size": int(info["size"]), "etag": etag.strip('"') if etag else None}


def member_key(name: str) -> Tuple[str, str]:
    """``(key, extension)`` of a member name as WebDataset splits it: the
    key is the path up to the first dot of the base name."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext if dot else "")


def audio_length(shard: TarShard, member: Member, where: str) -> Tuple[int, int]:
    """``(frames, sample_rate)`` of the audio ``member`` holds, from its header
    (See NOTE [ Tar shards read in place ]). InputError naming ``where`` when it is not audio."""
    def at(pos, n):
        return shard.pread(member.first + pos, min(n, member.size - pos)) if pos < member.size else b""

    head = at(0, _HEAD)
    if head[:4] == b"RIFF":
        header = read_wav_header(at)
        if header is not None and header.sized:
            if header.offset + header.data_size > member.size:
                raise InputError(f"{where}: truncated WAV: its header gives {header.data_size} bytes of audio, "
                                 f"the member holds {max(0, member.size - header.offset)}")
            return header.frames, header.rate
    elif head[:4] == b"fLaC" and len(head) >= 42 and head[4] & 0x7F == 0:  # STREAMINFO comes first
        info = head[8:42]
        total = int.from_bytes(info[13:18], "big") & 0xFFFFFFFFF
        if total:
            return total, int.from_bytes(info[10:13], "big") >> 4
    source = Source(shard.location, byte_range=ByteRange(member.first, member.last))
    try:
        x, rate = read_embedded(source, None)
    except DataError as e:
        raise InputError(f"{where}: not audio speechiter reads ({str(e).rsplit(': ', 1)[-1]})") from None
    if rate is None:
        raise InputError(f"{where}: not audio (an npy array)")
    return int(x.shape[0]), int(rate)


def audio_utterance(uid: str, shard: TarShard, member: Member, where: str) -> Utterance:
    """The utterance of an audio member (its text and speaker set afterwards)."""
    frames, rate = audio_length(shard, member, where)
    if frames <= 0:
        raise InputError(f"{where}: the audio has no frames")
    return Utterance(uid, shard.value(member), frames, seconds_text(frames / rate), relative=shard.relative,
                     where=where)


def expand_shards(patterns: List[str]) -> List[str]:
    """Shard names from brace ranges (``audio_{0..7}.tar``, zero padding
    kept, as NeMo and WebDataset expand them) and, for local paths, globs;
    in the order given."""
    out: List[str] = []
    for pattern in patterns:
        pattern = pattern.replace("_OP_", "{").replace("_CL_", "}")  # NeMo's brace-free spelling
        for name in _braces(pattern):
            if not is_url(name) and glob.has_magic(name):
                found = sorted(glob.glob(name))
                if not found:
                    raise InputError(f"{name}: matches no shard")
                out += found
            else:
                out.append(name)
    return out


def _braces(pattern: str) -> List[str]:
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    low, high = match.group(1), match.group(2)
    width = len(low) if low.startswith("0") and len(low) > 1 else 0
    if int(high) < int(low):
        raise InputError(f"{pattern}: the range {{{low}..{high}}} is empty")
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [name for i in range(int(low), int(high) + 1) for name in _braces(f"{head}{i:0{width}d}{tail}")]


def shard_location(value: str, base: str = ".") -> Tuple[str, bool]:
    """``(absolute path or URL, given relative)`` of a shard name."""
    if "#" in value:
        raise InputError(f"{value!r}: a shard name may not contain '#' (idx2wav reserves it for #bytes=)")
    if is_url(value):
        return value, False
    value = os.path.expanduser(value)
    return os.path.normpath(os.path.join(os.path.abspath(base), value)), not os.path.isabs(value)


class Keys:
    """Utterance ids seen so far, and where: a second one is an InputError naming both."""

    def __init__(self):
        self.seen: Dict[str, str] = {}

    def add(self, uid: str, where: str) -> None:
        if uid in self.seen:
            raise InputError(f"{where}: key {uid!r} occurs twice (first at {self.seen[uid]})")
        self.seen[uid] = where


def write_index(out_dir, utts: List[Utterance], shards: List[TarShard], absolute: bool = False,
                extra: Optional[Dict[str, str]] = None, sample_rate: Optional[int] = None) -> Dict[str, int]:
    """idx2 files and ``shards.json`` into ``out_dir`` through the importers'
    writer (NOTE [ Whole imports ] in speechiter/importers/writer.py); a
    shard's key in shards.json has the form of its idx2wav values (a path
    relative to ``out_dir``, or absolute, or a URL). ``extra`` and
    ``sample_rate`` as for :func:`speechiter.importers.writer.write_corpus`."""
    table = {}
    for shard in shards:
        key = shard.location
        if shard.relative and not absolute:
            key = os.path.relpath(key, os.path.abspath(out_dir))
        table[key] = shard.record
    text = json.dumps({"format": "speechiter-shard-index", "version": 1, "shards": table}, indent=1) + "\n"
    written = write_corpus(out_dir, utts, absolute, extra={**(extra or {}), SHARDS_FILE: text},
                           sample_rate=sample_rate)
    written[SHARDS_FILE] = len(table)
    return written


def read_object(location: str, what: str) -> bytes:
    """All bytes of a small file or object (a manifest, a cuts file)."""
    try:
        if is_url(location):
            return call(location, lambda: filesystem(location).cat_file(location))
        with open(location, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{location}: cannot read {what} ({e.strerror or e})") from None


def command(module: str, doc: str, add_inputs: Callable, convert: Callable, argv=None) -> int:
    """A tar importer's command line: its inputs, OUT_DIR and ``--absolute``."""
    parser = Parser(module, doc)
    add_inputs(parser)
    parser.add_argument("out_dir", type=Path, help="folder to write the idx2 files into (created if needed)")
    parser.add_argument("--absolute", action="store_true",
                        help="write absolute shard paths in idx2wav (default: relative ones relative to OUT_DIR)")
    return run_main(parser, convert, parser.parse_args(argv))


def read_text_member(shard: TarShard, member: Member, where: str, decode: Callable[[bytes], str]) -> str:
    try:
        return decode(shard.member_bytes(member))
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{where}: cannot read its text ({e})") from None
