"""POSIX shared-memory segments: create, open, unlink, and the session's names.

NOTE [ Segment cleanup ]
Segments are created and unlinked with ``_posixshmem`` directly, not with
``multiprocessing.shared_memory``: in Python 3.11 that class registers every
segment with the resource tracker of the process that opens it, which warns
about and double-unlinks segments created in one process and unlinked in
another. Here the main process alone unlinks, and every segment name starts
with the session prefix ``speechiter_<owner>_<token>_`` (the owner is the main
process: pid, start time, pid namespace; see NOTE [ Stale segments ] in
stale.py, which reclaims those of crashed runs), so
:meth:`SlotTable.close` can also remove segments it never heard of (a worker
killed between creating a segment and reporting it) by listing /dev/shm
after the workers have ended. See NOTE [ Shutdown order ] in scheduler.py.

NOTE [ Segments of a killed main process ]
The main process unlinks in every exit it lives through (an error, Ctrl-C,
SIGTERM in the command line). One killed outright (SIGKILL, or SIGTERM where
nothing handles it) cannot, and its workers die with it (NOTE [ Parent death ]
in lifeline.py). So every segment is also registered with Python's resource
tracker, the small process that multiprocessing starts for the main process
and shares with its workers, and which unlinks what is still registered once
all of them have ended: a worker registers a name before it creates the
segment (so a name in /dev/shm is always registered), the main process
unregisters it when it unlinks it. Only a whole process group killed at once
(the tracker with it) leaves segments; the next pool reclaims those (NOTE
[ Stale segments ] in stale.py).
"""
import errno
import mmap
import os
import secrets
from multiprocessing import resource_tracker
from typing import List, Optional

from speechiter.sequence.limits import is_emfile, open_files_error, shm_full
from speechiter.sequence.shm.stale import owner_tag

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

_SHM_DIR = "/dev/shm"


def session_prefix() -> str:
    """A name prefix unique to one started sequence of this process."""
    return f"speechiter_{owner_tag()}_{secrets.token_hex(3)}_"


def check_available() -> None:
    if _posixshmem is None:
        raise RuntimeError("thread_type='proc' needs POSIX shared memory; use thread_type='thread' on this system")


def create_segment(name: str, size: int, reserve: int = 0, tracked: bool = False) -> mmap.mmap:
    """A new segment of ``size`` bytes whose first ``reserve`` are backed now (see :func:`reserve_bytes`).

    ``tracked``: registered with the resource tracker first (NOTE [ Segments of a killed main process ]).
    """
    check_available()
    if tracked:
        resource_tracker.register("/" + name, "shared_memory")
    try:
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    except OSError as error:
        if tracked:
            resource_tracker.unregister("/" + name, "shared_memory")
        if is_emfile(error):
            raise open_files_error() from error
        raise
    try:
        os.ftruncate(fd, size)
        _reserve(fd, reserve)
        return mmap.mmap(fd, size)
    except BaseException:
        unlink_segment(name, tracked)
        raise
    finally:
        os.close(fd)


def reserve_bytes(name: str, nbytes: int) -> None:
    """Back the first ``nbytes`` of a segment with memory now: a full /dev/shm then raises a
    ResourceError here instead of killing the process that writes there with SIGBUS (NOTE [ Machine limits ])."""
    fd = _open_fd(name)
    try:
        _reserve(fd, nbytes)
    finally:
        os.close(fd)


def _reserve(fd: int, nbytes: int) -> None:
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise shm_full(nbytes) from None
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def _open_fd(name: str) -> int:
    check_available()
    try:
        return _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    except OSError as error:
        if is_emfile(error):
            raise open_files_error() from error
        raise


def open_segment(name: str, size: int) -> mmap.mmap:
    fd = _open_fd(name)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def unlink_segment(name: str, tracked: bool = False) -> None:
    """Remove the name; ``tracked``: and unregister it (NOTE [ Segments of a killed main process ])."""
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        return  # someone else unlinked (and unregistered) it
    if tracked:
        resource_tracker.unregister("/" + name, "shared_memory")


def close_map(mm: Optional[mmap.mmap]) -> None:
    """Unmap, tolerating views that are still alive (then GC unmaps later)."""
    if mm is None:
        return
    try:
        mm.close()
    except BufferError:
        pass


def leftover_segments(prefix: str) -> List[str]:
    """Names of existing segments that start with ``prefix``."""
    try:
        return [name for name in os.listdir(_SHM_DIR) if name.startswith(prefix)]
    except OSError:
        return []
