"""BlockIterator: batches with about the same total length ("rectangles of similar area")."""
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from speechiter.checks import check_positive_number
from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.iterator.view import Batches, batches_from_bounds, lengths_of, vectorised


class BlockIterator(Iterator):
    """Groups the sorted utterances into batches whose lengths add up to at
    most ``batch_len`` (samples for waveforms, frames for features).

    The rule: walk the sorted ids and add each one to the current batch; when
    adding it would push the batch's total past ``batch_len``, close the batch
    and start a new one with it. An utterance longer than ``batch_len`` gets
    a batch of its own. Unlike SpeeChain, which closes a batch once its total
    reaches ``batch_len`` (so batches overshoot by up to one utterance), a
    batch never exceeds the budget, which is what a GPU memory budget needs.
    """

    @vectorised
    def batches_generate_fn(self, data_index: Sequence[str], data_len: Optional[Mapping[str, float]],
                            batch_len: Optional[float] = None) -> Batches:
        if batch_len is None:
            raise ConfigError("batch_len", "missing; BlockIterator needs the total length of a batch")
        batch_len = check_budget(batch_len, "batch_len")
        if data_len is None:
            raise ConfigError("data_len", "BlockIterator needs utterance lengths: give data_len (an idx2 length "
                                          "file such as idx2wav_len) or use a dataset that registers them")
        return batches_from_bounds(data_index, block_bounds(lengths_of(data_index, data_len), batch_len))


def check_budget(value: Any, where: str) -> float:
    """check_positive_number, with the batching options' one wording for
    every bad value ("batch_len: expected a positive number, got 'abc'")."""
    try:
        return check_positive_number(value, where)
    except ConfigError:
        raise ConfigError(where, f"expected a positive number, got {value!r}") from None


def block_bounds(lengths: np.ndarray, batch_len: float) -> np.ndarray:
    """Batch offsets of the block rule over ``lengths`` in order.

    Whole lengths (the usual sample or frame counts): one binary search per
    batch in the exact running sums. Fractional lengths: the rule itself,
    summing in the same order as a plain Python loop would (same rounding).
    """
    lengths = np.asarray(lengths, dtype=np.float64)
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
        bounds, start = [0], 0
        while start < count:
            start = int(ends[start])
            bounds.append(start)
        return np.array(bounds, dtype=np.int64)
    bounds, total = [0], 0
    for position, length in enumerate(lengths.tolist()):
        if position > bounds[-1] and total + length > batch_len:
            bounds.append(position)
            total = 0
        total += length
    if count:
        bounds.append(count)
    return np.array(bounds, dtype=np.int64)
