"""MSequence: MDNC's data iterator, strictly ordered and hang-free.

>>> manager = MSequence(MyWorker, dset_size=512, batch_size=32, out_type='cpu')
>>> with manager.start() as mng:
...     for batch in mng:
...         ...

``worker`` is a picklable zero-argument factory (a class, typically) whose
result has ``__getitem__(ids)``. Every worker process or thread calls it once
to build its own indexer. :meth:`MSequence.iterate` runs a plan of
:class:`Task`; the MDNC API (``for batch in manager``) runs the default plan:
``range(dset_size)``, shuffled per epoch when ``shuffle``, chunked by
``batch_size``. MSequence is a thin layer over the schedulers that
speechiter's msequence engine (speechiter/engine.py) drives as well.
"""
import multiprocessing
import numbers
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from speechiter.checks import check_choice, check_int, check_positive_number
from speechiter.errors import ConfigError
from speechiter.sequence.convert import resolve_out_type
from speechiter.sequence.fetch import Task
from speechiter.sequence.choice import start_scheduler
from speechiter.sequence.pools import ProcPool
from speechiter.sequence.scheduler import Scheduler, SchedulerHandle
from speechiter.sequence.timing import BatchTiming

_TEST_MODES = ("default", "cpu", "numpy")


def _option(check: Callable, value: Any, name: str, what: str, *args, **kwargs):
    """``check(value, name, ...)`` from checks.py, raising MDNC's wording:
    ``ValueError("x should be <what>, but got x=...")``."""
    try:
        return check(value, name, *args, **kwargs)
    except ConfigError:
        raise ValueError(f"{name} should be {what}, but got {name}={value!r}") from None


class MSequence:
    """A scheduler of worker processes or threads that yields batches in plan order.

    Arguments follow MDNC's ``MSequence``; the keyword-only ones are speechiter's:
    ``batches`` (a list of id lists) replaces the default plan, ``timeout`` is
    the most seconds to wait for one batch (also for one built in the main
    process, see NOTE [ Inline timeout ] in watchdog.py), ``start_method`` the
    multiprocessing start method ('forkserver' by default where the OS has it,
    else 'spawn'; see NOTE [ Start method ] in start.py; or 'fork'), ``hedge``
    whether a late batch is built again on an idle worker (NOTE [ Hedging ] in hedge.py), ``worker_threads``
    the threads of each worker's numeric libraries (NOTE [ One thread per worker ] in threads.py).
    """

    def __init__(self, worker, dset_size=None, num_workers=4, num_converters=None, batch_size=32,
                 buffer=10, shuffle=True, thread_type="proc", out_type="cuda", seed=None, *,
                 batches=None, timeout=120.0, start_method=None, hedge=True, worker_threads=1):
        if not callable(worker):
            raise ValueError(f"worker should be a picklable zero-argument callable returning an indexer, "
                             f"but got worker={worker!r}")
        self._worker = worker
        if batches is not None:
            self._batches = [list(batch) for batch in batches]
            self._indices = None
            self._dset_size = sum(len(batch) for batch in self._batches)
        elif isinstance(dset_size, np.ndarray):
            self._batches = None
            self._indices = np.asarray(dset_size).reshape(-1)
            self._dset_size = len(self._indices)
        elif isinstance(dset_size, numbers.Integral) and not isinstance(dset_size, bool) and dset_size >= 0:
            self._batches = None
            self._indices = np.arange(int(dset_size))
            self._dset_size = int(dset_size)
        else:
            raise ValueError(f"dset_size should be a non-negative integer or an np.ndarray of indices "
                             f"(or give batches=), but got dset_size={dset_size!r}")
        self._num_workers = _option(check_int, num_workers, "num_workers", "an integer >= 0", minimum=0)
        self._batch_size = _option(check_int, batch_size, "batch_size", "a positive integer")
        self._buffer = _option(check_int, buffer, "buffer", "a positive integer")
        self._thread_type = _option(check_choice, thread_type, "thread_type", "'proc' or 'thread'",
                                    ("proc", "thread"))
        if start_method is not None:
            methods = multiprocessing.get_all_start_methods()
            _option(check_choice, start_method, "start_method", f"one of {methods} or None", methods)
        self._start_method = start_method
        if not isinstance(hedge, bool):
            raise ValueError(f"hedge should be True or False, but got hedge={hedge!r}")
        self._hedge = hedge
        self._worker_threads = _option(check_int, worker_threads, "worker_threads", "a positive integer")
        self._timeout = float(_option(check_positive_number, timeout, "timeout", "a positive number of seconds"))
        if seed is not None and not isinstance(seed, numbers.Integral):
            raise ValueError(f"seed should be an integer or None, but got seed={seed!r}")
        self._seed = seed
        self._shuffle = bool(shuffle)
        self._out_type = resolve_out_type(out_type)
        if num_converters is None:
            num_converters = 1 if self.use_cuda else 0
        self._num_converters = _option(check_int, num_converters, "num_converters", "an integer >= 0", minimum=0)
        self._handle = SchedulerHandle()
        self._timing = BatchTiming()  # of the last iterate() call
        self._earlier_wait_s, self._earlier_batches = 0.0, 0  # of the calls before it, since start
        self._prefetched = 0
        self._epoch = 0
        self._plans = {}

    # ------------------------------------------------------------ properties

    @property
    def dset_size(self) -> int:
        return self._dset_size

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def use_cuda(self) -> bool:
        return self._out_type.startswith("cuda")

    @property
    def length(self) -> int:
        if self._batches is not None:
            return len(self._batches)
        return -(-self._dset_size // self._batch_size)

    def __len__(self) -> int:
        return self.length

    @property
    def stats(self) -> dict:
        """``first_batch_s``, ``wait_s``, ``batches``, ``prefetched`` of the last
        iterate() call; ``total_wait_s``, ``total_batches`` since start."""
        timing = self._timing
        return {"first_batch_s": timing.first_batch_s, "wait_s": timing.wait_s, "batches": timing.batches,
                "prefetched": self._prefetched, "total_wait_s": self._earlier_wait_s + timing.wait_s,
                "total_batches": self._earlier_batches + timing.batches}

    @property
    def _scheduler(self) -> Optional[Scheduler]:
        """The running (or self-closed) scheduler; None before start() and after finish()."""
        return self._handle.current

    @property
    def running(self) -> bool:
        """Whether started and not finished (an error or leaving a loop early finishes)."""
        return self._scheduler is not None and not self._scheduler.closed

    @property
    def pids(self):
        """Process ids of the worker processes (empty unless started with thread_type='proc')."""
        pool = getattr(self._scheduler, "_pool", None)
        if not isinstance(pool, ProcPool):
            return []
        return [pool.pid(wid) for wid in range(len(pool))]

    # -------------------------------------------------------------- lifecycle

    def start(self, compat=None) -> "MSequence":
        """Start the workers (finishing a running session first). Returns self.

        ``compat`` is accepted for MDNC compatibility; converters always run
        as threads of the main process here, so it changes nothing.
        """
        return self._begin(self._num_workers, self._out_type)

    def start_test(self, test_mode: str = "default") -> "MSequence":
        """Run in the main thread: the same batches as start(), for debugging.

        ``test_mode``: 'default' converts like start(), 'cpu' keeps cuda
        output on the cpu, 'numpy' does no conversion.
        """
        _option(check_choice, test_mode, "test_mode", f"one of {_TEST_MODES}", _TEST_MODES)
        out_type = {"default": self._out_type, "numpy": "null",
                    "cpu": "cpu" if self.use_cuda else self._out_type}[test_mode]
        return self._begin(0, out_type)

    def _begin(self, num_workers: int, out_type: str) -> "MSequence":
        self.finish()
        self._timing = BatchTiming()
        self._earlier_wait_s, self._earlier_batches, self._prefetched = 0.0, 0, 0
        self._epoch = 0
        self._plans = {}
        self._handle.start(start_scheduler(
            self._worker, num_workers=num_workers, thread_type=self._thread_type, start_method=self._start_method,
            out_type=out_type, buffer=self._buffer, num_converters=self._num_converters, timeout=self._timeout,
            hedge=self._hedge, worker_threads=self._worker_threads))
        return self

    def finish(self) -> None:
        """End the workers and free all shared memory. Idempotent."""
        self._handle.close()

    def __enter__(self) -> "MSequence":
        return self

    def __exit__(self, *exc_info) -> None:
        self.finish()

    # -------------------------------------------------------------- iterating

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()):
        """A generator of the converted batches of ``tasks``, in exactly that order.

        Workers persist across calls. ``lookahead``: the next call's first
        tasks, prefetched once all of ``tasks`` are dispatched; see
        NOTE [ Lookahead ] in pool_scheduler.py. Leaving the generator early, or an
        exception while it runs, finishes the sequence (see NOTE [ Shutdown order ]
        in scheduler.py).
        """
        scheduler = self._scheduler
        if scheduler is not None and scheduler.closed:
            raise RuntimeError("the MSequence was finished (by an error, by leaving a loop early, or by the "
                               "garbage collector): call start() or start_test() again before iterating")
        if scheduler is None:
            raise RuntimeError("the MSequence is not started: use `with manager.start() as mng:` "
                               "or call start() / start_test() before iterating")
        started = time.perf_counter()
        batches = scheduler.iterate(tasks, lookahead)
        self._prefetched = scheduler.prefetched
        self._earlier_wait_s += self._timing.wait_s
        self._earlier_batches += self._timing.batches
        self._timing = BatchTiming()
        return self._timing.timed(batches, started)

    def __iter__(self):
        """One epoch of the default plan (or of ``batches``)."""
        epoch = self._epoch
        self._epoch += 1
        tasks = self._plan(epoch)
        lookahead = self._plan(epoch + 1)[:self._buffer]
        self._plans.pop(epoch, None)
        return self.iterate(tasks, lookahead)

    def _plan(self, epoch: int):
        """The epoch's tasks: MDNC's shuffle seeded by (seed, epoch), no per-batch seeds."""
        if epoch in self._plans:
            return self._plans[epoch]
        if self._shuffle:
            entropy = None if self._seed is None else [int(self._seed) & 0xFFFFFFFFFFFFFFFF, epoch]
            generator = np.random.default_rng(entropy)
        if self._batches is not None:
            order = generator.permutation(len(self._batches)) if self._shuffle else range(len(self._batches))
            plan = [Task(position, self._batches[i], None) for position, i in enumerate(order)]
        else:
            indices = generator.permutation(self._indices) if self._shuffle else self._indices
            plan = [Task(position, indices[start:start + self._batch_size].tolist(), None)
                    for position, start in enumerate(range(0, len(indices), self._batch_size))]
        self._plans[epoch] = plan
        return plan
