"""Cells of Parquet files (Hugging Face datasets): a row's audio, read with the row group that holds it.

# NOTE [ Parquet cells ]
A Parquet file stores a column in row groups, and within a row group in
pages that are usually compressed (snappy) or dictionary-encoded: then one
row's bytes are not a byte range of the file. Such a row is named by a data
value of its own, the column as a chunk key and the row (from 0, counted over
the whole file) as ``#row=``::

    data/train-00000-of-00004.parquet:audio#row=17          the audio of row 17
    s3://b/train-00000-of-00004.parquet:audio#row=17#t=1,2  one second of it

The column is a binary column, or a struct with a binary ``bytes`` field (the
``Audio`` feature of Hugging Face ``datasets``: ``{bytes, path}``); the bytes
are an encoded audio file (WAV, FLAC, MP3, OGG, anything libsndfile reads),
decoded from memory as a pack's are (speechiter/io/embedded.py).

Reading: the file's footer (its metadata) is read once per file and process,
with one ranged read of its last 64 KiB. A cell then lies in one column chunk
(one column of one row group), one contiguous byte range: the batch's chunks
join its other byte ranges in the coalesced reads (NOTE [ Coalesced reads ]
in speechiter/io/coalesce.py), so a batch reads each row group's chunk once,
pyarrow decodes it once (``ParquetFile.read_row_group`` over a file object
that serves the bytes already read), and each of the batch's rows takes its
cell. Every read is a checked one (NOTE [ Shard integrity ] in
speechiter/io/shards.py): the importer records each file's size and mtime or
ETag in ``shards.json``, so a file changed after import is an error naming it.

A row group holds many rows (100 in files that ``datasets`` 2.x wrote), and a
length-sorted batch takes rows from many row groups, so a batch reads about
one chunk per utterance: a read amplification of up to the rows per group.
So each process also keeps the row groups it decoded, the most recently used
up to ``SPEECHITER_PARQUET_CACHE_MB`` (256; 0: none), for later batches; a
chunk kept there is not read again. A corpus that fits is read once per
process; a larger one is read about (corpus / cache) times per epoch.
Files whose audio column is stored uncompressed and PLAIN (``datasets`` 3 and
later write media columns so) need no cells: the importer names each row's
bytes as a byte range (NOTE [ Parquet audio as byte ranges ] in
speechiter/importers/parquet_pages.py), read as exactly as a pack's.
"""
from __future__ import annotations

import bisect
import collections
import os
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

from speechiter.batch_context import current_batch
from speechiter.errors import DataError
from speechiter.io.decode import Select
from speechiter.io.embedded import bytes_info, decode_embedded
from speechiter.io.pread_file import PreadFile
from speechiter.io.shards import read_bytes, shard_record
from speechiter.io.source import ROW_MARK, Source, parse_source
from speechiter.io.storage import call, filesystem, is_url, redact

__all__ = ["INSTALL_HINT", "import_pyarrow", "is_parquet_file", "file_metadata", "audio_leaf", "chunk_range",
           "cell_bytes", "read_cell", "cell_info", "clear_metadata"]

INSTALL_HINT = "pip install 'speechiter[parquet]'"
_TAIL = 64 << 10  # bytes of a file's end read for its footer: the metadata of most files
_metas: Dict[str, "_Meta"] = {}
_groups: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()  # decoded row groups, LRU
_kept = [0]  # bytes in _groups
_lock = threading.Lock()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a read in another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Meta(NamedTuple):
    metadata: object  # pyarrow.parquet.FileMetaData
    size: int
    row_starts: List[int]  # the first row of each row group, then the number of rows
    leaves: Dict[str, int]  # leaf column path ("audio.bytes") -> its index


def import_pyarrow(where: str):
    """``pyarrow.parquet``, or a DataError naming ``where`` that says how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{redact(where)}: reading Parquet files needs pyarrow: {INSTALL_HINT}") from None
    return pq


def is_parquet_file(file: str) -> bool:
    return file.lower().endswith(".parquet")


def clear_metadata() -> None:
    """Forget the footers read (tests that change a file)."""
    with _lock:
        _metas.clear()
        _groups.clear()
        _kept[0] = 0


def _size(file: str) -> int:
    record = shard_record(file)
    if record is not None and record.get("size") is not None:
        return int(record["size"])  # read_bytes checks the file against it
    if is_url(file):
        return int(call(file, lambda: filesystem(file).size(file), "read the object's size"))
    try:
        return os.stat(file).st_size
    except OSError as e:
        raise DataError(f"{file}: cannot read it ({e.strerror or e})") from None


def file_metadata(file: str) -> _Meta:
    """The footer of a Parquet file (path or URL), read once per process."""
    meta = _metas.get(file)
    if meta is not None:
        return meta
    pq = import_pyarrow(file)
    import pyarrow as pa

    size, where = _size(file), redact(file)
    tail = read_bytes(file, max(0, size - _TAIL), size - 1) if size else b""
    if size < 12 or tail[-4:] != b"PAR1":
        raise DataError(f"{where}: not a Parquet file, or a truncated one (it does not end in PAR1)")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise DataError(f"{where}: corrupt Parquet footer (metadata of {length} bytes in a file of {size})")
    if length + 8 > len(tail):
        tail = read_bytes(file, size - length - 8, size - 1)
    try:
        metadata = pq.read_metadata(pa.BufferReader(b"PAR1" + tail[len(tail) - length - 8:]))
    except (OSError, ValueError, pa.ArrowException) as e:
        raise DataError(f"{where}: cannot read the Parquet footer ({e})") from None
    starts = [0]
    for i in range(metadata.num_row_groups):
        starts.append(starts[-1] + metadata.row_group(i).num_rows)
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    meta = _Meta(metadata, size, starts, leaves)
    with _lock:
        _metas[file] = meta
    return meta


def audio_leaf(meta: _Meta, column: str, where: str) -> int:
    """The index of the leaf that holds ``column``'s bytes: the column itself
    (binary) or its ``bytes`` field (``datasets``' Audio struct)."""
    for path in (column, f"{column}.bytes"):
        index = meta.leaves.get(path)
        if index is not None:
            kind = meta.metadata.schema.column(index).physical_type
            if kind != "BYTE_ARRAY":
                raise DataError(f"{where}: column {path!r} holds {kind} values, not the bytes of audio files")
            return index
    tops = sorted({path.split(".", 1)[0] for path in meta.leaves})
    raise DataError(f"{where}: no column {column!r} (the file has {', '.join(tops)})")


def _cell(source: Source):
    """``(meta, row group, leaf, row in the group, first byte, last byte)`` of a cell."""
    where = redact(source.entry)
    if source.row is None or source.key is None:
        raise DataError(f"{where}: a value in a Parquet file names a cell: <file>.parquet:<column>{ROW_MARK}<row>")
    meta = file_metadata(source.file)
    leaf = audio_leaf(meta, source.key, where)
    if source.row >= meta.row_starts[-1]:
        raise DataError(f"{where}: the file has {meta.row_starts[-1]} rows")
    group = bisect.bisect_right(meta.row_starts, source.row) - 1
    chunk = meta.metadata.row_group(group).column(leaf)
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    first = min(first, chunk.data_page_offset)
    return meta, group, leaf, source.row - meta.row_starts[group], first, first + chunk.total_compressed_size - 1


def chunk_range(value: str) -> Optional[Tuple[str, int, int]]:
    """``(file, first, last)``: the column chunk a cell value lies in, for the batch's coalesced reads;
    None when this process keeps it decoded."""
    source = parse_source(value)
    _, group, leaf, _, first, last = _cell(source)
    return None if (source.file, leaf, group) in _groups else (source.file, first, last)


def _cache_limit() -> int:
    raw = os.environ.get("SPEECHITER_PARQUET_CACHE_MB", "256")
    try:
        megabytes = float(raw)
        if not 0 <= megabytes < float("inf"):
            raise ValueError
    except ValueError:
        raise DataError(f"SPEECHITER_PARQUET_CACHE_MB should be a number of megabytes (0: keep no row group), "
                        f"but got {raw!r}") from None
    return int(megabytes * (1 << 20))


def _keep(key: tuple, column) -> None:
    """Keep a decoded row group for later batches, the least recently used going first."""
    limit, size = _cache_limit(), column.nbytes
    with _lock:
        if size > limit or key in _groups:
            return
        _groups[key] = column
        _kept[0] += size
        while _kept[0] > limit:
            _kept[0] -= _groups.popitem(last=False)[1].nbytes


def _kept_column(key: tuple):
    with _lock:
        column = _groups.get(key)
        if column is not None:
            _groups.move_to_end(key)
        return column


class _ChunkFile(PreadFile):
    """The file as pyarrow reads it: the chunk's bytes from memory, anything else read (checked)."""

    def __init__(self, file: str, size: int, first: int, data: bytes):
        super().__init__(size)
        self.file, self.first, self.data = file, first, data

    def pread(self, pos: int, n: int) -> bytes:
        start = pos - self.first
        if 0 <= start and start + n <= len(self.data):
            return self.data[start:start + n]
        return read_bytes(self.file, pos, pos + n - 1)


def _decode_chunk(source: Source, meta: _Meta, group: int, leaf: int, first: int, data: bytes):
    """The bytes column of row group ``group`` (a pyarrow BinaryArray)."""
    pq = import_pyarrow(source.file)
    import pyarrow as pa

    path = meta.metadata.schema.column(leaf).path
    try:
        table = pq.ParquetFile(_ChunkFile(source.file, meta.size, first, data), metadata=meta.metadata) \
            .read_row_group(group, columns=[path])
        column = table.column(0).combine_chunks()
        while pa.types.is_struct(column.type):  # the Audio struct: its bytes field, with the struct's nulls
            column = column.flatten()[0]
    except (OSError, ValueError, pa.ArrowException) as e:
        raise DataError(f"{redact(source.file)}: cannot read row group {group} of column {path!r} ({e})") from None
    return column


def cell_bytes(source: Source) -> bytes:
    """The bytes in a cell: its row group's chunk read and decoded once per batch, or kept from an earlier one
    (See NOTE [ Parquet cells ])."""
    meta, group, leaf, index, first, last = _cell(source)
    started = current_batch().reads  # NOTE [ Batch context ]
    reads = None if started is None else started.ranges
    key = (source.file, leaf, group)
    column = None if reads is None else reads.decoded.get(key)
    column = _kept_column(key) if column is None else column
    if column is None:
        data = None if reads is None else reads.get(source.file, first, last)
        column = _decode_chunk(source, meta, group, leaf, first,
                               read_bytes(source.file, first, last) if data is None else data)
        _keep(key, column)
    if reads is not None:
        reads.decoded[key] = column
    value = column[index].as_py()
    if not value:
        raise DataError(f"{redact(source.entry)}: the cell holds no audio bytes "
                        f"({'null' if value is None else 'empty'})")
    return value


def read_cell(source: Source, select: Optional[Select]) -> Tuple[object, Optional[int]]:
    """``(float32 (T, C), sample_rate)`` of the audio in a cell (``select``: the frames of a time range)."""
    return decode_embedded(cell_bytes(source), select, redact(source.entry))


def cell_info(source: Source) -> Tuple[int, Optional[int]]:
    """``(num_frames, sample_rate)`` of the audio in a cell, from its header."""
    return bytes_info(cell_bytes(source), redact(source.entry))
