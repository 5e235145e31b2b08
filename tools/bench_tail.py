"""The slow tail: a store that stalls 1% of its requests, with and without hedging (issue 32).

    python tools/bench_tail.py                        # 300 batches, 2 process workers, 1% stalled 5 s
    python tools/bench_tail.py --batches 300 --stall_fraction 0.01 --stall_s 5 --runs 2

A generated corpus (FLAC, short utterances) is packed in plan order into a
moto S3 server on 127.0.0.1 (one ranged GET per batch, NOTE [ Pack layout ]
in speechiter/pack/writer.py) and read by BlockIterators with 2 process
workers each, through a proxy that holds request n for ``--stall_s`` seconds
when a random number seeded by (``--seed``, n) is below ``--stall_fraction``
(so the same request numbers stall in every run and on each side: each side
has a proxy of its own), or through such proxies stalling nothing.

The machine is shared, so each run is one fresh process with both sides: hedge
off (the engine before issue 32) and on (late requests sent again, NOTE
[ Hedged requests ] in speechiter/io/hedged_requests.py; late batches built
again, NOTE [ Hedging ] in speechiter/sequence/hedge.py); ``--warmup`` batches
each, untimed, then ``--batches`` each in alternating segments of
``--segment``, timing each wait in ``next()`` and each whole step (the wait,
the batch's checksum and ``--step_ms`` of the consumer's work; 0: the loader
is the bottleneck). One run with stalls and one without, ``--runs`` times.

Printed per side and run: the median, p99 and largest wait, p99 / median, a
whole step's p99 / median, batches per second, batch copies (won), requests
stalled and sent, GETs sent again while the same GET was in flight; then the
targets (with stalls and hedging, p99 <= 2x median; hedge on / off throughput
without stalls >= 0.98; the same batches everywhere) beside the machine's own
tail (no stalls). Needs the ``s3`` and ``test`` extras (s3fs, moto).

Shards are 4 MiB by default (``--shard_size``): moto's server serves a ranged
GET of a large object slowly; with one 60 MB shard (``--num 3000``, 256 MiB
shards) the run took 3 min of system time, against 8 s with 4 MiB shards.
"""
import argparse
import collections
import http.server
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))
from bench_pack import RECIPE, SAMPLE_RATE  # noqa: E402 (the same recipe as the pack benchmark)


class StallingProxy:
    """Forwards every request to ``target``; request n first waits ``stall_s`` when the random number
    seeded by (``seed``, n) is below ``fraction``. Counts requests and stalls."""

    def __init__(self, target: str, fraction: float, stall_s: float, seed: int = 0):
        from bench_large import forward

        proxy = self
        self.requests = self.stalls = 0
        self.in_flight = collections.Counter()  # (path, Range) of the GETs not answered yet
        self.sent_again = 0  # GETs of an object and range while the same GET was in flight
        self.lock = threading.Lock()
        self.closed = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.lock:
                    proxy.requests += 1
                    number = proxy.requests
                    get = (self.path, self.headers.get("Range")) if self.command == "GET" else None
                    if get is not None:
                        proxy.sent_again += proxy.in_flight[get] > 0
                        proxy.in_flight[get] += 1
                if random.Random(seed * 1_000_003 + number).random() < fraction:
                    with proxy.lock:
                        proxy.stalls += 1
                    proxy.closed.wait(stall_s)
                try:
                    forward(self, target, body)
                finally:
                    if get is not None:
                        with proxy.lock:
                            proxy.in_flight[get] -= 1

            do_GET = do_HEAD = do_PUT = do_POST = _forward

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a worker that ends drops its connections: not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self):
        """Count from request 1 again (each side sees the same stalled request numbers)."""
        with self.lock:
            self.requests = self.stalls = self.sent_again = 0

    def close(self):
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()


def endless(iterator):
    """The iterator's batches, epoch after epoch."""
    epoch = 0
    while True:
        epoch += 1
        yield from iterator.build_loader(epoch)


def child(recipe: str, urls: str, workers: int, warmup: int, batches: int, segment: int, step_ms: float) -> dict:
    """In a fresh process: two iterators of the recipe, hedge off and on, each reading through its own proxy
    (``urls``: off's and on's, comma-separated; the workers take the endpoint from the environment as they
    start), ``warmup`` batches each, then ``batches`` timed batches each in segments of ``segment``, in the
    order off, on, on, off, off, ... (so both see the same machine)."""
    from speechiter import build_iterators, load_config
    from speechiter.dump import checksum

    sides = {hedge: build_iterators(load_config(recipe), num_workers=workers, groups=("train",), out_type="null",
                                    hedge=hedge)["train"] for hedge in (False, True)}
    streams = {hedge: endless(iterator) for hedge, iterator in sides.items()}
    result = {hedge: {"waits": [], "steps": [], "checksums": [], "seconds": 0.0} for hedge in sides}
    try:
        for (hedge, stream), url in zip(streams.items(), urls.split(",")):
            os.environ["AWS_ENDPOINT_URL"] = url  # the workers start with the first batch
            result[hedge]["checksums"] = [checksum(next(stream)) for _ in range(warmup)]
        order = [False, True]
        while any(len(side["waits"]) < batches for side in result.values()):
            for hedge in order:
                stream, side = streams[hedge], result[hedge]
                started = time.perf_counter()
                for _ in range(min(segment, batches - len(side["waits"]))):
                    begin = time.perf_counter()
                    batch = next(stream)
                    side["waits"].append(time.perf_counter() - begin)
                    side["checksums"].append(checksum(batch))
                    if step_ms:
                        time.sleep(step_ms / 1000)
                    side["steps"].append(time.perf_counter() - begin)
                side["seconds"] += time.perf_counter() - started
            order.reverse()
        for hedge, iterator in sides.items():
            hedger = iterator.engine().scheduler.hedger
            result[hedge].update(copies=hedger.copies, wins=hedger.wins,
                                 batches_per_s=batches / result[hedge]["seconds"])
    finally:
        for stream in streams.values():
            stream.close()
        for iterator in sides.values():
            iterator.close()
    return {"off": result[False], "on": result[True]}


def run_child(recipe: Path, args, urls: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, __file__, "--child", str(recipe), "--urls", urls, "--workers", str(args.workers),
               "--warmup", str(args.warmup), "--batches", str(args.batches), "--segment", str(args.segment),
               "--step_ms", str(args.step_ms)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench(tmp: Path, args) -> None:
    import boto3

    from local_s3 import fake_aws, start_local_s3
    from make_corpus import make_corpus
    from speechiter import build_iterators, load_config
    from speechiter.pack.writer import write_pack

    corpus = make_corpus(tmp / "corpus", args.num, fmt="flac", seed=0, min_sec=args.min_sec, max_sec=args.max_sec)
    batch_len = int(args.batch_seconds * SAMPLE_RATE)
    source = tmp / "source.yaml"
    source.write_text(RECIPE.format(root=corpus, batch_len=batch_len))
    server, endpoint = start_local_s3()
    os.environ.update(fake_aws(endpoint))
    proxies = []
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        iterator = build_iterators(load_config(source), num_workers=0, groups=("train",))["train"]
        try:
            write_pack(iterator, "s3://bench/pack", args.shard_size << 20, idx2_out=str(tmp / "remote"))
            per_epoch = len(iterator)
        finally:
            iterator.close()
        recipe = tmp / "remote.yaml"
        recipe.write_text(RECIPE.format(root=tmp / "remote", batch_len=batch_len))
        # each side its own proxy: the same request numbers of each stall
        stalling = [StallingProxy(endpoint, args.stall_fraction, args.stall_s, args.seed) for _ in range(2)]
        plain = [StallingProxy(endpoint, 0.0, 0.0) for _ in range(2)]
        proxies = stalling + plain
        print(f"\n== Slow tail: {args.num} FLAC utterances ({args.min_sec}-{args.max_sec} s) packed in S3 (moto on "
              f"127.0.0.1), BlockIterator {args.batch_seconds:g} s per batch ({per_epoch} per epoch), "
              f"{args.workers} process workers, {args.warmup} warm-up + {args.batches} timed batches per side in "
              f"alternating segments of {args.segment}, consumer step {args.step_ms:g} ms; stalls: "
              f"{args.stall_fraction:.1%} of requests held {args.stall_s:g} s; {args.runs} runs (a shared machine: "
              f"hedge off and on run side by side in one process)")
        results = {(stalls, hedge): [] for stalls in ("stalls", "none") for hedge in (False, True)}
        for _ in range(args.runs):
            for stalls, pair in (("stalls", stalling), ("none", plain)):
                for proxy in pair:
                    proxy.reset()
                both = run_child(recipe, args, ",".join(proxy.url for proxy in pair))
                for hedge, proxy in zip((False, True), pair):
                    side = both["on" if hedge else "off"]
                    side["stalled"], side["requests"] = proxy.stalls, proxy.requests
                    side["sent_again"] = proxy.sent_again
                    results[(stalls, hedge)].append(side)
        report(results, args)
    finally:
        for proxy in proxies:
            proxy.close()
        server.stop()


def report(results: dict, args) -> None:
    print(f"{'side':<22} | {'median ms':>9} | {'p99 ms':>8} | {'max ms':>8} | {'p99/med':>7} | {'step p99/med':>12} | "
          f"{'batch/s':>7} | copies (won) | stalled / requests (sent again)")
    summary = {}
    for (stalls, hedge), runs in results.items():
        label = f"{'stalls' if stalls == 'stalls' else 'no stalls'}, hedge {'on' if hedge else 'off'}"
        for run in runs:
            waits = np.array(run["waits"]) * 1000
            median, p99 = float(np.median(waits)), float(np.percentile(waits, 99))
            steps = np.array(run["steps"])
            run.update(median=median, p99=p99, step_ratio=float(np.percentile(steps, 99) / np.median(steps)))
            print(f"{label:<22} | {median:>9.1f} | {p99:>8.1f} | {waits.max():>8.1f} | {p99 / median:>7.2f} | "
                  f"{run['step_ratio']:>12.2f} | {run['batches_per_s']:>7.1f} | {run['copies']:>6} ({run['wins']}) | "
                  f"{run['stalled']} / {run['requests']} ({run['sent_again']})")
        summary[(stalls, hedge)] = runs
    same = len({tuple(run["checksums"]) for runs in results.values() for run in runs}) == 1

    def ratio(side):
        return statistics.median(run["p99"] / run["median"] for run in summary[side])

    def step_ratio(side):
        return statistics.median(run["step_ratio"] for run in summary[side])

    def largest(side):
        return statistics.median(max(run["waits"]) for run in summary[side])

    rates = [on_run["batches_per_s"] / off_run["batches_per_s"]
             for on_run, off_run in zip(summary[("none", True)], summary[("none", False)])]

    def p99(side):
        return statistics.median(run["p99"] for run in summary[side])

    print(f"with stalls: p99 / median wait {ratio(('stalls', True)):.2f} with hedging (target <= 2), "
          f"{ratio(('stalls', False)):.2f} without; p99 wait with stalls and hedging / p99 without stalls (hedge off) "
          f"{p99(('stalls', True)) / p99(('none', False)):.2f}; "
          f"largest wait {largest(('stalls', True)):.2f} s with hedging, "
          f"{largest(('stalls', False)):.2f} s without. No stalls (the machine's own tail): p99 / median "
          f"{ratio(('none', True)):.2f} with hedging, {ratio(('none', False)):.2f} without; throughput hedge on / off "
          f"{statistics.median(rates):.3f} (runs: {', '.join(f'{r:.3f}' for r in rates)}; target >= 0.98). "
          f"A whole step (the wait, the checksum, --step_ms), p99 / median: with stalls "
          f"{step_ratio(('stalls', True)):.2f} with hedging, {step_ratio(('stalls', False)):.2f} without; no stalls "
          f"{step_ratio(('none', True)):.2f} with hedging, {step_ratio(('none', False)):.2f} without. Every side "
          f"loaded the same batches: {same}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=600)
    parser.add_argument("--min_sec", type=float, default=0.5)
    parser.add_argument("--max_sec", type=float, default=2.0)
    parser.add_argument("--batch_seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--segment", type=int, default=50, help="batches of one side before the other's")
    parser.add_argument("--step_ms", type=float, default=0.0, help="the consumer's work per batch")
    parser.add_argument("--stall_fraction", type=float, default=0.01)
    parser.add_argument("--stall_s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--shard_size", type=int, default=4, help="MiB")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.urls, args.workers, args.warmup, args.batches, args.segment,
                               args.step_ms)))
        return 0
    with tempfile.TemporaryDirectory(prefix="speechiter-bench-tail-") as tmp:
        bench(Path(tmp), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
