"""Tar shards read in place against the formats' own readers, on local disk.

    python tools/bench_tars.py                       # 300 utterances, 2 workers, 20 s of audio per batch
    python tools/bench_tars.py --num 600 --workers 4 --batch_seconds 40

A generated corpus (FLAC, 16 kHz) is written as a Lhotse Shar directory
(``CutSet.to_shar``) and as WebDataset tars (``<key>.flac`` + ``<key>.txt``),
then indexed in place (speechiter.importers.shar / .webdataset) and read:

- speechiter: a BlockIterator over the imported idx2 files, ``batch_len`` =
  the batch budget in samples, process workers;
- Lhotse: ``CutSet.from_shar`` + ``DynamicCutSampler(max_duration=budget)`` +
  ``IterableDatasetWrapper`` + a torch DataLoader (Lhotse's Shar recipe:
  ``split_for_dataloading`` and ``make_worker_init_fn``), audio collated with
  ``collate_audio``;
- webdataset: ``WebDataset(shards).decode(soundfile)`` + ``.batched`` to the
  same number of utterances per batch as speechiter's mean, a DataLoader.

Each reader runs ``--epochs`` epochs with the same worker count; printed:
audio seconds per second of the last epoch, and the ratios (targets: Shar in
place >= 2x Lhotse, WebDataset in place >= the webdataset library).
"""
import argparse
import io
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))
from bench_pack import RECIPE, SAMPLE_RATE  # noqa: E402 (the same recipe as the pack benchmark)


def table(path):
    return dict(line.rstrip("\n").split(" ", 1) for line in Path(path).read_text().splitlines())


def epochs_rate(run_epoch, epochs):
    """Audio seconds per second of the last of ``epochs`` runs of ``run_epoch() -> samples``."""
    rate = None
    for _ in range(epochs):
        start = time.perf_counter()
        samples = run_epoch()
        rate = samples / SAMPLE_RATE / (time.perf_counter() - start)
    return rate


def speechiter_rate(index, batch_len, workers, epochs, tmp):
    from speechiter import build_iterators, load_config

    recipe = Path(tmp) / f"{Path(index).name}.yaml"
    recipe.write_text(RECIPE.format(root=index, batch_len=batch_len))
    iterator = build_iterators(load_config(recipe), groups=("train",), num_workers=workers)["train"]
    epoch = [0]

    def run():
        epoch[0] += 1
        return sum(int(b["feat_len"].sum()) for b in iterator.build_loader(epoch[0]))
    try:
        return epochs_rate(run, epochs), sum(len(b) for b in iterator.batches) / len(iterator.batches)
    finally:
        iterator.close()


class _LoadAudio:
    def __getitem__(self, cuts):
        from lhotse.dataset.collation import collate_audio

        return collate_audio(cuts)


def lhotse_rate(shar_dir, seconds, workers, epochs):
    import torch
    from lhotse import CutSet
    from lhotse.dataset import DynamicCutSampler, IterableDatasetWrapper
    from lhotse.dataset.dataloading import make_worker_init_fn

    def run():
        cuts = CutSet.from_shar(in_dir=shar_dir, split_for_dataloading=True)
        sampler = DynamicCutSampler(cuts, max_duration=seconds, shuffle=False)
        loader = torch.utils.data.DataLoader(IterableDatasetWrapper(_LoadAudio(), sampler), batch_size=None,
                                             num_workers=workers, worker_init_fn=make_worker_init_fn())
        return sum(int(lengths.sum()) for _, lengths in loader)
    return epochs_rate(run, epochs)


def _decode_flac(key, data):
    import soundfile

    return soundfile.read(io.BytesIO(data), dtype="float32")[0] if key.endswith(".flac") else data


def _collate(samples):
    import torch

    audio = [torch.from_numpy(s[0]) for s in samples]
    return torch.nn.utils.rnn.pad_sequence(audio, batch_first=True), torch.tensor([len(a) for a in audio])


def webdataset_rate(shards, batch_size, workers, epochs):
    import torch
    import webdataset as wds

    def run():
        dataset = wds.WebDataset([str(s) for s in shards], shardshuffle=False).decode(_decode_flac) \
            .to_tuple("flac", "txt").batched(batch_size, collation_fn=_collate)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        return sum(int(lengths.sum()) for _, lengths in loader)
    return epochs_rate(run, epochs)


def write_formats(corpus, tmp, num_shards):
    from lhotse import CutSet, Recording, SupervisionSegment

    files = {uid: corpus / value for uid, value in table(corpus / "idx2wav").items()}
    texts, cuts = table(corpus / "idx2text"), []
    for uid, file in sorted(files.items()):
        cut = Recording.from_file(file, recording_id=uid).to_cut()
        cut.id = uid
        cut.supervisions = [SupervisionSegment(f"{uid}-s", uid, 0, cut.duration, text=texts[uid])]
        cuts.append(cut)
    shar_dir = tmp / "shar"
    shar_dir.mkdir()
    CutSet.from_cuts(cuts).to_shar(shar_dir, fields={"recording": "flac"}, shard_size=-(-len(cuts) // num_shards))
    wds_dir, ids, shards = tmp / "wds", sorted(files), []
    wds_dir.mkdir()
    for s in range(num_shards):
        shards.append(wds_dir / f"train-{s:06d}.tar")
        with tarfile.open(shards[-1], "w") as archive:
            for uid in ids[s::num_shards]:
                archive.add(files[uid], arcname=f"{uid}.flac")
                data = texts[uid].encode()
                info = tarfile.TarInfo(f"{uid}.txt")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return shar_dir, shards


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch_seconds", type=float, default=20.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    from make_corpus import make_corpus
    from speechiter.importers.shar import import_shar
    from speechiter.importers.webdataset import import_webdataset

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = make_corpus(tmp / "corpus", args.num, fmt="flac", sample_rate=SAMPLE_RATE, seed=0, speakers=8,
                             min_sec=1.0, max_sec=8.0)
        shar_dir, shards = write_formats(corpus, tmp, args.shards)
        import_shar(shar_dir, tmp / "shar_index")
        import_webdataset(shards, tmp / "wds_index")
        batch_len = int(args.batch_seconds * SAMPLE_RATE)
        ours_shar, mean_batch = speechiter_rate(tmp / "shar_index", batch_len, args.workers, args.epochs, tmp)
        theirs_shar = lhotse_rate(shar_dir, args.batch_seconds, args.workers, args.epochs)
        ours_wds, _ = speechiter_rate(tmp / "wds_index", batch_len, args.workers, args.epochs, tmp)
        theirs_wds = webdataset_rate(shards, max(1, round(mean_batch)), args.workers, args.epochs)
    print(f"{args.num} utterances, {args.workers} workers, {args.batch_seconds} s per batch "
          f"(mean {mean_batch:.1f} utterances), audio seconds per second of epoch {args.epochs}:")
    print(f"  Shar in place        {ours_shar:10.0f}   Lhotse from_shar + sampler + DataLoader {theirs_shar:10.0f}"
          f"   ratio {ours_shar / theirs_shar:.2f} (target >= 2)")
    print(f"  WebDataset in place  {ours_wds:10.0f}   webdataset library + DataLoader        {theirs_wds:10.0f}"
          f"   ratio {ours_wds / theirs_wds:.2f} (target >= 1)")


if __name__ == "__main__":
    main()
