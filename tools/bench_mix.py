"""Weighted corpus mixing (mix.MixIterator): the schedule's shares in every window and the cost per batch.

    python tools/bench_mix.py                       # 0.7/0.3 of two corpora, 2 process workers
    python tools/bench_mix.py --workers 4 --utterances 800 --repeats 5

1. Shares: the largest deviation of each corpus's share from its weight over every window of 1,000
   consecutive batches of 100,000 steps, for a few weight sets (the issue asks for at most 1 point),
   and the schedule's cost per step.
2. Cost per batch: a corpus alone (BlockIterator, whole view per epoch) against (a) a mix of that one
   corpus (weight 1: exactly the same batches, so the ratio is the mixing's own cost) and (b) the corpus
   mixed 0.7/0.3 with a copy of itself; same workers, batch budget and number of batches. The wall
   seconds per batch of the best of interleaved epochs (after a warm-up epoch of each; the best, as
   timeit does, since other processes only add time), and the ratios to alone; then the main process's
   own planning cost per batch (the task and the batch's attributes), which is all a mix adds: its workers
   build each batch with the corpus's own reader. A mix loads with one set of workers.
"""
import argparse
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
from speechiter.plan.schedule import MixSchedule  # noqa: E402

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


def cost(corpus: Path, workers: int, repeats: int, batch_seconds: float):
    """({name: best seconds per batch}, {name: planning seconds per batch}) of the corpus alone, mixed
    with itself alone, and mixed 0.7/0.3."""
    alone = block(corpus, "alone", workers, batch_seconds)
    batches = len(alone)
    one = MixIterator({"libri": block(corpus, "alone", workers, batch_seconds)}, {"libri": 1}, batches,
                      num_workers=workers, out_type="cpu")
    parts = {name: block(corpus, name, workers, batch_seconds) for name in ("libri", "copy")}
    two = MixIterator(parts, {"libri": 0.7, "copy": 0.3}, batches, num_workers=workers, out_type="cpu")
    iterators = {"alone": alone, "mix of one": one, "mix 0.7/0.3": two}
    times = {name: [] for name in iterators}
    try:
        for epoch in range(1, repeats + 2):
            for name, iterator in iterators.items():
                seconds = seconds_per_batch(iterator, epoch)
                if epoch > 1:  # the first epoch starts the workers
                    times[name].append(seconds)
        planning = {name: planning_per_batch(iterator, repeats + 2) for name, iterator in iterators.items()}
    finally:
        for iterator in iterators.values():
            iterator.close()
    return batches, {name: min(values) for name, values in times.items()}, planning


def planning_per_batch(iterator, epoch: int) -> float:
    """Seconds per batch of what the main process does besides loading: each task, and each batch's ids
    and padding rows (as the Loader asks for them)."""
    started = time.perf_counter()
    tasks = iterator.epoch_tasks(epoch)
    for offset in range(len(tasks)):
        tasks[offset]
        tasks.batches[offset], tasks.batches.padding_of(offset)
    return (time.perf_counter() - started) / len(tasks)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--utterances", type=int, default=400, help="utterances of the corpus")
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
        batches, best, planning = cost(corpus, args.workers, args.repeats, args.batch_seconds)
    print(f"2. cost per batch, {args.workers} workers, epochs of {batches} batches of up to {args.batch_seconds:g} s "
          f"of audio, best of {args.repeats}")
    for name, seconds in best.items():
        print(f"   {name:12s} {seconds * 1e3:7.2f} ms/batch, ratio to alone {seconds / best['alone']:.3f}; "
              f"planning {planning[name] * 1e6:.0f} us/batch")
    return best, planning

if __name__ == "__main__":
    main()
