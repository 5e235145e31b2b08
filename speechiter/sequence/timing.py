"""How long a consumer waited for its batches: measured once, around the loop.

The Loader (speechiter/loader.py) and MSequence both wrap the batches of an
engine or scheduler with :meth:`BatchTiming.timed`; nothing below them times
batches.
"""
import time
from typing import Iterator, Optional, TypeVar

T = TypeVar("T")


class BatchTiming:
    """``first_batch_s``: from ``started`` to the first batch; ``wait_s``: time
    spent waiting in ``next()``; ``batches``: batches handed out."""

    def __init__(self):
        self.first_batch_s: Optional[float] = None
        self.wait_s = 0.0
        self.batches = 0

    def timed(self, batches: Iterator[T], started: float) -> Iterator[T]:
        """Yield ``batches``, timing each wait; closes ``batches`` when left early."""
        try:
            while True:
                waited = time.perf_counter()
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                now = time.perf_counter()
                self.wait_s += now - waited
                if self.first_batch_s is None:
                    self.first_batch_s = now - started
                self.batches += 1
                yield batch
                del batch  # a zero-copy batch holds its slot; see NOTE [ Zero-copy batches ] in shm/slots.py
        finally:
            batches.close()
