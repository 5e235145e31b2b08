"""Large-corpus benchmarks (issue 15): object storage behind latency, and worker memory over 1M segments.

    python tools/bench_large.py                       # both
    python tools/bench_large.py --only storage --num 200 --latency 0.05 --threads 32
    python tools/bench_large.py --only memory --segments 1000000

1. Storage: a corpus in a moto S3 server on 127.0.0.1, read with 32 thread
   workers through a small proxy that delays every request by ``--latency``
   seconds, against the same proxy with no delay (so the two sides differ
   only in the latency). Each run is a fresh process (its own filesystem
   caches), ``--runs`` of each side, alternating; printed: audio seconds per
   second (median of the timed epochs of a run, then of the runs), the ratio,
   and the time to the first batch of the first epoch. Needs the ``s3`` and
   ``test`` extras (s3fs, moto).
2. Memory: an epoch of a 1M-segment index (``rec.wav#t=start,end`` over a few
   one-minute recordings), read with 2 process workers; the USS of each worker
   after the first batches and at every quarter of the epoch.
"""
import argparse
import http.client
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

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SAMPLE_RATE = 16000


# ----------------------------------------------------------------- storage


def forward(handler, target: str, body: bytes) -> None:
    """Send ``handler``'s request (an http.server handler) to ``target`` and its answer back.

    Shared with the storage tests' proxy (tests/storage/conftest.py).
    """
    host, port = target.split("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request(handler.command, handler.path, body=body or None, headers=dict(handler.headers))
    response = conn.getresponse()
    data = response.read()
    handler.send_response(response.status)
    for key, value in response.getheaders():
        if key.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
            handler.send_header(key, value)
    length = response.getheader("Content-Length") if handler.command == "HEAD" else None
    handler.send_header("Content-Length", length or str(len(data)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)
    conn.close()


class DelayingProxy:
    """Forwards every HTTP request to ``target`` after sleeping ``delay`` seconds."""

    def __init__(self, target: str, delay: float):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay)
                forward(self, target, body)

            do_GET = do_HEAD = do_PUT = do_POST = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def storage_child(root: str, threads: int, epochs: int, batch_seconds: float) -> dict:
    """In a fresh process: epochs over ``root``'s idx2wav of URLs (AWS_ENDPOINT_URL set by the parent)."""
    from speechiter.dataset.speech_text import SpeechTextDataset
    from speechiter.iterator.block import BlockIterator
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": f"{root}/idx2wav"}},
                             data_len=f"{root}/idx2wav_len", batch_len=batch_seconds * SAMPLE_RATE,
                             num_workers=threads, thread_type="thread", out_type="null")
    rates, first = [], None
    try:
        for epoch in range(1, epochs + 2):
            frames, start = 0, time.perf_counter()
            for batch in iterator.build_loader(epoch, prefetch_next=epoch <= epochs):
                if first is None:
                    first = time.perf_counter() - start
                frames += int(batch["feat_len"].sum())
            if epoch > 1:  # the first epoch warms the filesystem's connections
                rates.append(frames / SAMPLE_RATE / (time.perf_counter() - start))
    finally:
        iterator.close()
    return {"rate": statistics.median(rates), "first": first}


def bench_storage(tmp: Path, num: int, latency: float, threads: int, epochs: int, batch_seconds: float,
                  runs: int = 2):
    import boto3

    sys.path.insert(0, str(REPO / "tools"))
    from local_s3 import fake_aws, start_local_s3
    from make_corpus import make_corpus
    local = make_corpus(tmp / "corpus", num, seed=0)
    server, endpoint = start_local_s3()
    env = dict(os.environ, **fake_aws(endpoint), PYTHONPATH=str(REPO))
    plain = proxy = None
    try:
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            client.upload_file(str(path), "bench", f"corpus/{path.relative_to(local).as_posix()}")
        remote = tmp / "remote"  # local idx2 files whose values are the objects' URLs
        remote.mkdir()
        lines = [line.split(maxsplit=1) for line in (local / "idx2wav").read_text().splitlines()]
        (remote / "idx2wav").write_text("".join(f"{uid} s3://bench/corpus/{path.strip()}\n" for uid, path in lines))
        (remote / "idx2wav_len").write_text((local / "idx2wav_len").read_text())
        # Both sides go through a proxy, so that they differ only in the added latency (the proxy's own
        # copying costs CPU, shared with the server on these 2 cores); runs alternate, medians are printed.
        plain, proxy = DelayingProxy(endpoint, 0.0), DelayingProxy(endpoint, latency)
        print(f"\n== Object storage: {num} utterances in a moto S3 server on 127.0.0.1, {threads} thread workers, "
              f"BlockIterator {batch_seconds:g} s per batch; per run the median of {epochs} epochs after a "
              f"warm-up epoch, {runs} runs of each side, alternating")
        print(f"{'endpoint':<28} | {'audio s/s':>9} | first batch s")
        sides = {"no added latency": plain.url, f"+{latency * 1000:.0f} ms per request": proxy.url}
        results = {label: [] for label in sides}
        args = [sys.executable, __file__, "--storage_child", str(remote), "--threads", str(threads),
                "--epochs", str(epochs), "--batch_seconds", str(batch_seconds)]
        for _ in range(runs):
            for label, url in sides.items():
                done = subprocess.run(args, env=dict(env, AWS_ENDPOINT_URL=url), capture_output=True, text=True,
                                      timeout=1800)
                if done.returncode != 0:
                    raise RuntimeError(done.stderr)
                results[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
        medians = []  # (rate, first batch) of each side
        for label, runs_of_side in results.items():
            rates, firsts = [r["rate"] for r in runs_of_side], [r["first"] for r in runs_of_side]
            medians.append((statistics.median(rates), statistics.median(firsts)))
            print(f"{label:<28} | {medians[-1][0]:>9.1f} | {medians[-1][1]:.3f}   "
                  f"(runs: {', '.join(f'{r:.0f}' for r in rates)} audio s/s; "
                  f"{', '.join(f'{f:.2f}' for f in firsts)} s)")
        (plain_rate, _), (delayed_rate, delayed_first) = medians
        print(f"with latency / without: {delayed_rate / plain_rate:.2f} (target >= 0.80); first batch with "
              f"latency {delayed_first:.3f} s (target <= 1 s)")
    finally:
        for each in (plain, proxy):
            if each is not None:
                each.close()
        server.stop()


# ----------------------------------------------------------------- memory


def segment_index(root: Path, segments: int, recordings: int = 8, seconds: float = 60.0,
                  segment_samples: int = 800) -> Path:
    """``segments`` overlapping time ranges of ``segment_samples`` over a few one-minute recordings."""
    import soundfile
    root.mkdir(parents=True)
    gen = np.random.default_rng(0)
    total = int(seconds * SAMPLE_RATE)
    for k in range(recordings):
        soundfile.write(root / f"rec{k}.wav", (gen.standard_normal(total) * 3000).astype(np.int16), SAMPLE_RATE)
    rec = gen.integers(0, recordings, segments)
    start = gen.integers(0, total - segment_samples, segments)
    with open(root / "idx2wav", "w") as wav, open(root / "idx2wav_len", "w") as lengths:
        for i in range(segments):
            s = start[i] / SAMPLE_RATE
            wav.write(f"seg{i:07d} rec{rec[i]}.wav#t={s},{s + segment_samples / SAMPLE_RATE}\n")
            lengths.write(f"seg{i:07d} {segment_samples}\n")
    return root


def _workers_uss(me) -> dict:
    """USS of the loading workers: the leaves below this process, not Python's resource tracker."""
    found = {}
    for proc in me.children(recursive=True):
        try:
            if not proc.children() and "resource_tracker" not in " ".join(proc.cmdline()):
                found[proc.pid] = proc.memory_full_info().uss
        except Exception:  # ended meanwhile
            pass
    return found


def bench_memory(tmp: Path, segments: int, batch_size: int = 500):
    import psutil

    from speechiter.dataset.speech_text import SpeechTextDataset
    from speechiter.iterator.piece import PieceIterator
    root = segment_index(tmp / "segments", segments)
    started = time.perf_counter()
    iterator = PieceIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_size=batch_size, num_workers=2,
                             thread_type="proc", out_type="null", shuffle=True)
    built = time.perf_counter() - started
    total = len(iterator)
    marks = {10: "after 10 batches", total // 4: "1/4", total // 2: "1/2", 3 * total // 4: "3/4", total: "end"}
    print(f"\n== Memory: an epoch of {segments} segments ({batch_size} per batch, {total} batches) over 8 one-minute "
          f"recordings, 2 proc workers; built in {built:.1f} s")
    me, rows, count = psutil.Process(), [], 0
    started = time.perf_counter()
    try:
        for _ in iterator.build_loader(1, prefetch_next=False):
            count += 1
            if count in marks:
                rows.append((marks[count], _workers_uss(me), me.memory_info().rss))
    finally:
        iterator.close()
    print(f"{count} batches in {time.perf_counter() - started:.1f} s")
    pids = sorted(rows[0][1])
    print(f"{'point':<18} | " + " | ".join(f"worker {i} USS MB" for i in range(len(pids))) + " | main RSS MB")
    for label, uss, rss in rows:
        print(f"{label:<18} | " + " | ".join(f"{uss.get(pid, 0) / 2 ** 20:>15.1f}" for pid in pids)
              + f" | {rss / 2 ** 20:>11.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("storage", "memory"))
    parser.add_argument("--num", type=int, default=600, help="utterances in the storage corpus")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every storage request")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=2, help="storage runs of each side")
    parser.add_argument("--segments", type=int, default=1_000_000)
    parser.add_argument("--storage_child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.storage_child:
        print(json.dumps(storage_child(args.storage_child, args.threads, args.epochs, args.batch_seconds)))
        return 0
    with tempfile.TemporaryDirectory(prefix="speechiter-bench-large-") as tmp:
        if args.only in (None, "storage"):
            bench_storage(Path(tmp), args.num, args.latency, args.threads, args.epochs, args.batch_seconds,
                          args.runs)
        if args.only in (None, "memory"):
            bench_memory(Path(tmp), args.segments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
