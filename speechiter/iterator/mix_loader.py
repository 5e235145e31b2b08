"""Loading a mix: one reader for every corpus, and the Loader whose batches say their corpus.

See NOTE [ Mixing corpora ] in mix.py; a mixed epoch's plan and tasks are in speechiter/plan/mixed.py.
"""
from collections.abc import Sequence
from typing import Any, List

from speechiter.batch import Batch
from speechiter.loader import Loader
from speechiter.plan.mixed import CorpusIds


class MixReader:
    """The engine's reader factory and indexer for a mix: ``reader[ids]`` is the batch of ``ids`` built by
    the reader of corpus ``ids.corpus``. Picklable, built once per worker (``reader()``)."""

    def __init__(self, readers: Sequence[Any]):
        self.readers = list(readers)

    def __call__(self) -> "MixReader":
        return MixReader([reader() for reader in self.readers])

    def __getitem__(self, ids: CorpusIds):
        return self.readers[ids.corpus][list(ids)]

    def prepare(self, ids: CorpusIds) -> None:
        """Start the reads of the batch ``ids`` where its corpus's reader can (NOTE [ Reading ahead ])."""
        prepare = getattr(self.readers[ids.corpus], "prepare", None)
        if prepare is not None:
            prepare(list(ids))


class MixLoader(Loader):
    """The Loader of a mix: each batch also says its corpus (``batch.source``) and carries that corpus's
    group_info values (``batch.meta``). See NOTE [ Batch attributes ] in speechiter/batch.py."""

    def _corpus(self, offset: int) -> str:
        """The corpus of the ``offset``-th task of this loader."""
        return self.iterator.names[self.tasks.batches.locate(self.tasks.start + offset)[0]]

    def _attributes(self, offset: int):
        ids, padding, _ = super()._attributes(offset)
        return ids, padding, self.iterator.iterators[self._corpus(offset)].group_info

    def _attach(self, offset: int, batch):
        batch = super()._attach(offset, batch)
        if isinstance(batch, Batch):
            batch.source = self._corpus(offset)
        return batch


class Chained(Sequence):
    """Sequences read as one, the first's items first."""

    def __init__(self, parts: List[Sequence]):
        self.parts = parts

    def __len__(self):
        return sum(len(part) for part in self.parts)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        if item < 0:
            item += len(self)
        for part in self.parts:
            if 0 <= item < len(part):
                return part[item]
            item -= len(part)
        raise IndexError("batch index out of range")
