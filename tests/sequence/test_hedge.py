"""Issue 32: a late batch is built again on an idle worker and the first result wins (NOTE [ Hedging ] in
speechiter/sequence/hedge.py): the same batches, nothing left in flight or in shared memory afterwards."""
import functools
import time

import pytest

from speechiter.sequence import MSequence, Task
from speechiter.sequence import hedge
from speechiter.sequence.hedge import HEDGE_FLOOR_S, MAX_DUPLICATES, MIN_SAMPLES, Hedger
from speechiter.sequence.pending import Pending
from tests.sequence import indexers
from tests.sequence.test_msequence import as_bytes

AT = 20  # the stalled batch: after the MIN_SAMPLES batches hedging waits for


def plan(n, offset=0):
    return [Task(offset + i, [offset + i, offset + i + 1000], None) for i in range(n)]


def expected(tasks):
    return [as_bytes(indexers.Stalled("/nonexistent", at=-1, build_s=0)[task.ids]) for task in tasks]


def settle(scheduler, seconds=30.0):
    """Receive until no attempt is in flight (the late one arrives after its winner), at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while (scheduler.hedger.extra or any(scheduler._load)) and time.monotonic() < deadline:
        scheduler._receive(0.05)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hedge.time, "monotonic", clock)
    return clock


def trained(clock, workers=3, build_s=0.2):
    """A Hedger that saw MIN_SAMPLES builds of ``build_s`` on worker 0 (seqs from 1000 on)."""
    hedger = Hedger(workers)
    for seq in range(1000, 1000 + MIN_SAMPLES):
        hedger.sent(0, seq)
        clock.now += build_s
        hedger.arrived(0, seq)
    return hedger


def test_a_worker_is_late_after_three_medians_and_the_floor(clock):
    hedger = trained(clock, build_s=0.02)
    assert hedger.limit() == HEDGE_FLOOR_S  # 3 x 20 ms is under the floor
    hedger = trained(clock)
    assert hedger.limit() == pytest.approx(0.6)
    hedger.sent(1, 1)
    hedger.sent(1, 2)  # queued behind 1: it starts when 1 comes back
    clock.now += 0.5
    assert hedger.late() == [] and hedger.wait_s([0, 2, 0]) == pytest.approx(0.1)
    clock.now += 0.2
    assert hedger.late() == [1]
    hedger.arrived(1, 1)
    assert hedger.late() == []  # 2 has just started
    assert Hedger(3, enabled=False).limit() is None and Hedger(1).limit() is None


def test_copies_go_to_idle_workers_first_needed_first_and_the_first_success_wins(clock):
    hedger = trained(clock)
    pending, load = {}, [0, 0, 0]

    def attempt(task, wid):
        seq = 500 + len(sent)
        sent.append((task.position, wid))
        load[wid] += 1
        hedger.sent(wid, seq)
        return Pending(seq, task, wid, f"slot{seq}")

    sent = []
    for seq in (1, 2, 3):  # three tasks queued on worker 1
        pending[seq] = Pending(seq, Task(seq, [seq]), 1, f"slot{seq}")
        hedger.sent(1, seq)
        load[1] += 1
    hedger.hedge(pending, load, attempt)
    assert sent == []  # not late yet
    clock.now += 1.0
    hedger.hedge(pending, load, attempt)
    assert sent == [(1, 0), (2, 2)] and hedger.in_flight() == MAX_DUPLICATES  # task 3: no idle worker, bound
    copy1, copy2 = pending[1].copy, pending[2].copy
    assert hedger.weighted(load) == [1, load[1] + max(load) + 1, 1]  # new tasks avoid worker 1
    # the copy of task 1 succeeds first: it is task 1's result, task 1's own attempt waits to be dropped
    assert hedger.settle(hedger.extra.pop(copy1.seq), True, pending, "done-copy") is None
    assert pending[1].result == "done-copy" and pending[1].slot == copy1.slot and pending[1].wid == 0
    beaten = hedger.extra[1]
    assert beaten.original is None and beaten.slot == "slot1" and beaten.wid == 1
    # task 2's own attempt came first: its copy is dropped when it arrives; a failed copy is dropped too
    pending[2].result = "done-own"
    assert hedger.settle(hedger.extra.pop(copy2.seq), True, pending, "late") is copy2
    assert hedger.settle(hedger.extra.pop(1), True, pending, "late own") is beaten
    assert hedger.extra == {} and hedger.wins == 1 and hedger.copies == 2
    failed = Pending(900, Task(3, [3]), 0, "slot900")
    failed.original = pending[3]
    assert hedger.settle(failed, False, pending, "Failed") is failed and pending[3].result is None


@pytest.mark.slow  # worker processes and threads, stalls of a second or more
@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["thread", "proc"])
@pytest.mark.parametrize("stalled", ["own attempt", "copy"])
def test_the_first_result_wins_and_the_late_one_is_dropped(tmp_path, kind, stalled):
    # "own attempt": the task's attempt waits for the release file, its copy wins;
    # "copy": the own attempt takes 2 s, long enough to be copied, and wins; the copy waits for the release.
    index = functools.partial(indexers.Stalled, tmp_path, AT, stall=1 if stalled == "own attempt" else 2,
                              slow_s=None if stalled == "own attempt" else 2.0)
    tasks = plan(40)
    manager = MSequence(index, num_workers=2, thread_type=kind, out_type="null", buffer=4, dset_size=0)
    with manager.start() as mng:
        scheduler = mng._scheduler
        got = []
        started = time.monotonic()
        for batch in mng.iterate(tasks):
            got.append(as_bytes(batch))
            assert scheduler.hedger.in_flight() <= MAX_DUPLICATES
        took = time.monotonic() - started
        assert got == expected(tasks)
        assert scheduler.hedger.copies >= 1
        if stalled == "own attempt":
            assert scheduler.hedger.wins >= 1 and took < 30  # not the 60 s the stalled attempt would take
        (tmp_path / "release").touch()
        settle(scheduler)
        assert scheduler.hedger.extra == {} and scheduler._pending == {} and not any(scheduler._load)
        if kind == "proc":
            slots = scheduler._slots
            assert sorted(slots.free) == list(range(len(slots)))  # every slot back, the duplicates' too
            assert len(slots) <= 2 * 4 + MAX_DUPLICATES  # the buffer, attempts beaten by copies, copies
        assert [as_bytes(b) for b in mng.iterate(plan(6, 100))] == expected(plan(6, 100))  # and it goes on


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_hedge_off_waits_for_the_late_batch(tmp_path):
    index = functools.partial(indexers.Stalled, tmp_path, AT, most_s=1.0)
    manager = MSequence(index, num_workers=2, thread_type="thread", out_type="null", buffer=4, dset_size=0,
                        hedge=False)
    with manager.start() as mng:
        assert [as_bytes(b) for b in mng.iterate(plan(30))] == expected(plan(30))
        assert mng._scheduler.hedger.copies == 0
