"""Benchmarks, measured side by side in one run (ratios mean more than absolute times).

    python tools/bench.py                 # engines: inline, torch DataLoader, msequence proc / thread; wav and flac
    python tools/bench.py --hdf5          # also individual files against HDF5 chunks
    python tools/bench.py --segments      # also individual files against time ranges of long recordings
    python tools/bench.py --scale [...]   # planning at 1M / 10M utterances and worker memory (tools/bench_scale.py)

Engines bench: a corpus from tools/make_corpus.py (LibriSpeech-like durations,
16 kHz), BlockIterator with 120 s of audio per batch, 2 workers, out_type cpu.
For each engine it prints seconds of audio loaded per second of wall time in
steady state (the median over epochs run interleaved, one epoch of each engine
in turn, after a warm-up epoch), time to first batch from a cold start,
and the epoch-boundary overhead: 20 epochs of 10 (and of 3) batches against one
epoch of as many batches.
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speechiter.dataset.speech_text import SpeechTextDataset  # noqa: E402
from speechiter.iterator.block import BlockIterator  # noqa: E402

SAMPLE_RATE = 16000
ENGINES = {  # name: Iterator settings
    "inline": dict(engine="inline", num_workers=0),
    "torch": dict(engine="torch"),
    "msequence proc": dict(engine="msequence", thread_type="proc"),  # workers from a fork server
    "msequence fork": dict(engine="msequence", thread_type="proc", start_method="fork"),
    "msequence thread": dict(engine="msequence", thread_type="thread"),
}


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_iterator(corpus: Path, settings, workers: int, batch_seconds: float, batches_per_epoch=None,
                  out_type="cpu", feat_conf=None):
    """A BlockIterator over ``corpus`` with ``batch_seconds`` of audio per batch (``feat_conf``: log-mel)."""
    conf = {"main_data": {"feat": str(corpus / "idx2wav")}, "sample_rate": SAMPLE_RATE}
    batch_len = batch_seconds * SAMPLE_RATE
    if feat_conf is not None:
        conf["feat_conf"] = feat_conf
        batch_len = batch_seconds * 1000 / feat_conf.get("frame_shift", 10)
    return BlockIterator(dataset_type=SpeechTextDataset, dataset_conf=conf, data_len=str(corpus / "idx2wav_len"),
                         batch_len=batch_len, batches_per_epoch=batches_per_epoch, out_type=out_type,
                         **{"num_workers": workers, **settings})


def consume(loader):
    """Iterate one loader; return (audio seconds, wall seconds, seconds to first batch)."""
    frames, first = 0, None
    start = time.perf_counter()
    for batch in loader:
        if first is None:
            first = time.perf_counter() - start
        frames += int(batch["feat_len"].sum())
    return frames / SAMPLE_RATE, time.perf_counter() - start, first


def bench_engines(corpus: Path, workers: int, batch_seconds: float, epochs: int, engines=None):
    """Rates of every engine, measured interleaved: one epoch of each in turn,
    so that load from elsewhere on a shared machine hits them alike.

    Returns {engine: (median audio s/s over the timed epochs, cold-start seconds to first batch)}.
    """
    engines = engines or ENGINES
    iterators = {name: make_iterator(corpus, settings, workers, batch_seconds) for name, settings in engines.items()}
    rates = {name: [] for name in engines}
    firsts = {}
    try:
        for name, iterator in iterators.items():  # warm-up epoch (worker start, page cache): time to first batch
            firsts[name] = consume(iterator.build_loader(1))[2]
        for epoch in range(2, 2 + epochs):
            for name, iterator in iterators.items():
                audio, wall, _ = consume(iterator.build_loader(epoch, prefetch_next=epoch < 1 + epochs))
                rates[name].append(audio / wall)
    finally:
        for iterator in iterators.values():
            iterator.close()
    return {name: (statistics.median(rates[name]), firsts[name]) for name in engines}


def bench_epoch_boundaries(corpus: Path, settings, workers: int, batch_seconds: float, short=3, count=20,
                           rounds=7):
    """Seconds for `count` epochs of `short` batches / seconds for one epoch of the same number of batches.

    The two are timed in turn, `rounds` times, which one first alternating, and
    the median of the rounds' ratios is returned: a burst of load from elsewhere
    on the machine lands on one round, not on one side of every comparison.
    """
    plans = {"long": (short * count, 1), "short": (short, count)}
    iterators = {side: make_iterator(corpus, settings, workers, batch_seconds, batches_per_epoch=per_epoch)
                 for side, (per_epoch, _) in plans.items()}
    seconds = {side: [] for side in plans}
    try:
        for iterator in iterators.values():
            consume(iterator.build_loader(1))  # start the workers
        epoch = 2
        for round_no in range(rounds):
            for side in ("long", "short") if round_no % 2 == 0 else ("short", "long"):
                epochs = plans[side][1]
                start = time.perf_counter()
                for last in range(epoch, epoch + epochs):
                    consume(iterators[side].build_loader(last, prefetch_next=last < epoch + epochs - 1))
                seconds[side].append(time.perf_counter() - start)
            epoch += count
    finally:
        for iterator in iterators.values():
            iterator.close()
    return statistics.median(short / long for short, long in zip(seconds["short"], seconds["long"]))


def bench_resume(corpus: Path, workers: int, start_step: int = 10_000):
    """Seconds to the first batch when resuming at step 0 and at ``start_step`` of a long epoch."""
    results = []
    for step in (0, start_step):
        iterator = make_iterator(corpus, ENGINES["msequence proc"], workers, batch_seconds=20.0,
                                 batches_per_epoch=2 * start_step)
        try:
            started = time.perf_counter()
            loader = iterator.build_loader(1, start_step=step, prefetch_next=False)
            next(iter(loader))
            results.append(time.perf_counter() - started)
        finally:
            iterator.close()
    return results


def run_engines(args):
    make_corpus = load_tool("make_corpus").make_corpus
    with tempfile.TemporaryDirectory(prefix="speechiter-bench-") as tmp:
        print(f"corpus: {args.num} utterances, LibriSpeech-like durations, {SAMPLE_RATE} Hz; "
              f"BlockIterator {args.batch_seconds:g} s per batch; {args.workers} workers; out_type cpu; "
              f"{os.cpu_count()} CPUs")
        for fmt in args.formats:
            corpus = make_corpus(Path(tmp) / fmt, args.num, fmt=fmt, seed=0)
            rows = bench_engines(corpus, args.workers, args.batch_seconds, args.epochs)
            print(f"\n[{fmt}]  audio seconds loaded per second (median of {args.epochs} interleaved epochs)")
            print(f"{'engine':<18}{'audio s/s':>11}{'x inline':>10}{'x torch':>10}{'first batch s':>15}")
            for name, (rate, first) in rows.items():
                print(f"{name:<18}{rate:>11.1f}{rate / rows['inline'][0]:>10.2f}{rate / rows['torch'][0]:>10.2f}"
                      f"{first:>15.3f}")
            if fmt == args.formats[0]:
                print("\nepoch boundaries: 20 short epochs / 1 epoch of the same number of batches "
                      "(median of 7 rounds in turn; target <= 1.1)")
                print(f"{'engine':<18}{'10 per epoch':>13}{'3 per epoch':>13}")
                for name in ("msequence proc", "msequence thread", "torch"):
                    ratios = [bench_epoch_boundaries(corpus, ENGINES[name], args.workers, args.batch_seconds, short=n)
                              for n in (10, 3)]
                    print(f"{name:<18}{ratios[0]:>13.3f}{ratios[1]:>13.3f}")
                first, resumed = bench_resume(corpus, args.workers)
                print(f"\nresume: first batch at step 0 {first:.3f} s, at step 10000 {resumed:.3f} s "
                      f"(ratio {resumed / first:.2f}; no skipped batch is read)")
            if args.hdf5 and fmt == args.formats[0]:
                run_hdf5(corpus, Path(tmp), args)
            if args.segments and fmt == args.formats[0]:
                run_segments(corpus, Path(tmp), args)


def run_hdf5(corpus: Path, tmp: Path, args):
    """Individual files against HDF5 chunks of the same audio (needs tools/pack_hdf5.py)."""
    pack = REPO / "tools" / "pack_hdf5.py"
    if not pack.exists():
        print("\n[hdf5] tools/pack_hdf5.py is missing; skipped")
        return
    import subprocess
    out = tmp / "hdf5"
    subprocess.run([sys.executable, str(pack), str(corpus / "idx2wav"), str(out)], check=True)
    print("\n[files vs hdf5]  audio seconds loaded per second, msequence proc")
    for label, root in (("individual files", corpus), ("hdf5 chunks", out)):
        rate, first = bench_engines(root, args.workers, args.batch_seconds, args.epochs)["msequence proc"]
        print(f"{label:<18}{rate:>11.1f}{first:>15.3f}")


def segment_corpus(corpus: Path, out: Path) -> Path:
    """The utterances of ``corpus`` as time ranges (``#t=start,end``) of one long recording per speaker."""
    import numpy as np
    import soundfile
    out.mkdir(parents=True)
    entries = [line.split(maxsplit=1) for line in (corpus / "idx2wav").read_text().splitlines()]
    by_speaker = {}
    for uid, path in entries:
        by_speaker.setdefault(uid.split("-")[0], []).append((uid, path.strip()))
    lines = []
    for speaker, utterances in by_speaker.items():
        waves = [soundfile.read(corpus / path if not os.path.isabs(path) else path, dtype="int16")[0]
                 for _, path in utterances]
        recording = out / f"{speaker}.{'wav' if str(utterances[0][1]).endswith('wav') else 'flac'}"
        soundfile.write(recording, np.concatenate(waves), SAMPLE_RATE, subtype="PCM_16")
        offset = 0
        for (uid, _), wave in zip(utterances, waves):
            lines.append(f"{uid} {recording.name}#t={offset / SAMPLE_RATE},{(offset + len(wave)) / SAMPLE_RATE}")
            offset += len(wave)
    (out / "idx2wav").write_text("\n".join(lines) + "\n")
    (out / "idx2wav_len").write_text((corpus / "idx2wav_len").read_text())
    return out


def run_segments(corpus: Path, tmp: Path, args):
    """Individual files against time ranges of one long recording per speaker (issue 15: >= 80%)."""
    segments = segment_corpus(corpus, tmp / "segments")
    engines = {"msequence proc": ENGINES["msequence proc"]}
    print("\n[files vs segments]  audio seconds loaded per second, msequence proc")
    rates = {}
    for label, root in (("individual files", corpus), ("segments", segments)):
        rates[label], first = bench_engines(root, args.workers, args.batch_seconds, args.epochs, engines)["msequence proc"]
        print(f"{label:<18}{rates[label]:>11.1f}{first:>15.3f}")
    print(f"segments / files: {rates['segments'] / rates['individual files']:.2f} (target >= 0.80)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", action="store_true", help="run tools/bench_scale.py (other options go to it)")
    parser.add_argument("--num", type=int, default=400, help="utterances in the corpus")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch_seconds", type=float, default=120.0)
    parser.add_argument("--epochs", type=int, default=9, help="timed epochs of each engine after the warm-up")
    parser.add_argument("--formats", nargs="+", default=["wav", "flac"], choices=["wav", "flac"])
    parser.add_argument("--hdf5", action="store_true", help="also compare individual files with HDF5 chunks")
    parser.add_argument("--segments", action="store_true", help="also compare individual files with time ranges "
                        "of long recordings")
    args, rest = parser.parse_known_args(argv)
    if args.scale:
        scale = REPO / "tools" / "bench_scale.py"
        if not scale.exists():
            parser.error("tools/bench_scale.py is missing")
        sys.argv = [str(scale), *rest]
        spec = importlib.util.spec_from_file_location("bench_scale", scale)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main(rest) if hasattr(module, "main") else 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    run_engines(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
