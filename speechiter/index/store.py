"""The plan cache's files: named arrays in one binary file, written atomically, mapped read-only.

A file is ``MAGIC``, the header's length (8 bytes, little-endian), a JSON header, then each array's bytes at
a 64-byte aligned offset. The header holds the format version, each array's dtype, shape and offset (from
the aligned end of the header), the data's total length (so a truncated file is seen), its CRC-32, and
``key``: what the entry was made from (a source file's path, size, mtime, ctime and inode, or a digest of its
inputs). :func:`open_entry` answers None, never a wrong entry, for a missing, truncated, foreign, corrupt or
stale file; :func:`write_entry` writes a private temporary file and renames it into place (See NOTE [ Plan
cache ] in speechiter/index/__init__.py).

# NOTE [ Entries are checked ]
An entry's size, version and key say it is whole and current, not that its bytes are the ones written: a
disk error, a copy gone wrong or a tool that rewrote some bytes in place keeps the size (and a same-size
edit may keep the mtime). A wrong sort or view would be a wrong plan, silently. So the header keeps the
CRC-32 of the data, checked each time an entry is opened: read with ``pread`` in blocks (not through the
mapping, so the check leaves no mapped pages in the process: a rank's USS stays what it maps later): 0.27 s
for the 162 MB of a 2M-utterance corpus's entries on this project's 2-core machine under load (about 1.7 s
per GB, against 6-16 s to parse those 2M rows). A failed check is treated as no entry: the run parses and writes it
again. The file is opened without blocking and must be a regular file: a FIFO put in its place would
otherwise wait for a writer forever.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
import time
import warnings
import zlib
from typing import Dict, Optional, Tuple

import numpy as np

__all__ = ["MAGIC", "VERSION", "Mapped", "CacheWriteWarning", "cache_dir", "min_rows", "enabled", "entry_path",
           "open_entry", "write_entry", "source_key", "settled", "forget_warnings"]

MAGIC = b"SPIDX\x00\x01\n"
VERSION = 2  # bump when what an entry holds changes: older files are then rebuilt (2: the data's CRC-32)
_ALIGN = 64
_HEAD = len(MAGIC) + 8
_MAX_HEADER = 1 << 20
_CHECK_BLOCK = 8 << 20  # bytes read at once to check an entry
SETTLE_SECONDS = 2
_warned = set()  # folders already warned about (one line per folder and process)


class CacheWriteWarning(UserWarning):
    """The cache folder could not be written; a run parses without it (``python -m speechiter.index``, whose
    only job is writing, turns it into an error). ``folder`` and ``reason`` say where and why."""

    def __init__(self, folder: str, reason: str):
        super().__init__(f"cannot write the plan cache in {folder} ({reason}); parsing without it (set "
                         f"SPEECHITER_INDEX_DIR to a writable folder)")
        self.folder, self.reason = folder, reason


def forget_warnings() -> None:
    """Warn again about a folder already warned about (the index command: each of its runs must fail)."""
    _warned.clear()


def cache_dir() -> str:
    """``$SPEECHITER_INDEX_DIR``, else ``$XDG_CACHE_HOME/speechiter/index`` (``~/.cache/speechiter/index``)."""
    folder = os.environ.get("SPEECHITER_INDEX_DIR")
    if folder:
        return folder
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "speechiter", "index")


def enabled() -> bool:
    """False when ``$SPEECHITER_INDEX`` is ``0`` / ``off`` / ``no`` / ``false``."""
    return os.environ.get("SPEECHITER_INDEX", "1").strip().lower() not in ("0", "off", "no", "false")


def min_rows() -> int:
    """The fewest rows a table (or a sort) needs before a run writes it (``$SPEECHITER_INDEX_MIN_ROWS``,
    default 1,000,000: a smaller file parses in well under a second)."""
    try:
        return max(0, int(os.environ.get("SPEECHITER_INDEX_MIN_ROWS", "1000000")))
    except ValueError:
        return 1_000_000


def source_key(path: str) -> Dict:
    """What a source file's entry is keyed by: its real path, size, mtime and ctime (ns) and inode."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    return {"path": real, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns,
            "inode": stat.st_ino}


def settled(key: Dict) -> bool:
    """Whether the file was last changed long enough ago (``SETTLE_SECONDS``) that a change within the
    same timestamp tick, which would keep its size and mtime, cannot follow unseen (git's "racily clean")."""
    return time.time_ns() - key["mtime_ns"] > SETTLE_SECONDS * 1e9


def entry_path(kind: str, digest: str) -> str:
    return os.path.join(cache_dir(), f"{digest}.{kind}")


class Mapped(np.memmap):
    """A read-only array mapped from a file. Pickled whole, it reopens the file (a worker shares the pages);
    any part of it (a slice, a gather) is an ordinary array and pickles its bytes."""

    def __array_finalize__(self, obj):
        super().__array_finalize__(obj)
        self._origin = getattr(obj, "_origin", None)

    def __reduce__(self):
        origin = self._origin
        if (origin is not None and self.shape == origin[3] and self.dtype == origin[2]
                and self.__array_interface__["data"][0] == origin[4]):
            return _reopen, origin[:4]
        return np.asarray(self).__reduce__()

    @classmethod
    def open(cls, path: str, offset: int, dtype, shape) -> "Mapped":
        dtype = np.dtype(dtype)
        array = cls(path, dtype=dtype, mode="r", offset=offset, shape=shape)
        array._origin = (path, offset, dtype, tuple(array.shape), array.__array_interface__["data"][0])
        return array


def _reopen(path, offset, dtype, shape):
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=dtype)
    return Mapped.open(path, offset, dtype, shape)


def _data_start(header_bytes: int) -> int:
    return -(-(_HEAD + header_bytes) // _ALIGN) * _ALIGN


def open_entry(path: str, key: Dict) -> Optional[Tuple[Dict, Dict[str, np.ndarray]]]:
    """``(header, {name: read-only mapped array})`` of the entry at ``path`` made from ``key``; None when
    there is none, or it is not a regular file, truncated, of another version or format, made from something
    else, or its data fails its checksum (See NOTE [ Entries are checked ])."""
    try:  # non-blocking: a FIFO put there opens at once (and is refused), where open() would wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head = os.pread(fd, _HEAD, 0)
        if len(head) != _HEAD or head[:len(MAGIC)] != MAGIC:
            return None
        size = int.from_bytes(head[len(MAGIC):], "little")
        if size > _MAX_HEADER:
            return None
        header = json.loads(os.pread(fd, size, _HEAD).decode("utf-8"))
        total = st.st_size
        if (not isinstance(header, dict) or header.get("version") != VERSION or header.get("key") != key
                or _data_start(size) + header.get("data_bytes", -1) != total
                or header.get("crc32") != _checksum(fd, _data_start(size), total)):
            return None
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)
    arrays = {}
    for name, (dtype, shape, offset) in header["arrays"].items():
        shape, offset = tuple(shape), _data_start(size) + offset
        count = int(np.prod(shape))
        if offset + count * np.dtype(dtype).itemsize > total:
            return None
        arrays[name] = (np.zeros(shape, dtype=dtype) if count == 0
                        else Mapped.open(path, offset, dtype, shape))
    return header, arrays


def _checksum(fd: int, start: int, end: int) -> int:
    """CRC-32 of bytes ``start..end`` of the file, read in blocks (not mapped: See NOTE [ Entries are checked ])."""
    crc, block = 0, bytearray(_CHECK_BLOCK)
    view = memoryview(block)
    while start < end:
        n = os.preadv(fd, [view[:min(_CHECK_BLOCK, end - start)]], start)
        if n <= 0:
            return -1
        crc = zlib.crc32(view[:n], crc)
        start += n
    return crc


def write_entry(path: str, key: Dict, arrays: Dict[str, np.ndarray], **extra) -> bool:
    """Write the entry atomically (a private temporary file renamed into place); False, with one warning
    line per folder, when the folder cannot be written (the caller carries on without the cache)."""
    folder = os.path.dirname(path)
    layout, offset = {}, 0
    for name, array in arrays.items():
        offset = -(-offset // _ALIGN) * _ALIGN
        layout[name] = [array.dtype.str, list(array.shape), offset]
        offset += array.nbytes
    crc, end = 0, 0  # of the data as written: each array after the zeros that align it
    for name, array in arrays.items():
        crc = zlib.crc32(bytes(layout[name][2] - end), crc)
        crc = zlib.crc32(np.ascontiguousarray(array).data if array.nbytes else b"", crc)
        end = layout[name][2] + array.nbytes
    header = {"version": VERSION, "key": key, "arrays": layout, "data_bytes": offset, "crc32": crc, **extra}
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    start = _data_start(len(text))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + len(text).to_bytes(8, "little") + text)
            for name, array in arrays.items():
                f.seek(start + layout[name][2])
                f.write(np.ascontiguousarray(array).data if array.nbytes else b"")
            f.truncate(start + offset)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
        return True
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if folder not in _warned:
            _warned.add(folder)
            warnings.warn(CacheWriteWarning(folder, e.strerror or str(e)), stacklevel=3)
        return False
