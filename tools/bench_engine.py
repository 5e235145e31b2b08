"""Micro-benchmark of the loading engines on real wav files.

    python tools/bench_engine.py [--files 400] [--epochs 3] [--batch_s 120] [--workers 2]

Writes ``--files`` wav files of noise (2-20 s, 16 kHz) into a temporary
directory, groups them into batches of about ``--batch_s`` seconds of audio
(sorted by length, batch order shuffled), and times one consumer loop per
engine: inline (the main thread), torch's DataLoader (persistent workers,
prefetch_factor=4, batch_sampler=the plan) and MSequence with processes and
threads, all with out_type='cpu' (a padded (B, T, 1) float32 tensor and the
lengths). The engines run interleaved, one epoch each in turn, after a warm-up epoch
(worker start, page cache), and the median rate over epochs is reported.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import soundfile

RATE = 16000


class WavBatches:
    """Indexer: reads the wavs of a batch and pads them into (B, T, 1) float32."""

    def __init__(self, paths):
        self.paths = paths

    def __getitem__(self, ids):
        waves = [soundfile.read(self.paths[i], dtype="float32")[0] for i in ids]
        lengths = np.array([len(w) for w in waves], dtype=np.int64)
        batch = np.zeros((len(waves), lengths.max(), 1), dtype=np.float32)
        for row, wave in zip(batch, waves):
            row[:len(wave), 0] = wave
        return {"feat": batch, "feat_len": lengths}


class WavItems:
    """The same reading as a map-style torch Dataset (one utterance per item)."""

    def __init__(self, paths):
        self.paths = paths

    def __getitem__(self, i):
        return soundfile.read(self.paths[i], dtype="float32")[0]

    def __len__(self):
        return len(self.paths)


def pad_collate(waves):
    import torch
    lengths = torch.tensor([len(w) for w in waves])
    batch = torch.zeros(len(waves), int(lengths.max()), 1)
    for row, wave in zip(batch, waves):
        row[:len(wave), 0] = torch.from_numpy(wave)
    return {"feat": batch, "feat_len": lengths}


def make_corpus(folder, count, seed=0):
    gen = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        samples = int(gen.uniform(2, 20) * RATE)
        path = os.path.join(folder, f"utt{i:04d}.wav")
        soundfile.write(path, (gen.standard_normal(samples) * 0.1).astype(np.float32), RATE, subtype="PCM_16")
        paths.append(path)
    return paths


def make_plan(paths, batch_s, seed=0):
    lengths = [soundfile.info(p).frames for p in paths]
    order = np.argsort(lengths)
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > batch_s * RATE:
            batches.append(current)
            current = []
        current.append(int(i))
    batches.append(current)
    return [batches[i] for i in np.random.default_rng(seed).permutation(len(batches))]


def consume(batches):
    count = nbytes = 0
    for batch in batches:
        count += 1
        nbytes += batch["feat"].numel() * 4
    return count, nbytes


def run_inline(paths, plan, epochs):
    indexer = WavBatches(paths)
    import torch
    for _ in range(epochs):
        yield consume({"feat": torch.from_numpy(b["feat"]), "feat_len": torch.from_numpy(b["feat_len"])}
                      for b in (indexer[ids] for ids in plan))


def run_torch(paths, plan, epochs, workers):
    from torch.utils.data import DataLoader
    loader = DataLoader(WavItems(paths), batch_sampler=plan, collate_fn=pad_collate, num_workers=workers,
                        persistent_workers=True, prefetch_factor=4)
    for _ in range(epochs):
        yield consume(loader)
    del loader


def run_msequence(paths, plan, epochs, workers, thread_type):
    import functools
    from speechiter.sequence import MSequence, Task
    manager = MSequence(functools.partial(WavBatches, paths), num_workers=workers, thread_type=thread_type,
                        out_type="cpu", buffer=8, dset_size=0)
    tasks = [Task(i, ids, None) for i, ids in enumerate(plan)]
    with manager.start() as mng:
        for _ in range(epochs):
            yield consume(mng.iterate(tasks, lookahead=tasks[:8]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch_s", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--engines", default="inline,torch,proc,thread")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        paths = make_corpus(folder, args.files)
        plan = make_plan(paths, args.batch_s)
        engines = {
            "inline": lambda: run_inline(paths, plan, args.epochs),
            "torch": lambda: run_torch(paths, plan, args.epochs, args.workers),
            "proc": lambda: run_msequence(paths, plan, args.epochs, args.workers, "proc"),
            "thread": lambda: run_msequence(paths, plan, args.epochs, args.workers, "thread"),
        }
        print(f"{len(plan)} batches/epoch, {args.files} files, {os.cpu_count()} cpus, "
              f"{args.workers} workers, epochs timed: {args.epochs - 1}")
        # Engines run interleaved, one epoch each per round, so that other load on the machine
        # spreads over all of them; the first epoch of each warms up.
        running = {name: engines[name]() for name in args.engines.split(",")}
        for epochs in running.values():
            next(epochs)
        rates = {name: [] for name in running}
        size = 0
        for _ in range(args.epochs - 1):
            for name, epochs in running.items():
                start = time.perf_counter()
                count, nbytes = next(epochs)
                rates[name].append(count / (time.perf_counter() - start))
                size = nbytes / count
        for epochs in running.values():
            epochs.close()
        results = {}
        for name, values in rates.items():
            results[name] = float(np.median(values))
            print(f"{name:>7}: median {results[name]:7.1f} batches/s ({results[name] * size / 2**20:7.1f} MiB/s), "
                  f"best {max(values):7.1f}, worst {min(values):7.1f}", flush=True)
        if "inline" in results:
            print("speed-up vs inline:", {k: round(v / results["inline"], 2) for k, v in results.items()})
        if "torch" in results:
            print("speed-up vs torch: ", {k: round(v / results["torch"], 2) for k, v in results.items()})


if __name__ == "__main__":
    main()
