"""Iterator subclasses of the reference recipes: a list hook and an own epoch_view."""
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import BlockIterator


class LongestFirst(Iterator):
    """A list hook: batches of max_utts, the longest utterance alone."""

    def batches_generate_fn(self, data_index, data_len, max_utts: int = 4):
        longest = max(data_index, key=lambda uid: data_len[uid])
        rest = [uid for uid in data_index if uid != longest]
        return [[longest]] + [rest[i:i + max_utts] for i in range(0, len(rest), max_utts)]


class Rotating(BlockIterator):
    """An own epoch_view: the view rotated by the epoch."""

    def epoch_view(self, epoch):
        batches = list(self.batches)
        shift = epoch % len(batches)
        return batches[shift:] + batches[:shift]
