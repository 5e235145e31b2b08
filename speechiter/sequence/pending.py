"""The pool scheduler's record of one dispatched attempt to build a task (pool_scheduler.py)."""
from typing import List, Sequence

from speechiter.sequence.fetch import Task, same_task


class Pending:
    """One attempt sent to a worker: in flight, received, or waiting to be discarded. ``original`` is set on
    a copy (NOTE [ Hedging ] in hedge.py), the task's attempt it duplicates; ``copy`` on that attempt."""

    __slots__ = ("seq", "task", "wid", "slot", "result", "discard", "future", "original", "copy")

    def __init__(self, seq, task, wid, slot):
        self.seq, self.task, self.wid, self.slot = seq, task, wid, slot
        self.result = None
        self.discard = False
        self.future = None
        self.original = self.copy = None


def leading_matches(prefetched: List[Pending], tasks: Sequence[Task]) -> int:
    """How many of ``prefetched``, from the first, are ``tasks``' first ones."""
    n = 0
    while n < min(len(prefetched), len(tasks)) and same_task(prefetched[n].task, tasks[n]):
        n += 1
    return n
