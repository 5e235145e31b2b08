"""Index Parquet files (Hugging Face datasets) in place into speechiter idx2 files.

    python -m speechiter.importers.parquet 'data/train-*.parquet' corpora/train
    python -m speechiter.importers.parquet s3://bucket/cv/train-{00000..00009}-of-00010.parquet corpora/train

A file holds one utterance per row: its audio column is the ``Audio`` feature
of ``datasets`` (a struct of ``bytes``, the encoded file, and ``path``) or a
binary column, found from the ``datasets`` metadata in the file, else the one
such column (``--audio_column`` names it). Files are local paths (globs and
brace ranges are expanded) or URLs; they are not copied. idx2wav names each
row's audio bytes in place: a byte range of the file
(``<file>#bytes=<first>-<last>``) where the column is stored uncompressed and
PLAIN, as ``datasets`` 3 and later write it, else a cell
(``<file>:<column>#row=<n>``), read with its row group (NOTE [ Parquet audio
as byte ranges ] in speechiter/importers/parquet_pages.py, NOTE [ Parquet
cells ] in speechiter/io/parquet.py). Writes into OUT_DIR:

- ``idx2wav``, ``idx2wav_len`` (samples, from the audio header, at
  ``--sample_rate`` if given), ``idx2dur``;
- ``idx2text`` from ``--text_column`` (default: the first of text, sentence,
  transcription, transcript, normalized_text), ``idx2spk`` and ``spk_list``
  from ``--speaker_column`` (default: speaker_id, speaker, client_id);
- ``idx2<column>`` for every other column of strings, numbers or booleans
  (``--columns`` picks them; ``--columns`` alone writes none);
- ``shards.json``: each file's size and mtime or ETag, so a file that changes
  later is an error naming it.

Utterance ids come from ``--id_column`` (default: the first of id, utt_id,
segment_id, key), else from the audio's ``path`` without its folder and
extension when every row has one and they are unique, else
``<file name>-<row>``. Reading a file reads its audio column once (for the
lengths). Refused, with one line naming the file, row and id (exit code 2): a
missing or truncated file or one that is not Parquet, no audio column or one
of another type, a row without audio bytes or with bytes that are not audio,
an id that occurs twice.
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import List, Optional

from speechiter.errors import DataError
from speechiter.importers.parquet_pages import plain_value_ranges
from speechiter.importers.tar_index import Keys, TarShard, command, expand_shards, write_index
from speechiter.importers.utterance import InputError, Utterance, seconds_text
from speechiter.importers.writer import IMPORTER_FILES
from speechiter.io.embedded import decode_embedded
from speechiter.io.parquet import import_pyarrow
from speechiter.io.source import ByteRange, ROW_MARK
from speechiter.io.wav import read_wav_header

__all__ = ["import_parquet", "main"]

TEXT_COLUMNS = ("text", "sentence", "transcription", "transcript", "normalized_text")
SPEAKER_COLUMNS = ("speaker_id", "speaker", "client_id")
ID_COLUMNS = ("id", "utt_id", "segment_id", "key")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _open(name: str):
    """``(file, ParquetFile)``; InputError for a missing file or one pyarrow cannot read."""
    pq = import_pyarrow(name)
    import pyarrow as pa

    file = TarShard(name)  # a path or URL as a file read in windows, with its shards.json record
    try:
        return file, pq.ParquetFile(file)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise InputError(f"{file.where}: not a Parquet file, or a truncated one ({e})") from None


def _audio_column(parquet, where: str, given: Optional[str]) -> str:
    """The audio column: ``given``, the ``datasets`` Audio feature, or the one binary / {bytes, path} column."""
    import pyarrow as pa

    schema = parquet.schema_arrow

    def is_audio(kind) -> bool:
        if pa.types.is_struct(kind):
            index = kind.get_field_index("bytes")
            return index >= 0 and is_audio(kind.field(index).type)
        return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)

    if given is None:
        features = json.loads((schema.metadata or {}).get(b"huggingface", b"{}")).get("info", {}).get("features", {})
        found = [n for n, f in features.items() if isinstance(f, dict) and f.get("_type") == "Audio"]
        found = found or [f.name for f in schema if is_audio(f.type)]
        if len(found) != 1:
            raise InputError(f"{where}: {'no column holds' if not found else 'several columns hold'} audio "
                             f"({', '.join(found or schema.names)}); name it with --audio_column")
        given = found[0]
    if given not in schema.names:
        raise InputError(f"{where}: no column {given!r} (the file has {', '.join(schema.names)})")
    kind = schema.field(given).type
    if not is_audio(kind):
        raise InputError(f"{where}: column {given!r} is {kind}, not audio: expected binary, or a struct with a "
                         f"binary 'bytes' field (the Audio feature of datasets)")
    if any(c in given for c in "#/:") or given != given.strip() or " " in given:
        raise InputError(f"{where}: column {given!r}: an audio column name may not contain '#', '/', ':' or spaces")
    return given


def _leaf(parquet, column: str) -> Optional[int]:
    """The index of the leaf that holds ``column``: the column itself, or its ``bytes`` field; None: no such leaf."""
    schema = parquet.metadata.schema
    paths = [schema.column(i).path for i in range(len(schema))]
    for path in (column, f"{column}.bytes"):
        if path in paths:
            return paths.index(path)
    return None


def _audio_length(data: bytes):
    """``(frames, sample_rate)`` of an encoded file: from its WAV or FLAC header, else decoded; or what is wrong."""
    if data[:4] == b"RIFF":
        header = read_wav_header(lambda pos, n: data[pos:pos + n])
        if header is not None and header.sized and header.offset + header.data_size <= len(data):
            return header.frames, header.rate
    elif data[:4] == b"fLaC" and len(data) >= 42 and data[4] & 0x7F == 0:  # STREAMINFO first
        total = int.from_bytes(data[21:26], "big") & 0xFFFFFFFFF
        if total:
            return total, int.from_bytes(data[18:21], "big") >> 4
    try:
        x, rate = decode_embedded(data, None, "")
    except DataError as e:
        return f"not audio speechiter reads ({str(e).rsplit(': ', 1)[-1]})"
    if rate is None:
        return "not audio (an npy array)"
    if not x.shape[0]:
        return "the audio has no frames"
    return int(x.shape[0]), int(rate)


def _scalar(kind) -> bool:
    import pyarrow as pa

    return (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
            or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _text(value) -> Optional[str]:
    return None if value is None else str(value)


class _Rows:
    """The rows of one file: audio values and lengths, ids, and the other columns' values."""

    def __init__(self, name: str, audio_column: Optional[str]):
        self.file, self.parquet = _open(name)
        where = self.file.where
        self.audio = _audio_column(self.parquet, where, audio_column)
        self.values, self.lengths, self.paths = [], [], []
        leaf = _leaf(self.parquet, self.audio)
        column = self.parquet.metadata.schema.column(leaf)
        struct = column.path != self.audio
        for group in range(self.parquet.num_row_groups):
            chunk = self.parquet.metadata.row_group(group).column(leaf)
            first = min(chunk.data_page_offset, chunk.dictionary_page_offset or chunk.data_page_offset)
            data = self.file.pread(first, chunk.total_compressed_size)  # kept: pyarrow's read of it is served
            blobs = self._read(group, column.path)
            self.paths += self._read(group, f"{self.audio}.path") if struct and _leaf(
                self.parquet, f"{self.audio}.path") is not None else [None] * len(blobs)
            ranges = plain_value_ranges(data, first, chunk.compression == "UNCOMPRESSED",
                                        column.max_definition_level, column.max_repetition_level)
            if ranges is not None and [data[a - first:b - first + 1] for a, b in ranges] != [b for b in blobs if
                                                                                              b is not None]:
                ranges = None  # not where the walk put them: name cells instead
            ranges = iter(ranges or ())
            for blob in blobs:
                row = len(self.values)
                span = next(ranges, None) if blob is not None else None
                self.values.append(f"{self.file.location}{ByteRange(*span)}" if span else
                                   f"{self.file.location}:{self.audio}{ROW_MARK}{row}")
                self.lengths.append(_audio_length(blob) if blob else self._no_audio(row))

    def _no_audio(self, row: int) -> str:
        path = self.paths[row]
        return f"no audio bytes in column {self.audio!r}" + (f" (only a path, {path!r}: the audio is not in the "
                                                             f"file)" if path else "")

    def _read(self, group: int, path: str) -> list:
        """The values of leaf ``path`` in row group ``group``, with the nulls of the struct around it."""
        import pyarrow as pa

        values = self.parquet.read_row_group(group, columns=[path]).column(0).combine_chunks()
        while pa.types.is_struct(values.type):
            values = values.flatten()[0]
        return values.to_pylist()

    def column(self, name: str) -> List[Optional[str]]:
        return [_text(v) for v in self.parquet.read(columns=[name]).column(0).to_pylist()]


def import_parquet(names, out_dir, audio_column=None, text_column=None, speaker_column=None, id_column=None,
                   columns=None, sample_rate=None, absolute=False):
    """Index the Parquet files into ``out_dir``; returns ``{file name: lines}``.
    Raises DataError (one line) for bad input."""
    files = [_Rows(name, audio_column) for name in expand_shards([str(n) for n in names])]
    schema = files[0].parquet.schema_arrow

    def pick(given, defaults, what=""):
        if given is not None:
            for f in files:
                if given not in f.parquet.schema_arrow.names:
                    raise InputError(f"{f.file.where}: no {what}column {given!r} (the file has "
                                     f"{', '.join(f.parquet.schema_arrow.names)})")
            return given
        return next((n for n in defaults if all(n in f.parquet.schema_arrow.names for f in files)), None)

    id_name, text_name = pick(id_column, ID_COLUMNS, "id "), pick(text_column, TEXT_COLUMNS, "text ")
    speaker_name = pick(speaker_column, SPEAKER_COLUMNS, "speaker ")
    taken = {id_name, text_name, speaker_name, *(f.audio for f in files)}
    if columns is None:  # the scalar columns all files have
        columns = [f.name for f in schema if _scalar(f.type) and f.name not in taken
                   and all(f.name in other.parquet.schema_arrow.names for other in files)]
    extra_names = [c for c in (pick(c, ()) for c in columns) if c not in taken]
    for name in extra_names:
        if not _NAME_RE.match(name) or f"idx2{name}" in IMPORTER_FILES:
            raise InputError(f"column {name!r} cannot be written as idx2{name}; leave it out with --columns")
    ids = _ids(files, id_name)
    utts, keys, extra = [], Keys(), {name: [] for name in extra_names}
    for f, file_ids in zip(files, ids):
        texts = f.column(text_name) if text_name else [None] * len(f.values)
        speakers = f.column(speaker_name) if speaker_name else [None] * len(f.values)
        for name in extra_names:
            extra[name] += [(uid, v) for uid, v in zip(file_ids, f.column(name))]
        for row, (uid, value, length) in enumerate(zip(file_ids, f.values, f.lengths)):
            where = f"{f.file.where}: row {row} (id {uid!r})"
            keys.add(uid, where)
            if isinstance(length, str):
                raise InputError(f"{where}: {length}")
            frames, rate = length
            utts.append(Utterance(uid, value, frames, seconds_text(frames / rate), text=texts[row],
                                  speaker=speakers[row], relative=f.file.relative, where=where, rate=rate))
    files_text = {f"idx2{name}": "".join(f"{uid} {' '.join(v.split())}\n" for uid, v in sorted(rows)
                                         if v is not None and v.strip()) for name, rows in extra.items()}
    written = write_index(out_dir, utts, [f.file for f in files], absolute,
                          extra={k: v for k, v in files_text.items() if v}, sample_rate=sample_rate,
                          importer="parquet")
    for name, text in files_text.items():
        if text:
            written[name] = text.count("\n")
    return written


def _ids(files: List[_Rows], id_name: Optional[str]) -> List[List[str]]:
    """Each file's utterance ids (see the module docstring)."""
    if id_name is not None:
        ids = [f.column(id_name) for f in files]
        for f, rows in zip(files, ids):
            if None in rows:
                raise InputError(f"{f.file.where}: row {rows.index(None)}: no id in column {id_name!r}")
        return ids
    stems = [[os.path.splitext(os.path.basename(p))[0] if p else None for p in f.paths] for f in files]
    flat = [s for rows in stems for s in rows]
    if all(flat) and len(set(flat)) == len(flat):
        return stems
    names = [os.path.basename(f.file.location).rsplit(".", 1)[0] for f in files]
    return [[f"{name}-{row:06d}" for row in range(len(f.values))] for name, f in zip(names, files)]


def main(argv=None):
    def inputs(parser):
        parser.add_argument("files", nargs="+", help="Parquet files: paths, globs, brace ranges or URLs")
        parser.add_argument("--audio_column", help="the column of audio bytes (default: the Audio feature)")
        parser.add_argument("--text_column", help=f"the transcript column (default: {', '.join(TEXT_COLUMNS)})")
        parser.add_argument("--speaker_column", help=f"idx2spk's column (default: {', '.join(SPEAKER_COLUMNS)})")
        parser.add_argument("--id_column", help=f"the utterance ids (default: {', '.join(ID_COLUMNS)}, else the "
                                                f"audio paths' names, else <file>-<row>)")
        parser.add_argument("--columns", nargs="*", help="the other columns to write as idx2<column> (default: "
                                                         "every column of strings, numbers or booleans)")
        parser.add_argument("--sample_rate", type=_positive,
                            help="write idx2wav_len at this rate, the dataset's sample_rate (default: each file's)")

    return command("speechiter.importers.parquet", __doc__, inputs,
                   lambda a: import_parquet(a.files, a.out_dir, a.audio_column, a.text_column, a.speaker_column,
                                            a.id_column, a.columns, a.sample_rate, a.absolute), argv)


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"should be a positive integer, but got {text!r}")
    return value


if __name__ == "__main__":
    sys.exit(main())
