"""Schedulers: one started session of building batches in plan order.

A scheduler runs the tasks its owner (the msequence engine in
speechiter/engine.py, or an MSequence) gives it: :class:`PoolScheduler`
(pool_scheduler.py) with worker processes or threads, :class:`InlineScheduler`
in the main thread. Both offer ``iterate(tasks, lookahead)`` and ``close()``.
A scheduler lives from its start until it closes, and is never restarted:
its owner starts a new one.

NOTE [ Shutdown order ]
Any exception in the consumer's generator, a KeyboardInterrupt, the consumer
leaving early (GeneratorExit) and finish() all close the scheduler; the pool
scheduler closes in this order:
1. converter threads finish what they run (they read shm views) and stop;
2. workers are asked to stop, then terminated, then killed, and joined, so no
   process can create a segment any more;
3. the slot table unmaps and unlinks every segment of the session, including
   ones it never heard of (NOTE [ Segment cleanup ] in shm/segments.py).
A scheduler also closes from a weakref.finalize on its owner (and at exit)
when the user never calls finish().
"""
import weakref
from typing import Iterator, List, Optional, Sequence

from speechiter.sequence.convert import Converter, hand_over
from speechiter.sequence.fetch import READ_AHEAD, Task, describe_ids, fetch
from speechiter.sequence.watchdog import BatchExpired, call_with_time_limit


class Run:
    """The state of one iterate() call."""

    def __init__(self, tasks: Sequence[Task], lookahead: Sequence[Task], entries: List, ahead=()):
        self.tasks = tasks
        self.lookahead = lookahead
        self.entries: List = entries  # dispatched tasks, in order (None once consumed)
        self.ahead: List = list(ahead)  # dispatched lookahead tasks, in order
        self.consumed = 0


class Scheduler:
    """What iterate() shares between the pool and the inline scheduler."""

    def __init__(self):
        self.closed = False
        self.prefetched = 0  # leading tasks of the last iterate() call that were prefetched
        self._run: Optional[Run] = None

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()) -> Iterator:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _take(self, run: Run, i: int):
        """Batch ``i`` of ``run``, converted."""
        raise NotImplementedError

    def _check_open(self):
        if self.closed:
            raise RuntimeError("the MSequence is finished: call start() or start_test() before iterating")

    def _generate(self, run: Run):
        """The consumer's generator. See NOTE [ Shutdown order ]."""
        try:
            for i in range(len(run.tasks)):
                if self._run is not run:
                    raise RuntimeError("this iterate() generator was superseded by a newer iterate() call")
                self._check_open()
                batch = self._take(run, i)
                run.consumed = i + 1
                if i < len(run.entries):
                    run.entries[i] = None  # its task's ids: an epoch of a 1M-utterance plan would keep them all
                yield batch
                del batch  # a zero-copy batch holds its slot; see NOTE [ Zero-copy batches ] in shm/slots.py
        except GeneratorExit:
            # Closed after the last batch was handed out (zip(), islice()) is not leaving early.
            if self._run is run and run.consumed < len(run.tasks):
                self.close()
            raise
        except BaseException:
            if self._run is run:
                self.close()
            raise


class InlineScheduler(Scheduler):
    """Builds every batch in the calling thread (start_test(), num_workers=0),
    each within ``timeout`` seconds: see NOTE [ Inline timeout ] in watchdog.py."""

    def __init__(self, factory, out_type: str, timeout: float):
        super().__init__()
        self._indexer = factory()
        self._convert = Converter(out_type)
        self._timeout = timeout

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()) -> Iterator:
        self._check_open()
        self._run = Run(as_sequence(tasks), (), [])
        return self._generate(self._run)

    def _take(self, run: Run, i: int):
        task = run.tasks[i]
        upcoming = [run.tasks[j] for j in range(i + 1, min(i + 1 + READ_AHEAD, len(run.tasks)))]  # prefetch.py
        try:
            raw = call_with_time_limit(self._timeout, fetch, self._indexer, task, upcoming)
        except BatchExpired as error:  # its traceback shows where the build was stuck
            raise TimeoutError(f"no batch after waiting {self._timeout:g} s (timeout={self._timeout:g}) for "
                               f"batch {task.position} built in the main process (num_workers=0), "
                               f"ids {describe_ids(task.ids)}") from error
        batch, event = self._convert(raw)
        return hand_over(batch, event, self._convert.device)

    def close(self) -> None:
        self.closed = True
        self._indexer = None


class SchedulerHandle:
    """An owner's running scheduler: :meth:`start` closes the one before.

    The scheduler also closes when the handle is garbage-collected, and at
    exit (weakref.finalize), when its owner never closes it.
    """

    def __init__(self):
        self.current: Optional[Scheduler] = None
        self._finalizer: Optional[weakref.finalize] = None

    def start(self, scheduler: Scheduler) -> Scheduler:
        self.close()
        self.current = scheduler
        self._finalizer = weakref.finalize(self, scheduler.close)
        return scheduler

    def close(self) -> None:
        """Close the current scheduler, if any. Idempotent."""
        scheduler, self.current = self.current, None
        if scheduler is not None:
            try:
                scheduler.close()
            finally:
                self._finalizer.detach()
                self._finalizer = None


def as_sequence(tasks) -> Sequence[Task]:
    """Tasks as given when they can be indexed (a lazy plan stays lazy), else a list."""
    return tasks if isinstance(tasks, Sequence) else list(tasks)
