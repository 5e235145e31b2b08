"""Ctrl-C in the CLI is never lost.

NOTE [ Swallowed Ctrl-C ]
Python raises KeyboardInterrupt in whatever code runs when SIGINT arrives, and
an exception raised inside a weakref finalizer or ``__del__`` (releasing a
zero-copy batch's slot runs one per batch) is printed as "Exception ignored"
and dropped: the run would go on. The CLI's handler also records the signal,
and the step loop raises KeyboardInterrupt at its next step when one was
recorded (:func:`check`).
"""
import signal
import threading
from contextlib import contextmanager

_pending = False


def _on_sigint(signum, frame):
    global _pending
    _pending = True
    raise KeyboardInterrupt


@contextmanager
def installed():
    """Handle SIGINT as Python does, and remember it (main thread only, where handlers can be set)."""
    global _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _pending = False
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C came and was swallowed."""
    if _pending:
        raise KeyboardInterrupt
