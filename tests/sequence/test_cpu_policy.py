"""Loading worker processes run as SCHED_BATCH, so that waking one with a task does not take the consumer's
CPU; the main process and its threads keep their policy (NOTE [ Workers as batch work ] in
speechiter/sequence/cpu_policy.py)."""
import os
import threading

import pytest

from speechiter.sequence import MSequence, Task
from speechiter.sequence.cpu_policy import run_as_batch_work
from tests.sequence import indexers

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
TASKS = [Task(i, [i], i) for i in range(4)]


def allowed_here() -> bool:
    """Whether this machine lets a thread switch to SCHED_BATCH (tried on a thread of its own, which ends)."""
    switched = []
    thread = threading.Thread(target=lambda: switched.append(run_as_batch_work()))
    thread.start()
    thread.join()
    return switched == [True]


def policies(thread_type, **options):
    with MSequence(indexers.SchedulingPolicy, num_workers=2, thread_type=thread_type, out_type="null",
                   dset_size=0, **options).start() as mng:
        return list(mng.iterate(TASKS))


@pytest.mark.slow  # process workers
@pytest.mark.timeout(90)
@pytest.mark.parametrize("start_method", [None, "fork"])
def test_process_workers_and_the_threads_they_start_run_as_batch_work(start_method):
    if not allowed_here():
        pytest.skip("this machine refuses SCHED_BATCH (a sandbox's filter): the workers run as before")
    options = {} if start_method is None else {"start_method": start_method}
    seen = policies("proc", **options)
    assert {row["pid"] for row in seen} - {os.getpid()}
    assert all(row["builder"] == row["started"] == os.SCHED_BATCH for row in seen), seen
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


@pytest.mark.timeout(60)
def test_thread_workers_keep_the_main_process_policy():
    seen = policies("thread")
    assert all(row["pid"] == os.getpid() for row in seen)
    assert all(row["builder"] == row["started"] == os.SCHED_OTHER for row in seen), seen


def test_a_refused_policy_leaves_the_worker_as_it_was(monkeypatch):
    def refuse(pid, policy, param):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert run_as_batch_work() is False
    monkeypatch.delattr(os, "SCHED_BATCH")
    assert run_as_batch_work() is False
