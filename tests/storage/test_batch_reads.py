"""NOTE [ Reading a batch's URLs together ] (speechiter/dataset/prefetch.py): one round trip per batch."""
import threading

import numpy as np
import pytest

from speechiter.io.read import read_feat
from speechiter.dataset import prefetch
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import DataError
from speechiter.seeding import seeded

from .test_storage import url_corpus

pytestmark = pytest.mark.slow  # an S3 server (moto)


def ids_and_dataset(folder, **conf):
    dataset = SpeechTextDataset(main_data={"feat": str(folder / "idx2wav")}, **conf)
    return list(dataset.get_data_index()), dataset


@pytest.mark.timeout(120)
def test_a_batch_reads_its_urls_at_once_and_gives_the_local_batch(s3_corpus, s3_proxy, tmp_path):
    ids, remote = ids_and_dataset(url_corpus(s3_corpus, tmp_path / "remote"), use_speed_perturb=True)
    _, local = ids_and_dataset(s3_corpus.local, use_speed_perturb=True)
    batch = ids[:6]
    remote.get_batch(ids[6:7])  # the filesystem's first request makes its session (one at a time)
    s3_proxy.requests.clear()
    barrier = threading.Barrier(len(batch), timeout=20)
    s3_proxy.hold = barrier.wait  # each GET waits here until all six are in flight
    with seeded(7):
        got = remote.get_batch(batch)
    with seeded(7):  # the same draws (speed factors) in the same order
        want = local.get_batch(batch)
    assert not barrier.broken and len(s3_proxy.gets()) == len(batch)
    np.testing.assert_array_equal(got["feat"], want["feat"])
    np.testing.assert_array_equal(got["feat_len"], want["feat_len"])


@pytest.mark.timeout(120)
def test_the_first_failing_utterance_of_a_batch_is_named(s3_corpus, s3_proxy, tmp_path):
    folder = url_corpus(s3_corpus, tmp_path / "remote")
    lines = (folder / "idx2wav").read_text().splitlines()
    broken = {2: "missing-a.wav", 4: "missing-b.wav"}  # two objects that do not exist
    for row, name in broken.items():
        uid = lines[row].split()[0]
        lines[row] = f"{uid} {s3_corpus.url}/{name}"
    (folder / "idx2wav").write_text("\n".join(lines) + "\n")
    ids, dataset = ids_and_dataset(folder)
    first = sorted(lines[row].split()[0] for row in broken)[0]  # the dataset's order is id order
    with pytest.raises(DataError, match=rf"utterance {first} \(feat from .*idx2wav\): .*missing-.\.wav: "
                                        "cannot read: no such object"):
        dataset.get_batch(ids[:8])


def test_local_values_and_single_urls_are_read_in_place(monkeypatch, corpus):
    started = []
    monkeypatch.setattr(prefetch, "_the_pool", lambda: started.append(1))
    with prefetch.reading_together({"a": "/a.wav", "b": "/b.wav"}, ["a", "b"], read_feat):
        pass
    with prefetch.reading_together({"a": "s3://bucket/a.wav"}, ["a"], read_feat):
        pass
    ids, dataset = ids_and_dataset(corpus)
    assert dataset.get_batch(ids[:4])["feat"].shape[0] == 4 and started == []
    assert prefetch.take("x", lambda value: value * 2) == "xx"  # nothing started: read here
