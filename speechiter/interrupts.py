"""Ctrl-C and SIGTERM end a command-line run the same way, and are never lost.

NOTE [ Swallowed Ctrl-C ]
Python raises KeyboardInterrupt in whatever code runs when SIGINT arrives, and
an exception raised inside a weakref finalizer or ``__del__`` (releasing a
zero-copy batch's slot runs one per batch) is printed as "Exception ignored"
and dropped: the run would go on. The CLI's handler also records the signal,
and the step loop raises KeyboardInterrupt at its next step when one was
recorded (:func:`check`).

NOTE [ One shutdown path ]
The CLI handles SIGTERM (``kill``, ``timeout``, a job scheduler) as it handles
Ctrl-C: the handler records the signal and raises :class:`Terminated`, a
KeyboardInterrupt, so the same code unwinds the run: every engine closes
(workers asked to stop, then terminated and killed; shared memory unlinked,
NOTE [ Shutdown order ] in sequence/scheduler.py) and the run exits with
:func:`exit_status` (130 for Ctrl-C, 143 for SIGTERM). Left to its default
action, SIGTERM would end the process with nothing cleaned up. Every wait of
the msequence engine polls at most ``POLL_S`` at a time and calls
:func:`check`, so a signal swallowed by a finalizer still ends the run within
that time. Waiting cannot end a thread blocked in a read (a stalled store):
thread workers and the threads that read a batch's URLs are daemon threads,
joined for a bounded time and then abandoned (sequence/pools.py and
daemon_pool.py), so the process exits without them.
"""
import signal
import threading
from contextlib import contextmanager

_pending = None  # the exception type of the signal that came, until installed() ends


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by the CLI's SIGTERM handler. See NOTE [ One shutdown path ]."""


_RAISES = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}


def _on_signal(signum, frame):
    global _pending
    _pending = _RAISES[signum]
    raise _pending


@contextmanager
def installed():
    """Handle SIGINT and SIGTERM as above, and remember them (main thread only, where handlers can be set)."""
    global _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _pending = None
    previous = {signum: signal.signal(signum, _on_signal) for signum in _RAISES}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _pending = None


def check() -> None:
    """Raise KeyboardInterrupt (or Terminated) if a signal came and was swallowed."""
    if _pending is not None:
        raise _pending


def exit_status(error: KeyboardInterrupt) -> int:
    """The CLI's exit status for an interrupted run: 143 after SIGTERM, 130 after Ctrl-C."""
    return 128 + (signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)


def describe(error: KeyboardInterrupt) -> str:
    return "terminated (SIGTERM)" if isinstance(error, Terminated) else "interrupted"
