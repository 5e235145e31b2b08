"""Layouts, and elastic resume: the rest of an epoch that a run of another layout (ranks, ngpu) began.

# NOTE [ Elastic resume ]
A layout is where the batches go, not what they are: ``ngpu`` (the ngpu rule
makes every batch's size divisible by it) and ``world_size`` (each batch is
shared among the ranks). A run of layout L plans an epoch in three steps:

    base view (batches_generate_fn's) --global_batches(L)--> the global batches, one per step
    --clip_batches, EpochShuffle--> the epoch's global plan --share_batches(rank of L)--> this rank's plan

(``global_batches`` is the ngpu rule and, for evaluation, the merge of batches
smaller than the ranks; see speechiter/plan/view.py). Sharing batch by
batch commutes with the clip and the shuffle, so this is the plan a rank
always ran. A state saves the base view's fingerprint and the layout of its
epoch; the layout may change on resume, the base view may not.

A state at (epoch E, step S) saved under L0 and loaded under L1 != L0: steps
S+1 .. end of epoch E are the saved run's global batches, planned under L0
(the same number of batches, the same clip and shuffle), each shared among
L1's ranks by the rule a fresh L1 run uses (training: an empty share repeats
the batch's last utterance; evaluation: it is marked in ``batch.is_padding``,
and batches are not merged again). Task seeds keep their position in the
epoch's plan. Epochs after E are planned under L1. So over all ranks every
utterance of epoch E is loaded exactly once (apart from those repeats), and a
state saved during E records L0, from E+1 on L1. When L0 == L1 nothing
changes. An iterator with its own ``epoch_view`` (a list hook) cannot say what
its global batches are, so its states resume on the same layout only.
An epoch continues through EpochPlanner.continue_from (speechiter/plan/epochs.py),
which returns a new planner or raises.
"""
import dataclasses
from typing import Any, Dict

from speechiter.checks import check_int
from speechiter.errors import ConfigError
from speechiter.plan.view import BatchView

KEY_NGPU = "ngpu"
KEY_WORLD_SIZE = "world_size"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a run's batches go: ``ngpu`` (the ngpu rule) and ``world_size`` (ranks sharing each batch)."""

    ngpu: int = 1
    world_size: int = 1

    def to_dict(self) -> Dict[str, int]:
        return {KEY_NGPU: self.ngpu, KEY_WORLD_SIZE: self.world_size}

    @classmethod
    def from_dict(cls, value: Any, where: str) -> "Layout":
        """A saved layout, checked: ``{ngpu: int, world_size: int}``, else a ConfigError at ``where``."""
        if not isinstance(value, dict) or sorted(value) != sorted((KEY_NGPU, KEY_WORLD_SIZE)):
            raise ConfigError(where, f"expected {{{KEY_NGPU}: N, {KEY_WORLD_SIZE}: W}}, got {value!r}"[:200])
        return cls(check_int(value[KEY_NGPU], f"{where}.{KEY_NGPU}"),
                   check_int(value[KEY_WORLD_SIZE], f"{where}.{KEY_WORLD_SIZE}"))

    def __str__(self):
        return f"{self.world_size} rank{'s' if self.world_size != 1 else ''}, ngpu {self.ngpu}"


@dataclasses.dataclass(frozen=True)
class ContinuedEpoch:
    """An epoch planned under another run's layout: its global batches (before the clip and shuffle)."""

    epoch: int
    layout: Layout
    global_view: BatchView

