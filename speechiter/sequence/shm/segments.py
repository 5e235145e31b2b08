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
after the workers have ended. See NOTE [ Shutdown order ] in pool_scheduler.py.
"""
import mmap
import os
import secrets
from typing import List, Optional

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


def create_segment(name: str, size: int) -> mmap.mmap:
    check_available()
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    except BaseException:
        unlink_segment(name)
        raise
    finally:
        os.close(fd)


def open_segment(name: str, size: int) -> mmap.mmap:
    check_available()
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def unlink_segment(name: str) -> None:
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


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
