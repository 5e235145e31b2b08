"""BucketIterator: length buckets, recomposed into new batches every epoch.

# NOTE [ Bucket rule ]
Utterances fall into geometric length buckets: with ``m`` the shortest
(positive) length and ``w = bucket_width``, bucket k holds the lengths in
``[m (1 + w)^k, m (1 + w)^(k + 1))``, so within a bucket lengths differ by at
most ``w`` (2% by default) and a batch pads at most that much.

Every batch of bucket k holds ``B_k = floor(batch_len / cost(L_k))`` utterances
(at least 1; rounded down to a multiple of ngpu when ``B_k >= ngpu``), where
``L_k`` is the bucket's longest utterance and ``cost(L) = L`` or, with
``quadratic_scale = q``, ``L + L^2 / q``. So every batch keeps
``utterances * cost(longest) <= batch_len`` (the padded area, plus the
attention term), except an utterance whose own cost is over the budget, which
is alone. The last batch of a bucket holds the rest.

Each epoch the utterances of every bucket are shuffled with a generator
seeded by (seed, epoch) and cut into batches in that order, so batch contents
change from epoch to epoch while the batch sizes, and hence the number of
batches, stay the same: ``len(iterator)`` is constant. Within a batch the
utterances are sorted longest first (ties in shuffled order), and buckets
come longest first (shortest first with ``is_descending: false``); the
cursor rule (``batches_per_epoch``), ngpu and the rank shares then apply to
each epoch's view as to any other (see Iterator.base_epoch_view), and the epoch's
shuffle of batches (``shuffle``) is the fresh one, as the view is new every
epoch (see NOTE [ Epoch shuffle ] in speechiter/plan/shuffle.py). Every rank computes the
same view, so all ranks run the same number of steps.

The bucket rule is speechiter's own (SpeeChain has none): as its budget is a
hard bound, lengths count at their longest once built (the dataset's
``max_batch_length_fn``, e.g. the slowest speed perturbation).
"""
from typing import Mapping, Optional, Sequence

import numpy as np

from speechiter.errors import ConfigError
from speechiter.ids import encode_ids
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import check_budget
from speechiter.plan.view import Batches, BatchView, hook_answer, lengths_of, vectorised

_STREAM = 0x6275636B  # "buck": keeps the bucket shuffle apart from other draws of (seed, epoch)


class BucketIterator(Iterator):
    """Bucketed batches under a padded-area budget, recomposed every epoch
    (see NOTE [ Bucket rule ]).

    Options (``conf``):
        batch_len: the budget, ``utterances * cost(longest) <= batch_len``
            (samples for waveforms, frames for features).
        bucket_width: relative width of a length bucket (default 0.02).
        quadratic_scale: adds ``L^2 / quadratic_scale`` to an utterance's cost,
            for models whose memory grows with the square of the length
            (attention); None (default) budgets the padded area only.
    """

    def budgets_longest(self, iter_conf: dict) -> bool:
        return True  # the budget is a hard bound, so every utterance counts at its longest

    @vectorised
    def batches_generate_fn(self, data_index: Sequence[str], data_len: Optional[Mapping[str, float]],
                            batch_len: Optional[float] = None, bucket_width: float = 0.02,
                            quadratic_scale: Optional[float] = None) -> Batches:
        if batch_len is None:
            raise ConfigError("batch_len", "missing; BucketIterator needs the padded length budget of a batch")
        batch_len = check_budget(batch_len, "batch_len")
        bucket_width = check_budget(bucket_width, "bucket_width")
        if quadratic_scale is not None:
            quadratic_scale = check_budget(quadratic_scale, "quadratic_scale")
        if data_len is None:
            raise ConfigError("data_len", "BucketIterator needs utterance lengths: give data_len (an idx2 length "
                                          "file such as idx2wav_len) or use a dataset that registers them")
        self.buckets = Buckets(encode_ids(data_index), lengths_of(data_index, data_len), batch_len, bucket_width,
                               quadratic_scale, self.ngpu, self.is_descending is not False)
        return hook_answer(data_index, self.buckets.compose(self.seed, 1))

    def base_epoch_view(self, epoch: int) -> BatchView:
        """The batches of ``epoch``: the buckets reshuffled with (seed, epoch); the ngpu rule and the
        rank share then apply as for epoch 1 (see Iterator.epoch_view)."""
        return super().base_epoch_view(epoch) if epoch == 1 else self.buckets.compose(self.seed, epoch)


class Buckets:
    """The bucket plan of a set of utterances (see NOTE [ Bucket rule ])."""

    def __init__(self, ids: np.ndarray, lengths: np.ndarray, batch_len: float, bucket_width: float,
                 quadratic_scale: Optional[float] = None, ngpu: int = 1, descending: bool = True):
        self.ids, self.lengths = ids, np.asarray(lengths, dtype=np.float64)
        positive = self.lengths[self.lengths > 0]
        shortest = positive.min() if len(positive) else 1.0
        raw = np.floor(np.log(np.maximum(self.lengths, shortest) / shortest) / np.log1p(bucket_width))
        keys, self.bucket = np.unique(-raw if descending else raw, return_inverse=True)
        counts = np.bincount(self.bucket, minlength=len(keys))
        longest = np.zeros(len(keys))
        np.maximum.at(longest, self.bucket, self.lengths)
        cost = longest + (longest ** 2 / quadratic_scale if quadratic_scale else 0.0)
        size = np.maximum(1, np.floor(batch_len / cost)).astype(np.int64)
        if ngpu > 1:
            size = np.where(size >= ngpu, size - size % ngpu, size)
        self.size = size
        self.batches = -(-counts // size)  # per bucket
        self.first_batch = np.concatenate([[0], np.cumsum(self.batches)[:-1]])
        self.first_row = np.concatenate([[0], np.cumsum(counts)[:-1]])
        sizes = np.repeat(size, self.batches)
        last = np.cumsum(self.batches) - 1
        sizes[last] = counts - size * (self.batches - 1)
        self.bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def __len__(self):
        return len(self.bounds) - 1

    def compose(self, seed: int, epoch: int) -> BatchView:
        """The batches of ``epoch``: each bucket shuffled, cut, each batch sorted longest first."""
        noise = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), _STREAM]).random(len(self.ids))
        order = np.lexsort((noise, self.bucket))
        bucket = self.bucket[order]
        within = np.arange(len(order)) - self.first_row[bucket]
        batch = self.first_batch[bucket] + within // self.size[bucket]
        order = order[np.lexsort((-self.lengths[order], batch))]
        return BatchView(self.ids[order], self.bounds)
