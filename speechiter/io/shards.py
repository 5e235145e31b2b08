"""Bytes of an object (local file or URL), checked: the pack's shard table, the object's end.

# NOTE [ Shard integrity ]
A pack (speechiter/pack/) records each shard's size, and its mtime (local) or
ETag (a store that gives one), in ``shards.json`` beside the shards. A shard
that changed after it was written must be an error naming it, never garbage
audio. So before this process first reads a byte range of an object, the
``shards.json`` of its folder is read (once per folder per process; a folder
without one is not a pack, and nothing is checked), and a listed shard is
checked once per process:

- local: ``os.stat`` against the recorded size and mtime, and then ``fstat`` of
  the file each read opens (free: the read needs its size anyway), so a shard
  replaced while a run reads it is caught at its next read;
- S3 with a recorded ETag: every ranged read is a conditional GET
  (``If-Match``), so the store refuses a changed object with no extra request;
- other stores: one ``info`` (HEAD) per shard per process: size, and ETag where
  given.

A pack copied on purpose (``cp`` without ``-p`` changes mtimes) is sealed
again with ``python -m speechiter.pack --reseal DIR``.

Shards indexed in place (tar shards, speechiter/importers/tar_index.py) lie
in folders speechiter does not write to; their records are in the
``shards.json`` beside the idx2 files instead, keyed by the shard's path
(relative to that folder) or URL. A path column notes its idx2 files' folders
(:func:`note_index_files`, in every process that reads it), and a shard not
in its own folder's table is looked up in theirs. Such a shard changed after
its import is imported again (the error names the importer), never resealed.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Dict, Optional, Tuple

from speechiter.errors import DataError
from speechiter.io.hedged_requests import hedged
from speechiter.io.storage import _status, call, filesystem, is_url, read_range, redact, transient

__all__ = ["SHARDS_FILE", "read_bytes", "shard_record", "clear_shards", "note_index_files"]

SHARDS_FILE = "shards.json"
_tables: Dict[str, Dict[str, dict]] = {}  # folder -> {shard name: record}; plain data, a forked child keeps it
_checked: Dict[str, Optional[str]] = {}  # shard -> the ETag its reads are conditional on (None: checked)
_local_records: Dict[str, dict] = {}  # local shard -> its record, compared with the file each read opens
_index_folders: Dict[str, None] = {}  # folders of idx2 files whose shards.json may list shards elsewhere
_index_tables: Dict[str, Dict[str, dict]] = {}  # index folder -> {shard path or URL: record}
_IMPORTED = "_imported"  # a record's key, set where it comes from an import's table: (its folder, importer)
_lock = threading.Lock()
_first_reads: Dict[str, threading.Lock] = {}  # folder or shard -> held while its table is read or it is checked


def clear_shards() -> None:
    """Forget the shard tables and checks (tests that change a pack)."""
    with _lock:
        _tables.clear()
        _checked.clear()
        _local_records.clear()
        _index_tables.clear()
        _first_reads.clear()


def note_index_files(files) -> None:
    """Note the folders of these idx2 files: a ``shards.json`` there covers the
    shards their values name (See NOTE [ Shard integrity ])."""
    for file in files:
        folder = os.path.dirname(os.path.abspath(os.fspath(file)))
        if folder not in _index_folders:
            _index_folders[folder] = None


def _after_fork() -> None:
    """A forked child's locks: new ones (a read in another thread may have held one at the fork)."""
    global _lock
    _lock = threading.Lock()
    _first_reads.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_after_fork)


def _split(file: str):
    folder, _, name = file.rpartition("/") if is_url(file) else (os.path.dirname(file), None,
                                                                   os.path.basename(file))
    return folder, name


def shard_record(file: str) -> Optional[dict]:
    """The record ``shards.json`` keeps for ``file`` (None: not a listed shard). A signed URL (one with a
    query: a presigned https URL) has no table read beside it, which no signature covers; an idx2 folder's
    table may list it, its query left out of the comparison."""
    folder, name = _split(file)
    signed = is_url(file) and "?" in file
    table = {} if signed else _tables.get(folder)
    if table is None:
        with _once(folder):  # the batches read ahead start together: one read of the table
            table = _tables.get(folder)
            if table is None:
                table = _read_table(folder, file)[0]
                with _lock:
                    _tables[folder] = table
    record = table.get(name)
    if record is None and _index_folders:
        key = _unsigned(file) if is_url(file) else os.path.abspath(file)
        for index in list(_index_folders):
            with _once(index):
                if index not in _index_tables:
                    shards, importer = _read_table(index)
                    _index_tables[index] = {_index_key(index, k): {**v, _IMPORTED: (index, importer)}
                                            for k, v in shards.items()}
            record = _index_tables[index].get(key)
            if record is not None:
                break
    return record


def _unsigned(url: str) -> str:
    """A URL without its query (a presigned URL's signature, which changes each time it is signed)."""
    return url.split("?", 1)[0]


def _index_key(index: str, shard: str) -> str:
    """An idx2 folder's shards.json key as :func:`shard_record` looks it up."""
    return _unsigned(shard) if is_url(shard) else os.path.normpath(os.path.join(index, shard))


def _once(key: str) -> threading.Lock:
    """The lock that makes the first read of ``key``'s table or check happen once."""
    with _lock:
        return _first_reads.setdefault(key, threading.Lock())


def _read_table(folder: str, of: Optional[str] = None) -> Tuple[Dict[str, dict], Optional[str]]:
    """``({shard: record}, the importer that wrote it or None)`` of the shards.json in ``folder`` (({}, None)
    where there is none); a store that cannot be read is an error naming ``of``, the object whose table it
    is (the user never wrote shards.json)."""
    path = f"{folder}/{SHARDS_FILE}" if is_url(folder) else os.path.join(folder, SHARDS_FILE)
    if is_url(path):
        fs = filesystem(path)

        def get():
            try:
                return fs.cat_file(path, start=0)  # a ranged GET: no HEAD for the size first
            except FileNotFoundError:
                return None
        text = call(of or path, get, f"read {SHARDS_FILE} beside it (the shard table of a pack)")
    else:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            return {}, None
        except OSError as e:
            raise DataError(f"{path}: cannot read the pack's shard table ({e.strerror or e})") from None
    if text is None:
        return {}, None
    try:
        document = json.loads(text)
        shards = document["shards"]
        if not isinstance(shards, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{redact(path)}: not a shard table (expected JSON with a 'shards' mapping)") from None
    importer = document.get("importer")
    return shards, importer if isinstance(importer, str) and importer.isidentifier() else None


def _changed(file: str, what: str, record: Optional[dict]) -> DataError:
    """The error for a shard that is not what ``record`` says: packs are written again or resealed, shards
    indexed in place (tar shards) imported again."""
    imported = (record or {}).get(_IMPORTED)
    if imported is None:
        return DataError(f"{redact(file)}: the pack shard changed after it was written ({what}); write the pack "
                         f"again (python -m speechiter.pack), or reseal a deliberate copy with "
                         f"python -m speechiter.pack --reseal <pack folder>")
    index, importer = imported
    again = (f"python -m speechiter.importers.{importer} ... {index}" if importer else
             f"the importer that wrote {os.path.join(index, SHARDS_FILE)}")
    return DataError(f"{redact(file)}: the shard changed after it was imported ({what}); import the shards again "
                     f"({again}), which indexes their members anew")


def _check(file: str) -> Optional[str]:
    """Check ``file`` against its record (once per process); the ETag its reads
    are to be conditional on, or None. See NOTE [ Shard integrity ]."""
    if file in _checked:
        return _checked[file]
    with _once(file):
        if file in _checked:
            return _checked[file]
        return _check_now(file)


def _check_now(file: str) -> Optional[str]:
    record = shard_record(file)
    etag = None
    if record is not None:
        size = record.get("size")
        if not is_url(file):
            _compare(file, os.stat(file), record)
            _local_records[file] = record  # and again at each read (a shard replaced mid-run)
        elif record.get("etag") and file.split("://", 1)[0].lower() in ("s3", "s3a") \
                and not os.environ.get("SPEECHITER_STORAGE_CACHE"):
            etag = record["etag"]  # checked by the store on every read
        else:
            info = call(file, lambda: filesystem(file).info(file), "read the object's size")
            if size is not None and int(info.get("size") or -1) != size:
                raise _changed(file, f"{info.get('size')} bytes, {SHARDS_FILE} says {size}", record)
            now = info.get("ETag") or info.get("etag")
            if record.get("etag") and now and now.strip('"') != str(record["etag"]).strip('"'):
                raise _changed(file, f"ETag {now}, {SHARDS_FILE} says {record['etag']}", record)
    with _lock:
        _checked[file] = etag
    return etag


def _compare(file: str, st: os.stat_result, record: dict) -> None:
    """Raise the changed-shard error unless a local shard's stat matches its record."""
    size, mtime = record.get("size"), record.get("mtime_ns")
    if size is not None and st.st_size != size:
        raise _changed(file, f"{st.st_size} bytes, {SHARDS_FILE} says {size}", record)
    if mtime is not None and st.st_mtime_ns != mtime:
        raise _changed(file, f"modified at mtime_ns {st.st_mtime_ns}, {SHARDS_FILE} says {mtime}", record)


def read_bytes(file: str, first: int, last: int, short_ok: bool = False) -> bytes:
    """Bytes ``first..last`` (inclusive) of ``file``, a path or URL: one read,
    after the shard check (NOTE [ Shard integrity ]). A range past the object's
    end is a DataError naming it, or, with ``short_ok``, the bytes there are."""
    etag = _check(file)
    if is_url(file):
        data = _read_remote(file, first, last + 1, etag)
    else:
        try:
            fd = os.open(file, os.O_RDONLY)
        except OSError as e:
            raise DataError(f"{file}: cannot read it ({e.strerror or e})") from None
        try:  # never more than the file holds: a range can ask for up to 2^63 bytes
            st = os.fstat(fd)
            record = _local_records.get(file)
            if record is not None:  # the file this read opened, not only the one first checked
                _compare(file, st, record)
            size = st.st_size
            data = os.pread(fd, max(0, min(last + 1, size) - first), first) if first < size else b""
        finally:
            os.close(fd)
    if len(data) < last + 1 - first and not short_ok:
        if is_url(file):
            size = call(file, lambda: filesystem(file).size(file), "read the object's size")
        raise DataError(f"{redact(file)}: the byte range {first}-{last} runs past the end of the object "
                        f"({size} bytes)")
    return data


def _read_remote(url: str, start: int, end: int, etag: Optional[str]) -> bytes:
    """One ranged GET (conditional on ``etag`` for S3); an unsatisfiable range gives no bytes."""
    if etag is None:
        try:
            return read_range(url, start, end)
        except DataError as e:
            if _unsatisfiable(e):
                return b""
            raise
    fs = filesystem(url)
    bucket, key, _ = fs.split_path(url)

    async def get():
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}",
                                     IfMatch=etag)
        try:
            return await response["Body"].read()
        finally:
            response["Body"].close()

    def read():
        from fsspec.asyn import sync

        try:
            return sync(fs.loop, get)
        except Exception as e:  # the store's answer decides: See NOTE [ Storage failures ] in storage.py
            status = _status(e)
            if status == 412 or "PreconditionFailed" in str(e):
                raise _changed(url, f"its ETag is no longer {etag}", shard_record(url)) from None
            if status == 416 or _unsatisfiable(e):
                return b""
            raise

    return call(url, lambda: hedged(url, read, transient))  # See NOTE [ Hedged requests ] in hedged_requests.py


def _unsatisfiable(error: BaseException) -> bool:
    """Whether a store refused a range that starts past the object's end (416, as s3fs or botocore word it)."""
    text = str(error)
    return "InvalidRange" in text or " 416" in text or "range is not satisfiable" in text
