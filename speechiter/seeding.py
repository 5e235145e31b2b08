"""Per-batch random state.

Every batch is built under random state derived from (seed, epoch, position of
the batch in the epoch's full plan), never from which worker builds it. So the
output does not depend on the number of workers, threads or processes, nor on
where a run resumed. See handbook.md, "Reproducibility".
"""
import random
import threading
import zlib
from contextlib import contextmanager

import numpy as np

_local = threading.local()


def batch_seed(seed: int, epoch: int, position: int, stream: int = 0) -> int:
    """A 63-bit seed for one batch, mixed from (seed, epoch, position).

    ``stream`` separates independent seed streams that share one seed, such as
    the iterators of one group (``sup`` and ``unsup``) or distributed ranks.
    """
    entropy = [int(seed) & 0xFFFFFFFF, int(stream) & 0xFFFFFFFF, int(epoch), int(position)]
    state = np.random.SeedSequence(entropy).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def stream_id(name: str) -> int:
    """A stable 32-bit number for a stream name (``hash()`` is salted per process)."""
    return zlib.crc32(name.encode("utf-8"))


@contextmanager
def seeded(seed: int):
    """Run a block under the random state of one batch.

    Seeds Python's ``random``, numpy's global generator and torch's, and sets
    the generator that :func:`rng` returns in this thread.
    """
    previous = getattr(_local, "generator", None)
    _local.generator = np.random.default_rng(seed)
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    try:
        import torch
        torch.manual_seed(seed)
    except ImportError:  # torch is optional for the engine
        pass
    try:
        yield _local.generator
    finally:
        _local.generator = previous


def rng() -> np.random.Generator:
    """The numpy Generator of the batch being built in this thread.

    Use it in datasets and hooks for augmentation: its numbers depend only on
    (seed, epoch, batch position), also with thread workers, where the global
    generators of ``random`` and numpy are shared between threads. Outside a
    batch it returns a fresh, unseeded generator.
    """
    generator = getattr(_local, "generator", None)
    return generator if generator is not None else np.random.default_rng()
