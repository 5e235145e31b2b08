"""Loaders: one epoch of an Iterator's plan, run on the Iterator's engine.

An Iterator owns one engine for its whole life (workers persist across
epochs; see speechiter/engine.py); each :class:`Loader` sends it the epoch's
tasks, and the first tasks of the epochs after as lookahead, and yields
batches in plan order, each a :class:`speechiter.batch.Batch` carrying its
ids (see NOTE [ Batch attributes ] in speechiter/batch.py).
"""
import time
from typing import Any, Dict, Iterable, List, Optional

from speechiter.batch import attach
from speechiter.sequence.timing import BatchTiming
from speechiter.skips import SkipLog, is_empty
from speechiter.state import check_changes, check_step
from speechiter.state_versions import read_loader_state


class Loader:
    """An iterable over one epoch's batches, from ``start_step`` on.

    ``tasks`` holds the plan: each task's ``position`` (step - 1) and ``ids``.
    After iterating, ``first_batch_s`` is the time to the first batch and
    ``wait_s`` the time the consumer spent waiting for batches. A step whose
    every utterance was skipped (``on_bad_audio: skip``) is counted but not
    yielded, unless ``keep_empty`` (NOTE [ Empty steps ] in speechiter/skips.py).
    """

    def __init__(self, iterator, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                 stop_step: Optional[int] = None, keep_empty: bool = False):
        self.iterator = iterator
        self.prefetch_next = prefetch_next
        self.stop_step = stop_step
        self.keep_empty = keep_empty
        self.resume_notes: List[str] = []  # what a resume under a changed mix carried over (load_state_dict)
        self._start_at(epoch, start_step)

    def _start_at(self, epoch: int, start_step: int):
        """Plan ``epoch`` from ``start_step`` on, with fresh timings."""
        self.epoch = epoch
        self.tasks = self.iterator.epoch_tasks(epoch, start_step)
        if self.stop_step is not None:
            self.tasks = self.tasks[:max(0, self.stop_step - start_step)]
        self.start_step = start_step
        self.step = start_step  # steps of this epoch consumed so far
        self._timing = BatchTiming()

    @property
    def first_batch_s(self) -> Optional[float]:
        """Seconds from starting to iterate to the first batch (None before it)."""
        return self._timing.first_batch_s

    @property
    def wait_s(self) -> float:
        """Seconds the consumer spent waiting for batches."""
        return self._timing.wait_s

    def state_dict(self) -> Dict[str, Any]:
        """Where this loader stands: resume with :meth:`load_state_dict`. See speechiter.state."""
        return self.iterator.state_at(self.epoch, self.step).to_dict()

    def load_state_dict(self, state: Dict[str, Any], allow_changes: Iterable[str] = ()) -> None:
        """Continue from a saved state (of any supported version): the next batch is the one after it, the
        rest of its epoch as the saved run planned it when saved on another layout (ranks, ngpu; see
        NOTE [ Elastic resume ] in speechiter/plan/layout.py). ``allow_changes=["mix"]``: a mix's state also
        resumes under changed weights, batches_per_epoch or corpora (NOTE [ Changed mix ] in
        speechiter/iterator/mix_changes.py); ``resume_notes`` then says what carried over.

        Raises a ConfigError, and changes nothing, if the state is malformed or belongs to another
        configuration.
        """
        changes = check_changes(allow_changes)
        saved, notes = self.iterator.carry_over(read_loader_state(state), changes, "state")
        saved.check_setup(self.iterator)
        planner = self.iterator.planner.continue_from(saved)  # See NOTE [ Elastic resume ]
        check_step(saved.step, planner.epoch_len(saved.epoch), saved.epoch, "state.step")
        self.iterator.planner = planner
        self.resume_notes = notes
        self._start_at(saved.epoch, saved.step)

    def __len__(self):
        return len(self.tasks)

    @property
    def plan(self) -> List[List[str]]:
        return [task.ids for task in self.tasks]

    def epoch_utterances(self) -> int:
        """Utterances (rows) in this loader's whole epoch, for max_bad_fraction (speechiter/skips.py)."""
        plan = getattr(self.tasks, "batches", None)
        if plan is None:  # an epoch_tasks override that returns plain tasks
            return sum(len(task.ids) for task in self.tasks)
        return int(plan.sizes().sum())

    def _attributes(self, offset: int):
        """The ids, padding rows and group_info columns of the ``offset``-th task of this loader."""
        tasks, group_info = self.tasks, self.iterator.group_info
        plan = getattr(tasks, "batches", None)
        if plan is None:  # an epoch_tasks override that returns plain tasks
            return tasks[offset].ids, None, group_info
        position = tasks.start + offset
        return plan[position], plan.padding_of(position), group_info

    def _following_tasks(self, count: int) -> List:
        """The first ``count`` tasks after this epoch: the next epoch's, then,
        if it is shorter, the one after's, and so on."""
        tasks, epoch = [], self.epoch
        while len(tasks) < count:
            epoch += 1
            following = self.iterator.epoch_tasks(epoch)
            if not len(following):
                break
            tasks.extend(following[:count - len(tasks)])
        return tasks

    def _attach(self, offset: int, batch):
        """The engine's ``offset``-th batch with its attributes (NOTE [ Batch attributes ] in batch.py)."""
        ids, padding, group_info = self._attributes(offset)
        return attach(batch, ids, group_info, padding)

    def __iter__(self):
        steps = self.all_steps()
        try:
            for batch in steps:
                if self.keep_empty or not is_empty(batch):
                    yield batch
        finally:
            steps.close()  # leaving early ends the engine's run at once (NOTE [ Shutdown order ])

    def all_steps(self):
        """Every step's batch, an empty one included (NOTE [ Empty steps ] in speechiter/skips.py)."""
        engine = self.iterator.engine()
        lookahead = self._following_tasks(self.iterator.engine_settings.lookahead) if self.prefetch_next else ()
        started = time.perf_counter()  # the time to the first batch includes starting the workers
        batches = self._timing.timed(engine.iterate(self.tasks, lookahead), started)
        skips = SkipLog(self)
        try:
            for offset, batch in enumerate(batches):
                self.step += 1
                batch = self._attach(offset, batch)
                skips.add(batch)
                yield batch
        except GeneratorExit:
            skips.warn()
            raise
        else:
            skips.warn()
        finally:
            batches.close()
