"""Parquet files (Hugging Face datasets' layout) read in place against `datasets` streaming and Lhotse, on local disk.

    python tools/bench_parquet.py                        # 300 utterances, 2 workers, 20 s of audio per batch
    python tools/bench_parquet.py --num 600 --workers 4 --row_group 100

A generated corpus (FLAC, 16 kHz, 1-8 s) is written as Parquet files in the
layout of ``datasets`` (``id``, ``audio`` = {bytes, path}, ``text``) twice:

- as ``datasets`` 3 and later write it: the audio uncompressed and PLAIN, one
  row group per file (speechiter names each row as a byte range);
- as ``datasets`` 2 wrote it: snappy pages, ``--row_group`` rows per group
  (speechiter names cells, read with their row group once per batch).

Then read, each with ``--workers`` workers, for ``--epochs`` epochs:

- speechiter: a BlockIterator (``batch_len`` = the batch budget) over the
  corpus as files, and over each import (python -m speechiter.importers.parquet);
- ``datasets``: ``load_dataset("parquet", streaming=True)``, the audio column
  cast to ``Audio(decode=False)`` and decoded with soundfile (``datasets``
  decodes with torchcodec, which this machine lacks; soundfile is the decoder
  speechiter uses for what dr_flac does not take), batched to speechiter's mean
  batch size, a DataLoader (the files shared among its workers);
- Lhotse: ``CutSet.from_huggingface_dataset`` over the same streaming dataset
  (Lhotse 1.x reads HF datasets only through ``datasets``), a
  ``DynamicCutSampler(max_duration=budget)`` and a DataLoader whose workers
  collate the audio (``collate_audio``).

Printed: audio seconds per second of the last epoch, the ratios, and for the
cells the bytes read per epoch over the audio bytes the batches use (the row
groups' read amplification, from the plan and the files' metadata).
"""
import argparse
import io
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))
from bench_pack import SAMPLE_RATE  # noqa: E402
from bench_tars import epochs_rate, speechiter_rate, table  # noqa: E402 (the same recipe and measure)


def write_parquet(corpus, out, num_files, row_group):
    """Both layouts of the corpus: ``(plain files, snappy files)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files, texts = table(corpus / "idx2wav"), table(corpus / "idx2text")
    ids = sorted(files)
    meta = {b"huggingface": b'{"info": {"features": {"id": {"dtype": "string", "_type": "Value"}, '
                            b'"audio": {"_type": "Audio"}, "text": {"dtype": "string", "_type": "Value"}}}}'}
    out.mkdir()
    plain, snappy = [], []
    for n in range(num_files):
        part = ids[n::num_files]
        data = pa.table({"id": part, "audio": pa.array(
            [{"bytes": (corpus / files[i]).read_bytes(), "path": f"{i}.flac"} for i in part],
            pa.struct([("bytes", pa.binary()), ("path", pa.string())])), "text": [texts[i] for i in part]}
        ).replace_schema_metadata(meta)
        plain.append(out / f"plain-{n:05d}-of-{num_files:05d}.parquet")
        pq.write_table(data, plain[-1], compression={"audio.bytes": "none", "audio.path": "snappy", "id": "snappy",
                                                     "text": "snappy"},
                       use_dictionary=["id", "text", "audio.path"], column_encoding={"audio.bytes": "PLAIN"})
        snappy.append(out / f"snappy-{n:05d}-of-{num_files:05d}.parquet")
        pq.write_table(data, snappy[-1], row_group_size=row_group)
    return plain, snappy


def amplification(index, batch_len, tmp):
    """Bytes of the row groups' audio chunks each batch reads, over the bytes of its audio, for one epoch."""
    from speechiter import build_iterators, load_config
    from bench_pack import RECIPE
    from speechiter.io.parquet import _cell
    from speechiter.io.source import parse_source

    recipe = Path(tmp) / "amplification.yaml"
    recipe.write_text(RECIPE.format(root=index, batch_len=batch_len))
    iterator = build_iterators(load_config(recipe), groups=("train",), num_workers=0)["train"]
    values = {uid: str(Path(index, v).resolve()) if not v.startswith("/") else v
              for uid, v in table(Path(index) / "idx2wav").items()}
    read = used = 0
    try:
        for batch in iterator.batches:
            chunks = set()
            for uid in batch:
                meta, group, leaf, row, first, last = _cell(parse_source(values[uid]))
                chunks.add((values[uid].split(":audio")[0], first, last))
                column = meta.metadata.row_group(group).column(leaf)
                used += column.total_compressed_size / meta.metadata.row_group(group).num_rows  # mean cell
            read += sum(last - first + 1 for _, first, last in chunks)
    finally:
        iterator.close()
    return read / used


def _decode(example):
    import soundfile

    example["audio"] = soundfile.read(io.BytesIO(example["audio"]["bytes"]), dtype="float32")[0]
    return example


def _collate(examples):
    import torch

    audio = [torch.from_numpy(e["audio"]) for e in examples]
    return torch.nn.utils.rnn.pad_sequence(audio, batch_first=True), torch.tensor([len(a) for a in audio])


def streaming(files):
    import datasets

    data = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train", streaming=True)
    return data.cast_column("audio", datasets.Audio(decode=False))


def datasets_rate(files, batch_size, workers, epochs):
    import torch

    def run():
        data = streaming(files).map(_decode)
        loader = torch.utils.data.DataLoader(data, batch_size=batch_size, collate_fn=_collate, num_workers=workers)
        return sum(int(lengths.sum()) for _, lengths in loader)
    return epochs_rate(run, epochs)


class _LoadAudio:
    def __getitem__(self, cuts):
        from lhotse.dataset.collation import collate_audio

        return collate_audio(cuts)


def lhotse_rate(files, seconds, workers, epochs):
    import torch
    from lhotse import CutSet
    from lhotse.dataset import DynamicCutSampler

    def run():
        cuts = CutSet.from_huggingface_dataset(streaming(files), audio_key="audio", text_key="text")
        sampler = DynamicCutSampler(cuts, max_duration=seconds, shuffle=False)
        loader = torch.utils.data.DataLoader(_LoadAudio(), sampler=sampler, batch_size=None, num_workers=workers)
        return sum(int(lengths.sum()) for _, lengths in loader)
    return epochs_rate(run, epochs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch_seconds", type=float, default=20.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--row_group", type=int, default=100, help="rows per group of the snappy files")
    args = parser.parse_args(argv)
    from make_corpus import make_corpus
    from speechiter.importers.parquet import import_parquet

    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = make_corpus(tmp / "corpus", args.num, fmt="flac", sample_rate=SAMPLE_RATE, seed=0, speakers=8,
                             min_sec=1.0, max_sec=8.0)
        plain, snappy = write_parquet(corpus, tmp / "parquet", args.files, args.row_group)
        import_parquet(plain, tmp / "plain_index")
        import_parquet(snappy, tmp / "snappy_index")
        batch_len = int(args.batch_seconds * SAMPLE_RATE)
        rates["files"], mean_batch = speechiter_rate(corpus, batch_len, args.workers, args.epochs, tmp)
        rates["plain"], _ = speechiter_rate(tmp / "plain_index", batch_len, args.workers, args.epochs, tmp)
        rates["snappy"], _ = speechiter_rate(tmp / "snappy_index", batch_len, args.workers, args.epochs, tmp)
        extra = amplification(tmp / "snappy_index", batch_len, tmp)
        for name, rate in (("datasets", datasets_rate), ("lhotse", lhotse_rate)):
            try:
                budget = max(1, round(mean_batch)) if name == "datasets" else args.batch_seconds
                rates[name] = rate(plain, budget, args.workers, args.epochs)
            except ImportError as e:
                print(f"{name}: not installed ({e})")
    print(f"{args.num} utterances in {args.files} files, {args.workers} workers, {args.batch_seconds} s per batch "
          f"(mean {mean_batch:.1f} utterances), audio seconds per second of epoch {args.epochs}:")
    names = {"files": "speechiter, the corpus as FLAC files", "plain": "speechiter, Parquet rows as byte ranges",
             "snappy": f"speechiter, Parquet cells ({args.row_group}-row snappy groups)",
             "datasets": "datasets streaming + DataLoader", "lhotse": "Lhotse from_huggingface_dataset + sampler"}
    for key, rate in rates.items():
        print(f"  {names[key]:45s} {rate:9.0f}   x files {rate / rates['files']:.2f}"
              + (f"   x datasets {rate / rates['datasets']:.2f}" if "datasets" in rates else "")
              + (f"   x Lhotse {rate / rates['lhotse']:.2f}" if "lhotse" in rates else ""))
    print(f"  cells: the batches read {extra:.1f}x the audio bytes they use (row groups of {args.row_group} rows)")


if __name__ == "__main__":
    main()
