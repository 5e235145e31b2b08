"""The reference implementation (reference.py) against SpeeChain's own output.

Expected values are literals: speechain_observed.py holds the batches that
SpeeChain's iterator classes produced on corpus.py's corpus (how: see its
docstring), and the small unit tests below are computed by hand from the
rules in tests/parity/RULES.md. Nothing here imports speechiter.
"""
import os

import numpy as np
import pytest

from tests.parity import reference as R
from tests.parity.corpus import make_lm_corpus, make_speech_corpus
from tests.parity.speechain_observed import OBSERVED, SELECTED


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity_rules")
    folder = make_speech_corpus(root, with_wavs=False)
    return {"F": str(folder), "LM": str(make_lm_corpus(root))}


def _md(p, feat=True):
    md = {"text": p["F"] + "/idx2no-punc_text"}
    if feat:
        md["feat"] = p["F"] + "/idx2wav"
    return md


# name -> (the SpeeChain iterator configuration, as reference.iterator_view kwargs; seed; shuffle; batches_per_epoch)
# Common to all: dataset_type speech_text.SpeechTextDataset, main_data {feat: idx2wav, text: idx2no-punc_text}
# unless "lm" (main_data {text: no-punc_lm_text}); abs = abs.Iterator, block = block.BlockIterator.
CASES = {
    "block_len1000_descTrue_shuffleTrue_bpeNone":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000), 0, True, None),
    "block_len1000_descTrue_shuffleTrue_bpeequal":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000), 0, True, 5),
    "block_len1000_descTrue_shuffleTrue_bpe3":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000), 0, True, 3),
    "block_len1000_descTrue_shuffleTrue_bpe7":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000), 0, True, 7),
    "block_len1000_descFalse_shuffleTrue_bpeNone":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000,
                        is_descending=False), 0, True, None),
    "block_len1000_descNone_shuffleTrue_bpeNone":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000,
                        is_descending=None), 0, True, None),
    "block_len1000_descNone_shuffleFalse_bpe3":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000,
                        is_descending=None), 0, False, 3),
    "block_len1000_seed5":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000), 5, True, None),
    "block_len1.8e3_float":  # batch_len: 1.8e3 (a YAML float, int() -> 1800)
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1.8e3), 0, False, None),
    "abs_bs5_descTrue_shuffleTrue":
        (lambda p: dict(main_data=_md(p), data_len=p["F"] + "/idx2wav_len", batch_size=5), 0, True, None),
    "abs_bs5_descNone_shuffleTrue":
        (lambda p: dict(main_data=_md(p), data_len=p["F"] + "/idx2wav_len", batch_size=5, is_descending=None),
         0, True, None),
    "abs_valid_ngpu2":  # no batch_size: batch_size = ngpu
        (lambda p: dict(main_data=_md(p), data_len=p["F"] + "/idx2wav_len", ngpu=2), 0, False, None),
    "abs_valid_ngpu3_nolen":  # no data_len: sorted by len(text)
        (lambda p: dict(main_data=_md(p), ngpu=3), 0, False, None),
    "block_len1000_ngpu2":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000, ngpu=2),
         0, False, None),
    "block_len1000_ngpu3":  # SpeeChain leaves an empty first batch
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000, ngpu=3),
         0, False, None),
    "abs_bs1_ngpu2":  # batch_size 1 with ngpu 2: every other batch is []
        (lambda p: dict(main_data=_md(p), data_len=p["F"] + "/idx2wav_len", batch_size=1, ngpu=2), 0, False, None),
    **{f"block_len1000_ngpu3_rank{r}":  # distributed, world size 3
       (lambda p, r=r: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000,
                            ngpu=3, rank=r, world_size=3), 0, True, None) for r in range(3)},
    "block_len1000_asc_ngpu3_rank0":
        (lambda p: dict(main_data=_md(p), kind="block", data_len=p["F"] + "/idx2wav_len", batch_len=1000,
                        ngpu=3, rank=0, world_size=3, is_descending=False), 0, False, None),
    "lm_block_len30_descTrue":  # text only, no data_len: lengths are len(text)
        (lambda p: dict(main_data={"text": p["LM"]}, kind="block", batch_len=30), 0, True, None),
    "lm_block_len30_descNone":
        (lambda p: dict(main_data={"text": p["LM"]}, kind="block", batch_len=30, is_descending=None), 0, True, None),
    "lm_abs_valid_noshuffle":
        (lambda p: dict(main_data={"text": p["LM"]}), 0, False, None),
    "speech_block_textlen_len20":  # feat + text, no data_len: batched by len(text)
        (lambda p: dict(main_data=_md(p), kind="block", batch_len=20), 0, True, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_speechain(paths, name):
    make_kwargs, seed, shuffle, bpe = CASES[name]
    expected = OBSERVED[name]
    view = R.iterator_view(**make_kwargs(paths))
    assert view == expected["view"]
    for epoch, batches in enumerate(expected["epochs"], start=1):
        assert R.epoch_batches(view, epoch, seed, shuffle, bpe) == batches, f"epoch {epoch}"


SELECTIONS = {
    "min_-3": ["min", -3], "max_-3": ["max", -3], "middle_0.5": ["middle", 0.5], "middle_-5": ["middle", -5],
    "middle_-8": ["middle", -8], "min_0.4": ["min", 0.4], "max_0.4": ["max", 0.4], "min_str3": ["min", "3"],
    "max_str6": ["max", "6"], "order_0.5": ["order", 0.5], "rev_order_-4": ["rev_order", -4],
}


@pytest.mark.parametrize("name", sorted(SELECTIONS) + ["chain_rev_order_-10_then_min_-4"])
def test_selection_matches_speechain(paths, name):
    meta = paths["F"] + "/idx2meta"
    if name.startswith("chain"):
        rules = [["rev_order", -10], ["min", -4, meta]]
    else:
        rule = SELECTIONS[name]
        rules = rule + [meta] if rule[0] not in ("order", "rev_order") else rule
    view = R.iterator_view(_md(paths), data_selection=rules, is_descending=None, batch_size=100)
    assert view == [SELECTED[name]]


# ----------------------------------------------------------------------------- hand-computed examples

def test_block_closes_at_reach():
    # lengths 600, 500, 300, 200, batch_len 1000: 600+500 >= 1000 closes [a, b]; 300+200 is the rest
    lengths = {"a": 600, "b": 500, "c": 300, "d": 200}
    assert R.block_batches(list("abcd"), lengths, 1000) == [["a", "b"], ["c", "d"]]
    # exactly reaching closes too: 600+400
    assert R.block_batches(list("ab"), {"a": 600, "b": 400}, 1000) == [["a", "b"]]
    # one utterance over the budget is a batch of its own
    assert R.block_batches(list("ab"), {"a": 1500, "b": 10}, 1000) == [["a"], ["b"]]
    # batch_len is truncated by int(): 1.8e3 -> 1800; 1799.9 -> 1799
    assert R.block_batches(list("ab"), {"a": 1000, "b": 799}, 1799.9) == [["a", "b"]]


def test_cumulative_shuffle_is_the_in_place_list_shuffle():
    # SpeeChain: np.random.RandomState(seed + epoch).shuffle(self.batches) in place, epochs 1, 2, 3, 4
    for n, seed in ((5, 0), (7, 3), (40, 11)):
        view = [[f"b{i}"] for i in range(n)]
        live = list(view)
        for epoch in range(1, 5):
            np.random.RandomState(seed + epoch).shuffle(live)
            assert R.epoch_batches(view, epoch, seed, True, None) == live
            assert R.epoch_batches(view, epoch, seed, True, n) == live            # bpe == len: same
        # any other batches_per_epoch: a fresh shuffle of the clip (a copy)
        assert R.epoch_batches(view, 4, seed, True, n - 1) == [
            R.clip(view, n - 1, 4)[i] for i in np.random.RandomState(seed + 4).permutation(n - 1)]


def test_id_order_is_python_str_order():
    assert sorted(["u2", "u10", "a1", "B3", "u01", "_x", "Z", "é"]) == ["B3", "Z", "_x", "a1", "u01", "u10", "u2", "é"]


def test_text_length_counts_characters_of_the_raw_value():
    assert R.text_lengths({"x": "a cat", "y": "['<space>', 'K', 'AE1', 'T']"}) == {"x": 5, "y": 28}  # 1 + 9 + 2 + 3 + 2 + 5 + 2 + 3 + 1


def test_make_divisible_by_hand():
    assert R.make_divisible([["a", "b", "c"], ["d", "e", "f"], ["g"]], 2) == [
        ["a", "b"], ["c", "d", "e", "f"], [], ["g"]]
    assert R.make_divisible([["a"], ["b"], ["c"]], 2) == [[], ["a", "b"], [], ["c"]]
    assert R.make_divisible([["a"], ["b"], ["c"]], 2, keep_empty=False) == [["a", "b"], ["c"]]


def test_rank_split_by_hand():
    batches = [["a", "b", "c", "d"], ["e"]]
    assert R.rank_split(batches, 0, 2, True) == [["b", "d"]]          # start = 2 - 0 - 1 = 1; ["e"][1::2] = []
    assert R.rank_split(batches, 1, 2, True) == [["a", "c"], ["e"]]
    assert R.rank_split(batches, 0, 2, False) == [["a", "c"], ["e"]]
    assert R.rank_split(batches, 0, 2, True, pad_empty=True) == [["b", "d"], ["e"]]


def test_middle_arithmetic():
    meta = {k: str(v) for k, v in zip("abcdefghi", range(9))}
    ids = sorted(meta) + ["zz"]                        # zz has no metadata: always kept
    # 9 found, keep 5: cut int((9 - 5) / 2) = 2 from each end
    assert R.select(ids, "middle", -5, meta) == ["c", "d", "e", "f", "g", "zz"]
    # keep 8: cut int(0.5) = 0 -> SpeeChain's [-0:] removes every found id
    assert R.select(ids, "middle", -8, meta) == ["zz"]
    # max with count 0 keeps everything ([: -0] removes nothing); min with 0 removes every found id
    assert R.select(ids, "max", 0.01, meta) == ids
    assert R.select(ids, "min", 0.01, meta) == ["zz"]


def test_parse_path_rules(tmp_path):
    cwd = str(tmp_path)
    assert R.parse_path("/abs/x", "/root", cwd) == "/abs/x"
    assert R.parse_path("./x", "/root", cwd) == os.path.join(cwd, "x")
    assert R.parse_path("../x", "/root", cwd) == os.path.join(os.path.dirname(cwd), "x")
    assert R.parse_path("datasets//libri/idx2wav", "/root", cwd) == "/root/datasets//libri/idx2wav"
    with pytest.raises(KeyError):
        R.parse_path("datasets/x", None, cwd)


def test_token_list_parsing_and_trimming():
    tokens = R.parse_token_list("['<space>', 'HH', 'AH0', '<space>', 'L', 'OW1', '<space>']")
    assert tokens == ["<space>", "HH", "AH0", "<space>", "L", "OW1", "<space>"]
    assert R.parse_token_list("hello world") == "hello world"
    durations = [0.2, 0.1, 0.1, 0.05, 0.1, 0.15, 0.3]                # total 1.0
    kept, kept_dur, (start, stop) = R.trim_spaces(tokens, durations, feat_len=1000)
    assert kept == ["HH", "AH0", "<space>", "L", "OW1"] and kept_dur == [0.1, 0.1, 0.05, 0.1, 0.15]
    assert (start, stop) == (200, 700)                                  # int(0.2*1000), 1000 - int(0.3*1000)
    assert R.trim_spaces(["<space>", "<space>"], [0.1, 0.2], feat_len=10) is None
