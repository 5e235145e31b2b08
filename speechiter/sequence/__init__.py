"""The MSequence engine: scheduler, workers, shared-memory transport, converters."""
from speechiter.sequence.fetch import Task, fetch
from speechiter.sequence.msequence import MSequence

__all__ = ["MSequence", "Task", "fetch"]
