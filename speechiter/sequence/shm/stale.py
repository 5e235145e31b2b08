"""Segments left by crashed runs: who owns a segment, and reclaiming those whose owner is gone.

NOTE [ Stale segments ]
When a whole process group is SIGKILLed (an OOM kill, a cluster pre-emption)
no process of it can unlink its segments, and /dev/shm fills up crash after
crash. So every segment name carries its owner -- the main process of the
session -- as ``speechiter_<pid>_<start>_<pidns>_``: its pid, its start time
(clock ticks since boot, /proc/<pid>/stat field 22) and its pid namespace
(the inode of /proc/self/ns/pid); see segments.session_prefix. Every new
process pool first reclaims the segments whose owner is gone, and says so in
one line on stderr (the ``speechiter`` logger). An owner is gone when its pid
is unused, is a zombie, or belongs to a process that started at another time
(the pid was reused). Never reclaimed: segments of a live owner, of another
pid namespace (a container sharing /dev/shm: its pids mean other processes
here), of an owner whose start time is unknown while its pid is in use, and
names in any other form. Unlinking only removes the name: a process that
still maps a segment keeps its memory until it unmaps it.
"""
import logging
import os
import re
from typing import Optional, Tuple

_SHM_DIR = "/dev/shm"
_OWNED = re.compile(r"speechiter_(\d+)_(\d+)_(\d+)_[0-9a-f]+_")
_log = logging.getLogger("speechiter")


def proc_stat(pid) -> Optional[Tuple[str, int]]:
    """(state, start time in clock ticks) from /proc/<pid>/stat; None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_tag() -> str:
    """``<pid>_<start>_<pidns>`` of this process (0 for what is unknown)."""
    stat = proc_stat("self")
    return f"{os.getpid()}_{stat[1] if stat else 0}_{_pid_namespace()}"


def owner_gone(pid: int, start: int, pidns: int) -> bool:
    """Whether the process a segment name names has ended. See NOTE [ Stale segments ]."""
    if pid <= 0 or pidns != _pid_namespace():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, owned by another user
    stat = proc_stat(pid)
    if stat is None:
        return not os.path.exists(f"/proc/{pid}") and os.path.isdir("/proc/self")
    state, started = stat
    return state in ("Z", "X") or (start != 0 and started != start)


def reclaim_stale() -> Tuple[int, int]:
    """Unlink the segments whose owner is gone; returns (count, bytes) and logs one line if any."""
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return 0, 0
    owners, count, size = {}, 0, 0
    for name in names:
        match = _OWNED.match(name)
        if match is None:
            continue
        owner = tuple(int(x) for x in match.groups())
        if owner not in owners:
            owners[owner] = owner_gone(*owner)
        if not owners[owner]:
            continue
        path = os.path.join(_SHM_DIR, name)
        try:
            nbytes = os.stat(path).st_size
            os.unlink(path)
        except OSError:  # gone already (another process reclaimed it), or not ours to remove
            continue
        count += 1
        size += nbytes
    if count:
        _log.warning(f"speechiter: reclaimed {count} stale shared-memory segments ({size / (1 << 20):.1f} MiB) "
                     "left by crashed runs")
    return count, size
