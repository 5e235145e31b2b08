import os
import threading

import pytest

from tests.processes import children, stop_resource_tracker


def shm_leftovers():
    prefix = f"speechiter_{os.getpid()}_"
    try:
        return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
    except OSError:
        return []


def engine_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("speechiter-") and t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaks():
    """After every test: no child processes, no segments of this process, no engine threads."""
    yield
    stop_resource_tracker()  # see tests/processes.py
    assert children() == []
    assert shm_leftovers() == []
    assert engine_threads() == []
