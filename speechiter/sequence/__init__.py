"""The msequence engine's parts: MSequence, schedulers, worker pools, shared-memory transport, converters."""
from speechiter.sequence.fetch import Task, fetch
from speechiter.sequence.msequence import MSequence
from speechiter.batch_memory import batch_empty

__all__ = ["MSequence", "Task", "batch_empty", "fetch"]
