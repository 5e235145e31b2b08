"""The batching view: :class:`BatchView`, and the steps that turn one view into another.

    hook's batches --as_view--> BatchView (the base view) --distribute--> the iterator's view:
        global_batches (ngpu rule) --share_batches--> this rank's share
    each epoch: the epoch's view --clip_batches, EpochShuffle (ordered.py, shuffle.py)--> the epoch's plan

A built-in ``batches_generate_fn`` (marked :func:`vectorised`) gets SortedIds
and returns a BatchView; a subclass's own hook gets and returns plain lists.
:func:`as_view` turns either answer into a BatchView once; every step after it
takes and returns a BatchView. See NOTE [ Compact storage ] in
speechiter/ids.py.
"""
from collections.abc import Sequence
from typing import Callable, Dict, List, Optional, Union

import numpy as np

from speechiter.errors import ConfigError
from speechiter.ids import IdList, SortedIds, decode_ids, encode_ids


class BatchView(Sequence):
    """A batching view: ``ids`` (S array) in batch order and batch offsets
    ``bounds`` (batch i is ``ids[bounds[i]:bounds[i + 1]]``). Reads as a
    list of lists of ids; compares equal to one. ``padding``: None, or one
    bool per id for rows that only pad a batch to the world size (see
    :func:`eval_share`). Reordered without a copy by
    :func:`speechiter.plan.ordered.reorder`."""

    def __init__(self, ids: np.ndarray, bounds: np.ndarray, padding: Optional[np.ndarray] = None):
        self.ids = ids
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.padding = padding

    @classmethod
    def from_lists(cls, batches: Sequence) -> "BatchView":
        """A view of lists of ids (the form a subclass's hook returns)."""
        bounds = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum([len(batch) for batch in batches], out=bounds[1:])
        return cls(encode_ids([uid for batch in batches for uid in batch]), bounds)

    def __len__(self):
        return len(self.bounds) - 1

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        if item < 0:
            item += len(self)
        if not 0 <= item < len(self):
            raise IndexError("batch index out of range")
        return self._batch(item)

    def _batch(self, item: int) -> List[str]:
        """Batch ``item`` (in range) as a list of ids."""
        return decode_ids(self.ids[self.bounds[item]:self.bounds[item + 1]])

    def __iter__(self):
        flat = iter(IdList(self.ids))
        for size in self.sizes().tolist():
            yield [next(flat) for _ in range(size)]

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def gather(self, batches: np.ndarray) -> "BatchView":
        """The batches at ``batches`` (indices, repeats allowed), in that order, with the ids (and padding)
        copied into fresh arrays (:func:`speechiter.plan.ordered.reorder` copies nothing)."""
        batches = np.asarray(batches, dtype=np.int64)
        sizes = self.sizes()[batches]
        bounds = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        rows = np.arange(bounds[-1], dtype=np.int64) - np.repeat(bounds[:-1] - self.bounds[batches], sizes)
        return BatchView(self.ids[rows], bounds, None if self.padding is None else self.padding[rows])

    def padding_of(self, item: int) -> Optional[List[bool]]:
        """Batch ``item``'s padding rows as bools, or None when the view has no padding."""
        if self.padding is None:
            return None
        return self.padding[self.bounds[item]:self.bounds[item + 1]].tolist()

    def tolist(self) -> List[List[str]]:
        return list(self)

    def __eq__(self, other):
        if isinstance(other, BatchView):
            return np.array_equal(self.bounds, other.bounds) and np.array_equal(self.ids, other.ids)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == list(b) for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self):
        return f"BatchView({len(self)} batches, {len(self.ids)} ids)"


Batches = Union[BatchView, List[List[str]]]  # what a hook returns


def as_view(batches: Batches, hook: str) -> BatchView:
    """What ``hook`` returned, as a BatchView: a list of non-empty lists of
    ids, or a BatchView already (a built-in hook's fast path)."""
    if isinstance(batches, BatchView):
        if (batches.sizes() > 0).all():
            return batches
    elif isinstance(batches, list) and all(isinstance(batch, list) and batch for batch in batches):
        return BatchView.from_lists(batches)
    raise ConfigError("type", f"{hook} must return a list of non-empty lists of ids")


# --------------------------------------------------------- built-in hooks


def vectorised(fn: Callable) -> Callable:
    """Mark a built-in ``batches_generate_fn`` that takes the compact fast
    path (SortedIds in, BatchView out) and also accepts lists and dicts."""
    fn.vectorised = True
    return fn


def is_vectorised(iterator) -> bool:
    return bool(getattr(type(iterator).batches_generate_fn, "vectorised", False))


def cacheable(fn: Callable) -> Callable:
    """Mark a ``batches_generate_fn`` whose view is a pure function of its inputs (the sorted ids and
    lengths, its options, ngpu), so the plan cache may keep it (speechiter/index/views.py)."""
    fn.cacheable = True
    return fn


def lengths_of(data_index: Sequence, data_len: Dict[str, float]) -> np.ndarray:
    """The lengths of ``data_index`` as float64 (from SortedIds when it has them)."""
    if isinstance(data_index, SortedIds) and data_index.lengths is not None:
        return data_index.lengths
    return np.array([data_len[uid] for uid in data_index], dtype=np.float64)


def hook_answer(data_index: Sequence, view: BatchView) -> Batches:
    """A built-in hook's answer in its caller's form: the view for compact
    ids, lists for a subclass that passed lists."""
    return view if isinstance(data_index, IdList) else view.tolist()


def batches_from_bounds(data_index: Sequence, bounds: np.ndarray) -> Batches:
    """Cut ``data_index`` at ``bounds`` (batch offsets)."""
    return hook_answer(data_index, BatchView(encode_ids(data_index), bounds))


# ------------------------------------------------------------ view steps


def make_divisible(view: BatchView, ngpu: int) -> BatchView:
    """SpeeChain's ngpu rule: move each batch's remainder (size % ngpu) to the
    front of the next batch; what is left after the last batch becomes a
    batch of its own.

    The ids keep their order; only the cuts move: after batch i the cut is at
    ``cum_i - cum_i % ngpu`` (cum_i: utterances up to batch i).
    """
    if not len(view):
        return view
    cum = np.cumsum(view.sizes())
    cuts = np.unique(cum - cum % ngpu)
    cuts = cuts[cuts > 0]
    total = len(view.ids)
    tail = [total] if not len(cuts) or cuts[-1] != total else []
    return BatchView(view.ids, np.concatenate([[0], cuts, tail]).astype(np.int64))


def rank_share(view: BatchView, rank: int, world_size: int, descending: bool) -> BatchView:
    """This rank's share of every batch (SpeeChain's split-each-batch rule).

    Rank r takes ``batch[start::world_size]`` with ``start = world_size - r - 1``
    for descending views (rank 0 gets the shortest utterances) and ``r``
    otherwise. Every rank keeps one share per batch, so all ranks run the same
    number of steps. NOTE [ Distributed padding ]: a batch with fewer
    utterances than ranks would leave some shares empty; such a rank takes the
    batch's last utterance again. These are the only repeated utterances.
    """
    start = world_size - rank - 1 if descending else rank
    sizes = view.sizes()
    counts = np.maximum(0, -(-(sizes - start) // world_size))  # rows start, start + W, ... of each batch
    first = np.where(counts > 0, view.bounds[:-1] + start, view.bounds[1:] - 1)  # an empty share: the last row
    counts = np.maximum(counts, 1)
    bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    rows = np.repeat(first, counts) + world_size * (np.arange(bounds[-1]) - np.repeat(bounds[:-1], counts))
    return BatchView(view.ids[rows], bounds)


def merge_small(view: BatchView, world_size: int) -> BatchView:
    """Consecutive batches joined until each holds at least ``world_size``
    utterances; a batch that already does is kept as it is. Only the last
    batch can stay smaller (when what is left is fewer than the ranks)."""
    cuts, held = [0], 0
    for end, size in zip(view.bounds[1:].tolist(), view.sizes().tolist()):
        held += size
        if held >= world_size:
            cuts.append(end)
            held = 0
    if held:
        cuts.append(len(view.ids))
    return BatchView(view.ids, np.array(cuts, dtype=np.int64))


def eval_share(view: BatchView, rank: int, world_size: int, descending: bool) -> BatchView:
    """This rank's share of an evaluation view: every utterance exactly once
    across the ranks, with equal step counts.

    Batches smaller than the world size are first merged with the next ones
    (:func:`merge_small`), then each batch is split as in training
    (:func:`rank_share`). Only the last batch can leave a rank empty; that
    rank takes the batch's last utterance again, marked in ``padding`` (so
    ``batch.is_padding`` lets metrics drop it). See NOTE [ Distributed padding ].
    """
    return share_batches(merge_small(view, world_size), rank, world_size, descending, evaluation=True)


def global_batches(view: BatchView, ngpu: int, world_size: int, evaluation: bool) -> BatchView:
    """The batches all ranks share, one per step: the ngpu rule, then, for
    evaluation among several ranks, :func:`merge_small`."""
    if ngpu > 1:
        view = make_divisible(view, ngpu)
    if evaluation and world_size > 1:
        view = merge_small(view, world_size)
    return view


def share_batches(view: BatchView, rank: int, world_size: int, descending: bool, evaluation: bool) -> BatchView:
    """This rank's share of every batch (:func:`rank_share`); for evaluation,
    the repeated row of an empty share is marked in ``padding``."""
    if world_size == 1:
        return view
    share = rank_share(view, rank, world_size, descending)
    if not evaluation:
        return share
    padding = np.zeros(len(share.ids), dtype=bool)
    start = world_size - rank - 1 if descending else rank
    padding[share.bounds[:-1][view.sizes() <= start]] = True  # an empty share holds one repeated row
    return BatchView(share.ids, share.bounds, padding)


def distribute(view: BatchView, ngpu: int, rank: int, world_size: int, descending: bool,
               evaluation: bool = False) -> BatchView:
    """The view one rank loads: :func:`global_batches`, then this rank's
    share (:func:`share_batches`; for evaluation as :func:`eval_share`)."""
    view = global_batches(view, ngpu, world_size, evaluation)
    return share_batches(view, rank, world_size, descending, evaluation)


def padding_rows(sizes: np.ndarray, world_size: int) -> int:
    """Rows the training split repeats across all ranks: ``world_size - size`` per batch smaller than the ranks."""
    return int(np.maximum(world_size - sizes, 0).sum())
