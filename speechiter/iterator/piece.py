"""PieceIterator: a fixed number of utterances in every batch."""
from typing import Dict, List, Optional

from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.plan import vectorised


class PieceIterator(Iterator):
    """Cuts the sorted utterances into batches of exactly ``batch_size`` (the
    last batch holds the remainder). Mainly for evaluation, e.g. batch_size 1."""

    @vectorised
    def batches_generate_fn(self, data_index: List[str], data_len: Optional[Dict[str, float]],
                            batch_size: int = None) -> List[List[str]]:
        if batch_size is None:
            raise ConfigError("batch_size", "missing; PieceIterator needs the number of utterances per batch")
        return super().batches_generate_fn(data_index, data_len, batch_size)
