"""The epoch shuffle: the order of an epoch's batches.

# NOTE [ Epoch shuffle ]
With ``shuffle: true``, epoch e's batches (after the cursor rule) come in one
of two orders, as in SpeeChain's ``Iterator.build_loader``:

- cumulative: when ``batches_per_epoch`` is None or equals the number of
  batches, SpeeChain shuffles its own list in place with
  ``RandomState(seed + e)`` each epoch, so epoch e's order is the composition
  of the shuffles of epochs 1..e: ``order_e = order_{e-1}[permutation(seed + e, n)]``.
  speechiter defines it as an uninterrupted run from epoch 1 computes it, also
  when a run resumes (SpeeChain's runner would restart from the unshuffled
  list at its start_epoch), so every resume point gives the same batches.
- fresh: for any other ``batches_per_epoch`` SpeeChain shuffles a new list
  (the epoch's clip) with ``RandomState(seed + e)``: ``permutation(seed + e, n)``.
  An iterator with its own ``epoch_view`` (bucket.BucketIterator) makes a new
  list every epoch, so its shuffle is the fresh one too.

Every rank uses the same seed, so all ranks shuffle alike. The cumulative
order costs e permutations of n (epoch 50, 10,000 batches: a few ms); the
last two orders are kept (the loader asks for an epoch and the next), so
consecutive epochs cost one permutation each.
"""
from typing import Dict

import numpy as np

from speechiter.seeding import cumulative_order, permutation


class EpochShuffle:
    """The batch order of every epoch for one seed (see NOTE [ Epoch shuffle ])."""

    def __init__(self, seed: int):
        self.seed = seed
        self._orders: Dict[int, np.ndarray] = {}  # epoch -> cumulative order, the last two

    def order(self, epoch: int, n: int, cumulative: bool) -> np.ndarray:
        """Positions in the epoch's clip of its n batches, in epoch order."""
        if not cumulative:
            return permutation(self.seed + epoch, n)
        cached = [e for e, order in self._orders.items() if e <= epoch and len(order) == n]
        since = (max(cached), self._orders[max(cached)]) if cached else None
        order = cumulative_order(self.seed, epoch, n, since)
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = order
        return order

    def forget(self):
        """Drop the kept orders (the batching view was replaced)."""
        self._orders.clear()
