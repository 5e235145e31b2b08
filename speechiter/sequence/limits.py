"""Limits of the machine that loading runs into: open files and shared memory, as clear errors.

NOTE [ Machine limits ]
A process pool needs file descriptors (about :data:`FDS_PER_WORKER` per worker
process in the main process: task pipe, result pipe, sentinel, the sentinel's
write end) and batches need room in /dev/shm. Where either runs out, Python
raises ``OSError: [Errno 24] Too many open files`` somewhere deep in
multiprocessing, and a segment that tmpfs cannot back kills the worker that
writes into it with SIGBUS. Both become one :class:`ResourceError` line that
names the limit, the numbers and how to raise it:

- before a pool starts, :func:`check_open_files` compares what its workers
  need with what the open-files limit leaves (so no connection to the fork
  server is cut half-way, which would kill the server);
- any EMFILE the engine meets (starting workers, mapping a segment, a worker's
  dataset opening a file) is translated by :func:`explain`;
- a worker reserves the bytes of a slot before it writes them (posix_fallocate:
  a new segment, a batch larger than the slot held so far, the space
  batch_empty hands out, in whole MiB; shm/segments.py and NOTE [ Reserving
  slots ] in shm/slots.py) and gets
  :func:`shm_full` instead of SIGBUS; a worker that still dies of SIGBUS is
  reported with the free space (:func:`sigbus_hint`).
"""
import errno
import os
from typing import Optional

from speechiter.errors import ResourceError

SHM_DIR = "/dev/shm"
# File descriptors one worker process keeps open in the main process.
FDS_PER_WORKER = 4
# Those a pool keeps besides (its "done" pipe).
FDS_PER_POOL = 2


def _nofile():
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _open_now() -> Optional[int]:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        return None


def open_files_error(workers: Optional[int] = None, needed: Optional[int] = None) -> ResourceError:
    """The one error for a process out of file descriptors (EMFILE)."""
    limits, open_now = _nofile(), _open_now()
    soft, hard = limits if limits is not None else (-1, -1)
    if workers is not None and needed is not None and open_now is not None:
        what = f"{workers} loading worker processes need about {needed} more, and {max(0, soft - open_now)} are left"
    else:
        what = "a file could not be opened"
    if hard < 0 or hard > soft:
        how = f"raise it in the shell that starts the run: `ulimit -n {_suggest(soft, hard)}`"
    else:
        how = ("it is also the hard limit, which an administrator raises (/etc/security/limits.conf, "
               "LimitNOFILE= of a systemd unit, docker run --ulimit nofile=4096)")
    return ResourceError(f"too many open files: {what} under the open-files limit of {soft} (ulimit -n); {how}; "
                         "or use fewer workers")


def _suggest(soft: int, hard: int) -> int:
    wanted = max(4096, 2 * soft)
    return wanted if hard < 0 else min(wanted, hard)


def check_open_files(workers: int) -> None:
    """Raise :func:`open_files_error` when ``workers`` more worker processes would pass the limit."""
    limits, open_now = _nofile(), _open_now()
    if limits is None or open_now is None or limits[0] < 0:
        return
    needed = FDS_PER_WORKER * workers + FDS_PER_POOL
    if open_now + needed > limits[0]:
        raise open_files_error(workers, needed)


def is_emfile(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE)


def shm_free() -> Optional[int]:
    """Bytes free in /dev/shm, or None where unknown."""
    try:
        stat = os.statvfs(SHM_DIR)
    except (OSError, AttributeError):
        return None
    return stat.f_bavail * stat.f_frsize


def shm_full(needed: int) -> ResourceError:
    free = shm_free()
    return ResourceError(f"shared memory ({SHM_DIR}) is full or too small: {needed} bytes needed, "
                         f"{'an unknown number' if free is None else free} free; give it more room (Docker: "
                         f"--shm-size=8g), use smaller batches, or thread_type: thread (no shared memory)")


def sigbus_hint() -> str:
    """What a worker's death by SIGBUS means here, for the death message."""
    free = shm_free()
    return (f": shared memory ({SHM_DIR}) is full or too small ({'?' if free is None else free} bytes free); "
            "a worker that writes a batch there dies of SIGBUS")


def explain(error: BaseException) -> BaseException:
    """``error``, or the clear ResourceError it stands for (see NOTE [ Machine limits ])."""
    return open_files_error() if is_emfile(error) else error
