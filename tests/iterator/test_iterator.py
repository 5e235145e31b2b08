"""Iterator semantics: sorting, block/piece batching, clipping, shuffling, ngpu and rank shares."""
import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import BlockIterator
from speechiter.iterator.bucket import BucketIterator
from speechiter.iterator.piece import PieceIterator
from speechiter.plan.ordered import clip_batches
from speechiter.plan.view import BatchView, make_divisible, rank_share
from speechiter.loader import Loader
from speechiter.seeding import cumulative_order


@pytest.fixture
def lengths_corpus(tmp_path):
    rng = np.random.default_rng(1)
    ids = [f"utt{i:03d}" for i in range(50)]
    lengths = rng.integers(100, 1000, size=len(ids))
    lengths[[3, 7, 9]] = 500  # ties
    (tmp_path / "idx2text").write_text("".join(f"{u} words {i}\n" for i, u in enumerate(ids)))
    (tmp_path / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, lengths)))
    return ids, dict(zip(ids, lengths.tolist())), tmp_path


def make(cls, root, **conf):
    conf.setdefault("engine", "inline")
    return cls(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(root / "idx2text")}},
               data_len=str(root / "idx2len"), **conf)


def flat(batches):
    return [uid for batch in batches for uid in batch]


def test_sorting_descending_ascending_and_none_with_ties_in_id_order(lengths_corpus):
    ids, lengths, root = lengths_corpus
    desc = flat(make(PieceIterator, root, batch_size=1).batches)
    assert [lengths[u] for u in desc] == sorted(lengths.values(), reverse=True)
    ties = [u for u in desc if lengths[u] == 500]
    assert ties == sorted(ties)
    asc = flat(make(PieceIterator, root, batch_size=1, is_descending=False).batches)
    assert [lengths[u] for u in asc] == sorted(lengths.values())
    assert [u for u in asc if lengths[u] == 500] == sorted(ties)
    assert flat(make(PieceIterator, root, batch_size=1, is_descending=None).batches) == ids


@pytest.mark.parametrize("descending", [True, False])
def test_block_reach_rule_is_the_default(lengths_corpus, descending):
    ids, lengths, root = lengths_corpus
    batches = make(BlockIterator, root, batch_len=2000, is_descending=descending).batches
    assert sorted(flat(batches)) == sorted(ids)
    for i, batch in enumerate(batches):
        total = sum(lengths[u] for u in batch)
        assert total - lengths[batch[-1]] < 2000  # its last utterance reached the budget, not an earlier one
        if i + 1 < len(batches):  # closed because the total reached batch_len: it may overshoot
            assert total >= 2000
    assert any(sum(lengths[u] for u in batch) > 2000 for batch in batches)


def test_block_never_exceed_rule(lengths_corpus):
    ids, lengths, root = lengths_corpus
    batches = make(BlockIterator, root, batch_len=2000, batch_len_rule="never_exceed").batches
    assert sorted(flat(batches)) == sorted(ids)
    for i, batch in enumerate(batches):
        total = sum(lengths[u] for u in batch)
        assert total <= 2000
        if i + 1 < len(batches):  # closed only because the next utterance did not fit
            assert total + lengths[batches[i + 1][0]] > 2000


@pytest.mark.parametrize("rule", ["reach", "never_exceed"])
def test_block_utterance_longer_than_budget_gets_its_own_batch(lengths_corpus, rule):
    _, lengths, root = lengths_corpus
    batches = make(BlockIterator, root, batch_len=300, batch_len_rule=rule).batches  # longest first
    for batch in batches:
        assert len(batch) == 1 or sum(lengths[u] for u in batch) <= (300 + 299 if rule == "reach" else 300)
    assert [len(b) for b in batches if lengths[b[0]] > 300] == [1] * sum(n > 300 for n in lengths.values())


def test_block_reach_truncates_a_fractional_budget_like_speechain(lengths_corpus):
    _, lengths, root = lengths_corpus
    total = sum(lengths[u] for u in make(BlockIterator, root, batch_len=2000).batches[0])  # reaches 2000
    whole = make(BlockIterator, root, batch_len=total).batches
    assert make(BlockIterator, root, batch_len=total + 0.9).batches == whole  # int(batch_len), as SpeeChain
    assert make(BlockIterator, root, batch_len=total + 1).batches != whole


def test_block_needs_lengths_and_a_positive_budget(lengths_corpus, tmp_path):
    _, _, root = lengths_corpus
    with pytest.raises(ConfigError, match="batch_len: expected a positive number, got -3"):
        make(BlockIterator, root, batch_len=-3)
    with pytest.raises(ConfigError, match="batch_len: missing"):
        make(BlockIterator, root)
    with pytest.raises(ConfigError, match="batch_len_rule: expected one of reach, never_exceed, got 'never'"):
        make(BlockIterator, root, batch_len=1000, batch_len_rule="never")
    idx2wav = tmp_path / "idx2wav"  # audio only: no lengths registered, none given (never read here)
    idx2wav.write_text((root / "idx2text").read_text().replace(" words ", " a"))
    with pytest.raises(ConfigError, match="data_len"):
        BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(idx2wav)}},
                      batch_len=1000)
    text_only = BlockIterator(dataset_type=SpeechTextDataset,
                              dataset_conf={"main_data": {"text": str(root / "idx2text")}}, batch_len=1000)
    assert len(text_only.batches) >= 1  # text lengths (len(text), as SpeeChain) are registered


def test_piece_and_abs_batch_sizes(lengths_corpus):
    ids, _, root = lengths_corpus
    assert [len(b) for b in make(PieceIterator, root, batch_size=8).batches] == [8] * 6 + [2]
    assert all(len(b) == 1 for b in make(Iterator, root).batches)
    with pytest.raises(ConfigError, match="batch_size: missing"):
        make(PieceIterator, root)
    with pytest.raises(ConfigError, match="batch_size: expected a positive integer"):
        make(PieceIterator, root, batch_size=0)


def test_clip_cursor_rule_smaller_and_larger():
    view = BatchView.from_lists([[str(i)] for i in range(5)])
    assert flat(clip_batches(view, 3, 1)) == ["0", "1", "2"]
    assert flat(clip_batches(view, 3, 2)) == ["3", "4", "0"]
    assert flat(clip_batches(view, 3, 3)) == ["1", "2", "3"]
    assert flat(clip_batches(view, 7, 1)) == ["0", "1", "2", "3", "4", "0", "1"]
    assert flat(clip_batches(view, 7, 2)) == ["2", "3", "4", "0", "1", "2", "3"]
    assert clip_batches(view, None, 9) == view


def test_shuffle_is_seeded_by_seed_and_epoch(lengths_corpus):
    _, _, root = lengths_corpus
    a = make(PieceIterator, root, batch_size=4, seed=5)
    b = make(PieceIterator, root, batch_size=4, seed=5)
    assert a.epoch_batches(1) == b.epoch_batches(1)
    assert a.epoch_batches(1) != a.epoch_batches(2)
    order = np.random.RandomState(1 + 5).permutation(len(a.batches))
    assert a.epoch_batches(1) == [a.batches[i] for i in order]
    assert make(PieceIterator, root, batch_size=4, shuffle=False).epoch_batches(3) == a.batches


def speechain_in_place(n, seed, epochs):
    """What SpeeChain's build_loader does to its own list, epoch after epoch."""
    batches, orders = list(range(n)), []
    for epoch in range(1, epochs + 1):
        np.random.RandomState(epoch + seed).shuffle(batches)
        orders.append(list(batches))
    return orders


@pytest.mark.parametrize("n", [1, 7, 40])
def test_cumulative_order_is_speechains_in_place_shuffle(n):
    expected = speechain_in_place(n, 3, 6)
    assert [cumulative_order(3, e, n).tolist() for e in range(1, 7)] == expected
    assert cumulative_order(3, 6, n, since=(4, np.array(expected[3]))).tolist() == expected[5]
    assert cumulative_order(3, 0, n).tolist() == list(range(n))


def test_shuffle_is_cumulative_over_the_whole_view_and_fresh_for_a_clip(lengths_corpus):
    _, _, root = lengths_corpus
    whole = make(PieceIterator, root, batch_size=4, seed=2)
    view = list(whole.batches)
    orders = speechain_in_place(len(view), 2, 4)
    assert [whole.epoch_batches(e) for e in range(1, 5)] == [[view[i] for i in order] for order in orders]
    equal = make(PieceIterator, root, batch_size=4, seed=2, batches_per_epoch=len(view))
    assert equal.epoch_batches(4) == whole.epoch_batches(4)
    clipped = make(PieceIterator, root, batch_size=4, seed=2, batches_per_epoch=5)
    for epoch in (1, 2, 3):
        clip = clip_batches(clipped.batches, 5, epoch)
        assert clipped.epoch_batches(epoch) == [clip[i] for i in np.random.RandomState(epoch + 2).permutation(5)]


def test_cumulative_shuffle_continues_from_the_kept_order(lengths_corpus, monkeypatch):
    import speechiter.plan.shuffle as shuffle
    _, _, root = lengths_corpus
    iterator = make(PieceIterator, root, batch_size=4)
    expected = make(PieceIterator, root, batch_size=4).epoch_batches(51)
    calls = []

    def counted(seed, epoch, n, since=None):
        calls.append((epoch, since[0] if since else 0))
        return cumulative_order(seed, epoch, n, since)

    monkeypatch.setattr(shuffle, "cumulative_order", counted)
    iterator.epoch_batches(50)
    assert iterator.epoch_tasks(51, start_step=5) == iterator.epoch_tasks(51)[5:]
    assert iterator.epoch_batches(51) == expected and iterator.epoch_batches(3)
    assert calls == [(50, 0), (51, 50), (3, 0)]  # the last epoch's plan is kept
    iterator.batches = iterator.batches[:3]  # a new view forgets the kept orders
    iterator.epoch_batches(51)
    assert calls[-1] == (51, 0)


def test_length_hooks_follow_the_rule(lengths_corpus):
    ids, lengths, root = lengths_corpus
    conf = dict(dataset_type=Perturbed, dataset_conf={"main_data": {"text": str(root / "idx2text")}},
                data_len=str(root / "idx2len"), engine="inline")
    assert BlockIterator(batch_len=1000, **conf).data_len["utt000"] == lengths["utt000"]
    assert BlockIterator(batch_len=1000, batch_len_rule="never_exceed", **conf).data_len["utt000"] == \
        2 * lengths["utt000"]
    assert BucketIterator(batch_len=1000, **conf).data_len["utt000"] == 2 * lengths["utt000"]
    assert PieceIterator(batch_size=2, **conf).data_len["utt000"] == lengths["utt000"]
    conf["dataset_type"] = Doubled  # only batch_length_fn: every rule budgets it
    assert BlockIterator(batch_len=1000, batch_len_rule="never_exceed", **conf).data_len["utt000"] == \
        2 * lengths["utt000"]
    assert BlockIterator(batch_len=1000, **conf).data_len["utt000"] == 2 * lengths["utt000"]


class Perturbed(SpeechTextDataset):
    """Usual length as given; at its longest, twice as long."""

    def batch_length_fn(self, length):
        return length

    def max_batch_length_fn(self, length):
        return 2 * length


class Doubled(SpeechTextDataset):
    def batch_length_fn(self, length):
        return 2 * length


def test_epoch_tasks_keep_position_and_seed_on_resume(lengths_corpus):
    _, _, root = lengths_corpus
    iterator = make(PieceIterator, root, batch_size=4)
    full = iterator.epoch_tasks(2)
    assert iterator.epoch_tasks(2, start_step=5) == full[5:]
    assert [t.position for t in full] == list(range(len(full)))
    with pytest.raises(ConfigError, match="start_step"):
        iterator.epoch_tasks(2, start_step=len(full) + 1)


@pytest.mark.timeout(60)
def test_prefetch_reaches_past_epochs_shorter_than_the_buffer(lengths_corpus):
    _, _, root = lengths_corpus
    iterator = make(PieceIterator, root, batch_size=4, batches_per_epoch=2, engine="msequence",
                    thread_type="thread", num_workers=2, buffer=5)
    following = Loader(iterator, 1)._following_tasks(5)
    assert following == [*iterator.epoch_tasks(2), *iterator.epoch_tasks(3), *iterator.epoch_tasks(4)[:1]]
    try:
        got = [[b["text"] for b in iterator.build_loader(epoch)] for epoch in range(1, 5)]
        assert iterator.engine().scheduler.prefetched == 2
    finally:
        iterator.close()
    texts = [[[f"words {int(u[3:])}" for u in batch] for batch in iterator.epoch_batches(epoch)]
             for epoch in range(1, 5)]
    assert got == texts


def test_make_divisible_moves_remainders_forward():
    batches = BatchView.from_lists([["a", "b", "c"], ["d", "e", "f"], ["g"]])
    out = make_divisible(batches, 2)
    assert out == [["a", "b"], ["c", "d", "e", "f"], ["g"]]
    assert flat(out) == flat(batches)


def test_rank_share_equal_steps_and_documented_padding():
    batches = BatchView.from_lists([["a", "b", "c", "d", "e"], ["f", "g"], ["h"]])
    shares = [rank_share(batches, r, 3, descending=True) for r in range(3)]
    assert all(len(s) == len(batches) for s in shares)
    assert shares[2][0] == ["a", "d"] and shares[0][0] == ["c"]
    for i, batch in enumerate(batches):
        got = [u for s in shares for u in s[i]]
        assert set(got) == set(batch)
        assert len(got) == max(len(batch), 3)  # repeats only pad batches smaller than the world


def test_distributed_iterators_share_every_batch(lengths_corpus):
    _, _, root = lengths_corpus
    full = make(BlockIterator, root, batch_len=3000)
    ranks = [make(BlockIterator, root, batch_len=3000, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(full)
    for i, batch in enumerate(full.batches):
        union = ranks[0].batches[i] + ranks[1].batches[i]
        assert set(union) == set(batch) and len(union) == max(len(batch), 2)


def test_data_len_missing_ids_are_dropped_with_a_warning(lengths_corpus):
    ids, lengths, root = lengths_corpus
    (root / "idx2len").write_text("".join(f"{u} {lengths[u]}\n" for u in ids[:-4]))
    with pytest.warns(UserWarning, match="4 of 50"):
        iterator = make(PieceIterator, root, batch_size=1)
    assert sorted(flat(iterator.batches)) == sorted(ids[:-4])


def test_group_info_and_accessors(lengths_corpus):
    ids, _, root = lengths_corpus
    (root / "idx2spk").write_text("".join(f"{u} s{i % 3}\n" for i, u in enumerate(ids)))
    iterator = make(PieceIterator, root, batch_size=10, group_info={"speaker": str(root / "idx2spk")},
                    batches_per_epoch=3)
    assert iterator.get_group_info()["speaker"][ids[4]] == "s1"
    assert len(iterator) == 3 and len(iterator.get_batch_indices()) == 5
    text = repr(iterator)
    assert "total_batches=5" in text and "batches_per_epoch=3" in text and "mean_batch=10.0" in text


@pytest.mark.parametrize("conf, match", [
    ({"batches_per_epoch": 0}, "batches_per_epoch"),
    ({"ngpu": -1}, "ngpu"),
    ({"engine": "fast"}, "engine"),
    ({"hedge": "yes"}, "hedge: expected true or false, got 'yes'"),
    ({"is_descending": "yes"}, "is_descending"),
    ({"group_info": ["x"]}, "group_info"),
    ({"rank": 2, "world_size": 2}, "rank"),
    ({"distributed": True}, "torch.distributed is not initialised"),
])
def test_iterator_option_errors(lengths_corpus, conf, match):
    _, _, root = lengths_corpus
    with pytest.raises(ConfigError, match=match):
        make(PieceIterator, root, batch_size=2, **conf)


@pytest.mark.parametrize("epoch, message", [(0, "epoch: expected a positive integer, got 0"),
                                            (-1, "epoch: expected a positive integer, got -1"),
                                            (1.5, "epoch: expected a positive integer, got 1.5"),
                                            (2 ** 40, "epoch: expected at most 2147483647")])
def test_build_loader_refuses_an_epoch_that_is_not_one(lengths_corpus, epoch, message):
    _, _, root = lengths_corpus
    iterator = make(PieceIterator, root, batch_size=8)
    with pytest.raises(ConfigError, match=message):
        iterator.build_loader(epoch)
