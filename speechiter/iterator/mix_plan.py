"""One epoch of a mixed iterator as the engine's tasks, and the reader that builds them in one set of workers.

Step ``s`` of mixed epoch ``e`` is global step ``g = (e - 1) * batches_per_epoch + s``; the schedule
(schedule.py) names its corpus and how many batches that corpus gave before it, ``c``; the corpus stands at
its own epoch and step ``stream_position(c, len(corpus))`` (the stream of epochs of ``steps: longest``,
speechiter/group.py), and the task is that corpus's own task there: its ids and its own per-batch seed.
See NOTE [ Mixing corpora ] in mix.py.
"""
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from speechiter.batch import Batch
from speechiter.group import stream_position
from speechiter.iterator.tasks import EpochTasks
from speechiter.loader import Loader

#: own epochs of each corpus whose plans a mixed iterator keeps (the current one, the next, lookahead)
KEPT_EPOCHS = 4
#: positions whose corpus and own position a MixPlan remembers
LOCATED_KEPT = 4096


class SourceIds(list):
    """A batch's ids, tagged with the index of the corpus they come from (what :class:`MixReader` reads)."""

    def __init__(self, source: int, ids: Sequence[str]):
        super().__init__(ids)
        self.source = source

    def __reduce__(self):
        return SourceIds, (self.source, list(self))


class MixReader:
    """The engine's reader factory and indexer for a mix: ``reader[ids]`` is the batch of ``ids`` built by
    the reader of corpus ``ids.source``. Picklable, built once per worker (``reader()``)."""

    def __init__(self, readers: Sequence[Any]):
        self.readers = list(readers)

    def __call__(self) -> "MixReader":
        return MixReader([reader() for reader in self.readers])

    def __getitem__(self, ids: SourceIds):
        return self.readers[ids.source][list(ids)]

    def prepare(self, ids: SourceIds) -> None:
        """Start the reads of the batch ``ids`` where its corpus's reader can (NOTE [ Reading ahead ])."""
        prepare = getattr(self.readers[ids.source], "prepare", None)
        if prepare is not None:
            prepare(list(ids))


class OwnPlans:
    """Each corpus's own epoch plans (``Iterator.epoch_tasks``), the last KEPT_EPOCHS of each kept; safe to
    ask from several threads."""

    def __init__(self, iterators: Sequence[Any]):
        self.iterators = list(iterators)
        self._plans: List["OrderedDict[int, EpochTasks]"] = [OrderedDict() for _ in self.iterators]
        self._lock = threading.Lock()

    def forget(self):
        """Drop the kept plans (a corpus continues an epoch on another layout)."""
        with self._lock:
            for plans in self._plans:
                plans.clear()

    def get(self, source: int, epoch: int) -> EpochTasks:
        with self._lock:
            plans = self._plans[source]
            plan = plans.get(epoch)
            if plan is None:
                plan = plans[epoch] = self.iterators[source].epoch_tasks(epoch)
                if len(plans) > KEPT_EPOCHS:
                    plans.popitem(last=False)
            return plan


class MixPlan:
    """Mixed epoch ``epoch``'s full plan: position -> the corpus's own batch there. Reads like a BatchView
    where the Loader needs one (ids, padding rows, sizes)."""

    def __init__(self, mix, epoch: int):
        self.mix, self.epoch = mix, epoch
        self.first = (epoch - 1) * len(mix)  # the global step of position 0
        self._located: Dict[int, Tuple[int, int, int]] = {}  # the task, ids and padding ask for each position

    def __len__(self):
        return len(self.mix)

    def locate(self, position: int) -> Tuple[int, int, int]:
        """``(corpus, its own epoch, its own step)`` of the batch at ``position`` of this epoch."""
        located = self._located.get(position)
        if located is None:
            source, consumed = self.mix.schedule.locate(self.first + position)
            located = (source, *stream_position(consumed, self.mix.sizes[source]))
            if len(self._located) >= LOCATED_KEPT:
                self._located.clear()
            self._located[position] = located
        return located

    def own_tasks(self, position: int) -> Tuple[int, EpochTasks, int]:
        source, epoch, step = self.locate(position)
        return source, self.mix.own_plans.get(source, epoch), step

    def task(self, position: int):
        """The engine's task at ``position``: the corpus's own task (ids, seed), its ids tagged with the corpus."""
        source, tasks, step = self.own_tasks(position)
        own = tasks[step]
        return type(own)(position, SourceIds(source, own.ids), own.seed)

    def __getitem__(self, position: int) -> List[str]:
        source, tasks, step = self.own_tasks(position)
        return tasks.batches[step]

    def padding_of(self, position: int) -> Optional[List[bool]]:
        source, tasks, step = self.own_tasks(position)
        return tasks.batches.padding_of(step)

    def sizes(self) -> np.ndarray:
        """Utterances of every batch of the epoch."""
        sizes = []
        for position in range(len(self)):
            source, tasks, step = self.own_tasks(position)
            sizes.append(len(tasks.batches[step]))
        return np.array(sizes, dtype=np.int64)

    def tolist(self) -> List[List[str]]:
        return [self[position] for position in range(len(self))]


class MixTasks(EpochTasks):
    """A mixed epoch's tasks ``[start, stop)`` of ``batches`` (a MixPlan), each built when it is read."""

    def __getitem__(self, item):
        if isinstance(item, slice):
            part = super().__getitem__(item)
            return MixTasks(self.batches, part.start, part.stop, self.seed, self.epoch, self.stream)
        if not -len(self) <= item < len(self):
            raise IndexError(item)
        return self.batches.task(self.start + item % len(self))


class MixLoader(Loader):
    """The Loader of a mixed iterator: each batch also says its corpus (``batch.source``) and carries that
    corpus's group_info values (``batch.meta``). See NOTE [ Batch attributes ] in speechiter/batch.py."""

    def _source(self, offset: int) -> str:
        """The corpus of the ``offset``-th task of this loader."""
        return self.iterator.names[self.tasks.batches.locate(self.tasks.start + offset)[0]]

    def _attributes(self, offset: int):
        ids, padding, _ = super()._attributes(offset)
        return ids, padding, self.iterator.iterators[self._source(offset)].group_info

    def _attach(self, offset: int, batch):
        batch = super()._attach(offset, batch)
        if isinstance(batch, Batch):
            batch.source = self._source(offset)
        return batch
