"""The batch being built: one record per thread, one accessor.

# NOTE [ Batch context ]
While a batch is built (in a worker process or thread, or in the main
process), what its code needs beyond the ids travels in one record,
:class:`BatchContext`, which :func:`current_batch` returns, as torch's
``get_worker_info()`` returns its WorkerInfo:

- ``seed``, ``generator``: the batch's seed and the numpy Generator that
  ``speechiter.rng()`` returns (set by speechiter.seeding.seeded, which the
  engine's fetch calls); ``py_random`` and ``np_random``: the thread's own
  ``random`` and ``numpy.random`` states once thread workers isolate them
  (see NOTE [ Global generators and threads ] in seeding.py);
- ``allocator``: where ``batch_empty`` carves the padded arrays (the slot the
  batch will travel in; set around the build by a process worker, see
  speechiter/batch_memory.py);
- ``reads``: the reads started for the batch (a
  :class:`speechiter.io.coalesce.StartedReads`): its URL values' reads (see
  NOTE [ Reading a batch's URLs together ] in dataset/prefetch.py) or its
  byte-range values' coalesced reads (see NOTE [ Coalesced reads ] in
  speechiter/io/coalesce.py);
- ``expected_lengths``: ``(LengthMap, files)`` of the waveform length file the
  decoded audio is checked against, set by the reader the engine builds with
  (see NOTE [ Length files are checked ] in dataset/length_check.py).

The record holds what crosses modules only: what one module keeps for
itself while a batch is built (the files decoded once for a batch's views,
dataset/augment/views.py) stays in that module, per thread.

There is one record per thread, because thread workers build batches side by
side; whoever sets a field puts the previous value back when the batch is
built. Outside a batch every field is None. The record is read and written by
attribute, so it costs what the separate thread-locals it replaces cost.
"""
import threading
from typing import Any, Optional

__all__ = ["BatchContext", "current_batch"]


class BatchContext:
    """What the batch being built in this thread needs (see NOTE [ Batch context ])."""

    __slots__ = ("seed", "generator", "py_random", "np_random", "allocator", "reads", "expected_lengths")

    def __init__(self):
        self.seed: Optional[int] = None
        self.generator: Any = None  # numpy Generator
        self.py_random: Any = None  # random.Random, in isolated threads
        self.np_random: Any = None  # numpy RandomState, in isolated threads
        self.allocator: Any = None  # speechiter.batch_memory.BatchAllocator
        self.reads: Any = None  # speechiter.io.coalesce.StartedReads
        self.expected_lengths: Optional[tuple] = None  # (LengthMap, files)

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__
                           if getattr(self, name) is not None)
        return f"BatchContext({fields})"


_local = threading.local()


def current_batch() -> BatchContext:
    """The context of the batch being built in this thread (all None outside a batch)."""
    try:
        return _local.context
    except AttributeError:
        context = _local.context = BatchContext()
        return context
