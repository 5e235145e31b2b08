"""Promised tasks: which worker gets each task after the buffer, told ahead so it can start the reads.

# NOTE [ Promised tasks ]
A worker reads a batch's data ahead while it builds the one before (NOTE
[ Reading ahead ] in speechiter/dataset/prefetch.py), but it only knows the
tasks sent to it, and the buffer (2 per worker by default) holds about one
more per worker. So the next ``READ_AHEAD`` tasks per worker after the buffer
are promised: each goes to the least-loaded worker (counting its promises) as
an ``Upcoming`` message, which only starts its reads, and is later sent to
that same worker, unless it is then two tasks behind another worker (a slow
batch must not hold up the tasks promised behind it). A new plan whose tasks
differ drops the promises that no longer hold (their reads are wasted: a few
requests per plan change, never a different batch). Promises change which
worker builds a batch, never what it gives (NOTE [ Ordering ] in
pool_scheduler.py).

Tasks are promised only once a worker's result says that its indexer reads
ahead (``Done.read_ahead``: it started the reads of a batch early, which a
batch of local files never needs). Otherwise a promise would only cost a
message per batch and tie a task to a worker that may no longer be the least
loaded, so that the other one waits idle for its next task.
"""
from typing import Iterator, List, Optional, Sequence, Tuple

from speechiter.sequence.fetch import READ_AHEAD, Task, same_task
from speechiter.sequence.scheduler import Run

__all__ = ["Promises", "least_loaded"]


def least_loaded(load: Sequence[int], turn: int) -> int:
    """The worker with the fewest tasks in ``load``, the one at ``turn`` and after it first."""
    n = len(load)
    return min(((turn + k) % n for k in range(n)), key=load.__getitem__)


class Promises:
    """The tasks after a scheduler's buffer, each with the worker it was promised to."""

    def __init__(self):
        self._promised: List[Tuple[Task, int]] = []
        self._run: Optional[Run] = None  # the run the promises were last checked against
        self.wanted = False  # a worker reads ahead: promise tasks

    def renew(self, run: Run, load: Sequence[int], turn: int) -> Iterator[Tuple[int, Task]]:
        """Drop the promises ``run`` no longer keeps, then yield ``(worker, task)`` for each new one.

        Within one run the promises stay its next tasks (:meth:`worker_for` takes the first as it is
        sent), so they are compared with the run's tasks only when the run is a new one.
        """
        if not self.wanted:
            return
        if run is not self._run:
            kept = 0
            while kept < len(self._promised) and _same(self._promised[kept][0], _undispatched(run, kept)):
                kept += 1
            del self._promised[kept:]  # a new plan: what was promised is not coming
            self._run = run
        while len(self._promised) < READ_AHEAD * len(load):
            task = _undispatched(run, len(self._promised))
            if task is None:
                return
            counted = list(load)
            for _, wid in self._promised:
                counted[wid] += 1
            wid = least_loaded(counted, (self._promised[-1][1] + 1) % len(load) if self._promised else turn)
            self._promised.append((task, wid))
            yield wid, task

    def worker_for(self, task: Task, load: Sequence[int], turn: int) -> int:
        """The worker to send ``task`` to: the one it was promised to, unless that one is behind."""
        if self._promised and same_task(self._promised[0][0], task):
            wid = self._promised.pop(0)[1]
            if load[wid] > min(load) + 1:
                wid = least_loaded(load, turn)  # that worker is behind (a slow batch): balance first
            return wid
        self._promised.clear()
        return least_loaded(load, turn)


def _same(a: Task, b: Optional[Task]) -> bool:
    return b is not None and same_task(a, b)


def _undispatched(run: Run, j: int) -> Optional[Task]:
    """The ``j``-th task of ``run`` not yet dispatched (its tasks, then its lookahead), or None."""
    j += len(run.entries)
    if j < len(run.tasks):
        return run.tasks[j]
    j += len(run.ahead) - len(run.tasks)
    return run.lookahead[j] if j < len(run.lookahead) else None
