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

# NOTE [ Members read in place ]
A member is indexed only when its bytes are one range of the shard, so the
importers refuse, naming the shard and member: a compressed tar (``.tar.gz``:
its members' bytes are not in the file), a truncated shard (a member whose data
runs past its end), a sparse member (``tar --sparse`` stores only its non-zero
blocks), a link (no bytes of its own), a name that is not UTF-8 (idx2 files
are), and a name that is absolute or climbs out with ``..`` (an utterance id
that is a path outside the corpus: nothing is ever written or read by it, and a
training script that writes per-utterance files by id must not be led outside
its folder either).

Each shard's size, and mtime (local) or ETag (a store), go in ``shards.json``
beside the idx2 files: a shard changed afterwards is an error naming it (NOTE [ Shard integrity ] in io/shards.py).
"""
from __future__ import annotations

import json
import os
import tarfile
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from pathlib import Path

from speechiter.errors import DataError
from speechiter.importers.command import Parser, run_main
from speechiter.importers.shard_names import expand_shards, shard_location
from speechiter.importers.utterance import InputError, Utterance
from speechiter.importers.writer import write_corpus
from speechiter.io.pread_file import PreadFile
from speechiter.io.shards import SHARDS_FILE
from speechiter.io.source import ByteRange
from speechiter.io.storage import call, filesystem, is_url, read_range, redact

__all__ = ["WINDOW", "AUDIO_EXTENSIONS", "Member", "TarShard", "Keys", "expand_shards", "member_key",
           "read_text_member", "read_object", "command", "write_index"]

#: Member extensions taken as audio (any other member is not audio).
AUDIO_EXTENSIONS = ("flac", "wav")

WINDOW = 64 << 10  # bytes per read while walking headers
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
               (b"\x04\x22\x4d\x18", "lz4"))


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
        """Up to ``n`` bytes from ``pos`` (fewer at the end, none past it), from the window when it holds them."""
        n = max(0, min(n, self.size - pos))
        if not n:
            return b""
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
        """Regular-file members in order; raises InputError for a corrupt, truncated or compressed shard and
        for a member that cannot be read in place (See NOTE [ Members read in place ])."""
        compressed = next((kind for magic, kind in _COMPRESSED if self.pread(0, len(magic)) == magic), None)
        if compressed:
            raise InputError(f"{self.where}: is compressed ({compressed}); members are read as byte ranges of "
                             f"the shard, so it must be an uncompressed tar: decompress it once")
        try:
            archive = tarfile.open(fileobj=self, mode="r:")
            for info in archive:
                if info.isfile() or info.issym() or info.islnk():
                    yield self._member(info)
            end = archive.offset
        except tarfile.TarError as e:  # the header at the start, or a pax / GNU header, is corrupt
            if "unexpected end of data" in str(e):
                raise InputError(f"{self.where}: truncated: the shard ends at byte {self.size}, inside the member "
                                 f"before byte {self.tell()} (an interrupted copy or upload?)") from None
            raise InputError(f"{self.where}: not a readable tar archive ({e}) near byte {self.tell()}") from None
        if end >= self.size or (self.size - end < 512 and any(self.pread(end, 512))):
            raise InputError(f"{self.where}: truncated: the shard ends at byte {self.size} without the tar's "
                             f"end-of-archive blocks; members after byte {end} may be missing")
        if any(self.pread(end, 512)):
            raise InputError(f"{self.where}: corrupt tar header at byte {end} (bad checksum or not a tar "
                             f"header); the members after it cannot be found")

    def _member(self, info: tarfile.TarInfo) -> Member:
        where = f"{self.where}: member {info.name!r}"
        try:
            info.name.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{self.where}: member {info.name.encode('utf-8', 'surrogateescape')!r} (header at "
                             f"byte {info.offset}): its name is not UTF-8, which idx2 files need") from None
        if info.name.startswith("/") or ".." in info.name.split("/"):
            raise InputError(f"{where}: an absolute name, or one that climbs out with '..'; a name that is a "
                             f"path outside the shard's folder is refused")
        if not info.isfile():
            raise InputError(f"{where}: a {'symbolic' if info.issym() else 'hard'} link (to {info.linkname!r}); "
                             f"members are read as their own bytes: write the tar with the files themselves")
        if info.issparse():
            raise InputError(f"{where}: a sparse file (tar --sparse): its bytes are not one range of the shard; "
                             f"write the tar without --sparse")
        if info.offset_data + info.size > self.size:
            raise InputError(f"{where}: truncated: its data runs to byte {info.offset_data + info.size}, but the "
                             f"shard has {self.size} bytes (an interrupted copy or upload?)")
        return Member(info.name, info.offset_data, info.size)

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


class Keys:
    """Utterance ids seen so far, and where: a second one is an InputError naming both."""

    def __init__(self):
        self.seen: Dict[str, str] = {}

    def add(self, uid: str, where: str) -> None:
        if uid in self.seen:
            raise InputError(f"{where}: key {uid!r} occurs twice (first at {self.seen[uid]})")
        self.seen[uid] = where


def write_index(out_dir, utts: List[Utterance], shards: List[TarShard], absolute: bool = False,
                extra: Optional[Dict[str, str]] = None, sample_rate: Optional[int] = None,
                importer: str = "") -> Dict[str, int]:
    """idx2 files and ``shards.json`` into ``out_dir`` through the importers'
    writer (NOTE [ Whole imports ] in speechiter/importers/writer.py), naming
    the ``importer`` (``webdataset``: a changed shard's error says to run it again); a
    shard's key in shards.json has the form of its idx2wav values (a path
    relative to ``out_dir``, or absolute, or a URL). ``extra`` and
    ``sample_rate`` as for :func:`speechiter.importers.writer.write_corpus`."""
    table = {}
    for shard in shards:
        key = shard.location
        if shard.relative and not absolute:
            key = os.path.relpath(key, os.path.abspath(out_dir))
        table[key] = shard.record
    text = json.dumps({"format": "speechiter-shard-index", "version": 1, "importer": importer or None,
                       "shards": table}, indent=1) + "\n"
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
