"""PieceIterator: a fixed number of utterances in every batch."""
from typing import Mapping, Optional, Sequence

from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.plan.view import Batches, cacheable, vectorised


class PieceIterator(Iterator):
    """Cuts the sorted utterances into batches of exactly ``batch_size`` (the
    last batch holds the remainder). Mainly for evaluation, e.g. batch_size 1."""

    @cacheable
    @vectorised
    def batches_generate_fn(self, data_index: Sequence[str], data_len: Optional[Mapping[str, float]],
                            batch_size: Optional[int] = None) -> Batches:
        if batch_size is None:
            raise ConfigError("batch_size", "missing; PieceIterator needs the number of utterances per batch")
        return super().batches_generate_fn(data_index, data_len, batch_size)
