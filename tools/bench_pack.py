"""Packs: requests per batch, and throughput from S3 behind latency against the same pack on local disk.

    python tools/bench_pack.py                         # 400 utterances, +50 ms, default worker settings
    python tools/bench_pack.py --num 200 --latency 0.05 --workers 1 --epochs 3

A generated corpus (FLAC, LibriSpeech-like lengths; ``--min_sec/--max_sec``
for shorter) is packed with ``write_pack`` in the plan order of a
BlockIterator (``--batch_seconds`` of audio per batch), once to local disk and
once into a moto S3 server on 127.0.0.1. Each side is read in a fresh
process with the default worker settings (``--workers``, process workers):

- local: the pack on disk;
- S3: the pack through a proxy that delays every request by ``--latency`` s
  and counts them.

Printed per side: audio seconds per second (median of the epochs after the
first), time to the first batch (from ``build_iterators``, workers started
included, and from ``build_loader``), and for S3 the ranged GETs per batch;
then the ratios against the targets (requests per batch <= 1.05, S3 / local
>= 0.95, first batch <= 1 s). Needs the ``s3`` and ``test`` extras.
"""
import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))
SAMPLE_RATE = 16000

RECIPE = """
train:
  type: block.BlockIterator
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {{main_data: {{feat: {root}/idx2wav}}}}
    data_len: {root}/idx2wav_len
    batch_len: {batch_len}
valid:
  type: abs.Iterator
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {{main_data: {{feat: {root}/idx2wav}}}}
"""


class CountingProxy:
    """Forwards every request to ``target`` after ``delay`` seconds; counts ranged GETs."""

    def __init__(self, target: str, delay: float):
        from bench_large import forward

        proxy = self
        self.ranged = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "GET" and self.headers.get("Range") and "shards.json" not in self.path:
                    proxy.ranged += 1
                time.sleep(proxy.delay)
                forward(self, target, body)

            do_GET = do_HEAD = do_PUT = do_POST = _forward

        self.delay = delay
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def child(recipe: str, workers: int, epochs: int) -> dict:
    """In a fresh process: ``epochs`` epochs (after one warm-up) of the recipe's train iterator."""
    from speechiter import build_iterators, load_config

    start = time.perf_counter()
    iterator = build_iterators(load_config(recipe), num_workers=workers, groups=("train",), out_type="null")["train"]
    rates, first_cold, first_warm, batches = [], None, None, 0
    try:
        for epoch in range(1, epochs + 2):
            frames, begin = 0, time.perf_counter()
            for batch in iterator.build_loader(epoch, prefetch_next=epoch <= epochs):
                if first_cold is None:
                    first_cold, first_warm = time.perf_counter() - start, time.perf_counter() - begin
                frames += int(batch["feat_len"].sum())
                batches += 1
            if epoch > 1:
                rates.append(frames / SAMPLE_RATE / (time.perf_counter() - begin))
    finally:
        iterator.close()
    return {"rate": statistics.median(rates), "first_cold": first_cold, "first_warm": first_warm,
            "batches": batches}


def run_child(recipe: Path, workers: int, epochs: int, env: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", str(recipe), "--workers", str(workers),
                           "--epochs", str(epochs)], env=env, capture_output=True, text=True, timeout=1800)
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
    proxy = None
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        iterator = build_iterators(load_config(source), num_workers=0, groups=("train",))["train"]
        try:
            write_pack(iterator, str(tmp / "local"), args.shard_size << 20)
            write_pack(iterator, "s3://bench/pack", args.shard_size << 20, idx2_out=str(tmp / "remote"))
            num_batches = len(iterator)
        finally:
            iterator.close()
        sides = {}
        for side in ("local", "remote"):
            sides[side] = tmp / f"{side}.yaml"
            sides[side].write_text(RECIPE.format(root=tmp / side, batch_len=batch_len))
        proxy = CountingProxy(endpoint, args.latency)
        env = dict(os.environ, PYTHONPATH=str(REPO), AWS_ENDPOINT_URL=proxy.url)
        print(f"\n== Packs: {args.num} FLAC utterances ({args.min_sec}-{args.max_sec} s), BlockIterator "
              f"{args.batch_seconds:g} s per batch ({num_batches} batches), {args.workers} process worker(s); "
              f"median of {args.epochs} epochs after a warm-up, {args.runs} runs per side")
        results = {"local": [], "remote": []}
        requests = []
        for _ in range(args.runs):
            for side in ("local", "remote"):
                before = proxy.ranged
                results[side].append(run_child(sides[side], args.workers, args.epochs, env))
                if side == "remote":
                    requests.append((proxy.ranged - before) / results[side][-1]["batches"])
        print(f"{'side':<26} | {'audio s/s':>9} | first batch s (cold / loader) | ranged GETs per batch")
        summary = {}
        for side, label in (("local", "local disk"), ("remote", f"S3 +{args.latency * 1000:.0f} ms per request")):
            runs = results[side]
            rate = statistics.median(r["rate"] for r in runs)
            cold = statistics.median(r["first_cold"] for r in runs)
            warm = statistics.median(r["first_warm"] for r in runs)
            per_batch = f"{statistics.mean(requests):.3f}" if side == "remote" else "-"
            summary[side] = (rate, cold, warm)
            print(f"{label:<26} | {rate:>9.1f} | {cold:.3f} / {warm:.3f}{'':<14} | {per_batch}")
        ratio = summary["remote"][0] / summary["local"][0]
        print(f"requests per batch {statistics.mean(requests):.3f} (target <= 1.05); S3 / local throughput "
              f"{ratio:.2f} (target >= 0.95); first batch from S3 {summary['remote'][1]:.3f} s cold, "
              f"{summary['remote'][2]:.3f} s from build_loader (target <= 1 s)")
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=400)
    parser.add_argument("--min_sec", type=float, default=2.0)
    parser.add_argument("--max_sec", type=float, default=16.0)
    parser.add_argument("--batch_seconds", type=float, default=120.0)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=1, help="process workers (the default setting: 1)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--shard_size", type=int, default=256, help="MiB")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.workers, args.epochs)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        bench(Path(tmp), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
