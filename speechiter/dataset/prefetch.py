"""A batch's reads from object storage, started together.

# NOTE [ Reading a batch's URLs together ]
A worker builds a batch one utterance after another, and its random draws
(speed factor, dither, ...) must come in that order for the batches to be the
same for any worker count. With values in object storage, each read waits one
round trip, so a batch of n utterances would wait n round trips in a row.

So before a batch is built, the reads that draw nothing (decoding, and
resampling, each URL value) are started together on this process's pool of
threads. The batch is then built as before, in order: each read takes its
result (or raises its error) when the utterance comes, so the utterances are
the same as read one by one, and an error still names its utterance. Reads the
batch did not reach (an earlier utterance failed) are cancelled or left to
finish on their own; each is bounded by the storage timeouts (see NOTE
[ Storage failures ] in speechiter/io/storage.py).

The pool belongs to one pid (a forked child makes its own) and is shared by
the thread workers of a process, so reads queue in the order the batches
started them: the first batch's reads go first. Like the fsspec filesystems
it reads through (and fsspec's own IO thread), it lives as long as the
process: its threads (``storage-read_N``) idle between batches and are not an
iterator's engine threads, which end with the iterator. The started reads are
kept in the batch's context (see NOTE [ Batch context ] in
speechiter/batch_context.py).

Byte-range values (``shard.pack#bytes=a-b``, local or URL) are read another
way: their ranges are merged per object and each merged range is one read on
this pool (NOTE [ Coalesced reads ] in speechiter/io/coalesce.py); decoding
stays with the batch's builder, as for local files.
"""
from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from speechiter.batch_context import current_batch
from speechiter.io.coalesce import BYTES_MARK, start_batch_reads
from speechiter.io.storage import is_url
from speechiter.daemon_pool import DaemonThreadPool  # NOTE [ Abandoned reads ]

__all__ = ["POOL_THREADS", "reading_together", "take"]

#: threads per process that read a batch's URLs; S3 keeps up to storage.MAX_CONNECTIONS connections.
POOL_THREADS = 32
_pool: Optional[DaemonThreadPool] = None
_pool_pid: Optional[int] = None
_pool_lock = threading.Lock()


def _the_pool() -> DaemonThreadPool:
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = DaemonThreadPool(POOL_THREADS, "storage-read")
            _pool_pid = os.getpid()
        return _pool


@contextlib.contextmanager
def reading_together(column: Optional[Mapping[str, str]], ids: Sequence[str],
                     read: Callable[[str], object]) -> Iterator[None]:
    """Start ``read(column[uid])`` for the batch ``ids`` when its values are URLs
    (told by the first; a batch of local files costs one lookup); inside the
    block, :func:`take` returns their results."""
    context = current_batch()
    if column is None or len(ids) < 2 or context.reads is not None or context.byte_reads is not None:
        yield
        return
    first = column[ids[0]]
    if BYTES_MARK in first:
        with _byte_reads(context, [column[uid] for uid in ids]):
            yield
        return
    if not is_url(first):
        yield
        return
    urls = [value for value in (column[uid] for uid in ids) if is_url(value)]
    pool = _the_pool()
    reads: Dict[str, List[Future]] = {}
    for value in urls:
        reads.setdefault(value, []).append(pool.submit(read, value))
    context.reads = reads
    try:
        yield
    finally:
        context.reads = None
        for futures in reads.values():
            for future in futures:
                future.cancel()


@contextlib.contextmanager
def _byte_reads(context, values: List[str]) -> Iterator[None]:
    context.byte_reads = start_batch_reads(values, _the_pool().submit)
    try:
        yield
    finally:
        if context.byte_reads is not None:
            context.byte_reads.cancel()
        context.byte_reads = None


def take(value: str, read: Callable[[str], object]) -> object:
    """The result of the read started for ``value`` (its error raised here), or
    ``read(value)`` when none was started."""
    reads = current_batch().reads
    futures = reads.get(value) if reads else None
    if not futures:
        return read(value)
    return futures.pop(0).result()  # bounded: each read has the storage timeouts and attempts
