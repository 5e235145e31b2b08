"""Engines: what builds an Iterator's batches, behind one small interface.

An :class:`Engine` takes one epoch's tasks (:class:`speechiter.sequence.Task`:
position, ids, seed) and yields their batches in exactly that order. An
Iterator owns one engine for its whole life (workers persist across epochs),
made by :func:`make_engine` from its :class:`EngineSettings` and a reader
factory (a picklable callable that builds the worker-side reader, whose
``reader[ids]`` is a batch; speechiter.dataset.reader.DatasetReader for a
speechiter Dataset):

- ``msequence``: worker processes or threads (speechiter/sequence/);
  ``num_workers=0`` builds batches in the main process.
- ``inline``: everything in the main process, for pdb.
- ``torch``: torch's DataLoader with persistent workers over the same tasks
  (torch_engine.py), for side-by-side comparison.

All three build a batch with speechiter.sequence.fetch, so they give the same
batches. The engine knows nothing of datasets: what a batch is made of comes
from the reader factory.
"""
import functools
import multiprocessing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

from speechiter.checks import check_bool, check_choice, check_int, check_optional_int
from speechiter.errors import ConfigError
from speechiter.io.hedged_requests import unhedged_reader
from speechiter.sequence.convert import is_out_type, resolve_out_type
from speechiter.sequence.fetch import Task
from speechiter.sequence.choice import start_scheduler
from speechiter.sequence.scheduler import Scheduler, SchedulerHandle
from speechiter.sequence.start import warm_up
from speechiter.torch_engine import TorchEngine

ENGINES = ("msequence", "inline", "torch")
THREAD_TYPES = ("proc", "thread")
# The most seconds the msequence engine waits for one batch (MSequence's default).
BATCH_TIMEOUT_S = 120.0


class Engine(Protocol):
    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()) -> Iterator[Any]:
        """The batches of ``tasks``, in exactly that order. ``lookahead``: the
        tasks of the next call, which the engine may start on early."""

    def close(self) -> None:
        """End the workers. Idempotent."""


@dataclass(frozen=True)
class EngineSettings:
    """How an Iterator loads: its keyword arguments ``engine`` (``kind`` here),
    ``num_workers``, ``thread_type``, ``start_method``, ``out_type``, ``buffer``, ``hedge``
    (build a late batch again on an idle worker; NOTE [ Hedging ] in speechiter/sequence/hedge.py),
    ``worker_threads``.

    Invalid values raise a ConfigError naming the option.
    """

    kind: str = "msequence"
    num_workers: int = 1
    thread_type: str = "proc"
    start_method: Optional[str] = None
    out_type: str = "cpu"
    buffer: Optional[int] = None
    hedge: bool = True
    worker_threads: int = 1  # NOTE [ One thread per worker ] in speechiter/sequence/threads.py

    def __post_init__(self):
        check_choice(self.kind, "engine", ENGINES)
        object.__setattr__(self, "num_workers", check_int(self.num_workers, "num_workers", minimum=0))
        check_choice(self.thread_type, "thread_type", THREAD_TYPES)
        if self.start_method is not None:
            check_choice(self.start_method, "start_method", multiprocessing.get_all_start_methods())
        if not is_out_type(self.out_type):
            raise ConfigError("out_type", f"expected cpu, cuda, cuda:N or null, got {self.out_type!r}")
        object.__setattr__(self, "buffer", check_optional_int(self.buffer, "buffer"))
        object.__setattr__(self, "hedge", check_bool(self.hedge, "hedge"))
        object.__setattr__(self, "worker_threads", check_int(self.worker_threads, "worker_threads"))

    @property
    def lookahead(self) -> int:
        """Batches in flight, and tasks of the next epoch prefetched: ``buffer``,
        by default 2 per worker (at least 2)."""
        return self.buffer if self.buffer is not None else max(2, 2 * self.num_workers)


def make_engine(settings: EngineSettings, reader: Callable[[], Any]) -> Engine:
    """The engine of ``settings``; each worker builds batches with ``reader()``
    (called in the worker; see speechiter.sequence.start for how it gets
    there). The workers start on first use."""
    if settings.kind == "torch":  # hedge: false, each read one request (NOTE [ Hedged requests ] in io/)
        return TorchEngine(reader if settings.hedge else unhedged_reader(reader), settings.num_workers,
                           settings.out_type, start_method=settings.start_method)
    out_type = resolve_out_type(settings.out_type)
    if settings.kind == "msequence" and settings.num_workers > 0 and settings.thread_type == "proc":
        warm_up(reader, settings.start_method)
    return SequenceEngine(functools.partial(
        start_scheduler, reader, num_workers=0 if settings.kind == "inline" else settings.num_workers,
        thread_type=settings.thread_type, start_method=settings.start_method, out_type=out_type,
        buffer=settings.lookahead, num_converters=1 if out_type.startswith("cuda") else 0,
        timeout=BATCH_TIMEOUT_S, hedge=settings.hedge, worker_threads=settings.worker_threads))


class SequenceEngine:
    """The msequence and inline engines: a scheduler (speechiter/sequence/)
    started on first use, and again after it closed itself. An error or a loop
    left early ends its workers (none outlive an abandoned epoch); the next
    epoch starts new ones.
    """

    def __init__(self, start: Callable[[], Scheduler]):
        self._start = start
        self._handle = SchedulerHandle()

    @property
    def scheduler(self) -> Optional[Scheduler]:
        return self._handle.current

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()) -> Iterator[Any]:
        scheduler = self._handle.current
        if scheduler is None or scheduler.closed:
            scheduler = self._handle.start(self._start())
        return scheduler.iterate(tasks, lookahead)

    def close(self) -> None:
        self._handle.close()
