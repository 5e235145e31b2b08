"""MSequence: MDNC's data-iterator engine, strictly ordered and hang-free.

>>> manager = MSequence(MyWorker, dset_size=512, batch_size=32, out_type='cpu')
>>> with manager.start() as mng:
...     for batch in mng:
...         ...

``worker`` is a picklable zero-argument factory (a class, typically) whose
result has ``__getitem__(ids)``. Every worker process or thread calls it once
to build its own indexer. speechiter's Iterators drive the engine with
:meth:`MSequence.iterate` and their own plans of :class:`Task`; the MDNC API
(``for batch in manager``) runs the default plan: ``range(dset_size)``,
shuffled per epoch when ``shuffle``, chunked by ``batch_size``.
"""
import multiprocessing
import numbers
import weakref
from typing import Sequence

import numpy as np

from speechiter.sequence.convert import resolve_out_type
from speechiter.sequence.fetch import Task
from speechiter.sequence.scheduler import InlineEngine, PoolEngine, new_stats
from speechiter.sequence.shm import SlotTable, session_prefix
from speechiter.sequence.workers import ProcPool, ThreadPool

_TEST_MODES = ("default", "cpu", "numpy")


def _positive_int(name, value, minimum=1):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} should be {what}, but got {name}={value!r}")
    return int(value)


class MSequence:
    """A scheduler of worker processes or threads that yields batches in plan order.

    Arguments follow MDNC's ``MSequence``; the keyword-only ones are speechiter's:
    ``batches`` (a list of id lists) replaces the default plan, ``timeout`` is
    the most seconds to wait for one batch, ``start_method`` the
    multiprocessing start method ('fork' by default on Linux, or 'spawn').
    """

    def __init__(self, worker, dset_size=None, num_workers=4, num_converters=None, batch_size=32,
                 buffer=10, shuffle=True, thread_type="proc", out_type="cuda", seed=None, *,
                 batches=None, timeout=120.0, start_method=None):
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
        self._num_workers = _positive_int("num_workers", num_workers, minimum=0)
        self._batch_size = _positive_int("batch_size", batch_size)
        self._buffer = _positive_int("buffer", buffer)
        if thread_type not in ("proc", "thread"):
            raise ValueError(f"thread_type should be 'proc' or 'thread', but got thread_type={thread_type!r}")
        self._thread_type = thread_type
        if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(f"start_method should be one of {multiprocessing.get_all_start_methods()} or None, "
                             f"but got start_method={start_method!r}")
        self._start_method = start_method
        if not isinstance(timeout, numbers.Real) or not timeout > 0:
            raise ValueError(f"timeout should be a positive number of seconds, but got timeout={timeout!r}")
        self._timeout = float(timeout)
        if seed is not None and not isinstance(seed, numbers.Integral):
            raise ValueError(f"seed should be an integer or None, but got seed={seed!r}")
        self._seed = seed
        self._shuffle = bool(shuffle)
        self._out_type = resolve_out_type(out_type)
        if num_converters is None:
            num_converters = 1 if self.use_cuda else 0
        self._num_converters = _positive_int("num_converters", num_converters, minimum=0)
        self._engine = None
        self._finalizer = None
        self._stats = new_stats()
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
        return self._stats

    @property
    def running(self) -> bool:
        """Whether started and not finished (an error or leaving a loop early finishes)."""
        return self._engine is not None and not self._engine.closed

    @property
    def pids(self):
        """Process ids of the worker processes (empty unless started with thread_type='proc')."""
        pool = getattr(self._engine, "_pool", None)
        if not isinstance(pool, ProcPool):
            return []
        return [pool.pid(wid) for wid in range(len(pool))]

    # -------------------------------------------------------------- lifecycle

    def start(self, compat=None) -> "MSequence":
        """Start the workers (finishing a running session first). Returns self.

        ``compat`` is accepted for MDNC compatibility; converters always run
        as threads of the main process here, so it changes nothing.
        """
        self.finish()
        if self._num_workers == 0:
            return self._begin(lambda stats: InlineEngine(self._worker, self._out_type, stats))
        return self._begin(self._pool_engine)

    def start_test(self, test_mode: str = "default") -> "MSequence":
        """Run in the main thread: the same batches as start(), for debugging.

        ``test_mode``: 'default' converts like start(), 'cpu' keeps cuda
        output on the cpu, 'numpy' does no conversion.
        """
        if test_mode not in _TEST_MODES:
            raise ValueError(f"test_mode should be one of {_TEST_MODES}, but got test_mode={test_mode!r}")
        self.finish()
        out_type = {"default": self._out_type, "numpy": "null",
                    "cpu": "cpu" if self.use_cuda else self._out_type}[test_mode]
        return self._begin(lambda stats: InlineEngine(self._worker, out_type, stats))

    def _pool_engine(self, stats):
        if self._thread_type == "thread":
            pool, slots = ThreadPool(self._worker, self._num_workers), None
        else:
            prefix = session_prefix()
            slots = SlotTable(prefix, self._buffer)
            pool = ProcPool(self._worker, self._num_workers, prefix, self._start_method)
        return PoolEngine(pool, slots, self._out_type, self._num_converters, self._buffer, self._timeout, stats)

    def _begin(self, make_engine) -> "MSequence":
        self._stats = new_stats()
        self._epoch = 0
        self._plans = {}
        engine = make_engine(self._stats)
        self._engine = engine
        self._finalizer = weakref.finalize(self, engine.close)
        return self

    def finish(self) -> None:
        """End the workers and free all shared memory. Idempotent."""
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                engine.close()
            finally:
                self._finalizer.detach()
                self._finalizer = None

    def __enter__(self) -> "MSequence":
        return self

    def __exit__(self, *exc_info) -> None:
        self.finish()

    # -------------------------------------------------------------- iterating

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()):
        """A generator of the converted batches of ``tasks``, in exactly that order.

        Workers persist across calls. ``lookahead``: the next call's first
        tasks, prefetched once all of ``tasks`` are dispatched; see
        NOTE [ Lookahead ] in scheduler.py. Leaving the generator early, or an
        exception while it runs, finishes the sequence (see NOTE [ Shutdown order ]).
        """
        if self._engine is not None and self._engine.closed:
            raise RuntimeError("the MSequence was finished (by an error, by leaving a loop early, or by the "
                               "garbage collector): call start() or start_test() again before iterating")
        if self._engine is None:
            raise RuntimeError("the MSequence is not started: use `with manager.start() as mng:` "
                               "or call start() / start_test() before iterating")
        return self._engine.iterate(tasks, lookahead)

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
