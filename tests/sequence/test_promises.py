"""Promised tasks (NOTE [ Promised tasks ] in speechiter/sequence/promises.py): made only for an indexer that
reads ahead, kept within a run without re-reading its tasks, dropped when the plan changes; they change which
worker builds a batch, never the batches."""
import pytest

from speechiter.sequence import MSequence, Task
from speechiter.sequence.fetch import READ_AHEAD
from speechiter.sequence.pools import ThreadPool
from speechiter.sequence.promises import Promises
from speechiter.sequence.scheduler import Run
from speechiter.sequence.workers import Upcoming


class CountedTasks:
    """A plan whose tasks count how often they are made (EpochTasks builds one on every access)."""

    def __init__(self, n, first=0):
        self.n, self.first, self.made = n, first, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        self.made += 1
        return Task(self.first + i, [self.first + i], None)


def promised(promises, run, load):
    return [(wid, task.position) for wid, task in promises.renew(run, load, 0)]


def send(promises, run, load):
    """What the scheduler does to dispatch the run's next task."""
    task = run.tasks[len(run.entries)]
    wid = promises.worker_for(task, load, 0)
    run.entries.append(task)
    load[wid] += 1
    return wid


def test_nothing_is_promised_until_a_worker_reads_ahead():
    promises, load = Promises(), [1, 1]
    run = Run(CountedTasks(10), (), [])
    assert promised(promises, run, load) == []
    assert send(promises, run, load) == 0  # the least loaded, as without promises
    promises.wanted = True
    assert promised(promises, run, load) == [(1, 1), (0, 2), (1, 3), (0, 4)][:READ_AHEAD * 2]


def test_promises_of_one_run_are_not_read_again_and_a_new_plan_drops_them():
    promises, load = Promises(), [0, 0]
    promises.wanted = True
    tasks = CountedTasks(20)
    run = Run(tasks, (), [])
    first = promised(promises, run, load)
    assert [position for _, position in first] == list(range(2 * READ_AHEAD))
    made = tasks.made
    for _ in range(5):
        wid = send(promises, run, load)
        load[wid] -= 1  # answered
        assert len(promised(promises, run, load)) == 1  # one new promise per task sent
    assert tasks.made - made == 5 * 2  # each task made when promised and when sent: never to check promises
    other = Run(CountedTasks(20, first=100), (), [])  # a new plan: the old promises are not coming
    assert [position for _, position in promised(promises, other, load)] == list(range(100, 100 + 2 * READ_AHEAD))


class Ahead:
    """Reads ahead (its prepare says so, or says nothing); counts the batches it was told of."""

    reads_ahead = None

    def __init__(self):
        self.told = []

    def prepare(self, ids):
        self.told.append(list(ids))
        return self.reads_ahead

    def __getitem__(self, ids):
        return {"ids": list(ids)}


class Local(Ahead):
    reads_ahead = False  # nothing to read ahead: local files


@pytest.mark.timeout(60)
@pytest.mark.parametrize("indexer, promises", [(Ahead, True), (Local, False)], ids=["reads-ahead", "local"])
def test_upcoming_messages_go_only_to_workers_that_read_ahead(monkeypatch, indexer, promises):
    sent = []
    real_send = ThreadPool.send
    monkeypatch.setattr(ThreadPool, "send", lambda self, wid, msg: sent.append(msg) or real_send(self, wid, msg))
    plan = [Task(i, [i, i + 100], None) for i in range(12)]
    with MSequence(indexer, num_workers=2, thread_type="thread", out_type="null", buffer=2,
                   dset_size=0).start() as manager:
        got = [batch["ids"] for batch in manager.iterate(plan)]
    assert got == [task.ids for task in plan]
    assert any(isinstance(msg, Upcoming) for msg in sent) == promises


@pytest.mark.timeout(120)
def test_a_reader_says_it_reads_ahead_for_a_pack_not_for_local_files(tmp_path, make_corpus):
    from tests.io.test_pack import pack, train_iterator

    original, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=12))
    for recipe, reads_ahead in ((original, False), (packed, True)):
        iterator = train_iterator(recipe, num_workers=0)
        try:
            ids = next(iter(iterator.build_loader(1))).ids
            assert iterator.reader().prepare(ids) is reads_ahead
        finally:
            iterator.close()


@pytest.mark.timeout(120)
def test_reads_another_dataset_started_for_the_same_ids_are_not_this_ones(tmp_path, make_corpus):
    """Two corpora made alike share their ids: a pack's reads started (and never taken) in this thread do not
    make the local corpus's reader say that its batch reads ahead."""
    from tests.io.test_pack import pack, train_iterator

    original, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=12))
    first, second = train_iterator(packed, num_workers=0), train_iterator(original, num_workers=0)
    try:
        ids = next(iter(first.build_loader(1))).ids
        assert first.reader().prepare(ids) is True  # started, left untaken
        assert second.reader().prepare(ids) is False
    finally:
        first.close()
        second.close()
