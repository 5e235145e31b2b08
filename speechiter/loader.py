"""Loaders: one epoch of an Iterator's plan, run on the chosen engine.

An Iterator owns one engine for its whole life (workers persist across
epochs); each :class:`Loader` sends it the epoch's tasks and yields batches
in plan order. Engines:

- ``msequence``: speechiter.sequence.MSequence workers (processes or threads);
  ``num_workers=0`` builds batches in the main process.
- ``inline``: MSequence.start_test(), everything in the main process (pdb).
- ``torch``: torch's DataLoader with persistent workers over the same plan,
  for side-by-side comparison.

All three build a batch with speechiter.sequence.fetch, so they give the same
batches.
"""
import time
import weakref
from typing import Any, Dict, List, Optional

from speechiter.dataset.abs import DatasetReader
from speechiter.state import LoaderState


class Loader:
    """An iterable over one epoch's batches, from ``start_step`` on.

    ``tasks`` holds the plan: each task's ``position`` (step - 1) and ``ids``.
    After iterating, ``first_batch_s`` is the time to the first batch and
    ``wait_s`` the time the consumer spent waiting for batches.
    """

    def __init__(self, iterator, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                 stop_step: Optional[int] = None):
        self.iterator = iterator
        self.prefetch_next = prefetch_next
        self.stop_step = stop_step
        self._start_at(epoch, start_step)

    def _start_at(self, epoch: int, start_step: int):
        """Plan ``epoch`` from ``start_step`` on, with fresh timings."""
        self.epoch = epoch
        self.tasks = self.iterator.epoch_tasks(epoch, start_step)
        if self.stop_step is not None:
            self.tasks = self.tasks[:max(0, self.stop_step - start_step)]
        self.start_step = start_step
        self.step = start_step  # steps of this epoch consumed so far
        self.first_batch_s: Optional[float] = None
        self.wait_s = 0.0

    def state_dict(self) -> Dict[str, Any]:
        """Where this loader stands: resume with :meth:`load_state_dict`. See speechiter.state."""
        return LoaderState.of(self.iterator, self.epoch, self.step).to_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a saved state: the next batch is the one after it.

        Raises a ConfigError if the state is malformed or belongs to another configuration.
        """
        saved = LoaderState.from_dict(state)
        saved.check_fits(self.iterator)
        self._start_at(saved.epoch, saved.step)

    def __len__(self):
        return len(self.tasks)

    @property
    def plan(self) -> List[List[str]]:
        return [task.ids for task in self.tasks]

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

    def __iter__(self):
        engine = engine_of(self.iterator)
        lookahead = self._following_tasks(self.iterator.buffer) if self.prefetch_next else ()
        started = time.perf_counter()
        batches = engine.iterate(self.tasks, lookahead)
        try:
            while True:
                waited = time.perf_counter()
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                now = time.perf_counter()
                self.wait_s += now - waited
                if self.first_batch_s is None:
                    self.first_batch_s = now - started
                self.step += 1
                yield batch
        finally:
            batches.close()


def engine_of(iterator):
    """The iterator's engine, started on first use."""
    if iterator._loader_engine is None:
        iterator._loader_engine = _make_engine(iterator)
        weakref.finalize(iterator, iterator._loader_engine.close)
    return iterator._loader_engine


def _make_engine(iterator):
    reader = DatasetReader(iterator.dataset)
    if iterator.engine == "torch":
        return TorchEngine(reader, iterator.num_workers, iterator.out_type, start_method=iterator.start_method)
    from speechiter.sequence import MSequence
    workers = 0 if iterator.engine == "inline" else iterator.num_workers
    sequence = MSequence(reader, dset_size=len(iterator.dataset), num_workers=workers, batch_size=1,
                         buffer=iterator.buffer, shuffle=False, thread_type=iterator.thread_type,
                         start_method=iterator.start_method,
                         out_type=iterator.out_type)
    return _SequenceEngine(sequence, in_process=workers == 0)


class _SequenceEngine:
    def __init__(self, sequence, in_process: bool):
        self.sequence = sequence
        self.in_process = in_process
        self.started = False

    def iterate(self, tasks, lookahead=()):
        # Leaving a loop early finishes the sequence (no workers outlive an
        # abandoned epoch); the next epoch starts it again.
        if not self.started or not self.sequence.running:
            if self.in_process:
                self.sequence.start_test("default")
            else:
                self.sequence.start()
            self.started = True
        return self.sequence.iterate(tasks, lookahead=lookahead)

    def close(self):
        if self.started:
            self.sequence.finish()
            self.started = False


class _TaskDataset:
    """torch Dataset whose items are whole batches: ``dataset[task]``."""

    def __init__(self, reader):
        self.reader = reader
        self.indexer = None

    def __getitem__(self, task):
        from speechiter.sequence import fetch
        if self.indexer is None:
            self.indexer = self.reader()
        return fetch(self.indexer, task)


class _PlanSampler:
    """A sampler whose plan changes every epoch while the workers persist."""

    def __init__(self):
        self.tasks = []

    def __iter__(self):
        return iter(self.tasks)

    def __len__(self):
        return len(self.tasks)


class TorchEngine:
    """torch.utils.data.DataLoader over the same tasks (persistent workers,
    prefetch_factor 4), for comparison with msequence."""

    def __init__(self, reader, num_workers: int, out_type: str, prefetch_factor: int = 4,
                 start_method: Optional[str] = None):
        import torch.utils.data
        self.sampler = _PlanSampler()
        extra = {}
        if num_workers > 0:
            extra = dict(persistent_workers=True, prefetch_factor=prefetch_factor, multiprocessing_context=start_method)
        self.loader = torch.utils.data.DataLoader(_TaskDataset(reader), batch_size=None, sampler=self.sampler,
                                                  num_workers=num_workers, **extra)
        self.device = _device(out_type)
        self.out_type = out_type

    def iterate(self, tasks, lookahead=()):
        self.sampler.tasks = list(tasks)
        for batch in self.loader:
            yield _to_device(batch, self.device) if self.device is not None else batch

    def close(self):
        iterator = getattr(self.loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        self.loader = None


def _device(out_type: str):
    import torch
    if out_type.startswith("cuda") and torch.cuda.is_available():
        return torch.device(out_type)
    return None


def _to_device(batch, device):
    import torch
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory().to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch
