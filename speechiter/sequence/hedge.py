"""Hedging: a batch that is late on its worker is built once more on an idle one; the first result wins.

# NOTE [ Hedging ]
On object storage one request in a few hundred stalls for seconds, and the
batch that waits for it holds up every batch after it (NOTE [ Ordering ] in
pool_scheduler.py). So the pool scheduler hedges: a worker is *late* when the
task it is building has taken more than ``HEDGE_FACTOR`` times the median
build time of the last ``WINDOW`` batches, and at least ``HEDGE_FLOOR_S``
(and only once ``MIN_SAMPLES`` batches were built: the first ones start
workers and connections). Each task queued on a late worker, the one it builds
first and then those behind it, is sent once more, as a copy, to a worker with
nothing to do, while fewer than ``MAX_DUPLICATES`` copies are in flight; new
tasks go to other workers than one whose task was copied, until it answers.

A build time is measured in the main process, with no clock in the worker: a
worker builds its tasks in the order they were sent (NOTE [ Queued tasks ] in
workers.py), so it starts a task when it is sent one with nothing queued, or
when its previous result arrives.

The first result wins. A copy that arrives while its task still waits becomes
the task's result, and the task's own attempt is dropped when it arrives (its
shared-memory slot released, as for a discarded task); a copy that arrives
after the task's own result, or after the task was discarded, is dropped the
same way. A copy that fails is dropped: the task's own attempt decides, as
without hedging. Whichever wins, the batch is the same (its randomness comes
only from ``Task.seed``, see fetch.py), so hedging changes when a batch comes,
never what it is. Each copy holds one more slot while it is in flight, and
an attempt it beat holds its slot until it arrives (a stalled worker holds at
most the tasks it was sent before it was found late, as without hedging).

A stalled worker stays busy until its read returns: with two workers, a
second stall while the first lasts leaves no idle worker to copy to, and that
batch waits as it would have.

The scheduler runs in the consumer's thread: it looks for late workers each
time a batch is taken, and while it waits for one it polls no longer than
until a task could become late. The inline engine (one thread) and the torch
engine do not hedge; ``hedge: false`` turns it off.
"""
import collections
import statistics
import time
from typing import Callable, Deque, Dict, List, Optional, Sequence

from speechiter.sequence.fetch import Task
from speechiter.sequence.pending import Pending

#: a worker is late when its task has run longer than this many times the median build time ...
HEDGE_FACTOR = 3.0
#: ... and longer than this
HEDGE_FLOOR_S = 0.25
#: build times the median is taken over (the latest ones)
WINDOW = 64
#: batches built before anything is hedged
MIN_SAMPLES = 8
#: copies in flight at once
MAX_DUPLICATES = 2


class Hedger:
    """When each worker started its current task, how long tasks take, and which workers are late."""

    def __init__(self, workers: int, enabled: bool = True):
        self.enabled = enabled and workers > 1
        self._queued: List[Deque[int]] = [collections.deque() for _ in range(workers)]  # seqs, in build order
        self._started: List[Optional[float]] = [None] * workers  # when the worker started its first queued seq
        self._times: Deque[float] = collections.deque(maxlen=WINDOW)
        self._limit: Optional[float] = None  # the late threshold, from the current times
        self.extra: Dict[int, Pending] = {}  # seq -> copies in flight and the attempts they beat
        self.copies = 0  # copies sent
        self.wins = 0  # copies whose result was used

    def sent(self, wid: int, seq: int) -> None:
        """Attempt ``seq`` was sent to worker ``wid``."""
        if not self._queued[wid]:
            self._started[wid] = time.monotonic()
        self._queued[wid].append(seq)

    def arrived(self, wid: int, seq: int) -> None:
        """Worker ``wid`` answered attempt ``seq``: its build time counts, the next queued one starts."""
        queued, now = self._queued[wid], time.monotonic()
        if queued and queued[0] == seq:
            queued.popleft()
            self._times.append(now - self._started[wid])
            self._limit = None
        elif seq in queued:  # not the one we thought it was building: its time is unknown
            queued.remove(seq)
        self._started[wid] = now if queued else None

    def limit(self) -> Optional[float]:
        """Seconds after which a task is late; None before MIN_SAMPLES batches (or when off)."""
        if not self.enabled or len(self._times) < MIN_SAMPLES:
            return None
        if self._limit is None:
            self._limit = max(HEDGE_FACTOR * statistics.median(self._times), HEDGE_FLOOR_S)
        return self._limit

    def late(self) -> List[int]:
        """The workers whose current task is late."""
        limit = self.limit()
        if limit is None:
            return []
        deadline = time.monotonic() - limit
        return [wid for wid, started in enumerate(self._started) if started is not None and started < deadline]

    def weighted(self, load: Sequence[int]) -> Sequence[int]:
        """``load`` with the workers a task was copied away from made the busiest, so that new tasks go
        elsewhere until they answer."""
        if not self.extra:
            return load
        hedged = {q.wid if q.original is None else q.original.wid for q in self.extra.values()
                  if q.original is None or q.original.result is None}  # beaten, or copied and still building
        heavy = max(load) + 1
        return [count + heavy if wid in hedged else count for wid, count in enumerate(load)]

    def in_flight(self) -> int:
        """Copies sent and not answered (the attempts they beat are not duplicates: they were sent anyway)."""
        return sum(q.original is not None for q in self.extra.values())

    def hedge(self, pending: Dict[int, Pending], load: List[int], attempt: Callable[[Task, int], Pending]) -> None:
        """Send a copy of each task queued on a late worker to an idle worker (``attempt(task, wid)`` sends
        one), first needed first, while fewer than MAX_DUPLICATES copies are in flight."""
        if 0 not in load or self.in_flight() >= MAX_DUPLICATES:
            return
        for seq in sorted(seq for wid in self.late() for seq in self._queued[wid]):
            p = pending.get(seq)
            if p is None or p.result is not None or p.discard or p.copy is not None:
                continue  # received, discarded, copied already, or itself a copy or a beaten attempt
            wid = next((wid for wid, count in enumerate(load) if count == 0), None)
            if wid is None or self.in_flight() >= MAX_DUPLICATES:
                return
            p.copy = attempt(p.task, wid)
            p.copy.original = p
            self.extra[p.copy.seq] = p.copy
            self.copies += 1

    def settle(self, q: Pending, ok: bool, pending: Dict[int, Pending], result) -> Optional[Pending]:
        """Attempt ``q`` of :attr:`extra` arrived with ``result`` (``ok``: a success). A copy whose task still
        waits becomes its result, the task's own attempt waiting in :attr:`extra` to be dropped; else ``q`` is
        dropped: returned, for its slot to be released."""
        p = q.original
        if p is None:  # an attempt a copy beat
            return q
        p.copy = None
        if not ok or pending.get(p.seq) is not p or p.result is not None or p.discard:
            return q
        self.extra[p.seq] = Pending(p.seq, p.task, p.wid, p.slot)  # p's own attempt: dropped when it comes
        p.result, p.slot, p.wid = result, q.slot, q.wid
        self.wins += 1
        return None

    def wait_s(self, load: Sequence[int]) -> float:
        """How long the consumer may wait for results before a task could become late (inf: no such task)."""
        limit = self.limit()
        if limit is None or 0 not in load or self.in_flight() >= MAX_DUPLICATES:
            return float("inf")
        now = time.monotonic()
        due = [started + limit - now for started in self._started if started is not None and started + limit > now]
        return min(due, default=float("inf"))  # a worker late already was hedged as far as it could be
