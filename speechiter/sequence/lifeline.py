"""Worker side: a worker process ends when its parent does, whatever it is doing.

NOTE [ Parent death ]
On Linux a worker's first act is to ask the kernel for a SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); the parent may have died
before that call, so it then checks that its parent is still the one it was
started by (man 2 prctl). SIGKILL ends a worker stuck anywhere -- in a C call,
a sleep, a lock -- but leaves it no time to clean up: the shared-memory
segments of a session whose main process was killed are reclaimed by the next
process pool started on the machine (NOTE [ Stale segments ] in shm/stale.py).
The kernel's "parent" is the thread that started the worker: the pool must be
started from a thread that outlives it (the consumer's, in practice). Workers
started by the fork server (NOTE [ Start method ] in start.py) are its
children: the server ends once every holder of its "alive" pipe has ended,
and its children inherit that pipe, so each worker first lets go of it
(:func:`leave_fork_server`); then the server ends with the main process, and
the workers with it.
Elsewhere, and as a fallback, an idle worker checks its parent every
``POLL_S`` (workers.py) and leaves when it is orphaned.
"""
import ctypes
import multiprocessing.forkserver
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> bool:
    """Have the kernel kill this process when its parent dies, where it can.

    Returns False when the parent is already gone (the caller should leave).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0))  # -1 on failure: polling still works
        except (OSError, AttributeError):
            pass
    return not orphaned(parent_pid)


def orphaned(parent_pid: int) -> bool:
    """Whether the process that started this one has died (it was reparented)."""
    return os.getppid() != parent_pid


def leave_fork_server() -> None:
    """Close this process's copy of the fork server's "alive" pipe (NOTE [ Parent death ])."""
    server = multiprocessing.forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        server._forkserver_alive_fd = None
        try:
            os.close(fd)
        except OSError:
            pass
