import gc
import multiprocessing.resource_tracker
import os
import threading

import psutil
import pytest


def shm_leftovers():
    prefix = f"speechiter_{os.getpid()}_"
    try:
        return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
    except OSError:
        return []


def children():
    """Child processes, except Python's own resource tracker ('spawn' semaphores start it once)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def engine_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("speechiter-") and t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaks():
    """After every test: no child processes, no segments of this process, no engine threads."""
    yield
    # 'spawn' starts Python's resource tracker, which outlives the test: stop it (a later
    # test starts it again if it needs it), so that other suites' "no children" checks hold.
    tracker = multiprocessing.resource_tracker._resource_tracker
    if getattr(tracker, "_fd", None) is not None:
        # Semaphores of finished pools unregister first (no "leaked" warnings, no unlinking
        # them twice): queue feeder threads let go of theirs, then the collector frees them.
        for thread in threading.enumerate():
            if thread.name == "QueueFeederThread":
                thread.join(5.0)
        gc.collect()
        tracker._stop()
    assert children() == []
    assert shm_leftovers() == []
    assert engine_threads() == []
