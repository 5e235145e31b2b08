"""Weighted corpus mixing (mix.MixIterator): the schedule's shares in every window and the cost per batch.

    python tools/bench_mix.py                       # 0.7/0.3 of two corpora, 2 process workers
    python tools/bench_mix.py --workers 4 --batches 600 --repeats 5

1. Shares: the largest deviation of each corpus's share from its weight over every window of 1,000
   consecutive batches of 100,000 steps, for a few weight sets (the issue asks for at most 1 point),
   and the schedule's cost per step.
2. Cost per batch: a corpus alone (BlockIterator) against the same corpus mixed 0.7/0.3 with a copy of
   itself, same workers, same batch budget, same number of batches: the median wall seconds per batch
   over interleaved repeats, and their ratio (mixed / alone). The mix loads with one set of workers.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speechiter.dataset.speech_text import SpeechTextDataset  # noqa: E402
from speechiter.iterator.block import BlockIterator  # noqa: E402
from speechiter.iterator.mix import MixIterator  # noqa: E402
from speechiter.iterator.schedule import MixSchedule  # noqa: E402

WEIGHT_SETS = ([0.7, 0.3], [0.5, 0.3, 0.2], [0.6, 0.25, 0.1, 0.05], [0.123, 0.877], [1, 2, 3, 4, 5])


def window_deviation(weights, steps: int = 100_000, window: int = 1000):
    """(largest |share - weight| of each corpus over every window, seconds per step of the schedule)."""
    schedule = MixSchedule(weights)
    started = time.perf_counter()
    sources = np.fromiter((schedule.source(g) for g in range(steps)), dtype=np.int64, count=steps)
    per_step = (time.perf_counter() - started) / steps
    shares = np.asarray(weights, dtype=float) / sum(weights)
    deviations = []
    for corpus, share in enumerate(shares):
        counts = np.concatenate([[0], np.cumsum(sources == corpus)])
        deviations.append(float(np.abs((counts[window:] - counts[:-window]) / window - share).max()))
    return deviations, per_step


def block(corpus: Path, name: str, workers: int, batch_seconds: float, **settings) -> BlockIterator:
    return BlockIterator(dataset_type=SpeechTextDataset,
                         dataset_conf={"main_data": {"feat": str(corpus / "idx2wav")}, "sample_rate": 16000},
                         data_len=str(corpus / "idx2wav_len"), batch_len=batch_seconds * 16000, out_type="cpu",
                         num_workers=workers, name=name, **settings)


def seconds_per_batch(iterator, epoch: int) -> float:
    loader = iterator.build_loader(epoch, prefetch_next=False)
    started = time.perf_counter()
    count = sum(1 for _ in loader)
    return (time.perf_counter() - started) / count


def cost(corpus: Path, workers: int, batches: int, repeats: int, batch_seconds: float):
    """(seconds per batch alone, mixed): interleaved epochs after a warm-up epoch of each."""
    alone = block(corpus, "alone", workers, batch_seconds, batches_per_epoch=batches)
    parts = {name: block(corpus, name, workers, batch_seconds) for name in ("libri", "copy")}
    mixed = MixIterator(parts, {"libri": 0.7, "copy": 0.3}, batches, num_workers=workers, out_type="cpu")
    times = {"alone": [], "mixed": []}
    try:
        for epoch in range(1, repeats + 2):
            for name, iterator in (("alone", alone), ("mixed", mixed)):
                seconds = seconds_per_batch(iterator, epoch)
                if epoch > 1:  # the first epoch starts the workers
                    times[name].append(seconds)
    finally:
        alone.close()
        mixed.close()
    return statistics.median(times["alone"]), statistics.median(times["mixed"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--utterances", type=int, default=400, help="utterances of the corpus")
    parser.add_argument("--batches", type=int, default=300, help="batches per timed epoch")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs of each")
    parser.add_argument("--batch_seconds", type=float, default=20.0, help="seconds of audio per batch")
    parser.add_argument("--steps", type=int, default=100_000, help="schedule steps for the window shares")
    args = parser.parse_args(argv)

    print("1. shares in every window of 1,000 batches (largest deviation from the weight, percentage points)")
    for weights in WEIGHT_SETS:
        deviations, per_step = window_deviation(weights, args.steps)
        shown = ", ".join(f"{w:g}: {100 * d:.2f}" for w, d in zip(weights, deviations))
        print(f"   weights {weights}: {shown}  (schedule {per_step * 1e6:.1f} us/step)")

    sys.path.insert(0, str(REPO / "tools"))
    from make_corpus import make_corpus
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp) / "corpus", args.utterances, seed=0)
        alone, mixed = cost(corpus, args.workers, args.batches, args.repeats, args.batch_seconds)
    print(f"2. cost per batch, {args.workers} workers, {args.batches} batches of {args.batch_seconds:g} s audio, "
          f"median of {args.repeats}")
    print(f"   alone {alone * 1e3:.2f} ms/batch, mixed 0.7/0.3 {mixed * 1e3:.2f} ms/batch, "
          f"ratio mixed/alone {mixed / alone:.3f}")
    return alone, mixed


if __name__ == "__main__":
    main()
