"""Shared-memory transport of numpy payloads, with reusable slots.

A worker process walks the batch it built, copies every ndarray (and CPU
tensor) into a *slot* -- a POSIX shared-memory segment -- and sends only a
small :class:`Packed` message: the batch with each array replaced by an
:class:`ArrayRef` (offset, dtype, shape). The main process maps the same
segment and hands the consumer arrays that view it (see NOTE [ Zero-copy
batches ] in slots.py), or, for small batches and CUDA output, copies them
out. Array payloads are never pickled and buffers are not allocated per batch.

- segments.py: POSIX segments, the session prefix, leftover cleanup;
- pack.py: the pack format (Packer, ArrayRef, Packed, SlotReader) and the
  in-place Arena behind speechiter.batch_memory.batch_empty;
- slots.py: the slot table (main side) and the slot writer (worker side);
- stale.py: segment owners, and reclaiming the segments of crashed runs;
- pinning.py: page-locking slot mappings for CUDA copies.
"""
from speechiter.sequence.shm.pack import Arena, ArrayRef, Packed, Packer, SlotReader, torch_module
from speechiter.sequence.shm.segments import (close_map, create_segment, leftover_segments, open_segment,
                                              session_prefix, unlink_segment)
from speechiter.sequence.shm.slots import SHARE_MIN_BYTES, SlotRef, SlotTable, SlotWriter
from speechiter.sequence.shm.pinning import HostPins, cuda_host_pins
from speechiter.sequence.shm.stale import reclaim_stale

__all__ = ["Arena", "ArrayRef", "HostPins", "Packed", "Packer", "SHARE_MIN_BYTES", "SlotReader", "SlotRef",
           "SlotTable", "SlotWriter", "close_map", "create_segment", "cuda_host_pins", "leftover_segments",
           "open_segment", "reclaim_stale", "session_prefix", "torch_module", "unlink_segment"]
