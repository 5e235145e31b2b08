"""Compact planning (speechiter.ids): the numpy idx2 parser against read_idx2, the compact views
against their list forms, and the list/dict hook API for subclasses that write their own batching."""
import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError, DataError
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import BlockIterator, block_bounds
from speechiter.plan.ordered import clip_batches
from speechiter.plan.view import BatchView, as_view, make_divisible, rank_share
from speechiter.idx2 import read_idx2, read_idx2_numbers, read_idx2_table
from speechiter.ids import IdList, decode_ids, encode_ids

TEXTS = {
    "plain": "a 1\nb 2\nc 3\n",
    "no final newline": "a x y\nb z",
    "blank and spaces": "\n\na   x  y  \n   \nb\tz\r\n\n",
    "leading whitespace": "  a x\nb y\n",
    "unicode": "é x\nb y z\u3000\nc \u00a0v\n",
    "long ids": "".join(f"{'u' * (40 + i)} v{i}\n" for i in range(5)),
    "control chars": "a\x0bx\nb\x1fy\n",
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_parser_matches_read_idx2(tmp_path, name):
    path = tmp_path / "idx2x"
    path.write_bytes(TEXTS[name].encode("utf-8"))
    table = read_idx2_table(path)
    ids, values = read_idx2(path)
    assert decode_ids(table.ids) == ids
    assert [table.buffer[s:e].tobytes().decode("utf-8") for s, e in zip(table.starts, table.ends)] == values


@pytest.mark.parametrize("text", ["a 1\nb\n", "a 1\na 2\n", "a 1\nb x\n", "\xff\xfe 1\n"])
def test_parser_errors_are_read_idx2s(tmp_path, text):
    path = tmp_path / "idx2len"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError) as expected:
        read_idx2(path, float)
    with pytest.raises(DataError) as got:
        read_idx2_numbers(path)
    assert str(got.value) == str(expected.value)


def test_numbers_whole_and_fractional(tmp_path):
    path = tmp_path / "idx2len"
    path.write_text("a 12\nb 3.5\nc 1e3\nd 0007\ne 123456789012345\n")
    assert read_idx2_numbers(path)[1].tolist() == [12, 3.5, 1000, 7, 123456789012345]


def random_view(rng, count=40):
    ids = encode_ids([f"u{i:03d}" for i in range(count)])
    cuts = np.unique(np.concatenate([[0, count], rng.integers(1, count, rng.integers(1, 15))]))
    return BatchView(ids, cuts)


# The rules as plain loops over lists (SpeeChain's form), against which the vectorised view steps are checked.
def clip_lists(batches, per_epoch, epoch):
    if per_epoch is None:
        return list(batches)
    cursor = (per_epoch * (epoch - 1)) % len(batches)
    return [batches[(cursor + i) % len(batches)] for i in range(per_epoch)]


def divisible_lists(batches, ngpu):
    result, carry = [], []
    for batch in batches:
        batch = carry + list(batch)
        remain = len(batch) % ngpu
        carry = batch[len(batch) - remain:] if remain else []
        if len(batch) > remain:
            result.append(batch[:len(batch) - remain])
    return result + [carry] if carry else result


def share_lists(batches, rank, world, descending):
    start = world - rank - 1 if descending else rank
    return [batch[start::world] or [batch[-1]] for batch in batches]


@pytest.mark.parametrize("seed", range(20))
def test_view_steps_equal_the_plain_list_rules(seed):
    rng = np.random.default_rng(seed)
    view = random_view(rng)
    lists = view.tolist()
    for ngpu in (2, 3, 4):
        assert make_divisible(view, ngpu) == divisible_lists(lists, ngpu)
    for world in (2, 3, 5):
        for rank in range(world):
            for descending in (True, False):
                assert rank_share(view, rank, world, descending) == share_lists(lists, rank, world, descending)
    for per_epoch in (1, 3, len(lists) + 4):
        for epoch in (1, 2, 5):
            assert clip_batches(view, per_epoch, epoch) == clip_lists(lists, per_epoch, epoch)
    assert as_view(lists, "hook") == view and as_view(view, "hook") is view


def never_exceed_loop(lengths, budget):
    bounds, total = [0], 0
    for i, length in enumerate(lengths):
        if i > bounds[-1] and total + length > budget:
            bounds.append(i)
            total = 0
        total += length
    return bounds + ([len(lengths)] if lengths else [])


def reach_loop(lengths, budget):
    """SpeeChain's loop; its int(batch_len) where the lengths are whole."""
    if all(float(n).is_integer() for n in lengths):
        budget = max(1, int(budget))
    bounds, total = [0], 0
    for i, length in enumerate(lengths):
        total += length
        if total >= budget:
            bounds.append(i + 1)
            total = 0
    return bounds + ([len(lengths)] if bounds[-1] != len(lengths) else [])


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("rule,loop", [("reach", reach_loop), ("never_exceed", never_exceed_loop)])
def test_block_bounds_equal_the_plain_loop(seed, rule, loop):
    rng = np.random.default_rng(seed)
    whole = rng.integers(1, 500, 300).astype(float)
    whole[rng.integers(0, 300, 20)] = 0  # zero lengths: a reached batch closes before them
    for lengths in (whole, rng.uniform(0.1, 500, 300), np.zeros(0)):
        for budget in (0.5, 1, 499.5, 1000, 2e4):
            assert block_bounds(lengths, budget, rule).tolist() == loop(lengths.tolist(), budget)


def test_views_read_like_lists():
    ids = IdList(encode_ids(["b", "a", "c"]))
    assert ids == ["b", "a", "c"] and ids[1:] == ["a", "c"] and "c" in ids and ids + ["d"] == ["b", "a", "c", "d"]
    view = BatchView(encode_ids(["a", "b", "c"]), [0, 2, 3])
    assert view == [["a", "b"], ["c"]] and view[-1] == ["c"] and view[:1] == [["a", "b"]]


@pytest.fixture
def lengths_corpus(tmp_path):
    ids = [f"utt{i:03d}" for i in range(30)]
    lengths = np.random.default_rng(0).integers(100, 1000, len(ids))
    (tmp_path / "idx2text").write_text("".join(f"{u} w {i}\n" for i, u in enumerate(ids)))
    (tmp_path / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, lengths)))
    return tmp_path


class OwnBlocks(BlockIterator):
    """A subclass with its own hook: gets a list and a dict, may call the built-in with them."""

    def batches_generate_fn(self, data_index, data_len, batch_len=None):
        assert type(data_index) is list and type(data_len) is dict
        assert all(isinstance(u, str) for u in data_index) and isinstance(data_len[data_index[0]], int)
        return super().batches_generate_fn(data_index, data_len, batch_len)


def test_subclass_hooks_get_lists_and_dicts_and_the_same_batches(lengths_corpus):
    conf = dict(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(lengths_corpus / "idx2text")}},
                data_len=str(lengths_corpus / "idx2len"), batch_len=2000, engine="inline")
    own, built_in = OwnBlocks(**conf), BlockIterator(**conf)
    assert type(own.batches) is list and isinstance(built_in.batches, BatchView)
    assert own.batches == built_in.batches and own.epoch_batches(2) == built_in.epoch_batches(2)
    assert built_in.data_len["utt004"] == own.data_len["utt004"]


def test_dataset_mappings_read_like_dicts(lengths_corpus):
    dataset = SpeechTextDataset(main_data={"text": str(lengths_corpus / "idx2text")}, data_selection=["order", -5])
    assert list(dataset.main_data["text"]) == dataset.get_data_index() == [f"utt{i:03d}" for i in range(5)]
    assert dataset.main_data["text"]["utt002"] == "w 2" and "utt007" not in dataset.main_data["text"]
    dataset.remove_data_by_index("utt002")
    assert len(dataset) == 4 and dataset["utt003"]["text"] == "w 3"
    with pytest.raises(KeyError):
        dataset["utt002"]
    with pytest.raises(KeyError, match="utt999"):
        dataset.keep_only(["utt999"])


def test_abs_iterator_compact_view(lengths_corpus):
    iterator = Iterator(dataset_type=SpeechTextDataset,
                        dataset_conf={"main_data": {"text": str(lengths_corpus / "idx2text")}},
                        data_len=str(lengths_corpus / "idx2len"), batch_size=4, ngpu=2, engine="inline")
    assert isinstance(iterator.batches, BatchView) and [len(b) for b in iterator.batches] == [4] * 7 + [2]


@pytest.mark.parametrize("descending", [True, False])
def test_sort_of_wide_whole_lengths_keeps_ties_in_id_order(tmp_path, descending):
    rng = np.random.default_rng(5)
    ids = [f"u{i:04d}" for i in rng.permutation(400)]
    lengths = rng.choice([3, 70000, 70001, 2 ** 20, 5 * 10 ** 6], size=len(ids))
    (tmp_path / "idx2text").write_text("".join(f"{u} x\n" for u in ids))
    (tmp_path / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, lengths)))
    iterator = Iterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(tmp_path / "idx2text")}},
                        data_len=str(tmp_path / "idx2len"), is_descending=descending, engine="inline")
    length = dict(zip(ids, lengths.tolist()))
    expected = sorted(sorted(ids), key=lambda u: -length[u] if descending else length[u])
    assert [b[0] for b in iterator.batches] == expected


class ListEpochs(Iterator):
    """A subclass that speaks lists everywhere: its own hook and its own epoch_view."""

    def batches_generate_fn(self, data_index, data_len, batch_size=4):
        return [data_index[i:i + batch_size] for i in range(0, len(data_index), batch_size)]

    def epoch_view(self, epoch):
        return self.batches[::-1] if epoch % 2 == 0 else self.batches


def test_list_epoch_view_and_batches_are_converted_once(lengths_corpus):
    conf = dict(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(lengths_corpus / "idx2text")}},
                data_len=str(lengths_corpus / "idx2len"), engine="inline", shuffle=False)
    iterator = ListEpochs(**conf)
    assert type(iterator.batches) is list and type(iterator.get_batch_indices()) is list
    assert iterator.epoch_batches(2) == iterator.batches[::-1] and type(iterator.epoch_batches(2)) is list
    assert [task.ids for task in iterator.epoch_tasks(2)] == iterator.batches[::-1]
    iterator.batches = iterator.batches[:2]  # a subclass may still replace its view
    assert len(iterator) == 2 and iterator.epoch_batches(1) == iterator.batches


@pytest.mark.parametrize("answer", [[], [["utt001"], []], [("utt001",)], "utt001"])
def test_malformed_or_empty_hook_answers(lengths_corpus, answer):
    class Bad(Iterator):
        def batches_generate_fn(self, data_index, data_len):
            return answer
    conf = dict(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(lengths_corpus / "idx2text")}},
                engine="inline")
    with pytest.raises(DataError if answer == [] else ConfigError,
                       match="view is empty" if answer == [] else "Bad.batches_generate_fn must return a list of"):
        Bad(**conf)


def test_engine_settings_and_lifecycle(lengths_corpus):
    iterator = Iterator(dataset_type=SpeechTextDataset,
                        dataset_conf={"main_data": {"text": str(lengths_corpus / "idx2text")}},
                        engine="inline", num_workers=3)
    assert iterator.engine_settings.kind == "inline" and iterator.engine_settings.lookahead == 6
    engine = iterator.engine()
    assert iterator.engine() is engine
    assert len(list(iterator.build_loader(1))) == len(iterator)
    iterator.close()
    iterator.close()  # a second close does nothing
    assert iterator.engine() is not engine
    iterator.close()
    with pytest.raises(ConfigError, match="num_workers: expected a non-negative integer, got -1"):
        Iterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(lengths_corpus / "idx2text")}},
                 num_workers=-1)
