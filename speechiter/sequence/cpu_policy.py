"""Loading workers run as batch work, so that handing them a task never takes the CPU from the consumer.

# NOTE [ Workers as batch work ]
The consumer (the training loop) sends a worker its next task as it takes a
batch. Writing to the worker's pipe wakes the worker, and Linux's scheduler
gives a task that wakes up the CPU at once when it has run less than the one
running: the woken worker took the consumer's core for a time slice, and with
as many busy workers as cores, about one batch in a hundred waited 3-5 ms for
that instead of the usual 0.6 ms (measured with tools/bench_tail.py, the
loader ahead of a 25 ms consumer step, 2 workers on 2 cores: the time was in
the pipe write). A worker process therefore switches itself to SCHED_BATCH,
the policy Linux keeps for non-interactive work: the same share of the CPU
and the same nice value, but it does not preempt on waking. The p99 wait went
from 5 ms to 1.2 ms there, with the same throughput. The threads a worker
starts (reads, numeric libraries) inherit the policy; the main process and
its threads keep theirs. Where the policy is missing (not Linux) or refused,
the worker runs as before.
"""
import os

__all__ = ["run_as_batch_work"]


def run_as_batch_work() -> bool:
    """Switch the calling process (its calling thread, and the threads it starts after) to SCHED_BATCH;
    whether it did. See NOTE [ Workers as batch work ]."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError:  # refused (a sandbox's seccomp filter): scheduled as before
        return False
    return True
