"""A mix's epochs as values: the MixPlanner, a mixed epoch's plan and its tasks.

Step ``s`` of mixed epoch ``e`` is global step ``g = (e - 1) * batches_per_epoch + s``; the schedule
(schedule.py) names its corpus and how many batches that corpus gave before it, ``c``; the corpus stands at
its own epoch and step ``stream_position(c, len(corpus))`` (the stream of epochs of ``steps: longest``,
steps.py), and the task is that corpus's own task there: its ids and its own per-batch seed, from the
corpus's own EpochPlanner. See NOTE [ Mixing corpora ] in speechiter/iterator/mix.py. After a resume under a
changed mix, ``g`` counts the steps since the schedule's start and each corpus's ``c`` adds its count there
(NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py).
"""
import threading
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from speechiter.checks import check_int
from speechiter.errors import ConfigError
from speechiter.plan.epochs import EpochPlanner
from speechiter.plan.layout import Layout
from speechiter.plan.schedule import MixSchedule, ScheduleStart
from speechiter.plan.steps import stream_position
from speechiter.plan.tasks import EpochTasks, check_epoch
from speechiter.sequence.fetch import Task

#: own epochs of each corpus whose plans a mix keeps (the current one, the next, lookahead)
KEPT_EPOCHS = 4
#: positions whose corpus and own position a MixedPlan remembers
LOCATED_KEPT = 4096


class CorpusIds(list):
    """A batch's ids, tagged with the index of the corpus they come from (what the mix's reader reads)."""

    def __init__(self, corpus: int, ids: Sequence[str]):
        super().__init__(ids)
        self.corpus = corpus

    def __reduce__(self):
        return CorpusIds, (self.corpus, list(self))


class MixPlanner:
    """A mix's epochs: ``batches_per_epoch`` steps each, the corpus of every step by ``schedule``, each
    corpus's batches by its own ``planners`` (``{name: EpochPlanner}``, in the schedule's order); ``start``:
    where the schedule began (None: at the mix's first step; NOTE [ Changed mix ]). Each corpus's own epoch
    plans are kept, the last KEPT_EPOCHS of each; safe to ask from several threads."""

    def __init__(self, planners: Dict[str, EpochPlanner], schedule: MixSchedule, batches_per_epoch: int,
                 seed: int, stream: int, start: Optional[ScheduleStart] = None):
        self.planners, self.schedule, self.start = dict(planners), schedule, start
        self.names: List[str] = list(self.planners)
        self.batches_per_epoch, self.seed, self.stream = batches_per_epoch, seed, stream
        self.sizes = [len(planner) for planner in self.planners.values()]
        self._counts = [0] * len(self.names) if start is None else [start.counts[name] for name in self.names]
        self._own: List["OrderedDict[int, EpochTasks]"] = [OrderedDict() for _ in self.names]
        self._lock = threading.Lock()

    def __len__(self):
        return self.batches_per_epoch

    @property
    def layout(self) -> Layout:
        """The corpora's layout (each corpus's epoch records its own in a state)."""
        return next(iter(self.planners.values())).layout

    def layout_of(self, epoch: int) -> Layout:
        return self.layout

    def epoch_len(self, epoch: int) -> int:
        """``batches_per_epoch``, or the saved run's length of the epoch in which the schedule started."""
        start = self.start
        return start.epoch_steps if start is not None and epoch == start.epoch else len(self)

    def scheduled(self, epoch: int, step: int) -> Optional[int]:
        """The schedule's steps done when ``step`` steps of ``epoch`` are: the global step, or the steps since
        the schedule's start; None before it (an earlier schedule's; NOTE [ Changed mix ])."""
        start = self.start
        if start is None:
            return (epoch - 1) * len(self) + step
        if (epoch, step) < (start.epoch, start.step):
            return None
        if epoch == start.epoch:
            return step - start.step
        return start.epoch_steps - start.step + (epoch - start.epoch - 1) * len(self) + step

    def check_planned(self, epoch: int, done: int, where: str, step: int) -> int:
        """The schedule's steps done when ``done`` steps of ``epoch`` are, else (before its start) a ConfigError
        (``step``: the step asked for)."""
        scheduled = self.scheduled(epoch, done)
        if scheduled is None:
            raise ConfigError(where, f"the mix's schedule started after {self.start} (a resume under a changed "
                                     f"mix), so its earlier steps cannot be planned: got epoch {epoch} step {step}")
        return scheduled

    def with_start(self, start: Optional[ScheduleStart]) -> "MixPlanner":
        """This planner with its schedule started at ``start``."""
        return MixPlanner(self.planners, self.schedule, self.batches_per_epoch, self.seed, self.stream, start)

    def own_tasks(self, corpus: int, epoch: int) -> EpochTasks:
        """All tasks of corpus ``corpus``'s own ``epoch``."""
        with self._lock:
            kept = self._own[corpus]
            tasks = kept.get(epoch)
            if tasks is None:
                tasks = kept[epoch] = self.planners[self.names[corpus]].tasks(epoch)
                if len(kept) > KEPT_EPOCHS:
                    kept.popitem(last=False)
            return tasks

    def corpus_of(self, epoch: int, step: int) -> str:
        """The corpus of step ``step`` (from 1) of ``epoch``."""
        return self.names[self.schedule.source(self.check_planned(epoch, step - 1, "source_of", step))]

    def own_positions(self, epoch: int, step: int) -> Dict[str, Tuple[int, int]]:
        """``{corpus: (its own epoch, its steps of it done)}`` once ``step`` steps of mixed ``epoch`` are done."""
        counts = self.schedule.counts(self.check_planned(epoch, step, "state", step))
        return {name: stream_position(before + count, size)
                for name, before, count, size in zip(self.names, self._counts, counts, self.sizes)}

    def own_count(self, scheduled: int) -> Tuple[int, int]:
        """``(corpus of the schedule's step scheduled, batches of its stream it gave before)``."""
        found, count = self.schedule.locate(scheduled)
        return found, self._counts[found] + count

    def plan(self, epoch: int) -> "MixedPlan":
        return MixedPlan(self, check_epoch(epoch))

    def tasks(self, epoch: int, start_step: int = 0) -> "MixTasks":
        """The engine's tasks of mixed epoch ``epoch`` from ``start_step`` on (see NOTE [ Mixing corpora ])."""
        epoch = check_epoch(epoch)
        start_step = check_int(start_step, "start_step", minimum=0)
        steps = self.epoch_len(epoch)
        if start_step > steps:
            raise ConfigError("start_step", f"epoch {epoch} has {steps} batches, got start_step={start_step}")
        # tasks before the schedule's start are refused when read (a Loader is built, then loads its state)
        return MixTasks(MixedPlan(self, epoch), start_step, steps, self.seed, epoch, self.stream)

    def continue_from(self, saved) -> "MixPlanner":
        """A planner whose corpora continue the epochs they were in (``saved.corpora``, a MixState's, checked
        to name every corpus) on the layouts they were saved with, under the saved schedule start
        (``saved.start``); their own epochs must keep their length (the mix walks each corpus through epochs
        of one length), else a ConfigError."""
        planners = {}
        for name, planner in self.planners.items():
            state = saved.corpora[name]
            planners[name] = planner.continue_from(state)
            if planners[name].epoch_len(state.epoch) != len(planner):
                raise ConfigError(f"state.sources.{name}.layout", f"a mix cannot continue epoch {state.epoch} of "
                                  f"{name} on a layout that changes its length: "
                                  f"{planners[name].epoch_len(state.epoch)} batches under {state.layout}, "
                                  f"{len(planner)} under {planner.layout}")
        return MixPlanner(planners, self.schedule, self.batches_per_epoch, self.seed, self.stream, saved.start)


class MixedPlan:
    """Mixed epoch ``epoch``'s full plan: position -> the corpus's own batch there. Reads like a BatchView
    where the Loader needs one (ids, padding rows, sizes)."""

    def __init__(self, planner: MixPlanner, epoch: int):
        self.planner, self.epoch = planner, epoch
        self._located: Dict[int, Tuple[int, int, int]] = {}  # the task, ids and padding ask for each position

    def __len__(self):
        return self.planner.epoch_len(self.epoch)

    def locate(self, position: int) -> Tuple[int, int, int]:
        """``(corpus, its own epoch, its own step)`` of the batch at ``position`` of this epoch."""
        located = self._located.get(position)
        if located is None:
            # the schedule's step of this position (See NOTE [ Changed mix ])
            scheduled = self.planner.check_planned(self.epoch, position, "build_loader", position + 1)
            corpus, consumed = self.planner.own_count(scheduled)
            located = (corpus, *stream_position(consumed, self.planner.sizes[corpus]))
            if len(self._located) >= LOCATED_KEPT:
                self._located.clear()
            self._located[position] = located
        return located

    def own_tasks(self, position: int) -> Tuple[int, EpochTasks, int]:
        corpus, epoch, step = self.locate(position)
        return corpus, self.planner.own_tasks(corpus, epoch), step

    def task(self, position: int) -> Task:
        """The engine's task at ``position``: the corpus's own task (ids, seed), its ids tagged with the corpus."""
        corpus, tasks, step = self.own_tasks(position)
        own = tasks[step]
        return Task(position, CorpusIds(corpus, own.ids), own.seed)

    def __getitem__(self, position: int) -> List[str]:
        corpus, tasks, step = self.own_tasks(position)
        return tasks.batches[step]

    def padding_of(self, position: int) -> Optional[List[bool]]:
        corpus, tasks, step = self.own_tasks(position)
        return tasks.batches.padding_of(step)

    def sizes(self) -> np.ndarray:
        """Utterances of every batch of the epoch (0 for the steps of an earlier schedule: NOTE [ Changed mix ])."""
        sizes = []
        for position in range(len(self)):
            if self.planner.scheduled(self.epoch, position) is None:
                sizes.append(0)
                continue
            corpus, tasks, step = self.own_tasks(position)
            sizes.append(len(tasks.batches[step]))
        return np.array(sizes, dtype=np.int64)

    def tolist(self) -> List[List[str]]:
        return [self[position] for position in range(len(self))]


class MixTasks(EpochTasks):
    """A mixed epoch's tasks ``[start, stop)`` of ``batches`` (a MixedPlan), each built when it is read."""

    def __getitem__(self, item):
        if isinstance(item, slice):
            part = super().__getitem__(item)
            return MixTasks(self.batches, part.start, part.stop, self.seed, self.epoch, self.stream)
        if not -len(self) <= item < len(self):
            raise IndexError(item)
        return self.batches.task(self.start + item % len(self))
