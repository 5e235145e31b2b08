"""Issue 32: a request that stalls on the store holds up its batch only until it is sent again (NOTE [ Hedged
requests ] in speechiter/io/hedged_requests.py) or an idle worker has built the batch again (NOTE [ Hedging ] in
speechiter/sequence/hedge.py); the batches are the same, stalled or not."""
import threading
import time

import psutil
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.iterator.abs import Iterator

from .test_storage import url_corpus

pytestmark = pytest.mark.slow  # an S3 server (moto), worker processes


def checksums(folder, hedge=True, thread_type="proc"):
    """The checksums of an epoch of one-utterance batches, and the scheduler's (copies, wins)."""
    dataset_conf = {"main_data": {"feat": str(folder / "idx2wav")}, "use_speed_perturb": True}
    with Iterator(dataset_type=SpeechTextDataset, dataset_conf=dataset_conf, batch_size=1, num_workers=2,
                  thread_type=thread_type, out_type="null", seed=1, hedge=hedge) as iterator:
        sums = [checksum(batch) for batch in iterator.build_loader(1, prefetch_next=False)]
        hedger = iterator.engine().scheduler.hedger
        return sums, (hedger.copies, hedger.wins)


@pytest.mark.timeout(120)
def test_a_stalled_request_is_hedged_and_the_batches_are_the_same(s3_corpus, s3_proxy, tmp_path):
    folder = url_corpus(s3_corpus, tmp_path / "remote")
    plain, _ = checksums(folder)
    s3_proxy.stall_some(lambda n: n % 100 == 14, 5.0)  # 1% of requests, from the 14th: after the first batches
    stalled, (copies, wins) = checksums(folder)
    assert stalled == plain and copies >= 1 and wins >= 1
    s3_proxy.stall_some(lambda n: n % 100 == 14, 0.5)
    assert checksums(folder, hedge=False) == (plain, (0, 0))


def sockets_to(proxy):
    """This process's open connections to the proxy."""
    port = int(proxy.url.rsplit(":", 1)[1])
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr[1] == port)


def duplicated(proxy):
    """The GETs the proxy saw more than once (the same object and range)."""
    gets = [(path, byte_range) for _, path, byte_range in proxy.gets()]
    return sorted({get for get in gets if gets.count(get) > 1})


@pytest.mark.timeout(120)
def test_a_stalled_request_is_answered_by_its_duplicate_and_the_loser_leaves_nothing(s3_corpus, s3_proxy, tmp_path,
                                                                                     monkeypatch):
    from speechiter.io import hedged_requests

    monkeypatch.setattr(hedged_requests, "counts", {"hedged": 0, "won": 0})
    monkeypatch.setattr(hedged_requests, "FLOOR_S", 0.1)  # the product's delays (s3_proxy sets them to an hour)
    monkeypatch.setattr(hedged_requests, "CEILING_S", 1.0)
    monkeypatch.setattr(hedged_requests, "MIN_SAMPLES", 4)  # the delay follows the latencies from the 4th
    folder = url_corpus(s3_corpus, tmp_path / "remote")
    plain, _ = checksums(folder, thread_type="thread")
    connected = sockets_to(s3_proxy)
    s3_proxy.requests.clear()
    s3_proxy.stall_some(lambda n: n == 12, 30.0)  # held until the proxy is released
    try:
        stalled, _ = checksums(folder, thread_type="thread")
        assert stalled == plain and hedged_requests.counts["won"] >= 1
        assert len(duplicated(s3_proxy)) >= 1, s3_proxy.gets()
    finally:
        s3_proxy.released.set()  # the abandoned request answers now; its answer is dropped
    deadline = time.monotonic() + 30
    while hedged_requests._extra and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hedged_requests._extra == 0
    assert sockets_to(s3_proxy) <= connected + 1  # the duplicate's connection, back in the pool
    requesting = [t for t in threading.enumerate() if t.name.startswith("storage-request")]
    assert len(requesting) <= hedged_requests.POOL_THREADS


@pytest.mark.timeout(120)
def test_hedge_false_sends_each_request_once(s3_corpus, s3_proxy, tmp_path):
    folder = url_corpus(s3_corpus, tmp_path / "remote")
    plain, _ = checksums(folder)
    s3_proxy.requests.clear()
    s3_proxy.stall_some(lambda n: n % 10 == 4, 1.2)  # past the 1 s delay of the first requests
    assert checksums(folder, hedge=False) == (plain, (0, 0))
    assert duplicated(s3_proxy) == []
