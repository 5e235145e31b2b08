"""The torch engine: torch.utils.data.DataLoader over the same tasks, for comparison.

Its workers persist across epochs (``persistent_workers``) while the plan
changes every epoch; each builds a batch with speechiter.sequence.fetch, so
it gives the same batches as the msequence engine. See speechiter/engine.py.
"""
from typing import Any, Iterator, Optional, Sequence

from speechiter.device_steps import run_device_steps
from speechiter.sequence.fetch import Task, fetch
from speechiter.sequence.start import worker_start
from speechiter.structure import is_tensor, map_structure


class _TaskDataset:
    """torch Dataset whose items are whole batches: ``dataset[task]``."""

    def __init__(self, reader):
        self.reader = reader
        self.indexer = None

    def __getitem__(self, task: Task):
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
            context, _ = worker_start(reader, start_method)  # never a fork of this threaded process by default
            extra = dict(persistent_workers=True, prefetch_factor=prefetch_factor, multiprocessing_context=context)
        self.loader = torch.utils.data.DataLoader(_TaskDataset(reader), batch_size=None, sampler=self.sampler,
                                                  num_workers=num_workers, **extra)
        self.device = _device(out_type)

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()) -> Iterator[Any]:
        """The batches of ``tasks`` in order; ``lookahead`` is not used (the DataLoader prefetches
        ``prefetch_factor`` batches per worker within an epoch)."""
        import torch
        self.sampler.tasks = list(tasks)
        for batch in self.loader:
            batch = _to_device(batch, self.device) if self.device is not None else batch
            yield run_device_steps(batch, self.device or torch.device("cpu"))

    def close(self) -> None:
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
    """Every tensor of ``batch`` on ``device``, through pinned memory."""
    return map_structure(batch, lambda tensor: tensor.pin_memory().to(device, non_blocking=True), is_tensor)
