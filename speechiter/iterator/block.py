"""BlockIterator: batches with about the same total length ("rectangles of similar area").

# NOTE [ Block rules ]
Walk the sorted ids, adding each one's length to the current batch's total.

- ``reach`` (the default, SpeeChain's rule): once the total reaches
  ``batch_len`` (``>=``), close the batch, the utterance that reached it
  included. A batch overshoots ``batch_len`` by at most its last utterance.
  As SpeeChain's ``int(batch_len)``, a fractional ``batch_len`` is truncated
  when the lengths are whole numbers (SpeeChain's only case; at least 1).
  Lengths are budgeted as the dataset's ``batch_length_fn`` gives them
  (SpeeChain: ``data_len`` as given, unperturbed with use_speed_perturb).
- ``never_exceed``: when adding the utterance would push the total past
  ``batch_len``, close the batch and start the next with it. A batch never
  exceeds ``batch_len`` (a hard memory bound), except an utterance longer
  than the budget, which is alone; lengths are budgeted at their longest once
  built (the dataset's ``max_batch_length_fn``: the slowest speed
  perturbation of SpeechTextDataset).
"""
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from speechiter.checks import check_choice, check_positive_number
from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.plan.view import Batches, batches_from_bounds, cacheable, lengths_of, vectorised

REACH, NEVER_EXCEED = "reach", "never_exceed"
RULES = (REACH, NEVER_EXCEED)


class BlockIterator(Iterator):
    """Groups the sorted utterances into batches whose lengths add up to
    about ``batch_len`` (samples for waveforms, frames for features).

    Options (``conf``):
        batch_len: the total length of a batch.
        batch_len_rule: ``reach`` (default, SpeeChain's: a batch closes once
            its total reaches batch_len, so it may overshoot by one utterance)
            or ``never_exceed`` (a hard bound); see NOTE [ Block rules ].
    """

    def budgets_longest(self, iter_conf: dict) -> bool:
        return check_rule(iter_conf.get("batch_len_rule", REACH)) == NEVER_EXCEED

    @cacheable
    @vectorised
    def batches_generate_fn(self, data_index: Sequence[str], data_len: Optional[Mapping[str, float]],
                            batch_len: Optional[float] = None, batch_len_rule: str = REACH) -> Batches:
        if batch_len is None:
            raise ConfigError("batch_len", "missing; BlockIterator needs the total length of a batch")
        batch_len = check_budget(batch_len, "batch_len")
        rule = check_rule(batch_len_rule)
        if data_len is None:
            raise ConfigError("data_len", "BlockIterator needs utterance lengths: give data_len (an idx2 length "
                                          "file such as idx2wav_len) or use a dataset that registers them")
        return batches_from_bounds(data_index, block_bounds(lengths_of(data_index, data_len), batch_len, rule))


def check_rule(value: Any) -> str:
    return check_choice(value, "batch_len_rule", RULES)


def check_budget(value: Any, where: str) -> float:
    """check_positive_number, with the batching options' one wording for
    every bad value ("batch_len: expected a positive number, got 'abc'")."""
    try:
        return check_positive_number(value, where)
    except ConfigError:
        raise ConfigError(where, f"expected a positive number, got {value!r}"[:200]) from None


def block_bounds(lengths: np.ndarray, batch_len: float, rule: str = REACH) -> np.ndarray:
    """Batch offsets of a block rule (NOTE [ Block rules ]) over ``lengths`` in order."""
    return (reach_bounds if rule == REACH else never_exceed_bounds)(np.asarray(lengths, dtype=np.float64), batch_len)


def reach_bounds(lengths: np.ndarray, batch_len: float) -> np.ndarray:
    """Batch offsets of the ``reach`` rule.

    Whole lengths: the budget is whole too (SpeeChain's ``int(batch_len)``),
    so the running sums are exact and every batch end is one binary search.
    Fractional lengths: the rule itself, summing in loop order (same rounding).
    """
    count = len(lengths)
    cum = np.concatenate([[0.0], np.cumsum(lengths)])
    whole = bool(count) and (lengths == np.floor(lengths)).all()
    budget = max(1, int(batch_len)) if whole else batch_len
    if whole and lengths.min() >= 0 and cum[-1] + budget < 2.0 ** 52:
        # from each start i the batch ends at the first e with cum[e] >= cum[i] + budget (e > i as budget >= 1);
        # the batches are the chain 0 -> end(0) -> end(end(0)) ...
        ends = np.minimum(np.searchsorted(cum, cum[:-1] + budget, side="left"), count)
        return _chain(ends, count)
    bounds, total = [0], 0.0
    for position, length in enumerate(lengths.tolist()):
        total += length
        if total >= budget:
            bounds.append(position + 1)
            total = 0.0
    if bounds[-1] != count:
        bounds.append(count)
    return np.array(bounds, dtype=np.int64)


def _chain(ends: np.ndarray, count: int) -> np.ndarray:
    """Batch offsets 0, ends[0], ends[ends[0]], ... up to ``count``."""
    bounds, start = [0], 0
    while start < count:
        start = int(ends[start])
        bounds.append(start)
    return np.array(bounds, dtype=np.int64)


def never_exceed_bounds(lengths: np.ndarray, batch_len: float) -> np.ndarray:
    """Batch offsets of the ``never_exceed`` rule.

    Whole lengths (the usual sample or frame counts): one binary search per
    batch in the exact running sums. Fractional lengths: the rule itself,
    summing in the same order as a plain Python loop would (same rounding).
    """
    count = len(lengths)
    cum = np.concatenate([[0.0], np.cumsum(lengths)])
    if count and (lengths == np.floor(lengths)).all() and cum[-1] < 2.0 ** 52 and lengths.min() >= 0:
        # NOTE [ Block rule by jumps ]: from each start i, the batch ends at the
        # largest e with cum[e] - cum[i] <= batch_len (at least i + 1); whole
        # sums are exact, so all ends come from one searchsorted, and the
        # batches are the chain 0 -> end(0) -> end(end(0)) ...
        starts = np.arange(count)
        ends = np.maximum(np.searchsorted(cum, cum[:-1] + batch_len, side="right") - 1, starts + 1)
        over = (ends > starts + 1) & (cum[ends] - cum[:-1] > batch_len)
        under = (ends < count) & (cum[np.minimum(ends + 1, count)] - cum[:-1] <= batch_len)
        for start in np.flatnonzero(over | under).tolist():  # rounding of cum[i] + batch_len
            end = start + 1
            while end < count and cum[end + 1] - cum[start] <= batch_len:
                end += 1
            ends[start] = end
        return _chain(ends, count)
    bounds, total = [0], 0
    for position, length in enumerate(lengths.tolist()):
        if position > bounds[-1] and total + length > batch_len:
            bounds.append(position)
            total = 0
        total += length
    if count:
        bounds.append(count)
    return np.array(bounds, dtype=np.int64)
