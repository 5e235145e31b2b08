"""EpochTasks: one epoch's plan as the engine's tasks, each built when it is read."""
from collections.abc import Sequence
from typing import Optional

from speechiter.checks import check_int
from speechiter.errors import ConfigError
from speechiter.plan.options import MAX_SEED
from speechiter.plan.ordered import View
from speechiter.seeding import batch_seed
from speechiter.sequence.fetch import Task


class EpochTasks(Sequence):
    """One epoch's tasks ``[start, stop)`` of the epoch's plan ``batches``.

    A task keeps its position in the full plan and its own seed, so a resumed
    epoch builds the same batches as an uninterrupted one; building each one
    when it is read makes a long epoch cost nothing to plan beyond its shuffle.
    """

    def __init__(self, batches: View, start: int, stop: int, seed: int, epoch: int, stream: int):
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
        position = self.start + item % len(self)
        return Task(position, self.batches[position], batch_seed(self.seed, self.epoch, position, self.stream))

    def __eq__(self, other):
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self):
        return f"EpochTasks(epoch {self.epoch}, steps {self.start + 1}..{self.stop})"


def check_epoch(epoch) -> int:
    """An epoch number: from 1, as SpeeChain's, to MAX_SEED (seed + epoch seeds the 32-bit shuffle)."""
    epoch = check_int(epoch, "epoch")
    if epoch > MAX_SEED:
        raise ConfigError("epoch", f"expected at most {MAX_SEED}, got {epoch}")
    return epoch


#: the fewest utterance slots an epoch's plan may always hold (see check_plan_size)
MIN_PLAN_LIMIT = 10_000_000


def check_plan_size(batches_per_epoch: Optional[int], view: View) -> None:
    """Refuse a batches_per_epoch whose plan would not fit in memory.

    Each epoch's plan is built in memory (the seeded shuffle permutes all of
    it), batches_per_epoch times the mean batch size utterance slots. It may
    hold up to 10 passes over the view, and at least MIN_PLAN_LIMIT slots
    (a few hundred MB) for a small corpus: 1e12 batches would need terabytes.
    """
    if batches_per_epoch is None:
        return
    utterances, batches = len(view.ids), len(view)
    limit = max(10 * utterances, MIN_PLAN_LIMIT)
    if batches_per_epoch * utterances > limit * batches:  # batches_per_epoch * mean batch size > limit
        raise ConfigError("batches_per_epoch", f"expected at most {limit * batches // utterances} here, got "
                          f"{batches_per_epoch}: an epoch's plan is built in memory and may hold {limit:,} "
                          f"utterances (10 passes over the {utterances} of the view, at least {MIN_PLAN_LIMIT:,}); "
                          f"the view has {batches} batches of {utterances / batches:.3g} utterances on average")
