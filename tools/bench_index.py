"""Plan cache benchmark: planning a large corpus by parsing against mapping the cache, one rank and four.

    python tools/bench_index.py                          # 10M and 30M utterances
    python tools/bench_index.py --sizes 10000000 --ranks 4

For each size, a ``make_corpus --lengths_only`` corpus (idx2wav + idx2wav_len) and a BlockIterator of
120 s batches, each measured in a fresh process:

1. parse: the cache off (``SPEECHITER_INDEX=0``): seconds to plan, peak RSS and USS above the RSS / USS
   after imports;
2. first run: the cache on and empty: the same, writing the entries;
3. cache: the cache on and full: the same, mapping the entries;
4. ranks: ``--ranks`` processes started together with explicit rank / world_size (ngpu = world size),
   from the cache (a first pass writes each rank's view): each rank's planning seconds, seconds from
   its start (imports included) to its first batch (an inline engine, a dataset that reads no audio),
   and its USS, PSS and anonymous memory (/proc/PID/smaps_rollup) above its own after imports, measured
   while all ranks hold their plans; then the same without the cache (sizes up to --parse_ranks_max).
   USS counts a mapped page that only this process touches (its own view's entry), PSS a share of each
   shared page; anonymous memory is what no file backs.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STARTED = time.perf_counter()
TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS.parent), str(TOOLS)]

BATCH_LEN = 120.0 * 16000


def child(root: str, rank: int, world_size: int, first_batch: bool):
    """Plan in this fresh process; print one JSON line, then wait for a line on stdin (the parent measures
    this process's memory meanwhile)."""
    import psutil

    from bench_scale import TouchDataset
    from speechiter.iterator.block import BlockIterator
    me = psutil.Process()
    base = me.memory_full_info()
    base_anon = anonymous(os.getpid())
    imported = time.perf_counter()
    options = {"rank": rank, "world_size": world_size, "ngpu": world_size} if world_size > 1 else {}
    iterator = BlockIterator(dataset_type=TouchDataset, dataset_conf={"main_data": {"feat": f"{root}/idx2wav"}},
                             data_len=f"{root}/idx2wav_len", batch_len=BATCH_LEN, engine="inline", num_workers=0,
                             out_type="null", **options)
    planned = time.perf_counter()
    result = {"plan_s": planned - imported, "batches": len(iterator),
              "planned_uss": me.memory_full_info().uss - base.uss}
    if first_batch:
        next(iter(iterator.build_loader(1, prefetch_next=False)))
        result["first_batch_s"] = time.perf_counter() - STARTED
    info = me.memory_full_info()
    result.update(base_anon=base_anon, base_uss=base.uss, base_rss=base.rss, uss=info.uss, pss=info.pss,
                  peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(json.dumps(result), flush=True)
    sys.stdin.readline()  # the parent measures this process's memory now
    print(json.dumps({"fingerprint": iterator.view_digest()[0]}), flush=True)  # after: it costs time
    iterator.close()


def run_children(root: Path, cache: str, ranks: int, env_extra: dict, first_batch=False):
    """Start ``ranks`` children together; read each one's line, measure each one's USS/PSS while all hold
    their plans, then let them go."""
    import psutil
    env = {**os.environ, "SPEECHITER_INDEX_DIR": cache, "PYTHONPATH": str(TOOLS.parent), **env_extra}
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(root), str(rank), str(ranks),
                               str(int(first_batch))], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for rank in range(ranks)]
    try:
        results = [json.loads(p.stdout.readline()) for p in procs]
        for p, result in zip(procs, results):
            info = psutil.Process(p.pid).memory_full_info()
            result.update(uss_all=info.uss, pss_all=info.pss, anon=anonymous(p.pid))
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
        for p, result in zip(procs, results):
            result.update(json.loads(p.stdout.readline()))
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            p.wait(timeout=600)
    return results


def anonymous(pid) -> int:
    """Anonymous memory (bytes) of a process: what no file backs, so the kernel cannot drop or share it."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Anonymous:"))
    except (OSError, StopIteration):
        return 0


def corpus(workdir: Path, num: int) -> Path:
    root = workdir / f"lengths_{num}"
    if not (root / "idx2wav_len").exists():
        from make_corpus import make_corpus
        make_corpus(root, num, lengths_only=True)
        old = time.time() - 3600
        for name in ("idx2wav", "idx2wav_len"):
            os.utime(root / name, (old, old))  # settled (see speechiter.index.store.settled)
    return root


def mb(value) -> str:
    return f"{value / 2 ** 20:,.0f}"


def bench(workdir: Path, num: int, ranks: int, parse_ranks: bool):
    root = corpus(workdir, num)
    cache = str(workdir / f"cache_{num}")
    shutil.rmtree(cache, ignore_errors=True)
    print(f"\n== {num:,} utterances (idx2wav {mb(os.path.getsize(root / 'idx2wav'))} MB, idx2wav_len "
          f"{mb(os.path.getsize(root / 'idx2wav_len'))} MB), BlockIterator 120 s batches")
    print(f"{'one process':<16} | {'plan s':>7} | {'peak MB':>8} | {'USS MB':>7} | batches, view fingerprint")
    rows = {}
    for label, env in (("parse", {"SPEECHITER_INDEX": "0"}), ("first run", {}), ("cache", {})):
        result = run_children(root, cache, 1, env)[0]
        rows[label] = result
        print(f"{label:<16} | {result['plan_s']:>7.2f} | {mb(result['peak_rss'] - result['base_rss']):>8} | "
              f"{mb(result['uss'] - result['base_uss']):>7} | {result['batches']} {result['fingerprint']}")
    size = sum(f.stat().st_size for f in Path(cache).iterdir())
    same = len({r["fingerprint"] for r in rows.values()}) == 1
    print(f"cache: {mb(size)} MB in {cache}; views {'identical' if same else 'DIFFER'}; "
          f"speed-up {rows['parse']['plan_s'] / rows['cache']['plan_s']:.1f}x")
    if ranks > 1:
        run_children(root, cache, ranks, {})  # each rank writes its view
        results = run_children(root, cache, ranks, {}, first_batch=True)
        parsed = run_children(root, cache, ranks, {"SPEECHITER_INDEX": "0"}, first_batch=True) if parse_ranks else []
        print("(USS planned: after planning; USS / PSS / anon: at the first batch, all ranks alive; MB above "
              "the rank's own figure after imports)")
        for label, rows in (("cache", results), ("parse", parsed)):
            if not rows:
                continue
            print(f"{ranks} ranks, {label:<6} | {'plan s':>7} | {'1st batch s':>11} | {'USS planned':>11} | "
                  f"{'USS MB':>7} | {'PSS MB':>7} | {'anon MB':>7} | batches")
            for rank, r in enumerate(rows):
                print(f"rank {rank:<15} | {r['plan_s']:>7.2f} | {r['first_batch_s']:>11.2f} | "
                      f"{mb(r['planned_uss']):>11} | {mb(r['uss_all'] - r['base_uss']):>7} | "
                      f"{mb(r['pss_all'] - r['base_uss']):>7} | {mb(r['anon'] - r['base_anon']):>7} | "
                      f"{r['batches']}")
        if not parsed:
            return
        same = [a["fingerprint"] for a in results] == [b["fingerprint"] for b in parsed]
        print(f"rank views with and without the cache: {'identical' if same else 'DIFFER'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--sizes", default="10000000,30000000", help="corpus sizes, comma-separated")
    parser.add_argument("--ranks", type=int, default=4, help="ranks started together (1: skip)")
    parser.add_argument("--parse_ranks_max", type=int, default=10_000_000,
                        help="also start the ranks without the cache for sizes up to this (slow, memory-hungry)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "speechiter_bench_index",
                        help="where the corpora and caches are kept (corpora reused)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        root, rank, world_size, first = args.child
        return child(root, int(rank), int(world_size), first == "1")
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.1f}")
    for num in (int(s) for s in args.sizes.split(",") if s):
        bench(args.workdir, num, args.ranks, num <= args.parse_ranks_max)
    return 0


if __name__ == "__main__":
    sys.exit(main())
