"""Reading ahead: a worker starts the reads of its next batches while it builds one (NOTE [ Reading ahead ]
in speechiter/dataset/prefetch.py); the batches, their order and their errors do not change."""
import collections
import threading

import pytest

from speechiter.dataset import prefetch
from speechiter.dataset.reader import DatasetReader
from speechiter.dump import checksum
from speechiter.errors import DataError, WorkerError
from speechiter.io import shards
from speechiter.sequence.fetch import READ_AHEAD

from .test_pack import batches, pack, train_iterator
from .test_pack_s3 import s3_pack  # noqa: F401

SETTINGS = [dict(num_workers=0), dict(num_workers=2, thread_type="proc"), dict(num_workers=2, thread_type="thread")]


def count_prepared(monkeypatch):
    calls = []
    real = prefetch.prepare
    monkeypatch.setattr(prefetch, "prepare", lambda column, ids, read: calls.append(list(ids)) or
                        real(column, ids, read))
    return calls


@pytest.mark.slow  # process workers
@pytest.mark.timeout(300)
def test_a_local_pack_gives_the_same_batches_with_and_without_reading_ahead(tmp_path, make_corpus, monkeypatch):
    original, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=30))
    want = batches(original, num_workers=0)  # local files: nothing is read ahead
    import speechiter.dataset.speech_text as speech_text

    prepared = count_prepared(monkeypatch)
    monkeypatch.setattr(speech_text, "prepare", prefetch.prepare)
    for settings in SETTINGS:
        assert batches(packed, **settings) == want, settings
        assert batches(packed, epoch=2, start_step=1, **settings) == batches(original, epoch=2, num_workers=0)[1:]
    assert prepared  # in this process: num_workers 0 and thread workers
    with monkeypatch.context() as m:
        m.delattr(DatasetReader, "prepare")
        assert batches(packed, num_workers=0) == want


def load_until_error(recipe, **settings):
    iterator = train_iterator(recipe, **settings)
    got = []
    try:
        for batch in iterator.build_loader(1):
            got.append((list(batch.ids), checksum(batch)))
    except (DataError, WorkerError) as error:
        return got, error
    finally:
        iterator.close()
    pytest.fail("no error")


@pytest.mark.slow  # process workers
@pytest.mark.timeout(300)
def test_a_read_ahead_that_fails_raises_at_its_own_batch(tmp_path, make_corpus, monkeypatch):
    original, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=30), shard_size="32K")
    want = batches(original, num_workers=0)
    shard_of = {line.split()[0]: line.split()[1].split("#")[0]
                for line in (tmp_path / "pack" / "idx2wav").read_text().splitlines()}
    late = shard_of[want[-1][0][0]]  # a shard the last batch reads
    first_bad = next(i for i, (ids, _) in enumerate(want) if any(shard_of[uid] == late for uid in ids))
    assert first_bad >= 2, "the shard must be read ahead of its batch"
    (tmp_path / "pack" / late).rename(tmp_path / "moved.pack")
    with monkeypatch.context() as m:
        m.delattr(DatasetReader, "prepare")
        alone, error = load_until_error(packed, num_workers=0)  # each batch read when it is built
    message = str(error)
    assert "\n" not in message and late in message and message.startswith("utterance "), message
    assert alone == want[:first_bad]
    for settings in SETTINGS:
        shards.clear_shards()
        got, error = load_until_error(packed, **settings)
        assert got == want[:first_bad], settings
        if settings["num_workers"] == 0:
            assert type(error) is DataError and str(error) == message and error.exit_code == 2
        else:
            assert f"DataError: {message}\n" in str(error) and error.exit_code == 2, str(error)


# ------------------------------------------------------------------- S3


def ranged_gets(proxy):
    return [r for r in proxy.gets() if r[2] and "shards.json" not in r[1]]


@pytest.mark.slow  # the S3 server
@pytest.mark.usefixtures("localhost_only")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("settings", SETTINGS, ids=["0", "2-proc", "2-thread"])
def test_an_s3_pack_read_ahead_gives_the_same_batches_at_one_request_per_batch(s3_pack, s3_proxy, settings,
                                                                               monkeypatch):
    original, packed, _, _ = s3_pack
    want = batches(original, num_workers=0) + batches(original, epoch=2, num_workers=0)
    s3_proxy.requests.clear()
    iterator = train_iterator(packed, hedge=False, **settings)  # requests counted: none sent twice on a busy machine
    try:  # two epochs, the second prefetched during the first: every batch read once
        got = [(list(b.ids), checksum(b)) for epoch in (1, 2)
               for b in iterator.build_loader(epoch, prefetch_next=epoch == 1)]
    finally:
        iterator.close()
    assert got == want
    # one request per batch; with workers, at most one more in the run: tasks are promised (read ahead
    # by the worker that will build them) only once a worker has said that it reads ahead
    assert len(ranged_gets(s3_proxy)) - len(got) <= (1 if settings.get("num_workers") else 0), (
        len(ranged_gets(s3_proxy)), len(got))
    if settings.get("thread_type") != "proc":
        with monkeypatch.context() as m:  # the same without reading ahead, in this process
            m.delattr(DatasetReader, "prepare")
            assert batches(packed, **settings) == want[:len(want) // 2]


def test_a_thread_keeps_the_reads_of_every_batch_fetch_tells_it_of():
    # fetch tells a thread the batch it builds and the next READ_AHEAD + 1 (sequence/fetch.py); a thread that kept
    # fewer would cancel the last ones' reads and start them again at each batch (each GET sent about 3 times)
    column = {f"u{i}": f"s3://bucket/u{i}.flac" for i in range(40)}
    plan = [[f"u{2 * i}", f"u{2 * i + 1}"] for i in range(20)]
    reads, built = collections.Counter(), []

    def read(value):
        reads[value] += 1
        return value

    def build_in_order():
        for position, ids in enumerate(plan):
            for told in plan[position:position + READ_AHEAD + 2]:
                prefetch.prepare(column, told, read)
            with prefetch.reading_together(column, ids, read):
                built.extend(prefetch.take(column[uid], read) for uid in ids)

    thread = threading.Thread(target=build_in_order)  # a thread of its own: nothing started before
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and built == [column[uid] for ids in plan for uid in ids]
    assert reads == {value: 1 for value in column.values()}
