"""EpochTasks: one epoch's plan as the engine's tasks, each built when it is read."""
from collections.abc import Sequence

from speechiter.iterator.view import BatchView
from speechiter.seeding import batch_seed


class EpochTasks(Sequence):
    """One epoch's tasks ``[start, stop)`` of the epoch's plan ``batches``.

    A task keeps its position in the full plan and its own seed, so a resumed
    epoch builds the same batches as an uninterrupted one; building each one
    when it is read makes a long epoch cost nothing to plan beyond its shuffle.
    """

    def __init__(self, batches: BatchView, start: int, stop: int, seed: int, epoch: int, stream: int):
        self.batches, self.start, self.stop = batches, start, stop
        self.seed, self.epoch, self.stream = seed, epoch, stream

    def __len__(self):
        return self.stop - self.start

    def __getitem__(self, item):
        if isinstance(item, slice):
            first, last, step = item.indices(len(self))
            if step != 1:
                raise ValueError("EpochTasks slices take no step")
            return EpochTasks(self.batches, self.start + first, self.start + max(first, last), self.seed,
                              self.epoch, self.stream)
        if not -len(self) <= item < len(self):
            raise IndexError(item)
        from speechiter.sequence import Task  # the engine package loads only when a plan is run
        position = self.start + item % len(self)
        return Task(position, self.batches[position], batch_seed(self.seed, self.epoch, position, self.stream))

    def __eq__(self, other):
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self):
        return f"EpochTasks(epoch {self.epoch}, steps {self.start + 1}..{self.stop})"
