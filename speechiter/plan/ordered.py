"""OrderedView: a BatchView's batches in another order, kept as an index array; the cursor rule's clip.

NOTE [ Lazy epoch plans ]
    An epoch's plan (the clip, then the shuffle) only reorders the batches of this rank's view, which may
    be mapped read-only from the plan cache (speechiter/index/). Gathering its ids would copy every id of
    the rank (~17 B each) into private memory each epoch; an OrderedView keeps the base view and one int64
    per planned batch instead, and reads each batch's ids from the base when it is asked for. ``ids``,
    ``bounds`` and ``padding`` are gathered on first access, for the few callers that want whole arrays
    (a continued epoch's rank share); batch reads, ``sizes``, ``padding_of`` and :func:`reorder` never gather.
"""
from collections.abc import Sequence
from typing import List, Optional, Union

import numpy as np

from speechiter.plan.view import BatchView


class OrderedView(Sequence):
    """The batches ``base[order[0]], base[order[1]], ...`` (repeats allowed); reads as the gathered
    BatchView would (``ids``, ``bounds``, ``padding``, ``sizes``, ``padding_of``). See NOTE [ Lazy epoch plans ]."""

    def __init__(self, base: BatchView, order: np.ndarray):
        self.base, self.order = base, np.asarray(order, dtype=np.int64)
        self._gathered: Optional[BatchView] = None

    def __len__(self):
        return len(self.order)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        if not -len(self) <= item < len(self):
            raise IndexError("batch index out of range")
        return self.base[int(self.order[item])]

    def __iter__(self):
        base = self.base
        for batch in self.order.tolist():
            yield base[batch]

    def sizes(self) -> np.ndarray:
        return self.base.sizes()[self.order]

    def padding_of(self, item: int) -> Optional[List[bool]]:
        if self.base.padding is None:
            return None
        return self.base.padding_of(int(self.order[item]))

    def tolist(self) -> List[List[str]]:
        return list(self)

    def _gather(self) -> BatchView:
        if self._gathered is None:
            self._gathered = self.base.gather(self.order)
        return self._gathered

    @property
    def ids(self) -> np.ndarray:
        return self._gather().ids

    @property
    def bounds(self) -> np.ndarray:
        return self._gather().bounds

    @property
    def padding(self) -> Optional[np.ndarray]:
        return None if self.base.padding is None else self._gather().padding

    def __eq__(self, other):
        if isinstance(other, OrderedView) and other.base is self.base and np.array_equal(self.order, other.order):
            return True
        gathered = self.base.gather(self.order) if self._gathered is None else self._gathered  # no copy kept
        if isinstance(other, OrderedView):
            other = other.base.gather(other.order) if other._gathered is None else other._gathered
        return gathered == other

    def __repr__(self):
        return f"BatchView({len(self)} batches, {int(self.sizes().sum())} ids)"


View = Union[BatchView, OrderedView]  # a view or a plan: what the view steps after the base view take


def reorder(view: View, order) -> OrderedView:
    """The batches of ``view`` at ``order`` (indices, repeats allowed), in that order, copying no id
    (see NOTE [ Lazy epoch plans ]); a reordered OrderedView composes its orders."""
    order = np.asarray(order, dtype=np.int64)
    if isinstance(view, OrderedView):
        return OrderedView(view.base, view.order[order])
    return OrderedView(view, order)


def clip_batches(view: View, batches_per_epoch: Optional[int], epoch: int) -> View:
    """SpeeChain's cursor rule.

    The clip of epoch e starts at ``(batches_per_epoch * (e - 1)) % len(view)``
    and takes ``batches_per_epoch`` batches, wrapping around to the start as
    often as needed. So consecutive epochs walk through the whole view.
    """
    total = len(view)
    if batches_per_epoch is None or batches_per_epoch == total:
        return view
    cursor = (batches_per_epoch * (epoch - 1)) % total
    return reorder(view, (cursor + np.arange(batches_per_epoch)) % total)
