"""STAND-IN written by the iterator branch of issue 11; the sequence branch
owns this module and its version replaces this file at the merge.

It holds only what the Iterator needs from the agreed interface: the
EngineSettings record and make_engine, which forwards to today's
speechiter.loader._make_engine.
"""
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterator, Optional, Protocol

from speechiter.checks import check_choice, check_int

ENGINES = ("msequence", "inline", "torch")


class Engine(Protocol):
    def iterate(self, tasks, lookahead=()) -> Iterator[Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EngineSettings:
    kind: str = "msequence"
    num_workers: int = 1
    thread_type: str = "proc"
    start_method: Optional[str] = None
    out_type: str = "cpu"
    buffer: Optional[int] = None

    def __post_init__(self):
        object.__setattr__(self, "num_workers", check_int(self.num_workers, "num_workers", minimum=0))
        check_choice(self.kind, "engine", ENGINES)

    @property
    def lookahead(self) -> int:
        """Batches in flight: ``buffer``, else 2 per worker (at least 2)."""
        return self.buffer if self.buffer is not None else max(2, 2 * self.num_workers)


def make_engine(settings: EngineSettings, dataset) -> Engine:
    from speechiter.loader import _make_engine
    return _make_engine(SimpleNamespace(
        dataset=dataset, engine=settings.kind, num_workers=settings.num_workers, thread_type=settings.thread_type,
        start_method=settings.start_method, out_type=settings.out_type, buffer=settings.lookahead))
