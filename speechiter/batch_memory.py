"""Where the big arrays of a batch are allocated while it is built.

A Dataset asks :func:`batch_empty` for its padded arrays instead of
``np.empty``. Whoever builds the batch -- the engine, in a process worker --
may install an allocator in the batch's context first (see
NOTE [ Batch context ] in speechiter/batch_context.py); then the arrays are
carved from the memory the batch will travel in (see
NOTE [ Batch arrays in place ] in speechiter/sequence/shm/pack.py) and cross
to the main process without another copy. With no allocator installed (threads, the main process) or no room left,
they are plain ``np.empty`` arrays.

This module knows nothing about the engine, so the dataset layer does not
import it; the engine imports this module to install its allocator::

    previous = install_allocator(arena)
    try:
        ...  # build the batch
    finally:
        install_allocator(previous)
"""
from typing import Optional, Protocol, Tuple, Union

import numpy as np

from speechiter.batch_context import current_batch

Shape = Union[int, Tuple[int, ...]]


class BatchAllocator(Protocol):
    """Space for the batch being built (the engine's ``Arena``)."""

    def allocate(self, shape: Shape, dtype: np.dtype) -> Optional[np.ndarray]:
        """An uninitialised C-contiguous array, or None when there is no room."""


def install_allocator(allocator: Optional[BatchAllocator]) -> Optional[BatchAllocator]:
    """Make ``allocator`` serve :func:`batch_empty` in this thread's batch (None: numpy).

    Returns the allocator it replaces, to put back when the batch is built.
    """
    context = current_batch()
    previous, context.allocator = context.allocator, allocator
    return previous


def current_allocator() -> Optional[BatchAllocator]:
    """The allocator installed in this thread's batch, if any."""
    return current_batch().allocator


def batch_empty(shape: Shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised array for the batch being built.

    In a process worker it is carved from the shared-memory slot the batch
    will travel in, so it crosses to the main process without another copy;
    elsewhere (threads, the main process, no room) it is ``np.empty``. Fill
    every element (padding included), and do not keep it after the batch is
    returned: its memory is reused for later batches.
    """
    allocator = current_allocator()
    array = allocator.allocate(shape, dtype) if allocator is not None else None
    return array if array is not None else np.empty(shape, dtype)

