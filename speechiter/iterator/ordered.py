"""OrderedView: a BatchView's batches in another order, kept as an index array (an epoch's plan).

NOTE [ Lazy epoch plans ]
    An epoch's plan (the clip, then the shuffle) only reorders the batches of this rank's view, which may
    be mapped read-only from the plan cache (speechiter/index/). Gathering its ids would copy every id of
    the rank (~17 B each) into private memory each epoch; an OrderedView keeps the base view and one int64
    per planned batch instead, and reads each batch's ids from the base when it is asked for. ``ids``,
    ``bounds`` and ``padding`` are gathered on first access, for the few callers that want whole arrays
    (a continued epoch's rank share); batch reads, ``sizes``, ``padding_of`` and ``take`` never gather.
"""
from typing import List, Optional

import numpy as np

from speechiter.iterator.view import BatchView


class OrderedView(BatchView):
    """The batches ``base[order[0]], base[order[1]], ...`` (repeats allowed); reads as the gathered
    BatchView would. See NOTE [ Lazy epoch plans ]."""

    def __init__(self, base: BatchView, order: np.ndarray):  # pylint: disable=super-init-not-called
        self.base, self.order = base, np.asarray(order, dtype=np.int64)
        self._gathered = None

    def __len__(self):
        return len(self.order)

    def _batch(self, item: int) -> List[str]:
        return self.base[int(self.order[item])]

    def __iter__(self):
        base = self.base
        for batch in self.order.tolist():
            yield base[batch]

    def sizes(self) -> np.ndarray:
        return self.base.sizes()[self.order]

    def take(self, batches: np.ndarray) -> "OrderedView":
        return OrderedView(self.base, self.order[np.asarray(batches, dtype=np.int64)])

    def padding_of(self, item: int) -> Optional[List[bool]]:
        if self.base.padding is None:
            return None
        if item < 0:
            item += len(self)
        return self.base.padding_of(int(self.order[item]))

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
        if isinstance(other, BatchView):  # compared gathered, without keeping the copy
            gathered = self.base.gather(self.order) if self._gathered is None else self._gathered
            return BatchView.__eq__(gathered, other)
        return BatchView.__eq__(self, other)

    def __repr__(self):
        return f"BatchView({len(self)} batches, {int(self.sizes().sum())} ids)"
