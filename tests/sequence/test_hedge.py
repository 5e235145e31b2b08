"""Issue 32: a late batch is built again on an idle worker and the first result wins (NOTE [ Hedging ] in
speechiter/sequence/hedge.py): the same batches, nothing left in flight or in shared memory afterwards."""
import functools
import time

import pytest

from speechiter.sequence import MSequence, Task
from speechiter.sequence.hedge import MAX_DUPLICATES
from tests.sequence import indexers
from tests.sequence.test_msequence import as_bytes

pytestmark = pytest.mark.slow  # worker processes and threads, stalls of a second or more

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


@pytest.mark.timeout(60)
def test_hedge_off_waits_for_the_late_batch(tmp_path):
    index = functools.partial(indexers.Stalled, tmp_path, AT, most_s=1.0)
    manager = MSequence(index, num_workers=2, thread_type="thread", out_type="null", buffer=4, dset_size=0,
                        hedge=False)
    with manager.start() as mng:
        assert [as_bytes(b) for b in mng.iterate(plan(30))] == expected(plan(30))
        assert mng._scheduler.hedger.copies == 0
