"""The adapter the engine calls to build a batch from a Dataset in each worker."""
from typing import Any, Dict, Sequence

from speechiter.dataset.abs import Dataset


class DatasetReader:
    """The engine's indexer: ``reader[ids]`` is the collated batch.

    It is also its own picklable factory (``reader()`` returns itself), so
    each worker gets a copy: pickled once per pool (fork server, spawn), inherited with fork. Datasets
    that hold open handles must open them lazily (see speechiter/io/arrays.py).
    """

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __call__(self) -> "DatasetReader":
        return self

    def __getitem__(self, ids: Sequence[str]) -> Dict[str, Any]:
        return self.dataset.get_batch(ids)
