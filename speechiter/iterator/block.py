"""BlockIterator: batches with about the same total length ("rectangles of similar area")."""
from typing import Dict, List, Optional

from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator, positive_number


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

    def batches_generate_fn(self, data_index: List[str], data_len: Optional[Dict[str, float]],
                            batch_len: float = None) -> List[List[str]]:
        if batch_len is None:
            raise ConfigError("batch_len", "missing; BlockIterator needs the total length of a batch")
        batch_len = positive_number(batch_len, "batch_len")
        if data_len is None:
            raise ConfigError("data_len", "BlockIterator needs utterance lengths: give data_len (an idx2 length "
                                          "file such as idx2wav_len) or use a dataset that registers them")
        return block_batches(data_index, [data_len[uid] for uid in data_index], batch_len)


def block_batches(ids: List[str], lengths: List[float], batch_len: float) -> List[List[str]]:
    """The block rule on ids in order (see BlockIterator)."""
    batches, current, total = [], [], 0
    for uid, length in zip(ids, lengths):
        if current and total + length > batch_len:
            batches.append(current)
            current, total = [], 0
        current.append(uid)
        total += length
    if current:
        batches.append(current)
    return batches
