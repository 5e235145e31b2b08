"""Node benchmark (issue 29): worker scaling, the CUDA feed and GPU features, side by side in one run.

    python tools/bench_node.py                  # every section this machine can run
    python tools/bench_node.py --tests          # first the tests of issue 29, the cuda-marked ones included
    python tools/bench_node.py --points 1 2 4   # only these worker counts

Sections (audio seconds loaded per second of wall time, the median of interleaved epochs after a warm-up;
ratios and per-worker efficiency, rate(n) / (n x rate(1)), mean more than the absolute figures):

1. threads: a process worker's torch / OpenMP / MKL / OpenBLAS threads (NOTE [ One thread per worker ]);
   log-mel on 2 process workers against the inline engine with one torch thread and with the default.
2. cuda (with CUDA; left out without): out_type cuda against cpu at 8 and cores-2 workers, the consumer reading
   every batch on the GPU, against DataLoader with pin_memory and .cuda(non_blocking=True); feat_conf device
   cuda (log-mel on the GPU) against CPU log-mel and the wav cuda feed.
3. scaling: wav and 80-bin log-mel at 1, 2, 4, 8 and cores-2 workers (those the machine has): msequence proc
   against torch's DataLoader reading with soundfile (log-mel: torchaudio's Kaldi fbank, else
   kaldi-native-fbank, else no peer row), both over the same batches of 120 s of audio.
4. kernel: the log-mel kernel alone in 1, cores/2 and cores-2 processes at once: the plain kernel
   (tests/dataset/fbank_reference.py) against the blocked one at several block sizes (NOTE [ Log-mel memory
   traffic ] in speechiter/fbank.py: what the node says decides BLOCK_FRAMES); whether their bits agree here.

The targets of issue 29 that the run measured are checked at the end (PASS / FAIL).

A GPU machine without network (DEVELOPERS.md, the device tool): it has torch, torchaudio, numpy, pyyaml,
h5py, tqdm, psutil and pytest, but no soundfile, soxr, miniaudio or cffi. Carry them as wheels, from the
repository's root on a machine with network:

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \\
        --platform manylinux2014_x86_64 -d .whl soundfile==0.14.0 soxr==1.1.0 miniaudio==1.71 cffi pycparser

(2.4 MB), name `.whl` in the run's carry, and start the command with

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 && python3 tools/bench_node.py --tests --out $OUT

Sections run in the order threads, cuda, scaling, kernel, and results.json is written after each, so a run
stopped by a time limit keeps what it measured. About 6 minutes with --tests on a 16-core node is the estimate
(it has not run on one yet); --quick halves it.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS.parent), str(TOOLS)]

import bench  # noqa: E402
import bench_peers  # noqa: E402

SAMPLE_RATE = 16000
FEAT = {"n_mels": 80}
PROC = {"engine": "msequence", "thread_type": "proc"}
ISSUE_TESTS = ["tests/sequence/test_threads.py", "tests/sequence/test_pinned_slots.py", "tests/sequence/test_cuda.py",
               "tests/dataset/test_gpu_features.py", "tests/dataset/test_features_identity.py"]
SECTIONS = ("threads", "cuda", "scaling", "kernel")


class Side:
    """One loader of a side-by-side comparison: a speechiter iterator or the DataLoader peer."""

    def __init__(self, name, corpus, workers, epoch_batches, feat=False, out_type="cpu", feat_device="cpu",
                 peer=False, settings=None, torch_threads=None):
        self.name, self.peer, self.cuda, self.torch_threads = name, peer, out_type == "cuda", torch_threads
        conf = {**FEAT, "device": feat_device} if feat else None
        self.iterator = bench.make_iterator(corpus, settings or PROC, workers, 120.0, epoch_batches, out_type, conf)
        self.lengths = {line.split()[0]: int(line.split()[1])
                        for line in (corpus / "idx2wav_len").read_text().splitlines()}
        self.loader = None
        if peer:
            plans = [self.iterator.build_loader(e).plan for e in range(1, 13)]  # warm-up + up to 11 epochs
            self.loader = bench_peers.peer_loader(corpus, [ids for plan in plans for ids in plan], workers, feat,
                                                  pin_memory=self.cuda)
            self.per_epoch = len(plans[0])

    def epoch(self, epoch: int) -> float:
        """Audio seconds per second of one epoch."""
        import torch
        if self.torch_threads is not None:  # the main process's, for this epoch
            before = torch.get_num_threads()
            torch.set_num_threads(self.torch_threads)
            try:
                return self._epoch(epoch)
            finally:
                torch.set_num_threads(before)
        return self._epoch(epoch)

    def _epoch(self, epoch: int) -> float:
        import torch
        if self.peer:
            batches, plan = self._peer_epoch(epoch), self.iterator.build_loader(epoch).plan
        else:
            loader = self.iterator.build_loader(epoch)
            batches, plan = loader, loader.plan
        audio = sum(self.lengths[uid] for ids in plan for uid in ids) / SAMPLE_RATE
        total = torch.zeros((), device="cuda") if self.cuda else 0
        started = time.perf_counter()
        for batch in batches:
            if self.cuda:  # every batch read on the GPU
                total += batch["feat"].cuda(non_blocking=True).sum() if self.peer else batch["feat"].sum()
            else:
                total += int(batch["feat_len"].sum())
        if self.cuda:
            torch.cuda.synchronize()
        return audio / (time.perf_counter() - started)

    def _peer_epoch(self, epoch):
        self.loader.sampler.indices = range((epoch - 1) * self.per_epoch, epoch * self.per_epoch)
        return iter(self.loader)

    def close(self):
        self.iterator.close()
        self.loader = None


def side_by_side(sides, epochs):
    """{name: median rate}: a warm-up epoch each, then ``epochs`` epochs of each in turn."""
    rates = {side.name: [] for side in sides}
    try:
        for side in sides:
            side.epoch(1)
        for epoch in range(2, 2 + epochs):
            for side in sides if epoch % 2 else sides[::-1]:
                rates[side.name].append(side.epoch(epoch))
    finally:
        for side in sides:
            side.close()
    return {name: statistics.median(values) for name, values in rates.items()}


def run_threads(corpus, args, results):
    from speechiter.sequence import MSequence, Task
    with MSequence(bench_peers.ThreadProbe, num_workers=1, out_type="null", dset_size=0).start() as mng:
        counts = next(iter(mng.iterate([Task(0, [0], None)])))
    print(f"\n[threads] a process worker's thread counts after a lazy torch import: {counts}")
    results["worker_threads"] = counts
    inline = {"engine": "inline"}
    sides = [Side("inline, 1 torch thread", corpus, 0, 8, True, settings=inline, torch_threads=1),
             Side("inline, default threads", corpus, 0, 8, True, settings=inline),
             Side("2 proc workers", corpus, 2, 8, True)]
    rates = side_by_side(sides, args.epochs)
    for name, rate in rates.items():
        print(f"  log-mel {name:<26}{rate:>10.0f} audio-s/s")
    results["inline_vs_2"] = rates


def run_scaling(corpus, args, results):
    backend = bench_peers.fbank_backend()
    for kind in ("wav", "log-mel"):
        feat = kind == "log-mel"
        peer = "DataLoader + soundfile" + (f" + {backend}" if feat else "")
        print(f"\n[{kind}] audio-s/s, msequence proc against {peer if not feat or backend else 'no peer'}")
        print(f"{'workers':>8}{'speechiter':>12}{'per worker':>12}{'efficiency':>12}{'peer':>10}{'x peer':>8}")
        base, rows = None, {}
        for n in args.points:
            sides = [Side("speechiter", corpus, n, max(16, 8 * n), feat)]
            if not feat or backend:
                sides.append(Side("peer", corpus, n, max(16, 8 * n), feat, peer=True))
            rates = side_by_side(sides, args.epochs)
            base = base or rates["speechiter"] / n
            peer_rate = rates.get("peer", float("nan"))
            rows[n] = {**rates, "efficiency": rates["speechiter"] / n / base}
            print(f"{n:>8}{rates['speechiter']:>12.0f}{rates['speechiter'] / n:>12.0f}{rows[n]['efficiency']:>12.2f}"
                  f"{peer_rate:>10.0f}{rates['speechiter'] / peer_rate:>8.2f}")
        results[kind] = rows


def run_kernel(args, results):
    from speechiter import fbank
    from speechiter.features import LogMel
    identical = _bits_agree(LogMel, fbank)
    cores = os.cpu_count() or 1
    counts = sorted({1, max(1, cores // 2), max(1, cores - 2)})
    variants = ["plain", "block 128", "block 256", "whole"]
    print(f"\n[log-mel kernel] audio-s per CPU-second per process, processes at once; blocked == plain bits here: "
          f"{identical}")
    print(f"{'kernel':<12}" + "".join(f"{f'{k} procs':>12}" for k in counts) + f"{'scaling':>10}")
    context = multiprocessing.get_context("spawn")
    rows = {}
    for variant in variants:
        rates = []
        for k in counts:
            queue, barrier = context.Queue(), context.Barrier(k)  # they start together, torch imported
            procs = [context.Process(target=bench_peers.kernel_rate, args=(variant, args.kernel_s, barrier, queue))
                     for _ in range(k)]
            for proc in procs:
                proc.start()
            got = [queue.get(timeout=120) for _ in procs]
            for proc in procs:
                proc.join()
            rates.append(statistics.median(cpu for cpu, _ in got))
        rows[variant] = rates
        print(f"{variant:<12}" + "".join(f"{rate:>12.0f}" for rate in rates) + f"{rates[-1] / rates[0]:>10.2f}")
    results["kernel"] = {"processes": counts, "rates": rows, "bit_identical": identical}


def _bits_agree(LogMel, fbank):
    import numpy as np
    import importlib.util
    spec = importlib.util.spec_from_file_location("ref", TOOLS.parent / "tests/dataset/fbank_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    rng = np.random.default_rng(0)
    for conf in ({}, {"dither": 1.0, "normalize": "utterance"}):
        mel = LogMel(SAMPLE_RATE, **conf)
        for n in (400, 16000 * 3 + 17, 16000 * 13):
            wave = rng.uniform(-0.5, 0.5, n).astype(np.float32)
            ours = mel(wave, np.random.default_rng(n))
            if not np.array_equal(ours.view(np.uint32),
                                  reference.reference_log_mel(mel, wave, np.random.default_rng(n)).view(np.uint32)):
                return False
    return True


def run_cuda(corpus, args, results):
    import torch
    if not torch.cuda.is_available():
        print("\n[cuda] no CUDA device: the CUDA feed and GPU feature rows are left out")
        return
    backend = bench_peers.fbank_backend()
    points = sorted({n for n in (8, args.points[-1]) if n <= args.points[-1]})
    print(f"\n[cuda] audio-s/s on {torch.cuda.get_device_name()}, the consumer reading every batch on the GPU")
    print(f"{'workers':>8}{'feed':>10}{'cpu':>10}{'cuda':>10}{'cuda/cpu':>10}{'pinned peer':>13}{'x peer':>8}"
          f"{'gpu feat':>10}{'/cpu feat':>10}{'/wav cuda':>10}")
    rows = {}
    for n in points:
        for kind, feat in (("wav", False), ("log-mel", True)):
            batches = max(16, 8 * n)
            sides = [Side("cpu", corpus, n, batches, feat), Side("cuda", corpus, n, batches, feat, "cuda")]
            if not feat or backend:
                sides.append(Side("peer", corpus, n, batches, feat, "cuda", peer=True))
            if feat:
                sides.append(Side("gpu feat", corpus, n, batches, True, "cuda", feat_device="cuda"))
            rates = side_by_side(sides, args.epochs)
            rows[f"{kind} {n}"] = rates
            if feat:
                rates["wav cuda"] = rows[f"wav {n}"]["cuda"]
            peer = rates.get("peer", float("nan"))
            gpu = rates.get("gpu feat", float("nan"))
            print(f"{n:>8}{kind:>10}{rates['cpu']:>10.0f}{rates['cuda']:>10.0f}{rates['cuda'] / rates['cpu']:>10.2f}"
                  f"{peer:>13.0f}{rates['cuda'] / peer:>8.2f}{gpu:>10.0f}{gpu / rates['cpu']:>10.2f}"
                  f"{gpu / rates.get('wav cuda', float('nan')):>10.2f}")
    results["cuda"] = rows


def check_targets(results, args):
    """The issue's targets that this run measured."""
    most = args.points[-1]
    checks = []
    if "log-mel" in results and most >= 8:
        row = results["log-mel"][most]
        checks.append((f"log-mel {most} workers: efficiency >= 0.8", row["efficiency"] >= 0.8))
        if "peer" in row:
            checks.append((f"log-mel {most} workers: >= 2x the DataLoader peer", row["speechiter"] >= 2 * row["peer"]))
    if "wav" in results and most >= 8:
        row = results["wav"][most]
        checks.append((f"wav {most} workers: >= 4x the DataLoader peer", row["speechiter"] >= 4 * row["peer"]))
    for key, rates in results.get("cuda", {}).items():
        checks.append((f"{key} workers: cuda >= 0.9 of cpu", rates["cuda"] >= 0.9 * rates["cpu"]))
        if "gpu feat" in rates and key.endswith(str(most)):
            checks += [(f"{key}: GPU features >= 3x CPU log-mel", rates["gpu feat"] >= 3 * rates["cpu"]),
                       (f"{key}: GPU features >= 0.9 of wav cuda", rates["gpu feat"] >= 0.9 * rates["wav cuda"])]
    inline = results.get("inline_vs_2")
    if inline:
        two = inline["2 proc workers"]
        checks += [("log-mel 2 workers >= 1.8x inline on one thread", two >= 1.8 * inline["inline, 1 torch thread"]),
                   ("log-mel 2 workers >= inline with default threads", two >= inline["inline, default threads"])]
    print("\n[targets]")
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    results["targets"] = {name: ok for name, ok in checks}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = os.cpu_count() or 1
    parser.add_argument("--points", type=int, nargs="+",
                        default=sorted({n for n in (1, 2, 4, 8, cores - 2) if 1 <= n <= max(cores - 2, 2)}))
    parser.add_argument("--num", type=int, default=1500, help="utterances in the corpus (LibriSpeech-like, wav)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs of each side, after a warm-up")
    parser.add_argument("--kernel_s", type=float, default=2.0, help="seconds each kernel process computes")
    parser.add_argument("--quick", action="store_true", help="1 epoch, 1 s kernels, at most 800 utterances")
    parser.add_argument("--tests", action="store_true", help="run the tests of issue 29 first (the cuda-marked "
                                                             "ones and the fast ones)")
    parser.add_argument("--skip", default="", help=f"comma-separated sections to leave out: {','.join(SECTIONS)}")
    parser.add_argument("--out", help="a folder for results.json (and the tests' log)")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.kernel_s, args.num = 1, 1.0, min(args.num, 800)
    args.points = sorted(set(args.points))
    results = {"cpus": cores, "points": args.points}
    if args.tests:
        import subprocess
        log = Path(args.out) / "tests.log" if args.out else None
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda or not slow",
                   *ISSUE_TESTS]
        done = subprocess.run(command, cwd=TOOLS.parent, capture_output=True, text=True)
        print(done.stdout[-3000:] + done.stderr[-2000:])
        if log:
            log.write_text(done.stdout + done.stderr)
        results["tests_exit_code"] = done.returncode
    skip = set(filter(None, args.skip.split(",")))
    started = time.perf_counter()
    sections = {"threads": run_threads, "cuda": run_cuda, "scaling": run_scaling,
                "kernel": lambda corpus, args, results: run_kernel(args, results)}
    with tempfile.TemporaryDirectory(prefix="speechiter-node-") as tmp:
        corpus = bench.load_tool("make_corpus").make_corpus(Path(tmp) / "wav", args.num, fmt="wav", seed=0)
        print(f"corpus: {args.num} utterances, LibriSpeech-like, {SAMPLE_RATE} Hz wav; {cores} CPUs; "
              f"worker points {args.points}; shared machine? compare ratios")
        for name in SECTIONS:
            if name not in skip:
                sections[name](corpus, args, results)
                results.setdefault("seconds", {})[name] = round(time.perf_counter() - started)
                _save(results, args)
    check_targets(results, args)
    _save(results, args)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


def _save(results, args):
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "results.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
