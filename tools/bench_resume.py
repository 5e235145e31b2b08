"""Resume benchmark: the first batch of a resume deep into an epoch, and throughput after an elastic resume.

    python tools/bench_resume.py                         # 1.1M utterances, resume at step 1,000,000
    python tools/bench_resume.py --num 200000 --step 150000 --batches 2000
    python tools/bench_resume.py --parts 3                # the mix resume under changed weights only

1. Deep resume: an abs.Iterator with batch_size 1 over NUM utterances (a
   ``make_corpus --lengths_only`` corpus, a Dataset that reads no audio), on
   rank 0 of 2: the time from ``build_loader()`` + ``load_state_dict()`` of a
   state at step STEP of epoch 1 to the first batch, for a state saved on the
   same 2 ranks and for one saved on 4 ranks (elastic: the epoch's global
   batches are shared among the 2), the inline engine and msequence with 2
   process workers; and ``build_loader(1, STEP)`` without a state. The
   iterator is built (the idx2 files read and planned) before the clock starts.
2. Throughput: BATCHES batches of 64 utterances on rank 0 of 2, from step
   STEP2, after an elastic resume (a state of 4 ranks) and in a fresh run
   (``build_loader(1, STEP2)``), best of 3 alternating runs; the ratio should
   be 1.
3. Mix resume: a mix (batches_per_epoch NUM) of two corpora over the same
   utterances (batch_size 1 and 2), weights 0.7/0.3, saved at step STEP of
   epoch 1; the time from ``build_loader()`` + ``load_state_dict()`` to the
   first batch in a mix of the same weights (a plain resume) and in one of
   0.5/0.5 (``allow_changes=["mix"]``: NOTE [ Changed mix ] in
   speechiter/iterator/mix_changes.py), fresh corpora each, built before the
   clock; best of 3 alternating runs, and the ratio (changed / plain).
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS.parent), str(TOOLS)]

from bench_scale import TouchDataset, corpus  # noqa: E402
from speechiter.iterator.abs import Iterator  # noqa: E402
from speechiter.iterator.mix import MixIterator  # noqa: E402


def make(root: Path, batch_size: int, rank: int, world_size: int, engine: str = "inline", workers: int = 0,
         name: str = "train"):
    return Iterator(dataset_type=TouchDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                    data_len=str(root / "idx2wav_len"), batch_size=batch_size, rank=rank, world_size=world_size,
                    engine=engine, num_workers=workers, out_type="null", name=name)


def state_at(root: Path, batch_size: int, world_size: int, step: int) -> dict:
    """Rank 0's state of a ``world_size``-rank run after ``step`` steps of epoch 1."""
    iterator = make(root, batch_size, 0, world_size)
    try:
        return iterator.build_loader(1, step).state_dict()
    finally:
        iterator.close()


def first_batch(iterator, state=None, step: int = 0) -> float:
    started = time.perf_counter()
    loader = iterator.build_loader(1, 0 if state else step, prefetch_next=False)
    if state is not None:
        loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - started


def bench_deep_resume(root: Path, num: int, step: int):
    print(f"\n== Resume at step {step:,} of an epoch of {num:,} batches (batch_size 1), rank 0 of 2: "
          f"seconds to the first batch")
    states = {"same layout (2 ranks)": state_at(root, 1, 2, step), "elastic (saved on 4)": state_at(root, 1, 4, step)}
    print(f"{'engine':<22} | {'start_step':>10} | " + " | ".join(f"{label:>21}" for label in states))
    for engine, workers in (("inline", 0), ("msequence", 2)):
        iterator = make(root, 1, 0, 2, engine, workers)
        try:
            iterator.engine()  # the workers start before the clock
            seconds = [first_batch(iterator, step=step)]
            for state in states.values():
                again = make(root, 1, 0, 2, engine, workers)  # a fresh iterator: nothing cached
                try:
                    again.engine()
                    seconds.append(first_batch(again, state))
                finally:
                    again.close()
        finally:
            iterator.close()
        print(f"{engine + f' ({workers} workers)':<22} | {seconds[0]:>9.3f}s | "
              + " | ".join(f"{value:>20.3f}s" for value in seconds[1:]))


def rate(iterator, state, start: int, batches: int) -> float:
    loader = iterator.build_loader(1, 0 if state else start, prefetch_next=False, stop_step=start + batches)
    if state is not None:
        loader.load_state_dict(state)  # the same stop_step
    started, count = time.perf_counter(), 0
    for _ in loader:
        count += 1
    return count / (time.perf_counter() - started)


def bench_throughput(root: Path, step: int, batches: int):
    state = state_at(root, 64, 4, step)
    print(f"\n== Throughput: {batches} batches of 64 utterances from step {step:,}, rank 0 of 2, batches/s "
          f"(best of 3)")
    print(f"{'engine':<22} | {'fresh run':>10} | {'elastic resume':>14} | ratio")
    for engine, workers in (("inline", 0), ("msequence", 2)):
        fresh, elastic = make(root, 64, 0, 2, engine, workers), make(root, 64, 0, 2, engine, workers)
        try:
            fresh.engine(), elastic.engine()
            runs = {"fresh": [], "elastic": []}
            for _ in range(3):
                runs["fresh"].append(rate(fresh, None, step, batches))
                runs["elastic"].append(rate(elastic, state, step, batches))
        finally:
            fresh.close()
            elastic.close()
        best = {label: max(values) for label, values in runs.items()}
        print(f"{engine + f' ({workers} workers)':<22} | {best['fresh']:>10.0f} | {best['elastic']:>14.0f} | "
              f"{best['elastic'] / best['fresh']:.3f}")


def make_mix(root: Path, num: int, weights: dict, engine: str = "inline", workers: int = 0) -> MixIterator:
    corpora = {"a": make(root, 1, 0, 1, name="train/a"), "b": make(root, 2, 0, 1, name="train/b")}
    return MixIterator(corpora, weights, batches_per_epoch=num, engine=engine, num_workers=workers, out_type="null",
                       name="train")


def mix_first_batch(root: Path, num: int, weights: dict, state: dict, engine: str, workers: int,
                    changes=()) -> float:
    mix = make_mix(root, num, weights, engine, workers)
    try:
        mix.engine()  # the workers start before the clock
        started = time.perf_counter()
        loader = mix.build_loader(1, prefetch_next=False)
        loader.load_state_dict(state, allow_changes=changes)
        next(iter(loader))
        return time.perf_counter() - started
    finally:
        mix.close()


def bench_mix_resume(root: Path, num: int, step: int, repeats: int = 3):
    saving = make_mix(root, num, {"a": 0.7, "b": 0.3})
    try:
        state = saving.state_at(1, step).to_dict()
    finally:
        saving.close()
    print(f"\n== Mix resume at step {step:,} of a mix of two corpora (epoch {num:,} batches), weights 0.7/0.3: seconds "
          f"to the first batch (best of {repeats})")
    print(f"{'engine':<22} | {'plain resume':>12} | {'changed weights 0.5/0.5':>23} | ratio")
    for engine, workers in (("inline", 0), ("msequence", 2)):
        runs = {"plain": [], "changed": []}
        for _ in range(repeats):
            runs["plain"].append(mix_first_batch(root, num, {"a": 0.7, "b": 0.3}, state, engine, workers))
            runs["changed"].append(mix_first_batch(root, num, {"a": 0.5, "b": 0.5}, state, engine, workers,
                                                   changes=["mix"]))
        best = {label: min(values) for label, values in runs.items()}
        print(f"{engine + f' ({workers} workers)':<22} | {best['plain']:>11.3f}s | {best['changed']:>22.3f}s | "
              f"{best['changed'] / best['plain']:.2f}")
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=1_100_000, help="utterances (batches in part 1)")
    parser.add_argument("--step", type=int, default=1_000_000, help="the resume step of part 1")
    parser.add_argument("--step2", type=int, default=5_000, help="the resume step of part 2")
    parser.add_argument("--batches", type=int, default=3_000, help="batches timed in part 2")
    parser.add_argument("--workdir", type=Path, help="where the corpus is made (default: a temporary folder)")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run (default: 1,2,3)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind in part 3 (the best counts)")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        root = corpus(args.workdir or Path(tmp), args.num)
        if "1" in parts:
            bench_deep_resume(root, args.num, args.step)
        if "2" in parts:
            bench_throughput(root, args.step2, args.batches)
        if "3" in parts:
            return bench_mix_resume(root, args.num, args.step, args.repeats)


if __name__ == "__main__":
    main()
