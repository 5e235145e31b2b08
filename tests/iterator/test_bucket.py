"""BucketIterator: padding efficiency, the budget, per-epoch recomposition, and the exactness checks
(ngpu, distributed shares, batches_per_epoch, resume, worker counts)."""
import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError
from speechiter.iterator.bucket import BucketIterator

BATCH_LEN = 1.92e6  # 120 s of 16 kHz audio, Lhotse's usual max_duration


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory):
    from tests.conftest import load_tool
    root = tmp_path_factory.mktemp("bucket20k")
    return load_tool("make_corpus").make_corpus(root, 20000, lengths_only=True)


def bucket(root, **conf):
    conf.setdefault("batch_len", BATCH_LEN)
    return BucketIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                          data_len=str(root / "idx2wav_len"), engine="inline", **conf)


def flat(batches):
    return [uid for batch in batches for uid in batch]


def padding(batches, lengths):
    real = padded = 0
    for batch in batches:
        values = [lengths[u] for u in batch]
        real += sum(values)
        padded += max(values) * len(values)
    return real / padded


def test_padding_efficiency_and_budget_on_librispeech_like_lengths(big_corpus):
    iterator = bucket(big_corpus)
    lengths = dict(line.split() for line in (big_corpus / "idx2wav_len").read_text().splitlines())
    lengths = {u: int(v) for u, v in lengths.items()}
    for epoch in (1, 2):
        view = iterator.epoch_view(epoch)
        assert sorted(flat(view)) == sorted(lengths)  # every utterance once per epoch
        assert padding(view, lengths) >= 0.98
        for batch in view:
            longest = max(lengths[u] for u in batch)
            assert len(batch) == 1 or len(batch) * longest <= BATCH_LEN
            assert [lengths[u] for u in batch] == sorted((lengths[u] for u in batch), reverse=True)


def test_batches_change_every_epoch_but_their_number_does_not(big_corpus):
    iterator = bucket(big_corpus, seed=3)
    views = [iterator.epoch_view(e) for e in (1, 2, 3)]
    assert len({len(v) for v in views}) == 1 and len(iterator) == len(views[0])
    assert [len(b) for b in views[0]] == [len(b) for b in views[1]]
    assert views[0] != views[1] and views[1] != views[2]
    again = bucket(big_corpus, seed=3)
    assert again.epoch_view(2) == views[1] and again.epoch_batches(3) == iterator.epoch_batches(3)
    assert bucket(big_corpus, seed=4).epoch_view(1) != views[0]


def test_bucket_batches_get_the_fresh_shuffle(big_corpus):
    # a new view every epoch: SpeeChain's shuffle of a new list, not the cumulative one (NOTE [ Epoch shuffle ])
    iterator = bucket(big_corpus, seed=3)
    for epoch in (1, 2, 3):
        view = iterator.epoch_view(epoch)
        order = np.random.RandomState(epoch + 3).permutation(len(view))
        assert iterator.epoch_batches(epoch) == [view[i] for i in order]


def test_quadratic_scale_shrinks_batches_within_the_budget(big_corpus):
    lengths = {u: int(v) for u, v in (l.split() for l in (big_corpus / "idx2wav_len").read_text().splitlines())}
    scale = 2e5
    view = bucket(big_corpus, quadratic_scale=scale).epoch_view(1)
    assert len(view) > len(bucket(big_corpus).epoch_view(1))
    for batch in view:
        longest = max(lengths[u] for u in batch)
        assert len(batch) == 1 or len(batch) * (longest + longest ** 2 / scale) <= BATCH_LEN


@pytest.fixture
def small(shared_corpus):
    return shared_corpus(num=60, min_sec=0.2, max_sec=1.5)  # read only: made once per session


def test_ngpu_sizes_are_divisible_in_every_epoch(small):
    iterator = bucket(small, batch_len=16000 * 4, ngpu=2)
    for epoch in (1, 2, 3):
        view = iterator.epoch_view(epoch)
        assert len(view) == len(iterator)
        assert all(len(b) % 2 == 0 for b in view[:-1])
        assert sorted(flat(view)) == sorted(flat(iterator.epoch_view(1)))


@pytest.mark.filterwarnings("ignore:.*ngpu:UserWarning")  # ngpu 1 on 2 ranks is the case under test
def test_distributed_ranks_run_equal_steps_and_share_each_batch(small):
    full = bucket(small, batch_len=16000 * 4, seed=7)
    ranks = [bucket(small, batch_len=16000 * 4, seed=7, rank=r, world_size=2) for r in range(2)]
    for epoch in (1, 2):
        plans = [r.epoch_batches(epoch) for r in ranks]
        assert len(plans[0]) == len(plans[1]) == len(full.epoch_batches(epoch))
        for i, batch in enumerate(full.epoch_batches(epoch)):
            union = plans[0][i] + plans[1][i]
            assert set(union) == set(batch) and len(union) == max(len(batch), 2)


def test_batches_per_epoch_and_exact_resume(small):
    iterator = bucket(small, batch_len=16000 * 4, batches_per_epoch=5)
    assert len(iterator) == 5
    for epoch in (1, 2, 3):
        tasks = iterator.epoch_tasks(epoch)
        assert len(tasks) == 5
        assert iterator.epoch_tasks(epoch, start_step=2) == tasks[2:]


@pytest.mark.parametrize("conf, match", [
    ({"batch_len": None}, "batch_len: missing"),
    ({"bucket_width": -1}, "bucket_width"),
    ({"quadratic_scale": 0}, "quadratic_scale"),
])
def test_bucket_option_errors(small, conf, match):
    with pytest.raises(ConfigError, match=match):
        bucket(small, **conf)


def test_bucket_needs_lengths(small):
    with pytest.raises(ConfigError, match="data_len"):
        BucketIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(small / "idx2wav")}},
                       batch_len=1000)


def _load(root, num_workers, epochs=(1, 2)):
    iterator = BucketIterator(dataset_type=SpeechTextDataset,
                              dataset_conf={"main_data": {"feat": str(root / "idx2wav"), "text": str(root / "idx2text")}},
                              data_len=str(root / "idx2wav_len"), batch_len=16000 * 4, seed=11,
                              num_workers=num_workers, out_type="null")
    try:
        return [(epoch, batch["text"], batch["feat"].tobytes())
                for epoch in epochs for batch in iterator.build_loader(epoch)]
    finally:
        iterator.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_identical_batches_for_any_number_of_workers(small):
    inline = _load(small, 0)
    assert inline == _load(small, 2)
    assert [t for e, t, _ in inline if e == 1] != [t for e, t, _ in inline if e == 2]
