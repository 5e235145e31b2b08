"""Child processes of the test process, for "nothing outlives the run" checks.

- ``children()``: child processes, except Python's own resource tracker and
  fork server (started once, they live as long as this process); the fork
  server's children (workers) are counted.
- ``FORKS_ON_PURPOSE``: a mark for tests that fork this process on purpose.
- ``own_stderr(text)``: a process's stderr without the line of a new pool that reclaimed segments of
  crashed runs: under pytest-xdist those are another test's, killed on purpose beside this one.
- ``stop_resource_tracker()``: stop that tracker (a later test starts it again
  if it needs it), so that later "no child processes" checks hold.
"""
import gc
import multiprocessing.resource_tracker
import threading

import psutil
import pytest

# For the tests that fork this (threaded) test process on purpose: Python 3.12+ warns about it.
FORKS_ON_PURPOSE = pytest.mark.filterwarnings(r"ignore:.*use of fork\(\) may lead to deadlocks:DeprecationWarning")


def children():
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            if "resource_tracker" not in cmdline and "multiprocessing.forkserver" not in cmdline:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def stop_resource_tracker():
    tracker = multiprocessing.resource_tracker._resource_tracker
    if getattr(tracker, "_fd", None) is not None:
        # Semaphores of finished pools unregister first (no "leaked" warnings, no unlinking
        # them twice): queue feeder threads let go of theirs, then the collector frees them.
        for thread in threading.enumerate():
            if thread.name == "QueueFeederThread":
                thread.join(5.0)
        gc.collect()
        tracker._stop()


def own_stderr(text: str) -> str:
    """``text`` without "speechiter: reclaimed ... left by crashed runs" lines (NOTE [ Stale segments ])."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not (line.startswith("speechiter: reclaimed ") and "left by crashed runs" in line))
