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

# NOTE [ Reading ahead ]
Started with its batch, a read still waits its round trip in series with
building: a worker reads batch i+1 only once batch i is built. But the plan is
known in advance. So before a batch is built, the engine's fetch
(speechiter/sequence/fetch.py) calls ``indexer.prepare(ids)`` for that batch
and for the next ones this thread builds: the tasks queued to a worker and
those promised to it (NOTE [ Promised tasks ] in
speechiter/sequence/promises.py), or the next ones of the plan in the
main process (num_workers=0); the torch engine reads nothing ahead. The
dataset passes its column here, and :func:`prepare` starts those batches'
reads on the pool, kept per thread. When such a batch is built,
:func:`reading_together` takes the started reads instead of starting them:
the same reads, taken in the same order, so batches, draws and errors do not
change (a read that failed ahead raises when its own batch takes it). A thread
keeps at most :data:`AHEAD_PER_COLUMN` started batches per column (the oldest
is cancelled), so the bytes read ahead stay within a worker's next batches.
Local files are not read ahead (a lookup of the batch's first value decides,
and the thread keeps the answer for the next times the batch is told); local
packs are, as their merged reads already run on the pool.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from concurrent.futures import Future
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from speechiter.batch_context import current_batch
from speechiter.io.coalesce import StartedReads, is_ranged, start_batch_reads
from speechiter.io.storage import is_url
from speechiter.daemon_pool import ProcessPool  # NOTE [ Abandoned reads ]

__all__ = ["POOL_THREADS", "prepare", "reading_together", "take", "under_way"]

#: threads per process that read a batch's URLs; S3 keeps up to storage.MAX_CONNECTIONS connections.
POOL_THREADS = 32
_the_pool = ProcessPool(POOL_THREADS, "storage-read")
#: started batches a thread keeps for one column: the one being built and the next READ_AHEAD + 1 that fetch
#: (sequence/fetch.py) tells it of; fewer would cancel the last ones' reads and start them again at each batch
AHEAD_PER_COLUMN = 4
#: and for all columns (several iterators built in one thread)
AHEAD_PER_THREAD = 8
_local = threading.local()  # .started: [StartedReads], oldest first; .plain: _local_batches()



def _start(column: Mapping[str, str], ids: Sequence[str], read: Callable[[str], object]) -> Optional[StartedReads]:
    """Start the reads of batch ``ids`` (None: its values are local files, told by the first)."""
    first = column[ids[0]]
    if is_ranged(first):
        ranges = start_batch_reads([column[uid] for uid in ids], _the_pool().submit)
        return StartedReads(column, ids, read, ranges=ranges)
    if not is_url(first):
        return None
    pool = _the_pool()
    reads: Dict[str, List[Future]] = {}
    for value in (column[uid] for uid in ids):
        if is_url(value):
            reads.setdefault(value, []).append(pool.submit(read, value))
    return StartedReads(column, ids, read, urls=reads)


def _local_batches() -> collections.deque:
    """``(column, first id)`` of the batches this thread lately found to be local files (nothing to start).

    A batch is told several times (as an upcoming one, then when built) and each time telling that it is
    local would cost a lookup of its first id: the answer is kept instead. See NOTE [ Reading ahead ].
    """
    try:
        return _local.plain
    except AttributeError:
        _local.plain = collections.deque(maxlen=AHEAD_PER_THREAD)
        return _local.plain


def _known_local(column: Mapping[str, str], first: str) -> bool:
    for known, known_first in _local_batches():
        if known is column and known_first == first:
            return True
    return False


def prepare(column: Optional[Mapping[str, str]], ids: Sequence[str], read: Callable[[str], object]) -> bool:
    """Start the reads of a batch this thread builds soon, so that its
    :func:`reading_together` takes them. See NOTE [ Reading ahead ].

    Returns whether reads of ``column`` for ``ids`` are under way (False for local files)."""
    if column is None or len(ids) < 2 or _known_local(column, ids[0]):
        return False
    started = _ahead()
    ids = tuple(ids)
    if any(s.ids == ids and s.column is column for s in started):
        return True
    try:
        entry = _start(column, ids, read)
    except Exception:  # noqa: BLE001 - the batch raises it in order when it is built
        return False
    if entry is None:
        _local_batches().append((column, ids[0]))
        return False
    started.append(entry)
    same = [s for s in started if s.column is column]
    for old in same[:max(0, len(same) - AHEAD_PER_COLUMN)] + started[:max(0, len(started) - AHEAD_PER_THREAD)]:
        if old in started:
            started.remove(old)
            old.cancel()
    return entry in started


def under_way(ids: Sequence[str]) -> bool:
    """Whether this thread has reads started for the batch ``ids`` (by :func:`prepare`); False for a
    batch of local files, which is not read ahead."""
    ids = tuple(ids)
    return any(s.ids == ids for s in getattr(_local, "started", ()))


def _ahead() -> List[StartedReads]:
    try:
        return _local.started
    except AttributeError:
        _local.started = []
        return _local.started


def _take_started(column, ids, read) -> Optional[StartedReads]:
    started = getattr(_local, "started", None)
    if not started:
        return None
    ids = tuple(ids)
    for entry in started:
        if entry.ids == ids and entry.column is column:
            started.remove(entry)
            if entry.read == read:
                return entry
            entry.cancel()
            return None
    return None


@contextlib.contextmanager
def reading_together(column: Optional[Mapping[str, str]], ids: Sequence[str],
                     read: Callable[[str], object]) -> Iterator[None]:
    """Start ``read(column[uid])`` for the batch ``ids`` when its values are URLs
    (told by the first; a batch of local files costs one lookup), or its merged
    byte-range reads, unless :func:`prepare` started them; inside the block,
    :func:`take` returns their results."""
    context = current_batch()
    if column is None or len(ids) < 2 or context.reads is not None:
        yield
        return
    entry = _take_started(column, ids, read)
    if entry is None and not _known_local(column, ids[0]):
        entry = _start(column, ids, read)
    if entry is None:
        yield
        return
    context.reads = entry
    try:
        yield
    finally:
        context.reads = None
        entry.cancel()


def take(value: str, read: Callable[[str], object]) -> object:
    """The result of the read started for ``value`` (its error raised here), or
    ``read(value)`` when none was started."""
    started = current_batch().reads
    futures = started.urls.get(value) if started is not None and started.urls else None
    if not futures:
        return read(value)
    return futures.pop(0).result()  # bounded: each read has the storage timeouts and attempts
