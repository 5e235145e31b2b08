"""Write an iterator's audio into shards in plan order, and its idx2 files pointing at them.

# NOTE [ Pack layout ]
``write_pack(iterator, out)`` writes into ``out`` (a folder or a URL):

- ``shard-00000.pack``, ...: the original bytes of every audio file (or
  ``.npy``) the iterator's batches read, one after another in the order of
  ``iterator.batches`` flattened (its batching view: for a BlockIterator the
  length-sorted, contiguous batches), never re-encoded, so the samples are
  bit-identical. A shard is closed at a batch boundary once it holds
  ``shard_size`` bytes, so no block batch straddles two shards: each batch is
  one contiguous byte range, one request (NOTE [ Coalesced reads ] in
  speechiter/io/coalesce.py). A file that several values read (segments of one
  recording) is stored once, where it is first read.
- ``shards.json``: each shard's size and mtime (local) or ETag (a store), checked
  when read (NOTE [ Shard integrity ] in speechiter/io/shards.py).
- the iterator's idx2 files, under their own names: main_data files whose
  path values become ``shard-00000.pack#bytes=<first>-<last>`` (a ``#t=`` range
  kept after it), and the ``data_len``, ``group_info`` and other main_data files
  copied as they are. Rows the batches do not read (data_selection, length
  filters) keep their original value, made absolute, so the recipe pointed at
  these files selects and batches as before. In a local pack the values name
  shards relative to the idx2 files (the folder can move); in a pack at a URL
  they are URLs, so the idx2 files can be copied to a local folder (idx2 files
  are read from local disk).

Values that are not whole files (HDF5 / npz entries) keep their original value.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Dict, List, Optional, Tuple

from speechiter.errors import DataError
from speechiter.idx2 import read_idx2_table
from speechiter.ids import decode_ids
from speechiter.io.shards import SHARDS_FILE, read_bytes
from speechiter.io.source import parse_source
from speechiter.io.storage import filesystem, is_url, redact
from speechiter.pack.out import Out
from speechiter.paths import resolve_data_path

__all__ = ["DEFAULT_SHARD_SIZE", "write_pack"]

DEFAULT_SHARD_SIZE = 256 << 20


def _read_file(file: str) -> bytes:
    """All bytes of a file or object (a byte-range value's object part, when packing a pack, is read by range)."""
    if is_url(file):
        fs = filesystem(file)
        return read_bytes(file, 0, int(fs.size(file)) - 1) if fs.size(file) else b""
    try:
        with open(file, "rb") as f:
            return f.read()
    except OSError as e:
        raise DataError(f"{file}: cannot read it ({e.strerror or e})") from None


class _Shards:
    """Blobs appended to numbered shards; a shard is closed at a batch boundary past ``size``."""

    def __init__(self, out: Out, size: int, relative: bool):
        self.out, self.size, self.relative = out, size, relative
        self.names: List[str] = []
        self.f, self.used = None, 0
        self.stored: Dict[Tuple[str, Optional[tuple]], str] = {}  # (file, byte range) -> "shard#bytes=a-b"

    def value(self, file: str, byte_range) -> str:
        key = (file, None if byte_range is None else tuple(byte_range))
        if key not in self.stored:
            data = _read_file(file) if byte_range is None else read_bytes(file, *byte_range)
            if not data:
                raise DataError(f"{redact(file)}: is empty; nothing to pack")
            if self.f is None:
                self.names.append(f"shard-{len(self.names):05d}.pack")
                self.f, self.used = self.out.open(self.names[-1]), 0
            self.f.write(data)
            name = self.names[-1] if self.relative else self.out.path(self.names[-1])
            self.stored[key] = f"{name}#bytes={self.used}-{self.used + len(data) - 1}"
            self.used += len(data)
        return self.stored[key]

    def batch_done(self):
        if self.f is not None and self.used >= self.size:
            self.close()

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None

    def abandon(self):
        """Drop the shard being written, after a failure (a local file is closed, an upload left undone)."""
        f, self.f = self.f, None
        if f is not None and not is_url(f.path):
            try:
                f.close()
            except DataError:
                pass


def _plan_ids(iterator) -> List[str]:
    seen, order = set(), []
    for batch in iterator.batches:
        for uid in batch:
            if uid not in seen:
                seen.add(uid)
                order.append(uid)
    return order


def write_pack(iterator, out: str, shard_size: int = DEFAULT_SHARD_SIZE, idx2_out: Optional[str] = None) -> dict:
    """Pack ``iterator``'s audio into ``out`` (see NOTE [ Pack layout ]);
    ``idx2_out``: where the idx2 files go (default ``out``). Returns
    ``{"shards": n, "utterances": n, "bytes": n, "files": {idx2 name: rows}}``."""
    dataset = iterator.dataset
    shard_out, index_out = Out(out), Out(idx2_out or out)
    copies = _copies(iterator, index_out)
    relative = shard_out.root == index_out.root and not is_url(shard_out.root)
    shards = _Shards(shard_out, shard_size, relative)
    packed: Dict[str, Dict[str, str]] = {key: {} for key in dataset.path_keys if key in dataset.main_data}
    kept = 0
    try:
        for batch in iterator.batches:
            for uid in batch:
                for key, values in packed.items():
                    if uid in values:
                        continue
                    value = dataset.main_data[key][uid]
                    source = parse_source(value)
                    if source.key is not None:
                        kept += 1
                        continue
                    suffix = "" if source.time_range is None else value[value.rfind("#t="):]
                    values[uid] = shards.value(source.file, source.byte_range) + suffix
            shards.batch_done()
    except BaseException:
        shards.abandon()  # not closed: closing an upload to a store that failed would wait on it again
        raise
    shards.close()
    if kept:
        warnings.warn(f"{kept} values are HDF5 / npz entries, not whole files; they keep their original value",
                      stacklevel=2)
    records = {name: shard_out.record(name) for name in shards.names}
    with shard_out.open(SHARDS_FILE) as f:
        f.write(json.dumps({"format": "speechiter-pack", "version": 1, "shards": records}, indent=1).encode())
    written: Dict[str, int] = {}
    for file, key in copies:
        _copy_idx2(file, index_out, None if key is None else packed.get(key), written)
    return {"shards": len(shards.names), "utterances": len(_plan_ids(iterator)),
            "bytes": sum(r["size"] for r in records.values()), "files": written}


def _copies(iterator, out: Out) -> List[Tuple[str, Optional[str]]]:
    """``[(idx2 file, its main_data key or None)]`` the pack copies into ``out``; refused, before anything is
    written, when a copy would replace the file itself (``--out`` the corpus's own folder)."""
    copies = [(file, key) for key, files in iterator.dataset.main_data_files.items() for file in files]
    plan = iterator.batch_options
    extra = [plan.data_len] if isinstance(plan.data_len, str) else list(plan.data_len or [])
    for files in (plan.group_info or {}).values():
        extra += [files] if isinstance(files, str) else list(files)
    copies += [(os.fspath(file), None) for file in extra]
    for file, _ in copies:
        target = out.path(os.path.basename(file))
        if not is_url(target) and os.path.exists(target) and os.path.samefile(target, file):
            raise DataError(f"{file}: the pack's idx2 files would replace the recipe's own; give --out (or "
                            f"--idx2_out) another folder than {os.path.dirname(target)}")
    return copies


def _copy_idx2(file: str, out: Out, values: Optional[Dict[str, str]], written: Dict[str, int]) -> None:
    """``file`` into ``out`` under its own name: packed values replaced,
    other path values made absolute (``values`` None: copied as it is)."""
    name = os.path.basename(file)
    if name in written:
        raise DataError(f"{file}: two idx2 files of the iterator are named {name!r}; pack needs distinct names")
    if name == "segments":
        raise DataError(f"{file}: Kaldi segments cannot be packed yet; import them first "
                        f"(python -m speechiter.importers.kaldi) and pack the idx2wav it writes")
    if values is None:
        with open(file, "rb") as f:
            data = f.read()
    else:
        table = read_idx2_table(file)
        lines = []
        for i, uid in enumerate(decode_ids(table.ids)):
            value = values.get(uid)
            if value is None:
                raw = table.buffer[table.starts[i]:table.ends[i]].tobytes().decode("utf-8")
                value = resolve_data_path(raw, file)
            lines.append(f"{uid} {value}\n")
        data = "".join(lines).encode("utf-8")
    with out.open(name) as f:
        f.write(data)
    written[name] = data.count(b"\n") + (not data.endswith(b"\n") and bool(data))  # rows, as the importers count
