"""MixSchedule: which corpus each step of a mixed iterator draws from.

# NOTE [ Mixing schedule ]
The corpora's weights are exact fractions (``0.7`` is 7/10). They hang at the
leaves of a balanced binary tree; each inner node splits the steps that reach
it between its two halves in the proportion ``p`` of their weights by Beatty
rounding: of its first ``n`` steps, ``left(n) = floor(n * p + 1/2)`` go to the
left half (its step ``n`` goes left iff ``left(n + 1) > left(n)``), the rest
to the right. So:

- no randomness: the schedule is a function of the global step
  ``g = (epoch - 1) * batches_per_epoch + step`` alone, the same for any seed,
  worker count, engine, rank or resume point;
- low discrepancy in every window, not only on average: in any ``N``
  consecutive steps a node sends ``N * p`` steps left, give or take less than
  one, so a corpus at depth ``d`` of the tree (``d = ceil(log2 k)`` for ``k``
  corpora) gets its share of any window give or take less than ``d`` batches
  (0.7/0.3: within one batch of 700 in every 1,000);
- resumable in O(k): the batches each corpus gave before step ``g`` are the
  counts down the tree from ``g`` at the root, and the corpus of step ``g``
  is one walk down (O(log k)).

Integer arithmetic throughout (fractions of Python ints), so the schedule is
the same on every machine. A mix resumed under changed weights starts a new
schedule at its resume step (a ScheduleStart; NOTE [ Changed mix ] in
speechiter/iterator/mix_changes.py): ``g`` then counts the steps since.
"""
import dataclasses
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from speechiter.checks import check_int
from speechiter.errors import ConfigError

#: bump when the rule changes: it is part of a mixed iterator's configuration fingerprint (saved states)
SCHEDULE_VERSION = 1


class _Node:
    """A split of corpora ``lo .. hi - 1``: ``left``/``right`` halves, ``p = (num, den)`` the left's share."""

    def __init__(self, weights: Sequence[Fraction], lo: int, hi: int):
        self.lo, self.hi = lo, hi
        self.left = self.right = None
        if hi - lo > 1:
            mid = (lo + hi) // 2
            self.left, self.right = _Node(weights, lo, mid), _Node(weights, mid, hi)
            share = sum(weights[lo:mid]) / sum(weights[lo:hi]) if sum(weights[lo:hi]) else Fraction(0)
            self.num, self.den = share.numerator, share.denominator

    def left_of(self, n: int) -> int:
        """``floor(n * p + 1/2)``: how many of this node's first ``n`` steps go left."""
        return (2 * n * self.num + self.den) // (2 * self.den)


class MixSchedule:
    """The corpus of every global step for ``weights`` (non-negative numbers, a positive sum; see
    NOTE [ Mixing schedule ]); callers check the weights (speechiter.iterator.mix)."""

    def __init__(self, weights: Sequence[Union[Fraction, float]]):
        self.weights = [weight if isinstance(weight, Fraction) else Fraction(str(weight)) for weight in weights]
        self._root = _Node(self.weights, 0, len(self.weights))

    def _walk(self, g: int, target: Optional[int]) -> Tuple[int, int]:
        """Down the tree from step ``g``: ``(corpus, its steps before g)`` toward corpus ``target``, or
        toward the corpus of step ``g`` when ``target`` is None."""
        node, n = self._root, g
        while node.left is not None:
            before = node.left_of(n)
            go_left = node.left_of(n + 1) > before if target is None else target < node.left.hi
            node, n = (node.left, before) if go_left else (node.right, n - before)
        return node.lo, n

    def source(self, g: int) -> int:
        """The corpus of global step ``g`` (counted from 0)."""
        return self._walk(g, None)[0]

    def locate(self, g: int) -> Tuple[int, int]:
        """``(corpus of step g, batches that corpus gave before step g)``: its own position in its stream."""
        return self._walk(g, None)

    def count(self, g: int, corpus: int) -> int:
        """Batches corpus ``corpus`` gave in steps ``0 .. g - 1``."""
        return self._walk(g, corpus)[1]

    def counts(self, g: int) -> List[int]:
        """Batches of every corpus in steps ``0 .. g - 1`` (they sum to ``g``)."""
        return [self.count(g, corpus) for corpus in range(len(self.weights))]


_START_KEYS = ("epoch", "step", "epoch_steps", "counts")


@dataclasses.dataclass(frozen=True)
class ScheduleStart:
    """Where a mix's schedule began (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py): after
    ``step`` steps of the mix's ``epoch``, which has ``epoch_steps`` steps, with each corpus at ``counts``
    batches of its stream of epochs (its own position)."""

    epoch: int
    step: int
    epoch_steps: int
    counts: Dict[str, int]

    def to_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "epoch_steps": self.epoch_steps, "counts": dict(self.counts)}

    @classmethod
    def from_dict(cls, value: Any, where: str) -> "ScheduleStart":
        """A saved schedule start, checked, else a ConfigError at ``where``."""
        if not isinstance(value, dict) or sorted(value) != sorted(_START_KEYS):
            raise ConfigError(where, f"expected {{{', '.join(_START_KEYS)}}}, got {value!r}"[:200])
        counts = value["counts"]
        if not isinstance(counts, dict):
            raise ConfigError(f"{where}.counts", f"expected {{corpus: batches}}, got {counts!r}"[:200])
        counts = {str(name): check_int(count, f"{where}.counts.{name}", minimum=0) for name, count in counts.items()}
        start = cls(check_int(value["epoch"], f"{where}.epoch"), check_int(value["step"], f"{where}.step", minimum=0),
                    check_int(value["epoch_steps"], f"{where}.epoch_steps"), counts)
        if start.step > start.epoch_steps:
            raise ConfigError(f"{where}.step", f"epoch {start.epoch} has {start.epoch_steps} steps, got step "
                                               f"{start.step}")
        return start

    def __str__(self):
        return f"epoch {self.epoch} step {self.step}"
