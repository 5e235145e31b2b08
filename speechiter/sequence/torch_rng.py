"""Thread workers and torch's global generator: a warning, once, when it is drawn from while they load.

NOTE [ torch's generator in thread workers ]
Each batch runs under its seed, torch's global generator included (seeding.py).
Process workers have a generator each; thread workers share the process's one,
so while one thread builds a batch another may reseed it or draw from it: a
dataset that calls ``torch.rand`` is not reproducible with ``thread_type:
thread``. After each batch a thread worker looks at the generator: if it
still carries this batch's seed (no other thread seeded it since) but its
state is no longer the freshly seeded one, someone drew from it -- the
dataset, or another thread of the process (a training loop's CPU dropout),
whose draws the workers' seeding disturbs just as much -- and the process
warns once. Where another thread seeded it in between, the check
concludes nothing and waits for a later batch; it never warns wrongly. It
costs a few microseconds per batch, in thread mode only, once torch is imported.
"""
import threading
import warnings
from typing import Optional

from speechiter.seeding import imported_torch

MESSAGE = ("torch's global generator was drawn from while a thread worker built a batch (torch.rand, torch.randn, "
           "... in the dataset, or in another thread meanwhile); thread workers share it and seed it for each "
           "batch, so such draws are not reproducible: draw from speechiter.rng() (a generator of the batch's own) "
           "in the dataset, or use process workers (thread_type: proc)")
_warned = False
_warned_lock = threading.Lock()  # two threads may conclude at once


def check_after_batch(seed: Optional[int]) -> None:
    """Warn once if the batch built under ``seed`` drew from torch's global generator."""
    global _warned
    torch = imported_torch()
    if _warned or seed is None or torch is None:
        return
    generator = torch.random.default_generator
    if generator.initial_seed() != seed:
        return
    state = generator.get_state()
    if generator.initial_seed() != seed:  # reseeded while we looked
        return
    if torch.equal(state, torch.Generator().manual_seed(seed).get_state()):
        return
    with _warned_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(MESSAGE, RuntimeWarning, stacklevel=2)
