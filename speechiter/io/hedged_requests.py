"""Hedged requests: a request to a store that has not answered in time is sent once more; the first answer wins.

# NOTE [ Hedged requests ]
On object storage one request in a few hundred stalls for seconds, and the
batch that waits for it holds up every batch after it (Dean and Barroso, "The
Tail at Scale", 2013: send the request again once it is late). Building the
batch again elsewhere (NOTE [ Hedging ] in speechiter/sequence/hedge.py) waits
for a worker to be late and idle, and reads everything again; so the request
itself is hedged. Each read that is one request (a ranged GET of a pack or tar
shard or of Parquet bytes, a WAV's header or frames, a whole object:
:func:`speechiter.io.storage.read_range`, and the conditional GET of a pack's
shard in shards.py) is sent from a daemon thread, and when it has not answered
after the store's *delay*, the same request is sent once more (the first holds
its connection, so the second takes another):

- the delay is :data:`FACTOR` times the median latency of this process's last
  :data:`WINDOW` answered requests to that store (scheme and bucket or host),
  and at least :data:`FLOOR_S`, at most :data:`CEILING_S` (also the delay
  until :data:`MIN_SAMPLES` requests were answered);
- each request is checked as it would be alone (NOTE [ Ranged answers are
  checked ] in ranged.py, the conditional GET of NOTE [ Shard integrity ] in
  shards.py), and the first answer that passes wins: a failed request (refused
  bytes, a timeout, a 5xx) waits for the other. When both fail, a failure that
  is not transient is raised (else the first one), to the retries of NOTE
  [ Storage failures ] in storage.py;
- the other request is abandoned, not waited for: it ends on its daemon thread
  when its read returns (bounded by the storage timeout), its connection goes
  back to the pool and its answer is dropped (NOTE [ Abandoned reads ] in
  speechiter/daemon_pool.py);
- bounded: one more request per read at most, and at most :data:`MAX_EXTRA`
  reads of a process with a second request out until both have answered; a
  read that finds none left waits for its first request alone.

Whichever answers, the bytes are the same, so batches are byte-identical with
hedging on or off. It is on by default; the engine's ``hedge: false``
(``--no_hedge``) turns it off with the batch hedging: the engine's reader is
wrapped in :class:`Unhedged`, which runs each build and read-ahead with
:data:`ENABLED` false, and the read pools carry it to their threads (they run
each task in its submitter's context, speechiter/daemon_pool.py). Reads through
the local cache (``SPEECHITER_STORAGE_CACHE``) or through file objects (FLAC,
HDF5 at a URL) are not hedged.
"""
from __future__ import annotations

import collections
import contextvars
import functools
import os
import statistics
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Callable, Deque, Dict, Optional, TypeVar

from speechiter.daemon_pool import ProcessPool

__all__ = ["FACTOR", "FLOOR_S", "CEILING_S", "WINDOW", "MIN_SAMPLES", "MAX_EXTRA", "ENABLED", "Latencies",
           "hedged", "counts", "Unhedged", "unhedged_reader"]

#: the delay is this many times the median latency of a store's requests ...
FACTOR = 3.0
#: ... at least this ...
FLOOR_S = 0.1
#: ... and at most this (also the delay before MIN_SAMPLES latencies are known)
CEILING_S = 1.0
#: latencies kept per store (the latest ones)
WINDOW = 256
#: answered requests before the delay follows the latencies
MIN_SAMPLES = 16
#: reads of a process with a second request out at once
MAX_EXTRA = 4
#: threads that send requests (storage.MAX_CONNECTIONS connections, and the second requests)
POOL_THREADS = 64 + MAX_EXTRA
#: whether reads in this context are hedged (the engine's ``hedge``; See NOTE [ Hedged requests ])
ENABLED: contextvars.ContextVar = contextvars.ContextVar("speechiter_hedged_requests", default=True)
T = TypeVar("T")


class Latencies:
    """A store's latest request latencies, and the delay after which a request is sent again."""

    def __init__(self):
        self._times: Deque[float] = collections.deque(maxlen=WINDOW)
        self._delay: Optional[float] = None
        self._lock = threading.Lock()  # the reads of a process's threads add theirs

    def add(self, seconds: float) -> None:
        with self._lock:
            self._times.append(seconds)
            self._delay = None

    def delay(self) -> float:
        with self._lock:
            if self._delay is None:
                if len(self._times) < MIN_SAMPLES:
                    self._delay = CEILING_S
                else:
                    self._delay = min(CEILING_S, max(FLOOR_S, FACTOR * statistics.median(self._times)))
            return self._delay


_latencies: Dict[str, Latencies] = {}  # store -> its latencies
_the_pool = ProcessPool(POOL_THREADS, "storage-request")
_lock = threading.Lock()
_extra = 0  # reads with a second request out
#: this process's reads sent twice, and those the second request answered first
counts = {"hedged": 0, "won": 0}


def _after_fork() -> None:
    """A forked child: a new lock, and none of its parent's requests in flight or latencies."""
    global _lock, _extra
    _lock = threading.Lock()
    _extra = 0
    _latencies.clear()
    counts.update(hedged=0, won=0)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _store(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.split('/', 1)[0].rpartition('@')[2]}"


def _timed(fn: Callable[[], T]):
    started = time.monotonic()
    return fn(), time.monotonic() - started


def _take_extra() -> bool:
    global _extra
    with _lock:
        if _extra >= MAX_EXTRA:
            return False
        _extra += 1
        counts["hedged"] += 1
        return True


def _give_back_when_done(futures) -> None:
    """Count the second request of a read as out until both of its requests have answered."""
    left = [len(futures)]

    def done(_):
        global _extra
        with _lock:
            left[0] -= 1
            if left[0] == 0:
                _extra -= 1

    for future in futures:
        future.add_done_callback(done)


def hedged(url: str, fn: Callable[[], T], transient: Callable[[BaseException], bool]) -> T:
    """``fn()``, one checked request to ``url``: sent once more when it has not answered after the store's
    delay; the first answer wins (``transient(error)``: a failure worth trying again). See NOTE [ Hedged
    requests ]."""
    if not ENABLED.get():
        return fn()
    store = _store(url)
    latencies = _latencies.get(store) or _latencies.setdefault(store, Latencies())
    pool = _the_pool()
    futures = [pool.submit(_timed, fn)]
    # bounded: each request has the storage timeouts (NOTE [ Storage failures ] in storage.py)
    if not wait(futures, timeout=latencies.delay()).done and _take_extra():
        futures.append(pool.submit(_timed, fn))
        _give_back_when_done(futures)
    return _first_answer(futures, latencies, transient)


def _first_answer(futures, latencies: Latencies, transient: Callable[[BaseException], bool]):
    """The value of the first of ``futures`` to answer with one; when all fail, the first failure that is not
    transient, else the first failure."""
    waiting, failures = list(futures), []
    while waiting:
        done = wait(waiting, return_when=FIRST_COMPLETED).done  # bounded: see hedged()
        for future in [f for f in futures if f in done]:  # both at once: the first request first
            waiting.remove(future)
            error = future.exception()
            if error is None:
                value, seconds = future.result()
                latencies.add(seconds)
                if future is not futures[0]:
                    with _lock:
                        counts["won"] += 1
                return value
            failures.append(error)
    raise next((e for e in failures if not transient(e)), failures[0])


class Unhedged:
    """An engine's reader's indexer whose builds and read-ahead send each request once (``hedge: false``; See
    NOTE [ Hedged requests ]); anything else is the indexer's."""

    def __init__(self, indexer):
        self.indexer = indexer

    def _once(self, fn, *args):
        token = ENABLED.set(False)
        try:
            return fn(*args)
        finally:
            ENABLED.reset(token)

    def __getitem__(self, ids):
        return self._once(self.indexer.__getitem__, ids)

    def prepare(self, ids):
        method = getattr(self.indexer, "prepare", None)
        return False if method is None else self._once(method, ids)

    def __len__(self):
        return len(self.indexer)

    def __getattr__(self, name):
        if name == "indexer":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.indexer, name)


def _build_unhedged(reader: Callable[[], object]) -> Unhedged:
    return Unhedged(reader())


def unhedged_reader(reader: Callable[[], object]) -> Callable[[], Unhedged]:
    """``reader`` (an engine's, called in each worker), its indexer wrapped in :class:`Unhedged`."""
    return functools.partial(_build_unhedged, reader)
