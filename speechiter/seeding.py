"""Per-batch random state.

Every batch is built under random state derived from (seed, epoch, position of
the batch in the epoch's full plan), never from which worker builds it. So the
output does not depend on the number of workers, threads or processes, nor on
where a run resumed. See handbook.md, "Reproducibility". The batch's generators
live in its context (see NOTE [ Batch context ] in speechiter/batch_context.py).
"""
import hashlib
import random
import sys
import struct
import threading
import zlib
from contextlib import ExitStack, contextmanager
from typing import Optional, Tuple

import numpy as np

from speechiter.batch_context import current_batch

_spares = threading.local()  # RandomStates to reseed, per thread
_MASK64 = (1 << 64) - 1


def batch_seed(seed: int, epoch: int, position: int, stream: int = 0) -> int:
    """A 63-bit seed for one batch, mixed from (seed, epoch, position).

    ``stream`` separates independent seed streams that share one seed, such as
    the iterators of one group (``sup`` and ``unsup``) or distributed ranks.
    An unkeyed BLAKE2b of the four numbers: about a microsecond, so a plan of
    100k batches costs 0.1 s.
    """
    data = struct.pack("<4Q", *(int(x) & _MASK64 for x in (seed, stream, epoch, position)))
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


@contextmanager
def _random_state(seed: int):
    """``np.random.RandomState(seed)``, reseeded from this thread's spares.

    Building a RandomState seeds a SeedSequence from os.urandom first (~95 us);
    reseeding one gives the same numbers in ~2 us, which counts once per batch
    and at every boundary of short epochs.
    """
    spares = _spares.__dict__.setdefault("states", [])
    state = spares.pop() if spares else np.random.RandomState(0)
    state.seed(seed)
    try:
        yield state
    finally:
        spares.append(state)


def permutation(seed: int, n: int) -> np.ndarray:
    """``np.random.RandomState(seed).permutation(n)``: the epoch shuffle."""
    with _random_state(seed) as state:
        return state.permutation(n)


def cumulative_order(seed: int, epoch: int, n: int, since: Optional[Tuple[int, np.ndarray]] = None) -> np.ndarray:
    """SpeeChain's in-place shuffle, epochs 1..``epoch`` composed.

    SpeeChain shuffles its own list of n batches in place with
    ``RandomState(seed + e).shuffle`` every epoch e, so
    ``order_e = order_{e-1}[permutation(seed + e, n)]`` from
    ``order_0 = arange(n)``; batch i of epoch e is the view's batch
    ``order_e[i]``. ``since = (k, order_k)``, k <= epoch, continues from an
    order computed before (the Iterator keeps the last ones).
    """
    start, order = since if since is not None else (0, np.arange(n))
    with _random_state(0) as state:
        for e in range(start + 1, epoch + 1):
            state.seed(seed + e)
            order = order[state.permutation(n)]
    return order


def stream_id(name: str) -> int:
    """A stable 32-bit number for a stream name (``hash()`` is salted per process)."""
    return zlib.crc32(name.encode("utf-8"))


_isolated = False
_isolate_lock = threading.Lock()


@contextmanager
def seeded(seed: int):
    """Run a block under the random state of one batch.

    Seeds Python's ``random``, numpy's global generator and torch's, and sets
    the seed and the generator that :func:`rng` returns in this thread's batch
    context (speechiter.batch_context.current_batch). Once any thread
    other than the main one enters it, :func:`isolate_thread_random` gives
    ``random`` and ``numpy.random`` a state of their own in each thread.
    """
    if not _isolated and threading.current_thread() is not threading.main_thread():
        isolate_thread_random()  # a thread worker: see NOTE [ Global generators and threads ]
    context = current_batch()
    previous = context.seed, context.generator, context.py_random, context.np_random
    with ExitStack() as stack:
        context.seed, context.generator = seed, np.random.default_rng(seed)
        if _isolated:
            context.py_random = random.Random(seed)
            context.np_random = stack.enter_context(_random_state(seed & 0xFFFFFFFF))
        else:
            random.seed(seed)
            np.random.seed(seed & 0xFFFFFFFF)
        _seed_torch(seed)
        try:
            yield context.generator
        finally:
            context.seed, context.generator, context.py_random, context.np_random = previous


def imported_torch():
    """torch if it is imported (completely: another thread may be importing it), else None.

    Seeding never imports it: see NOTE [ A batch that imports torch ] in sequence/fetch.py.
    """
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    return torch


def _seed_torch(seed: int):
    torch = imported_torch()
    if torch is None:
        return
    if torch.cuda.is_initialized():
        torch.manual_seed(seed)  # also seeds every CUDA device
    else:  # a hundred times cheaper than torch.manual_seed without CUDA
        torch.random.default_generator.manual_seed(seed)


def isolate_thread_random():
    """Give each thread worker its own ``random`` and ``numpy.random`` state.

    NOTE [ Global generators and threads ]: thread workers share the
    interpreter's global generators, so seeding them per batch would race.
    This replaces the module-level functions of ``random`` and
    ``numpy.random`` (``random.random``, ``np.random.uniform``, ...) by
    dispatchers that use the state set by :func:`seeded` in the calling
    thread, and the usual global state elsewhere. Names imported before the
    call (``from random import random``) and torch's global generator are not
    covered: use :func:`rng` in code that runs in thread workers.
    """
    global _isolated
    with _isolate_lock:
        if _isolated:
            return
        _redirect(random, random._inst, "py_random")
        _redirect(np.random, np.random.mtrand._rand, "np_random")
        _isolated = True


def _redirect(module, instance, attr: str):
    for name in dir(module):
        if getattr(getattr(module, name), "__self__", None) is instance:
            setattr(module, name, _dispatcher(name, instance, attr))


def _dispatcher(name: str, default, attr: str):
    def call(*args, **kwargs):
        state = getattr(current_batch(), attr)
        return getattr(state if state is not None else default, name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    return call


def rng() -> np.random.Generator:
    """The numpy Generator of the batch being built in this thread.

    Use it in datasets and hooks for augmentation: its numbers depend only on
    (seed, epoch, batch position), also with thread workers, where the global
    generators of ``random`` and numpy are shared between threads. Outside a
    batch it returns a fresh, unseeded generator.
    """
    generator = current_batch().generator
    return generator if generator is not None else np.random.default_rng()
