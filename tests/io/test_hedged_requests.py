"""Hedged requests (NOTE [ Hedged requests ] in speechiter/io/hedged_requests.py): a late request is sent once
more and the first answer that passes its checks wins; bounded; off with the engine's hedge: false."""
import threading
import time

import numpy as np
import pytest

from speechiter.dataset import prefetch
from speechiter.errors import DataError
from speechiter.io import hedged_requests
from speechiter.io.hedged_requests import ENABLED, Unhedged, hedged, unhedged_reader

URL = "s3://bucket/shard-00000.pack"
WAIT_S = 10  # what a stalled request waits at most: released by the test long before


@pytest.fixture
def quick(monkeypatch):
    """A delay of 20 ms from the first request, no latencies kept, counts from 0."""
    monkeypatch.setattr(hedged_requests, "CEILING_S", 0.02)
    monkeypatch.setattr(hedged_requests, "_latencies", {})
    monkeypatch.setattr(hedged_requests, "counts", {"hedged": 0, "won": 0})
    yield
    wait_until(lambda: hedged_requests._extra == 0)


def wait_until(condition, seconds=WAIT_S):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time limit"
        time.sleep(0.01)


class Store:
    """``request()`` answers the n-th request (from 1) with ``answers[n]`` (bytes, or an error raised); request
    numbers in ``stalled`` first wait until :meth:`release` (or their ``delays``)."""

    def __init__(self, answers, stalled=()):
        self.answers, self.stalled, self.sent = answers, set(stalled), 0
        self.delays = {}  # request number -> seconds it is stalled (else until released)
        self.released, self.lock, self.finished = threading.Event(), threading.Lock(), []

    def request(self):
        with self.lock:
            self.sent += 1
            number = self.sent
        if number in self.stalled:
            self.released.wait(self.delays.get(number, WAIT_S))
        answer = self.answers[number]
        self.finished.append(number)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def release(self):
        self.released.set()


def transient(error):
    return isinstance(error, ConnectionError)


def test_a_late_request_is_sent_again_and_the_first_answer_wins(quick):
    store = Store({1: b"late", 2: b"bytes"}, stalled={1})
    try:
        assert hedged(URL, store.request, transient) == b"bytes"
        assert hedged_requests.counts == {"hedged": 1, "won": 1} and store.finished == [2]
        assert hedged_requests._extra == 1  # the abandoned request is out until it answers
    finally:
        store.release()
    wait_until(lambda: store.finished == [2, 1] and hedged_requests._extra == 0)  # its answer dropped
    on_time = Store({1: b"bytes"})
    assert hedged(URL, on_time.request, transient) == b"bytes" and on_time.sent == 1
    assert hedged_requests.counts == {"hedged": 1, "won": 1}


@pytest.mark.parametrize("refused", ["the duplicate's, first", "the first request's, first"])
def test_an_answer_refused_by_its_checks_does_not_win(quick, refused):
    wrong = DataError(f"{URL}: the store answered a ranged read (bytes 0-9) with status 200 ...")
    if refused == "the duplicate's, first":  # then the stalled first request answers
        store = Store({1: b"bytes", 2: wrong}, stalled={1})
        threading.Timer(0.3, store.release).start()
    else:  # the first request is refused while the duplicate is out
        store = Store({1: wrong, 2: b"bytes"}, stalled={1, 2})
        store.delays = {1: 0.1, 2: 0.4}
    try:
        assert hedged(URL, store.request, transient) == b"bytes" and store.sent == 2
    finally:
        store.release()


def test_when_both_fail_the_error_that_is_not_transient_is_raised(quick):
    wrong = DataError(f"{URL}: refused")
    store = Store({1: ConnectionError("dropped"), 2: wrong}, stalled={1})
    threading.Timer(0.2, store.release).start()
    with pytest.raises(DataError, match="refused"):
        hedged(URL, store.request, transient)
    store = Store({1: ConnectionError("dropped"), 2: ConnectionError("reset")}, stalled={1})
    threading.Timer(0.2, store.release).start()
    with pytest.raises(ConnectionError, match="reset"):  # the first to fail, to the storage retries
        hedged(URL, store.request, transient)


def test_a_request_failing_before_its_delay_is_not_sent_again(quick, monkeypatch):
    monkeypatch.setattr(hedged_requests, "CEILING_S", 5.0)
    store = Store({1: ConnectionError("dropped")})
    with pytest.raises(ConnectionError):
        hedged(URL, store.request, transient)
    assert store.sent == 1 and hedged_requests.counts["hedged"] == 0


def test_at_most_max_extra_reads_have_a_second_request_out(quick, monkeypatch):
    monkeypatch.setattr(hedged_requests, "MAX_EXTRA", 1)
    first = Store({1: b"first", 2: b"first"}, stalled={1, 2})  # both of its requests stall
    second = Store({1: b"late", 2: b"second"}, stalled={1})
    results = {}
    reading = threading.Thread(target=lambda: results.update(first=hedged(URL, first.request, transient)))
    reading.start()
    try:
        wait_until(lambda: first.sent == 2)
        threading.Timer(0.3, second.release).start()
        assert hedged(URL, second.request, transient) == b"late"  # no second request left: it waited
        assert second.sent == 1 and hedged_requests.counts["hedged"] == 1
    finally:
        first.release()
        reading.join(WAIT_S)
    assert results == {"first": b"first"}


def test_hedge_false_sends_each_request_once_in_the_build_and_its_pool_threads(quick):
    class Indexer:
        def __init__(self):
            self.stores = []

        def __getitem__(self, ids):
            store = Store({1: b"late", 2: b"bytes"}, stalled={1})
            self.stores.append(store)
            threading.Timer(0.2, store.release).start()
            return prefetch._the_pool().submit(hedged, URL, store.request, transient).result(WAIT_S)

        def prepare(self, ids):
            return ENABLED.get()

    indexer = unhedged_reader(Indexer)()
    assert isinstance(indexer, Unhedged) and indexer.stores == []
    assert indexer[[0]] == b"late" and indexer.stores[0].sent == 1
    assert indexer.prepare([0]) is False and ENABLED.get() is True  # set for the build only
    assert Indexer()[[0]] == b"bytes"  # on by default
    assert Unhedged(object()).prepare([0]) is False  # an indexer that reads nothing ahead


class ReportsHedging:
    """An indexer whose batch says whether its build, and a read it starts on the read pool, hedge requests."""

    def __getitem__(self, ids):
        on_pool = prefetch._the_pool().submit(ENABLED.get).result(WAIT_S)
        return {"build": np.array(ENABLED.get()), "read": np.array(on_pool)}


@pytest.mark.parametrize("kind,workers,thread_type", [
    ("inline", 0, "thread"), ("msequence", 2, "thread"), ("torch", 0, "thread"),
    pytest.param("msequence", 2, "proc", marks=pytest.mark.slow),
    pytest.param("torch", 2, "proc", marks=pytest.mark.slow)])
@pytest.mark.parametrize("hedge", [True, False])
def test_the_engines_hedge_setting_reaches_each_build_and_its_reads(kind, workers, thread_type, hedge):
    from speechiter.engine import EngineSettings, make_engine
    from speechiter.sequence.fetch import Task

    settings = EngineSettings(kind=kind, num_workers=workers, thread_type=thread_type, out_type="null", hedge=hedge)
    engine = make_engine(settings, ReportsHedging)
    try:
        batches = list(engine.iterate([Task(0, [0]), Task(1, [1])]))
    finally:
        engine.close()
    assert [(bool(b["build"]), bool(b["read"])) for b in batches] == [(hedge, hedge)] * 2
    assert ENABLED.get() is True  # the caller's thread keeps the default
