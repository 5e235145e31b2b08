"""Failures never hang, and leave no process, thread or /dev/shm segment behind.

The autouse fixture in conftest.py checks the leftovers after every test.
"""
import functools
import gc
import threading
import time

import numpy as np
import pytest

from speechiter.errors import WorkerError
from speechiter.sequence import MSequence, Task
from tests.sequence import indexers

THREAD_TYPES = [pytest.param("proc", marks=pytest.mark.slow), "thread"]  # proc: process workers, slow


def plan(n=40, size=1):
    return [Task(i, list(range(i * size, (i + 1) * size)), None) for i in range(n)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", THREAD_TYPES)
def test_worker_exception_becomes_worker_error(thread_type):
    manager = MSequence(indexers.Failing, num_workers=2, thread_type=thread_type, out_type='cpu', dset_size=0)
    got = []
    with manager.start() as mng:
        with pytest.raises(WorkerError) as info:
            for batch in mng.iterate(plan(40, size=3)):
                got.append(batch)
    assert len(got) == 4  # batches before the failing one arrive, in order
    text = str(info.value)
    assert "ValueError: cannot decode utterance 13" in text
    assert "while building batch 4 (ids [12, 13, 14])" in text
    assert "Traceback" in text and "in __getitem__" in text and "indexers.py" in text
    assert info.value.exit_code == 1
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert mng._scheduler is None or mng._scheduler.closed  # finished


@pytest.mark.slow  # a process worker
@pytest.mark.timeout(60)
def test_data_error_keeps_exit_code_2_and_long_ids_are_truncated():
    manager = MSequence(indexers.failing_data_error, num_workers=2, out_type='null', dset_size=0)
    tasks = [Task(0, list(range(100)), None)]
    with pytest.raises(WorkerError, match=r"speechiter.errors.DataError: utterance 0: broken wav header") as info:
        with manager.start() as mng:
            list(mng.iterate(tasks))
    assert info.value.exit_code == 2
    assert "(92 more)" in str(info.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", THREAD_TYPES)
def test_factory_failure(thread_type):
    manager = MSequence(indexers.BrokenFactory, num_workers=2, thread_type=thread_type, out_type='null',
                        dset_size=0)
    with pytest.raises(WorkerError, match="OSError: cannot open data.h5") as info:
        with manager.start() as mng:
            list(mng.iterate(plan(4)))
    assert "while building its indexer" in str(info.value)


def test_inline_mode_raises_the_original_exception():
    manager = MSequence(indexers.failing_data_error, num_workers=0, out_type='null', dset_size=0)
    from speechiter.errors import DataError
    with pytest.raises(DataError):
        with manager.start() as mng:
            list(mng.iterate(plan(20)))


@pytest.mark.slow  # a process worker, killed
@pytest.mark.timeout(60)
def test_killed_worker_is_reported_within_seconds():
    manager = MSequence(indexers.Killed, num_workers=2, out_type='null', buffer=4, dset_size=0)
    started = time.monotonic()
    got = []
    with pytest.raises(RuntimeError, match=r"loading worker \d \(pid \d+\) exited unexpectedly "
                                           r"\(signal 9: SIGKILL\) while building batch 17") as info:
        with manager.start() as mng:
            for batch in mng.iterate(plan(40)):
                got.append(batch)
    assert time.monotonic() - started < 10
    assert [b.tolist() for b in got] == [[i] for i in range(len(got))]
    assert len(got) <= 17
    pid = int(str(info.value).split("pid ")[1].split(")")[0])
    assert pid in [p for p in mng.pids] or not mng.pids  # finished: pids are gone


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_timeout_for_one_batch():
    manager = MSequence(indexers.Hang, num_workers=2, out_type='null', timeout=1.0, dset_size=0)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timeout=1\) for batch 5 from loading worker \d \(pid \d+\)"):
        with manager.start() as mng:
            list(mng.iterate(plan(10)))
    assert time.monotonic() - started < 8  # the hung worker process is terminated


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_timeout_for_one_batch_with_threads():
    manager = MSequence(functools.partial(indexers.Hang, seconds=4.0), num_workers=2, thread_type='thread',
                        out_type='null', timeout=1.0, dset_size=0)
    with pytest.raises(TimeoutError, match=r"timeout=1\) for batch 5 from loading worker \d"):
        with pytest.warns(RuntimeWarning, match="still busy"):
            with manager.start() as mng:
                list(mng.iterate(plan(10)))
    # A thread busy in user code cannot be stopped; it ends with its batch.
    for thread in threading.enumerate():
        if thread.name.startswith("speechiter-worker"):
            thread.join(10)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", THREAD_TYPES)
def test_consumer_breaking_early_finishes(thread_type):
    manager = MSequence(indexers.Slow, num_workers=2, thread_type=thread_type, out_type='cpu', dset_size=0)
    manager.start()
    for i, batch in enumerate(manager.iterate(plan(40))):
        if i == 3:
            break
    gc.collect()
    assert manager._scheduler.closed
    manager.finish()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", THREAD_TYPES)
def test_generator_close_finishes(thread_type):
    manager = MSequence(indexers.Slow, num_workers=2, thread_type=thread_type, out_type='cpu', dset_size=0)
    manager.start()
    batches = manager.iterate(plan(40))
    next(batches)
    batches.close()
    assert manager._scheduler.closed and not manager.running
    with pytest.raises(RuntimeError, match="finished"):
        list(manager.iterate(plan(3)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
@pytest.mark.parametrize("thread_type", THREAD_TYPES)
def test_exception_in_consumer_finishes(thread_type, error):
    manager = MSequence(indexers.Slow, num_workers=2, thread_type=thread_type, out_type='cpu', dset_size=8)
    with pytest.raises(error):
        with manager.start() as mng:
            for i, batch in enumerate(mng):
                raise error("in the training step")
    assert manager._scheduler is None


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_keyboard_interrupt_without_context_manager():
    manager = MSequence(indexers.Slow, num_workers=2, out_type='cpu', dset_size=400, batch_size=2)
    manager.start()
    with pytest.raises(KeyboardInterrupt):
        for batch in manager:
            raise KeyboardInterrupt
    gc.collect()  # the interrupted loop's generator is closed, which finishes the sequence
    assert manager._scheduler.closed
    manager.finish()


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_never_finished_sequence_is_cleaned_when_collected():
    manager = MSequence(indexers.Slow, num_workers=2, out_type='null', dset_size=40, batch_size=2)
    manager.start()
    next(iter(manager))
    del manager
    gc.collect()


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_finish_is_idempotent_and_restart_works():
    manager = MSequence(indexers.Slow, num_workers=2, out_type='null', dset_size=10, batch_size=3,
                        shuffle=False)
    manager.finish()
    assert not manager.running
    with manager.start() as mng:
        assert mng.running
        assert [b["n"].tolist() for b in mng] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
        mng.start()  # interrupts the running one and starts anew
        first = mng.pids
        mng.start_test()
        assert mng.pids == []
        mng.start()
        assert mng.pids != first and len(mng.pids) == 2
        assert [b["n"].tolist() for b in mng][-1] == [9]
    manager.finish()
    manager.finish()


@pytest.mark.slow  # a spawned worker
@pytest.mark.timeout(60)
def test_spawn_worker_failure():
    manager = MSequence(functools.partial(indexers.Failing, data_error=True), num_workers=1,
                        out_type='null', start_method='spawn', dset_size=0)
    with pytest.raises(WorkerError) as info:
        with manager.start() as mng:
            list(mng.iterate(plan(20)))
    assert info.value.exit_code == 2


def test_worker_returning_cuda_tensors_is_an_error_message(monkeypatch):
    from speechiter.sequence.shm import SlotRef, SlotWriter
    import torch

    class FakeCuda:
        device = torch.device("meta")

    writer = SlotWriter("speechiter_test_", 0)
    with pytest.raises(TypeError, match="must return CPU tensors"):
        writer.pack({"x": torch.empty(3, device="meta")}, SlotRef(0, None, 0))
    assert writer.pack({"s": "x", "e": np.zeros(0)}, SlotRef(0, None, 0)).slot.name is None


ORPHAN_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {root!r})
from speechiter.sequence import MSequence, Task
from tests.sequence import indexers
manager = MSequence(indexers.Sized, num_workers=2, out_type='null', dset_size=0, buffer=4)
manager.start()
batches = manager.iterate([Task(i, [1], None) for i in range(100)])
next(batches)
print(os.getpid(), ' '.join(map(str, manager.pids)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow  # the main process is a subprocess that dies under its workers
@pytest.mark.timeout(60)
def test_workers_exit_and_segments_are_reclaimed_when_the_main_process_dies(tmp_path, caplog):
    import os
    import subprocess
    import sys

    import psutil

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT.format(root=root)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == -9, proc.stderr
    main_pid, *pids = [int(pid) for pid in proc.stdout.split()]
    assert len(pids) == 2

    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    # Waiting for the kernel to kill them (PR_SET_PDEATHSIG), not covering a race.
    deadline = time.monotonic() + 10
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(alive, pids))
    # Killed workers cannot clean up: the next pool reclaims the segments (NOTE [ Stale segments ]).
    from speechiter.sequence.shm import reclaim_stale
    with caplog.at_level("WARNING", logger="speechiter"):
        reclaim_stale()
    assert [name for name in os.listdir("/dev/shm") if name.startswith(f"speechiter_{main_pid}_")] == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", THREAD_TYPES)
def test_converter_threads_keep_order(thread_type):
    manager = MSequence(indexers.Slow, num_workers=2, num_converters=2, thread_type=thread_type, out_type='cpu',
                        buffer=5, dset_size=0)
    tasks = plan(30, size=2)
    with manager.start() as mng:
        got = [batch["n"].tolist() for batch in mng.iterate(tasks)]
        assert got == [task.ids for task in tasks]
        for i, batch in enumerate(mng.iterate(tasks)):
            if i == 5:
                break
    assert manager._scheduler is None


@pytest.mark.slow  # forks
@pytest.mark.timeout(60)
def test_spawn_needs_a_picklable_worker():
    class Local:
        def __getitem__(self, ids):
            return ids

    manager = MSequence(Local, num_workers=2, out_type='null', start_method='spawn', dset_size=4)
    with pytest.raises(ValueError, match="cannot be sent to a 'spawn' worker process .* define it at module level"):
        manager.start()
    # fork needs no pickling
    manager = MSequence(Local, num_workers=2, out_type='null', start_method='fork', dset_size=4, shuffle=False)
    with manager.start() as mng:
        assert list(mng) == [[0, 1, 2, 3]]


@pytest.mark.slow  # a process worker
@pytest.mark.timeout(60)
def test_unpicklable_batch_is_a_worker_error():
    manager = MSequence(indexers.Unpicklable, num_workers=1, out_type='null', dset_size=0)
    with pytest.raises(WorkerError, match=r"raised AttributeError: Can't (pickle|get) local object"):
        with manager.start() as mng:
            list(mng.iterate(plan(3)))
