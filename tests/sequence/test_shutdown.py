"""One shutdown path (NOTE [ One shutdown path ] in speechiter/interrupts.py): Ctrl-C ends a run whose thread
workers are stuck in reads, SIGTERM unwinds a CLI run as Ctrl-C does, and no run leaves /dev/shm segments,
also when its main process is killed (NOTE [ Segments of a killed main process ] in shm/segments.py)."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from speechiter.daemon_pool import DaemonThreadPool
from speechiter.sequence.shm import stale
from tests.sequence.test_limits import ENV, ROOT, cli_recipe, script
from tests.engine.test_faults import alive, owned_by, wait_until


# ------------------------------------------------------ threads in stalled reads

STALLED = script("""
    import functools
    manager = MSequence(functools.partial(indexers.StalledStore, sys.argv[1]), num_workers=8, thread_type="thread",
                        out_type="null", dset_size=0, buffer=16)
    with manager.start() as mng:
        for batch in mng.iterate([Task(i, [2 * i, 2 * i + 1], None) for i in range(64)]):
            print("batch", flush=True)
    """)


@pytest.mark.slow  # Ctrl-C sent to a real process
@pytest.mark.timeout(90)
def test_ctrl_c_ends_a_run_whose_thread_workers_are_stuck_in_reads(tmp_path):
    marker = tmp_path / "stuck"
    marker.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", STALLED, str(marker)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        assert [proc.stdout.readline().strip() for _ in range(4)] == ["batch"] * 4  # ids 0-7 read
        assert wait_until(lambda: len(marker.read_text().split()) >= 2)  # reads of ids >= 8 never return
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        assert time.monotonic() - started < 10, stderr
        assert "KeyboardInterrupt" in stderr
    finally:
        proc.kill()
        proc.wait(30)


def test_daemon_thread_pool_runs_like_an_executor():
    pool = DaemonThreadPool(2, "test-daemon")
    futures = [pool.submit(pow, 2, n) for n in range(6)]
    assert [future.result(10) for future in futures] == [2 ** n for n in range(6)]
    failed = pool.submit(int, "x")
    with pytest.raises(ValueError):
        failed.result(10)


# ------------------------------------------------------------------- SIGTERM

SLOW_MODULE = '''
import time
from speechiter.dataset.speech_text import SpeechTextDataset


class Slow(SpeechTextDataset):
    def extract_main_data_fn(self, main_data):
        time.sleep(0.05)
        return super().extract_main_data_fn(main_data)
'''


def start_cli(tmp_path, corpus, *args):
    (tmp_path / "slow.py").write_text(SLOW_MODULE)
    recipe = cli_recipe(tmp_path, corpus)
    recipe.write_text(recipe.read_text().replace("speech_text.SpeechTextDataset", "slow.Slow", 1))
    return recipe, subprocess.Popen(
        [sys.executable, "-m", "speechiter.run", "--data_cfg", str(recipe), "--quiet", *map(str, args)],
        cwd=ROOT, env=dict(ENV, PYTHONPATH=f"{ROOT}:{tmp_path}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def no_process_runs(recipe):
    return not any(str(recipe) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


@pytest.mark.slow  # SIGTERM sent to a real CLI process
@pytest.mark.timeout(120)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_sigterm_ends_a_cli_run_as_ctrl_c_does_leaving_nothing(tmp_path, corpus, thread_type):
    dump = tmp_path / "dump.jsonl"
    recipe, proc = start_cli(tmp_path, corpus, "--num_workers", 4, "--thread_type", thread_type, "--epochs", 50,
                             "--dump_batches", dump)
    try:
        assert wait_until(lambda: dump.exists() and dump.stat().st_size > 0 or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "speechiter: terminated (SIGTERM)"
    assert owned_by(proc.pid) == []  # checked before any other run could reclaim them
    assert wait_until(lambda: no_process_runs(recipe))
    # A second run after it leaves nothing either.
    recipe, second = start_cli(tmp_path, corpus, "--num_workers", 4, "--thread_type", thread_type)
    _, stderr = second.communicate(timeout=90)
    assert second.returncode == 0, stderr
    # The first run's segments were checked above; a "reclaimed" line here would be another test's killed run
    # (pytest-xdist runs kill-and-resume tests beside this one), so it is not asserted on.
    assert owned_by(second.pid) == []


# --------------------------------------------------------- killed main process

HOLDING = script("""
    import functools, os, time
    manager = MSequence(functools.partial(indexers.Stuck, sys.argv[1], "read"), num_workers=2, out_type="null",
                        dset_size=0, buffer=4)
    manager.start()
    batches = manager.iterate([Task(0, [0], None), Task(1, [5], None), Task(2, [5], None)])
    held = next(batches)  # its slot has a segment; then both workers get stuck at id 5
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(open(sys.argv[1]).read().split()) < 2:
        time.sleep(0.05)
    print(os.getpid(), " ".join(map(str, manager.pids)), flush=True)
    sys.stdin.read()
    """)


@pytest.mark.slow  # a main process killed under its workers
@pytest.mark.timeout(90)
def test_segments_of_a_killed_main_process_are_unlinked_when_its_workers_end(tmp_path):
    marker = tmp_path / "stuck"
    marker.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", HOLDING, str(marker)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        main_pid, *pids = [int(pid) for pid in proc.stdout.readline().split()]
        assert len(marker.read_text().split()) == 2 and owned_by(main_pid) != []
        os.kill(main_pid, signal.SIGKILL)  # the main process alone; its workers are stuck and cannot sweep
        assert proc.wait(30) == -signal.SIGKILL
        assert wait_until(lambda: not any(map(alive, pids)))
        # No other pool needs to start: the segments go without a reclaim (NOTE [ Stale segments ]).
        assert wait_until(lambda: owned_by(main_pid) == []), owned_by(main_pid)
    finally:
        proc.kill()
        proc.wait(30)
        stale.reclaim_stale()
