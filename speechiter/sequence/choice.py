"""Which scheduler runs the loading, for the given settings.

The inline one (scheduler.py) for 0 workers, else a PoolScheduler
(pool_scheduler.py) over a thread pool, or over a process pool with its
shared-memory slots (pools.py, shm/).
"""
from typing import Optional

from speechiter.io.hedged_requests import unhedged_reader
from speechiter.sequence import shm
from speechiter.sequence.pool_scheduler import PoolScheduler
from speechiter.sequence.pools import ProcPool, ThreadPool
from speechiter.sequence.scheduler import InlineScheduler, Scheduler


def start_scheduler(factory, *, num_workers: int, thread_type: str, start_method: Optional[str], out_type: str,
                    buffer: int, num_converters: int, timeout: float, hedge: bool = True, worker_threads: int = 1,
                    pins: Optional[shm.HostPins] = None) -> Scheduler:
    """A started scheduler: inline for ``num_workers=0``, else a pool of ``thread_type`` workers that hedges
    late batches unless ``hedge`` is False (NOTE [ Hedging ] in hedge.py); ``hedge`` False sends each request
    of a read once too (NOTE [ Hedged requests ] in speechiter/io/hedged_requests.py).

    ``out_type`` must be resolved already (see convert.resolve_out_type). ``worker_threads``: each
    worker's numeric libraries' threads (NOTE [ One thread per worker ] in threads.py). ``pins``: page-locks
    the slots for CUDA copies; by default CUDA's for a cuda out_type (NOTE [ Pinned slots ] in shm/pinning.py).
    """
    if not hedge:  # and each read is one request: See NOTE [ Hedged requests ] in speechiter/io/hedged_requests.py
        factory = unhedged_reader(factory)
    if num_workers == 0:
        return InlineScheduler(factory, out_type, timeout)
    if thread_type == "thread":
        pool, slots = ThreadPool(factory, num_workers, worker_threads), None
    else:
        shm.reclaim_stale()  # See NOTE [ Stale segments ] in shm/stale.py
        prefix = shm.session_prefix()
        if pins is None and out_type.startswith("cuda"):
            pins = shm.cuda_host_pins()
        slots = shm.SlotTable(prefix, buffer, tracked=True, pins=pins)  # NOTE [ Segments of a killed main process ]
        pool = ProcPool(factory, num_workers, prefix, start_method, worker_threads)
    return PoolScheduler(pool, slots, out_type, num_converters, buffer, timeout, hedge)
