"""Faults in flight (issue 14): an inline batch that hangs, a main process killed while its
workers are stuck, segments left by a killed process group, workers started in a process
that runs threads."""
import bdb
import functools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from speechiter import engine as engine_module
from speechiter.dataset.reader import DatasetReader
from speechiter.sequence import MSequence, Task
from speechiter.sequence import shm
from speechiter.sequence.shm import stale
from speechiter.sequence.start import start_method_for
from speechiter.sequence.watchdog import BatchExpired
from tests.sequence import indexers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plan(n=10):
    return [Task(i, [i], None) for i in range(n)]


def wait_until(condition, seconds=10.0):
    """Poll ``condition`` until it holds or ``seconds`` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ------------------------------------------------------------- inline timeout


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_inline_batch_that_hangs_times_out_with_its_ids():
    manager = MSequence(indexers.Hang, num_workers=2, out_type="null", timeout=1.0, dset_size=0)
    got = []
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timeout=1\) for batch 5 built in the main process "
                                           r"\(num_workers=0\), ids \[5\]") as info:
        with manager.start_test() as mng:
            for batch in mng.iterate(plan()):
                got.append(batch.tolist())
    assert time.monotonic() - started < 10
    assert got == [[i] for i in range(5)]
    cause = info.value.__cause__
    assert isinstance(cause, BatchExpired)
    frames = [frame.name for frame in __import__("traceback").extract_tb(cause.__traceback__)]
    assert "__getitem__" in frames  # where it was stuck


class _HangingDataset:
    def get_batch(self, ids):
        if "u5" in ids:
            time.sleep(60)
        return {"ids": list(ids)}


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["inline", "msequence"])
def test_inline_engine_uses_the_worker_timeout(monkeypatch, kind):
    monkeypatch.setattr(engine_module, "BATCH_TIMEOUT_S", 1.0)
    engine = engine_module.make_engine(engine_module.EngineSettings(kind=kind, num_workers=0, out_type="null"),
                                       DatasetReader(_HangingDataset()))
    tasks = [Task(i, [f"u{i}"], None) for i in range(8)]
    try:
        with pytest.raises(TimeoutError, match=r"timeout=1\) for batch 5 built in the main process.*'u5'"):
            for _ in engine.iterate(tasks):
                pass
    finally:
        engine.close()


class _Swallowing:
    """Catches everything, even the time limit, and returns late."""

    def __getitem__(self, ids):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                time.sleep(0.05)
            except BaseException:
                pass
        return np.asarray(ids)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_build_that_swallows_the_time_limit_still_times_out():
    with pytest.raises(TimeoutError, match="batch 0 built in the main process"):
        with MSequence(_Swallowing, num_workers=0, out_type="null", timeout=0.5, dset_size=0).start_test() as mng:
            list(mng.iterate(plan(1)))


@pytest.mark.timeout(60)
def test_inline_batches_unchanged_and_other_timers_restored():
    handler = signal.getsignal(signal.SIGALRM)
    delay = signal.getitimer(signal.ITIMER_REAL)[0]  # pytest-timeout's, when it uses signals
    manager = MSequence(indexers.Random, num_workers=0, out_type="null", timeout=5.0, dset_size=0)
    tasks = [Task(i, [i, i + 1], 1000 + i) for i in range(6)]
    with manager.start_test() as mng:
        inline = [batch["rng"].tolist() for batch in mng.iterate(tasks)]
    with MSequence(indexers.Random, num_workers=2, thread_type="thread", out_type="null", dset_size=0).start() as mng:
        threaded = [batch["rng"].tolist() for batch in mng.iterate(tasks)]
    assert inline == threaded
    assert signal.getsignal(signal.SIGALRM) is handler
    after = signal.getitimer(signal.ITIMER_REAL)[0]
    assert (after == 0) if delay == 0 else (0 < after <= delay)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_off_the_main_thread_there_is_no_limit():
    got, errors = [], []

    def consume():
        try:
            manager = MSequence(functools.partial(indexers.Hang, seconds=1.0), num_workers=0, out_type="null",
                                timeout=0.2, dset_size=0)
            with manager.start_test() as mng:
                got.extend(batch.tolist() for batch in mng.iterate(plan(7)))
        except BaseException as error:  # reported below
            errors.append(error)

    thread = threading.Thread(target=consume)
    thread.start()
    thread.join(30)
    assert errors == [] and got == [[i] for i in range(7)]


class _Debugged:
    """Runs under a bdb debugger (as pdb would) while it takes longer than the limit."""

    def __getitem__(self, ids):
        debugger = bdb.Bdb()
        debugger.reset()
        sys.settrace(debugger.trace_dispatch)
        try:
            time.sleep(1.0)
        finally:
            sys.settrace(None)
        return np.asarray(ids)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_no_limit_while_a_debugger_runs_the_build():
    with MSequence(_Debugged, num_workers=0, out_type="null", timeout=0.3, dset_size=0).start_test() as mng:
        assert [b.tolist() for b in mng.iterate(plan(1))] == [[0]]


# ------------------------------------------------------------ parent death

STUCK_SCRIPT = """
import functools, os, sys, time
sys.path.insert(0, {root!r})
from speechiter.sequence import MSequence, Task
from tests.sequence import indexers
manager = MSequence(functools.partial(indexers.Stuck, {marker!r}, {how!r}), num_workers=2, out_type='null', dset_size=0, buffer=4)
manager.start()
batches = manager.iterate([Task(0, [0], None), Task(1, [5], None), Task(2, [5], None)])
next(batches)  # the first batch goes alone (NOTE [ Slow start ]); then both workers get stuck at id 5
print(os.getpid(), ' '.join(map(str, manager.pids)), flush=True)
deadline = time.monotonic() + 30  # both workers are stuck in the dataset
while time.monotonic() < deadline and len(open({marker!r}).read().split()) < 2:
    time.sleep(0.05)
print('stuck', flush=True)
sys.stdin.read()
"""


@pytest.mark.slow  # a main process killed under its workers
@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["sleep", "read"])
def test_workers_stuck_in_the_dataset_die_with_a_killed_main_process(tmp_path, how):
    marker = tmp_path / "stuck"
    marker.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", STUCK_SCRIPT.format(root=ROOT, marker=str(marker), how=how)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        main_pid, *pids = [int(pid) for pid in proc.stdout.readline().split()]
        assert proc.stdout.readline().strip() == "stuck"
        assert sorted(int(pid) for pid in marker.read_text().split()) == sorted(pids)
        os.kill(main_pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
        assert wait_until(lambda: not any(map(alive, pids))), [p for p in pids if alive(p)]
    finally:
        proc.kill()
        proc.wait(30)
        stale.reclaim_stale()


# ------------------------------------------------------------ stale segments

GROUP_SCRIPT = """
import os, sys
sys.path.insert(0, {root!r})
from speechiter.sequence import MSequence, Task
from tests.sequence import indexers
manager = MSequence(indexers.Sized, num_workers=2, out_type='null', dset_size=0, buffer=4)
manager.start()
batches = manager.iterate([Task(i, [1 + i % 3], None) for i in range(100)])
held = [next(batches) for _ in range(3)]
print(os.getpid(), ' '.join(map(str, manager.pids)), flush=True)
sys.stdin.read()
"""


def owned_by(pid):
    return [name for name in os.listdir("/dev/shm") if name.startswith(f"speechiter_{pid}_")]


@pytest.mark.slow  # a process group killed, segments left behind
@pytest.mark.timeout(90)
def test_segments_of_a_killed_process_group_are_reclaimed_by_the_next_pool(caplog):
    proc = subprocess.Popen([sys.executable, "-c", GROUP_SCRIPT.format(root=ROOT)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        main_pid, *pids = [int(pid) for pid in proc.stdout.readline().split()]
        left = owned_by(main_pid)
        assert len(left) >= 2
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert wait_until(lambda: not any(map(alive, pids)))
        # Workers may fill the buffer ahead between the listing and the kill, so
        # more can be left than was listed, but nobody could clean anything up.
        left_after_kill = owned_by(main_pid)
        assert set(left) <= set(left_after_kill)
        with caplog.at_level("WARNING", logger="speechiter"):
            with MSequence(indexers.Echo, num_workers=1, out_type="null", dset_size=3).start() as mng:
                assert len(list(mng)) == 1
        assert owned_by(main_pid) == []
        lines = [r.getMessage() for r in caplog.records if "reclaimed" in r.getMessage()]
        assert len(lines) == 1
        count = int(lines[0].split()[2])
        assert count >= len(left_after_kill)
        assert lines[0].startswith(f"speechiter: reclaimed {count} stale shared-memory segments (")
        assert lines[0].endswith(" MiB) left by crashed runs")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _segment(owner, suffix="w0_0"):
    name = f"speechiter_{owner}_abcdef_{suffix}"
    shm.close_map(shm.create_segment(name, 4096))
    return name


@pytest.mark.slow  # processes that own segments, alive, zombie and dead
@pytest.mark.timeout(60)
def test_segments_whose_owner_lives_are_never_reclaimed(caplog):
    me = psutil.Process()
    start, ns = [int(x) for x in stale.owner_tag().split("_")[1:]]
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    assert wait_until(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleeper_start = stale.proc_stat(sleeper.pid)[1]
    kept = [_segment(f"{me.pid}_{start}_{ns}"),  # this process
            _segment(f"{sleeper.pid}_{sleeper_start}_{ns}"),  # a live process
            _segment(f"{sleeper.pid}_0_{ns}"),  # start time unknown, pid in use
            _segment(f"{dead.pid}_{start}_{ns + 1}"),  # another pid namespace
            f"speechiter_{dead.pid}_abcdef_w0_0"]  # an older form of name
    shm.close_map(shm.create_segment(kept[-1], 4096))
    reclaimed = [_segment(f"{sleeper.pid}_{sleeper_start + 1}_{ns}"),  # its pid was reused
                 _segment(f"{zombie.pid}_{stale.proc_stat(zombie.pid)[1]}_{ns}"),  # a zombie
                 _segment(f"{dead.pid}_{start}_{ns}")]  # gone
    try:
        with caplog.at_level("WARNING", logger="speechiter"):
            count, size = stale.reclaim_stale()
        existing = set(os.listdir("/dev/shm"))
        assert all(name in existing for name in kept)
        assert not any(name in existing for name in reclaimed)
        assert count >= 3 and size >= 3 * 4096
        assert any(f"reclaimed {count} stale" in r.getMessage() for r in caplog.records)
    finally:
        for name in kept + reclaimed:
            shm.unlink_segment(name)
        sleeper.kill()
        sleeper.wait()
        zombie.wait()


# ------------------------------------------------------------ start method


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_workers_do_not_fork_a_process_that_runs_threads(monkeypatch):
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, name="user-thread")
    helper.start()

    def no_fork():
        raise AssertionError("os.fork() called in a process that runs threads")

    monkeypatch.setattr(os, "fork", no_fork)
    tasks = [Task(i, [i, i + 1], 7 + i) for i in range(8)]
    try:
        with MSequence(indexers.Random, num_workers=2, out_type="null", dset_size=0,
                       start_method="spawn").start() as mng:
            spawned = [batch["rng"].tolist() for batch in mng.iterate(tasks)]
    finally:
        stop.set()
        helper.join()
    with MSequence(indexers.Random, num_workers=0, out_type="null", dset_size=0).start_test() as mng:
        assert spawned == [batch["rng"].tolist() for batch in mng.iterate(tasks)]


def test_start_method_choice():
    # never a fork of this (threaded) process by default (NOTE [ Start method ])
    assert start_method_for(indexers.Echo, None) == "forkserver"
    assert start_method_for(indexers.Echo, "fork") == "fork"
    assert start_method_for(indexers.Echo, "spawn") == "spawn"


@pytest.mark.slow  # another interpreter (Python 3.12)
@pytest.mark.timeout(120)
def test_sequence_tests_start_no_fork_under_python_3_12():
    """Python 3.12 warns when a process that runs threads forks: none of that in a real run."""
    python = "/root/.pyenv/versions/3.12.1/bin/python"
    if not os.path.exists(python) or subprocess.run([python, "-c", "import numpy, torch, soundfile"],
                                                    capture_output=True).returncode != 0:
        pytest.skip("no Python 3.12 with numpy, torch and soundfile here")
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {ROOT!r})
        import torch  # a thread of its own
        from speechiter.sequence import MSequence
        from tests.sequence import indexers
        if __name__ == "__main__":
            with MSequence(indexers.Slow, num_workers=2, out_type='cpu', dset_size=20, batch_size=4).start() as m:
                print(sum(len(b["ids"]) for b in m))
        """)
    result = subprocess.run([python, "-W", "error::DeprecationWarning", "-c", script], capture_output=True,
                            text=True, timeout=100)
    assert result.returncode == 0 and result.stdout.split() == ["20"], result.stderr
