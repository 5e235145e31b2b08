"""The reader factory: what the engine calls to build a batch from a Dataset in each worker."""
from typing import Any, Dict, Optional, Sequence

from speechiter.batch_context import current_batch
from speechiter.dataset.abs import Dataset
from speechiter.dataset.prefetch import under_way


class DatasetReader:
    """The engine's indexer: ``reader[ids]`` is the collated batch.

    It is also its own picklable factory (``reader()`` returns itself), so
    each worker gets a copy: pickled once per pool (fork server, spawn), inherited with fork. Datasets
    that hold open handles must open them lazily (see speechiter/io/arrays.py).

    ``expected_lengths``: ``(LengthMap, files)`` of a waveform length file,
    which each batch's decoded audio is checked against; the reader puts it in
    the batch's context (see NOTE [ Batch context ] in speechiter/batch_context.py
    and NOTE [ Length files are checked ] in length_check.py).
    """

    def __init__(self, dataset: Dataset, expected_lengths: Optional[tuple] = None):
        self.dataset = dataset
        self.expected_lengths = expected_lengths

    def __call__(self) -> "DatasetReader":
        return self

    def __getitem__(self, ids: Sequence[str]) -> Dict[str, Any]:
        context = current_batch()
        previous, context.expected_lengths = context.expected_lengths, self.expected_lengths
        try:
            return self.dataset.get_batch(ids)
        finally:
            context.expected_lengths = previous

    def prepare(self, ids: Sequence[str]) -> bool:
        """Start the reads of the batch ``ids``, built soon by this thread (see
        NOTE [ Reading ahead ] in prefetch.py); a dataset without ``prepare_batch`` reads nothing ahead.

        Returns whether reads of the batch are under way (False: nothing to read ahead, as for local files).
        """
        prepare_batch = getattr(self.dataset, "prepare_batch", None)
        if prepare_batch is None:
            return False
        started = prepare_batch(ids)  # whether this dataset's reads started: another's may share the ids
        return under_way(ids) if started is None else bool(started)
