"""A time limit for building one batch in the main thread (``num_workers=0``, ``start_test()``).

NOTE [ Inline timeout ]
A batch built by a worker has ``timeout`` seconds (NOTE [ Never wait forever ] in
pool_scheduler.py); a batch built inline gets the same limit from a SIGALRM
interval timer, whose handler raises :class:`BatchExpired` inside the build.
The batch is still built in the main thread, by the same call as without a
limit, so batches stay identical, pdb and Ctrl-C work as before, and a build
past its limit is interrupted where it is stuck (a helper thread could be
waited for with a timeout, but a hung thread can never be stopped).

- BatchExpired is a BaseException, so ``except Exception`` in a dataset does
  not swallow it; the timer fires again every ``POLL_S`` after the limit, and a
  build that still returns late is an error too.
- A blocking system call (sleep, reading a FIFO or a socket) is interrupted at
  once; a C call that holds the GIL or retries EINTR itself, only when it returns.
- Stopped in a debugger (pdb, breakpoint()) during the build: no limit for that batch.
- Only the main thread can handle signals: called from another thread, or
  where there is no setitimer (Windows), the build has no limit.
- A timer someone else set (pytest-timeout, signal.alarm) is respected: a
  one-shot one that fires first is left alone (no limit of ours), a later one
  is set again, minus the time spent, afterwards; a periodic one (a sampling
  profiler) means no limit.
"""
import signal
import sys
import threading
import time
from typing import Callable, TypeVar

from speechiter.sequence.workers import POLL_S

T = TypeVar("T")


class BatchExpired(BaseException):
    """Raised inside a batch build that ran past its time limit."""

    def __init__(self):
        super().__init__("the batch's time limit expired here")


def _debugging() -> bool:
    bdb = sys.modules.get("bdb")
    return bdb is not None and isinstance(getattr(sys.gettrace(), "__self__", None), bdb.Bdb)


class _Alarm:
    """The SIGALRM handler of one build."""

    def __init__(self):
        self.active = True
        self.fired = False
        self.debugged = False

    def __call__(self, signum, frame):
        if not self.active or self.debugged:
            return
        if _debugging():
            self.debugged = True
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        self.fired = True
        raise BatchExpired()


def _free_timer(seconds: float):
    """The other timer's (delay, interval) when ours may be set, else None. See NOTE [ Inline timeout ]."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGALRM) is None:  # a handler installed outside Python: leave it
        return None
    delay, interval = signal.getitimer(signal.ITIMER_REAL)
    if interval or (delay and delay <= seconds):
        return None
    return delay, interval


def call_with_time_limit(seconds: float, fn: Callable[..., T], *args) -> T:
    """``fn(*args)``, interrupted by :class:`BatchExpired` after ``seconds``.

    See NOTE [ Inline timeout ].
    """
    other = _free_timer(seconds)
    if other is None:
        return fn(*args)
    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm)  # before the timer: SIGALRM's default action kills
    started = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds, POLL_S)
        try:
            result = fn(*args)
        finally:
            alarm.active = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)  # runs a pending call of ours first (inactive by now)
        if other[0]:
            signal.setitimer(signal.ITIMER_REAL, max(other[0] - (time.monotonic() - started), 1e-6))
    if alarm.fired:
        raise BatchExpired()
    return result
