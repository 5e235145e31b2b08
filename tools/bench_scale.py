"""Scale and bucketing benchmark: planning 1M/10M-utterance corpora, worker memory, bucketed batches.

    python tools/bench_scale.py                      # 1M and 10M plans, worker USS, bucketing
    python tools/bench_scale.py --sizes 1000000      # plans for 1M only
    python tools/bench_scale.py --skip workers,bucket,resume

1. Plan: the time and peak RSS (above the RSS after imports) of building a
   BlockIterator (idx2wav + idx2wav_len -> intersect -> sort -> block batches)
   from a ``make_corpus --lengths_only`` corpus, against a plain dict-and-sort
   implementation of the same algorithm (SpeeChain's reach rule), for both
   block rules. Each one runs in a fresh process.
2. Workers: one epoch of a 1M-utterance index with 2 process workers (a tiny
   Dataset that touches every id and path but reads no audio); each worker's
   USS at the first batch and at the end of the epoch.
3. Bucketing: 100k LibriSpeech-like durations, batches of at most 120 s padded:
   bucket.BucketIterator's per-epoch plan against Lhotse's
   DynamicBucketingSampler (30 buckets; only if lhotse is installed), random
   batches and BlockIterator: plan seconds per epoch and padding efficiency.
4. Resume: time from build_loader() to the first batch at epoch 1 step 0,
   epoch 50 step 0 and epoch 50 step 10,000 (the cumulative shuffle composes
   50 permutations), 1M utterances in 20,000 batches, each on a fresh
   iterator (its workers started by the measured call).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS.parent), str(TOOLS)]

from speechiter.dataset.abs import Dataset  # noqa: E402

SAMPLE_RATE = 16000
BATCH_SECONDS = 120.0


# ------------------------------------------------------------------- plans


def baseline_plan(root: Path, batch_len: float) -> int:
    """The documented algorithm with dicts of strings and Python lists."""
    def read(path, convert=str):
        table = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                uid, value = line.split(maxsplit=1)
                table[uid] = convert(value.strip())
        return table

    wav, lengths = read(root / "idx2wav"), read(root / "idx2wav_len", int)
    ids = [uid for uid in wav if uid in lengths]
    ids = sorted(sorted(ids), key=lambda uid: -lengths[uid])
    batches, current, total = [], [], 0
    for uid in ids:
        current.append(uid)
        total += lengths[uid]
        if total >= batch_len:  # SpeeChain's rule: closes once the total reaches batch_len
            batches.append(current)
            current, total = [], 0
    if current:
        batches.append(current)
    return len(batches)


def our_plan(root: Path, batch_len: float, rule: str = "reach") -> int:
    from speechiter.dataset.speech_text import SpeechTextDataset
    from speechiter.iterator.block import BlockIterator
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_len=batch_len, batch_len_rule=rule,
                             engine="inline")
    return len(iterator.batches)


def child(kind: str, root: str):
    """Run one plan in this (fresh) process; print seconds and MB above the post-import RSS."""
    import speechiter.dataset.speech_text  # noqa: F401 - both sides pay the same imports
    import speechiter.iterator.block  # noqa: F401
    import psutil
    before = psutil.Process().memory_info().rss
    started = time.perf_counter()
    budget = BATCH_SECONDS * SAMPLE_RATE
    batches = baseline_plan(Path(root), budget) if kind == "baseline" else our_plan(Path(root), budget, kind)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "mb": (peak - before) / 2 ** 20, "batches": batches}))


def run_child(kind: str, root: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(root)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def corpus(workdir: Path, num: int) -> Path:
    root = workdir / f"lengths_{num}"
    if not (root / "idx2wav_len").exists():
        from make_corpus import make_corpus
        make_corpus(root, num, lengths_only=True)
    return root


def bench_plans(workdir: Path, sizes):
    print(f"\n== Plan: BlockIterator from idx2wav + idx2wav_len (batch_len {BATCH_SECONDS:.0f} s), fresh process each")
    print(f"{'utterances':>11} | {'baseline s':>10} {'MB':>7} | {'ours s':>7} {'MB':>7} | {'speed-up':>8} "
          f"{'memory':>7} | batches")
    for num in sizes:
        root = corpus(workdir, num)
        base, ours = run_child("baseline", root), run_child("reach", root)
        same = "same" if base["batches"] == ours["batches"] else f"DIFFER {base['batches']} vs {ours['batches']}"
        print(f"{num:>11} | {base['seconds']:>10.2f} {base['mb']:>7.0f} | {ours['seconds']:>7.2f} {ours['mb']:>7.0f} "
              f"| {base['seconds'] / ours['seconds']:>7.1f}x {base['mb'] / max(ours['mb'], 1):>6.1f}x | "
              f"{ours['batches']} ({same})")
        strict = run_child("never_exceed", root)
        print(f"{'':>11} | {'never_exceed:':>18} | {strict['seconds']:>7.2f} {strict['mb']:>7.0f} | {'':>16} | "
              f"{strict['batches']}")


# ----------------------------------------------------------------- workers


class TouchDataset(Dataset):
    """Reads no audio: each item is a tiny array made from the id and the path
    (so every access reads the stored id and value)."""

    def extract_main_data_fn(self, main_data):
        return {"x": np.array([len(main_data["id"]), len(main_data["feat"])], dtype=np.int32)}


def bench_workers(workdir: Path, num: int = 1_000_000, batch_size: int = 250):
    import psutil

    from speechiter.iterator.piece import PieceIterator
    root = corpus(workdir, num)
    print(f"\n== Workers: one epoch of {num} utterances ({batch_size} per batch), 2 proc workers, USS per worker")
    iterator = PieceIterator(dataset_type=TouchDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_size=batch_size, num_workers=2,
                             thread_type="proc", out_type="null", shuffle=True)
    me = psutil.Process()
    first, started, count = {}, time.perf_counter(), 0
    try:
        for batch in iterator.build_loader(1, prefetch_next=False):
            count += 1
            if count == 1:
                first = {p.pid: p.memory_full_info().uss for p in me.children(recursive=True)}
        last = {p.pid: p.memory_full_info().uss for p in me.children(recursive=True) if p.pid in first}
    finally:
        iterator.close()
    print(f"{count} batches in {time.perf_counter() - started:.1f} s")
    print(f"{'worker pid':>10} | {'USS first batch MB':>18} | {'USS end MB':>10} | growth MB")
    for pid in sorted(first):
        if pid in last:
            print(f"{pid:>10} | {first[pid] / 2 ** 20:>18.1f} | {last[pid] / 2 ** 20:>10.1f} | "
                  f"{(last[pid] - first[pid]) / 2 ** 20:.1f}")


# ----------------------------------------------------------------- resume


def bench_resume(workdir: Path, num: int = 1_000_000, batch_size: int = 50):
    from speechiter.iterator.piece import PieceIterator
    root = corpus(workdir, num)
    print(f"\n== Resume: time from build_loader() to the first batch, {num} utterances in {num // batch_size} "
          f"batches, a fresh iterator each")
    print(f"{'engine':<22} | {'epoch 1 step 0':>14} | {'epoch 50 step 0':>15} | {'epoch 50 step 10000':>19} | ratio")
    def first_batch(engine, workers, epoch, step):
        iterator = PieceIterator(dataset_type=TouchDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                                 data_len=str(root / "idx2wav_len"), batch_size=batch_size, engine=engine,
                                 num_workers=workers, out_type="null")
        try:
            started = time.perf_counter()
            next(iter(iterator.build_loader(epoch, start_step=step, prefetch_next=False)))
            return time.perf_counter() - started
        finally:
            iterator.close()

    first_batch("msequence", 2, 1, 0)  # warm-up: the engine's imports
    for engine, workers in (("msequence", 2), ("inline", 0)):
        seconds = [min(first_batch(engine, workers, epoch, step) for _ in range(2))
                   for epoch, step in ((1, 0), (50, 0), (50, 10_000))]
        print(f"{engine + f' ({workers} workers)':<22} | {seconds[0]:>13.4f}s | {seconds[1]:>14.4f}s | "
              f"{seconds[2]:>18.4f}s | {seconds[2] / seconds[0]:.2f}x")


# --------------------------------------------------------------- bucketing


def padding(batches_lengths) -> float:
    real = sum(float(np.sum(b)) for b in batches_lengths)
    padded = sum(float(np.max(b)) * len(b) for b in batches_lengths)
    return real / padded


def random_batches(seconds, budget, rng):
    order, batches, current, longest = rng.permutation(len(seconds)), [], [], 0.0
    for i in order.tolist():
        if current and (len(current) + 1) * max(longest, seconds[i]) > budget:
            batches.append(seconds[current])
            current, longest = [], 0.0
        current.append(i)
        longest = max(longest, seconds[i])
    batches.append(seconds[current])
    return batches


def bench_bucket(num: int = 100_000, epochs: int = 3):
    from make_corpus import plan_corpus

    from speechiter.iterator.block import block_bounds
    from speechiter.iterator.bucket import Buckets
    samples = plan_corpus(num)["num_samples"].astype(np.float64)
    seconds = samples / SAMPLE_RATE
    ids = np.array([f"u{i:08d}".encode() for i in range(num)])
    budget = BATCH_SECONDS * SAMPLE_RATE
    row = {uid: i for i, uid in enumerate(ids.tolist())}
    print(f"\n== Bucketing: {num} LibriSpeech-like utterances, batches of at most {BATCH_SECONDS:.0f} s padded")
    print(f"{'plan':<40} | {'s per epoch':>11} | {'padding eff.':>12} | batches")
    results = {}

    started = time.perf_counter()
    buckets = Buckets(ids, samples, budget, 0.02)
    setup = time.perf_counter() - started
    times, effs = [], []
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        view = buckets.compose(0, epoch)
        times.append(time.perf_counter() - started)
        rows = np.array([row[u] for u in view.ids.tolist()])
        effs.append(padding(np.split(seconds[rows], view.bounds[1:-1])))
    results["ours"] = np.mean(times)
    print(f"{'bucket.BucketIterator (width 0.02)':<40} | {np.mean(times):>11.4f} | {100 * np.mean(effs):>11.2f}% | "
          f"{len(view)} (+{setup:.3f} s once)")

    try:
        from lhotse.dataset.sampling import DynamicBucketingSampler
        from lhotse.testing.dummies import dummy_cut
    except ImportError:
        print(f"{'lhotse DynamicBucketingSampler':<40} | lhotse not installed (pip install lhotse)")
    else:
        from lhotse import CutSet
        cuts = CutSet.from_cuts(dummy_cut(i, duration=float(d), recording_duration=float(d))
                                for i, d in enumerate(seconds.tolist()))
        sampler = DynamicBucketingSampler(cuts, max_duration=BATCH_SECONDS, num_buckets=30, shuffle=True, seed=0)
        times, effs = [], []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            started = time.perf_counter()
            batches = [np.array([c.duration for c in batch]) for batch in sampler]
            times.append(time.perf_counter() - started)
            effs.append(padding(batches))
        results["lhotse"] = np.mean(times)
        print(f"{'lhotse DynamicBucketingSampler (30)':<40} | {np.mean(times):>11.4f} | {100 * np.mean(effs):>11.2f}% | "
              f"{len(batches)}")

    started = time.perf_counter()
    batches = random_batches(seconds, BATCH_SECONDS, np.random.default_rng(0))
    print(f"{'random batches':<40} | {time.perf_counter() - started:>11.4f} | {100 * padding(batches):>11.2f}% | "
          f"{len(batches)}")
    started = time.perf_counter()
    order = np.argsort(-samples, kind="stable")
    bounds = block_bounds(samples[order], budget, "never_exceed")
    spent = time.perf_counter() - started
    print(f"{'block.BlockIterator never_exceed (fixed)':<40} | {spent:>11.4f} | "
          f"{100 * padding(np.split(seconds[order], bounds[1:-1])):>11.2f}% | {len(bounds) - 1} (same every epoch)")
    if "lhotse" in results:
        print(f"plan speed: ours {results['lhotse'] / results['ours']:.0f}x Lhotse's")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--sizes", default="1000000,10000000", help="plan sizes, comma-separated")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "speechiter_bench_scale",
                        help="where the generated corpora are kept (reused)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: plans, workers, bucket, resume")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    args.workdir.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} cpus")
    if "plans" not in skip:
        bench_plans(args.workdir, [int(s) for s in args.sizes.split(",") if s])
    if "workers" not in skip:
        bench_workers(args.workdir)
    if "bucket" not in skip:
        bench_bucket()
    if "resume" not in skip:
        bench_resume(args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
