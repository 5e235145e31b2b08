"""speechiter's iterators against the SpeeChain reference (issue 12).

Each test writes a small real corpus (corpus.py: wav files, idx2 files in
scrambled line order, length ties, an LM text file with numeric ids), a
data_cfg YAML, builds it with ``speechiter.build_iterators(speechiter.load_config(path))``
and compares the batches of epochs 1..4 with reference.py (which
test_rules.py checks against SpeeChain's own output).

Tests marked ``xfail(strict=True)`` fail today for the reason given; the
implementer of issue 12 removes each mark as its rule lands.
"""
import warnings

import pytest

import speechiter
from speechiter.errors import ConfigError
from tests.inprocess import run_cli
from tests.parity import reference as R
from tests.parity.corpus import TEXT, make_lm_corpus, make_speech_corpus

xfail = pytest.mark.xfail


def issue12(rule, raises=AssertionError):
    """Expected to fail today. ``raises``: the failure we expect (batches that differ: AssertionError;
    None where today's failure is an error of speechiter, e.g. a refused option)."""
    return xfail(reason=f"issue 12: {rule}", strict=True, raises=raises)


@pytest.fixture(scope="module")
def corpus_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity_corpus")
    make_speech_corpus(root)
    make_lm_corpus(root)
    return root


@pytest.fixture(scope="module")
def F(corpus_root):
    return str(corpus_root / "librispeech" / "data" / "wav" / "train")


@pytest.fixture(scope="module")
def LM(corpus_root):
    return str(corpus_root / "librispeech" / "data" / "lm_text" / "no-punc_lm_text")


def _yaml_value(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_cfg(tmp_path, group, it_type, main_data, name="data_cfg.yaml", **conf):
    """A bare data_cfg with the iterator under ``group`` (train and valid get the same iterator, since a
    data_cfg needs both; test gets it as the set ``s``); ``conf`` keys go under conf:."""
    lines = []
    for g in (("train", "valid") if group in ("train", "valid") else ("test",)):
        pad = "  " if g == "test" else ""
        lines += [f"{g}:"] + (["  s:"] if g == "test" else [])
        body = [f"type: {it_type}", "conf:", "  dataset_type: speech_text.SpeechTextDataset",
                "  dataset_conf:", "    main_data:"]
        body += [f"      {k}: {v}" for k, v in main_data.items()]
        body += [f"  {key}: {_yaml_value(value)}" for key, value in conf.items()]
        lines += [pad + "  " + line for line in body]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def build(path, group, **settings):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iterators = speechiter.build_iterators(speechiter.load_config(str(path)), num_workers=0,
                                               groups=[group], **settings)
    it = iterators[group]
    return it["s"] if group == "test" else it


def plan(it, epoch):
    return [list(b) for b in it.epoch_batches(epoch)]


def assert_epochs(it, view, seed, shuffle, bpe, epochs=4):
    for epoch in range(1, epochs + 1):
        assert plan(it, epoch) == R.epoch_batches(view, epoch, seed, shuffle, bpe), f"epoch {epoch}"


def speech_md(F):
    return {"feat": F + "/idx2wav", "text": F + "/idx2no-punc_text"}


# ----------------------------------------------------------------------------- block.BlockIterator

BLOCK_CASES = []
for desc in (True, False, None):
    for shuffle in (True, False):
        for bpe in (None, "equal", 3, 7):
            BLOCK_CASES.append((desc, shuffle, bpe))


def _block_mark(desc, shuffle, bpe):
    # the >= cut (R1), the cumulative shuffle (R2) and id order (R3) hold
    return ()


@pytest.mark.parametrize("desc,shuffle,bpe", [pytest.param(*c, marks=_block_mark(*c), id=f"desc{c[0]}-shuffle{c[1]}-bpe{c[2]}")
                                              for c in BLOCK_CASES])
def test_block_epochs(tmp_path, F, desc, shuffle, bpe):
    view = R.iterator_view(speech_md(F), "block", data_len=F + "/idx2wav_len", batch_len=1000, is_descending=desc)
    bpe_value = len(view) if bpe == "equal" else bpe
    conf = dict(data_len=F + "/idx2wav_len", batch_len=1000, is_descending=desc, shuffle=shuffle)
    if bpe_value is not None:
        conf["batches_per_epoch"] = bpe_value
    it = build(write_cfg(tmp_path, "train", "block.BlockIterator", speech_md(F), **conf), "train", seed=0)
    assert [list(b) for b in it.batches] == view
    assert_epochs(it, view, 0, shuffle, bpe_value)


def test_block_float_batch_len(tmp_path, F):
    view = R.iterator_view(speech_md(F), "block", data_len=F + "/idx2wav_len", batch_len=1.8e3)
    it = build(write_cfg(tmp_path, "train", "block.BlockIterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_len="1.8e3", shuffle=False), "train")
    assert [list(b) for b in it.batches] == view


def test_block_budget_where_cut_rules_agree(tmp_path, F):
    # one batch holding everything: both cut rules agree, so this pins the length sort and its ties
    # (500 x3, 300 x2, 200 x2 in id order) independently of the cut rule
    view = R.iterator_view(speech_md(F), "block", data_len=F + "/idx2wav_len", batch_len=10 ** 6)
    it = build(write_cfg(tmp_path, "train", "block.BlockIterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_len=10 ** 6), "train", seed=0)
    assert [list(b) for b in it.batches] == view
    assert_epochs(it, view, 0, True, None)


def test_block_never_exceed_is_opt_in(tmp_path, F):
    # speechiter's hard bound, asked for in the YAML: no batch's total passes batch_len
    lengths = R.read_idx2(F + "/idx2wav_len", int)
    it = build(write_cfg(tmp_path, "train", "block.BlockIterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_len=1000, batch_len_rule="never_exceed", shuffle=False), "train")
    ordered = [uid for batch in R.iterator_view(speech_md(F), "block", data_len=F + "/idx2wav_len", batch_len=1000)
               for uid in batch]
    expected, total = [], 0
    for uid in ordered:
        if expected and total + lengths[uid] <= 1000:
            expected[-1].append(uid)
            total += lengths[uid]
        else:
            expected.append([uid])
            total = lengths[uid]
    assert [list(b) for b in it.batches] == expected
    assert expected[:3] == [["z9"], ["B3"], ["c4"]]


# ----------------------------------------------------------------------------- abs.Iterator / piece

@pytest.mark.parametrize("desc", [True, False, None])
@pytest.mark.parametrize("bpe", [None, "equal", 2, 5])
def test_abs_epochs(tmp_path, F, desc, bpe):
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=4, is_descending=desc)
    bpe_value = len(view) if bpe == "equal" else bpe
    conf = dict(data_len=F + "/idx2wav_len", batch_size=4, is_descending=desc, shuffle=True)
    if bpe_value is not None:
        conf["batches_per_epoch"] = bpe_value
    it = build(write_cfg(tmp_path, "train", "abs.Iterator", speech_md(F), **conf), "train", seed=3)
    assert [list(b) for b in it.batches] == view
    assert_epochs(it, view, 3, True, bpe_value)


@pytest.mark.parametrize("desc", [True, None])
def test_piece_matches_abs_with_batch_size(tmp_path, F, desc):
    # SpeeChain has no piece.py; speechiter's piece.PieceIterator is abs.Iterator with a required batch_size
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=5, is_descending=desc)
    it = build(write_cfg(tmp_path, "test", "piece.PieceIterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_size=5, is_descending=desc, shuffle=False), "test")
    assert [list(b) for b in it.batches] == view


def test_cumulative_shuffle_epochs_2_to_4(tmp_path, F):
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=2)
    it = build(write_cfg(tmp_path, "train", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_size=2), "train", seed=0)
    assert_epochs(it, view, 0, True, None)


def test_loader_yields_reference_ids(tmp_path, F):
    # the loaded batches (not only the plan) carry the reference ids, epoch 1, start_step 2
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=3)
    it = build(write_cfg(tmp_path, "train", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_size=3), "train", seed=0, engine="inline")
    text_to_id = {text: uid for uid, text in TEXT.items()}          # transcripts are unique in corpus.py
    try:
        got = [[text_to_id[t] for t in batch["text"]] for batch in it.build_loader(1, start_step=2,
                                                                                   prefetch_next=False)]
    finally:
        it.close()
    assert got == R.epoch_batches(view, 1, 0, True, None, start_step=2)


# ----------------------------------------------------------------------------- R3: id-sorted reading

def test_dataset_order_is_id_order(tmp_path, F):
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=5, is_descending=None)
    it = build(write_cfg(tmp_path, "test", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_size=5, is_descending=None, shuffle=False), "test")
    assert [list(b) for b in it.batches] == view


@pytest.mark.parametrize("rule", [["order", 0.5], ["rev_order", -4]])
def test_position_selection_on_id_order(tmp_path, F, rule):
    view = R.iterator_view(speech_md(F), "abs", data_selection=rule, is_descending=None, batch_size=100)
    path = write_cfg(tmp_path, "train", "abs.Iterator", speech_md(F), batch_size=100, is_descending=None,
                     shuffle=False)
    text = path.read_text().replace("    main_data:", f"    data_selection: [{rule[0]}, {rule[1]}]\n      main_data:")
    path.write_text(text)
    it = build(path, "train")
    assert [sorted(b) for b in it.batches] == [sorted(b) for b in view]
    assert [list(b) for b in it.batches] == view


# ----------------------------------------------------------------------------- R4: lengths from len(text)

@pytest.mark.parametrize("desc", [True, False, None])
def test_lm_block_from_text_lengths(tmp_path, LM, desc):
    view = R.iterator_view({"text": LM}, "block", batch_len=30, is_descending=desc)
    it = build(write_cfg(tmp_path, "train", "block.BlockIterator", {"text": LM}, batch_len=30,
                         is_descending=desc), "train", seed=0)
    assert [list(b) for b in it.batches] == view
    assert_epochs(it, view, 0, True, None)


def test_lm_valid_sorted_by_text_length(tmp_path, LM):
    view = R.iterator_view({"text": LM}, "abs", batch_size=1)
    it = build(write_cfg(tmp_path, "valid", "abs.Iterator", {"text": LM}, batch_size=1, shuffle=False), "valid")
    assert [list(b) for b in it.batches] == view


# ----------------------------------------------------------------------------- R5: data_selection

META_RULES = {
    "min_-3": ("min", -3), "max_-3": ("max", -3), "middle_0.5": ("middle", 0.5), "middle_-5": ("middle", -5),
    "min_str3": ("min", "'3'"), "max_str6": ("max", "'6'"),
}


@pytest.mark.parametrize("name", sorted(META_RULES))
def test_meta_selection(tmp_path, F, name):
    mode, number = META_RULES[name]
    meta = F + "/idx2meta"
    view = R.iterator_view(speech_md(F), "abs", is_descending=None, batch_size=100,
                           data_selection=[mode, number.strip("'") if isinstance(number, str) else number, meta])
    path = write_cfg(tmp_path, "train", "abs.Iterator", speech_md(F), batch_size=100, is_descending=None,
                     shuffle=False)
    path.write_text(path.read_text().replace(
        "    main_data:", f"    data_selection: [{mode}, {number}, {meta}]\n      main_data:"))
    it = build(path, "train")
    assert sorted(uid for b in it.batches for uid in b) == sorted(uid for b in view for uid in b)
    assert [list(b) for b in it.batches] == view        # the result is in id order, as SpeeChain's setdiff1d


# ----------------------------------------------------------------------------- R10: ngpu

def test_ngpu_divisible_block_with_fix(tmp_path, F):
    # speechiter's documented fix 2: no [] batches; otherwise SpeeChain's carry rule
    view = R.iterator_view(speech_md(F), "block", data_len=F + "/idx2wav_len", batch_len=1000, ngpu=3,
                           speechiter_fixes=True)
    it = build(write_cfg(tmp_path, "train", "block.BlockIterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_len=1000, shuffle=False), "train", ngpu=3)
    assert [list(b) for b in it.batches] == view


def test_valid_batch_size_defaults_to_ngpu(tmp_path, F):
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", ngpu=2, speechiter_fixes=True)
    it = build(write_cfg(tmp_path, "valid", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
                         shuffle=False), "valid", ngpu=2)
    assert [list(b) for b in it.batches] == view


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_rank_share_with_fix(tmp_path, F, rank):
    # documented fix 3: every rank keeps one share per batch and all ranks use the same seed
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=4, ngpu=3,
                           rank=rank, world_size=3, speechiter_fixes=True)
    it = build(write_cfg(tmp_path, "train", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
                         batch_size=4, shuffle=False), "train", ngpu=3, rank=rank, world_size=3)
    assert [list(b) for b in it.batches] == view


def test_block_ranks_with_fix_share_the_cumulative_shuffle(tmp_path, F):
    # fixes 2 and 3 on the block >= cut: one share per batch on every rank, every rank shuffled with the same seed
    views = [R.iterator_view(speech_md(F), "block", data_len=F + "/idx2wav_len", batch_len=1000, ngpu=3, rank=r,
                             world_size=3, speechiter_fixes=True) for r in range(3)]
    assert len({len(v) for v in views}) == 1
    for rank, view in enumerate(views):
        it = build(write_cfg(tmp_path, "train", "block.BlockIterator", speech_md(F), data_len=F + "/idx2wav_len",
                             batch_len=1000), "train", ngpu=3, rank=rank, world_size=3, seed=5)
        assert [list(b) for b in it.batches] == view
        assert_epochs(it, view, 5, True, None)


# ----------------------------------------------------------------------------- R11-R12: paths and exp_cfg

def test_speechain_root_relative_paths(tmp_path, corpus_root, F, monkeypatch):
    md = {"feat": "librispeech/data/wav/train/idx2wav", "text": "librispeech/data/wav/train/idx2no-punc_text"}
    cfg_dir = tmp_path / "recipes"
    cfg_dir.mkdir()
    path = write_cfg(cfg_dir, "train", "abs.Iterator", md, data_len="librispeech/data/wav/train/idx2wav_len",
                     batch_size=4, shuffle=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(corpus_root))
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", batch_size=4)
    it = build(path, "train")
    assert [list(b) for b in it.batches] == view


def test_recipe_path_relative_to_speechain_root(tmp_path, corpus_root, F, monkeypatch):
    # SpeeChain's runner: `--config recipes/...` is read under $SPEECHAIN_ROOT from any folder
    recipes = corpus_root / "recipes" / "asr"
    recipes.mkdir(parents=True)
    write_cfg(recipes, "train", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len", batch_size=4,
              shuffle=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(corpus_root))
    it = build("recipes/asr/data_cfg.yaml", "train")
    assert [list(b) for b in it.batches] == R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len",
                                                            batch_size=4)
    done = run_cli("--data_cfg", "recipes/asr/data_cfg.yaml", "--epochs", 1, "--num_workers", 0, cwd=elsewhere)
    assert done.returncode == 0, done.stderr


def test_recipe_path_dot_slash_is_the_current_folder(tmp_path, corpus_root, F, monkeypatch):
    # `./x` names the current folder even when $SPEECHAIN_ROOT holds a file of the same name
    (corpus_root / "dotted").mkdir()
    write_cfg(corpus_root / "dotted", "train", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
              batch_size=4, shuffle=False)
    here = tmp_path / "here"
    (here / "dotted").mkdir(parents=True)
    write_cfg(here / "dotted", "train", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len",
              batch_size=2, shuffle=False)
    monkeypatch.chdir(here)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(corpus_root))
    assert len(build("./dotted/data_cfg.yaml", "train").batches[0]) == 2
    assert len(build("dotted/data_cfg.yaml", "train").batches[0]) == 4
    with pytest.raises(ConfigError, match="no such file"):
        speechiter.load_config("./missing.yaml")


def test_exp_cfg_with_data_cfg_path(tmp_path, F):
    data = write_cfg(tmp_path, "test", "abs.Iterator", speech_md(F), data_len=F + "/idx2wav_len", batch_size=4,
                     shuffle=False, name="test_data.yaml")
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"seed: 0\nngpu: 1\ndata_cfg: {data}\n")
    it = build(exp, "test")
    assert [list(b) for b in it.batches] == R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len",
                                                            batch_size=4)


def test_exp_cfg_ngpu_sets_valid_batch_size(tmp_path, F):
    exp = tmp_path / "exp.yaml"
    group = ("    type: abs.Iterator\n    conf:\n"
             "      dataset_type: speech_text.SpeechTextDataset\n      dataset_conf:\n        main_data:\n"
             f"          feat: {F}/idx2wav\n          text: {F}/idx2no-punc_text\n"
             f"      data_len: {F}/idx2wav_len\n      shuffle: false\n")
    exp.write_text("ngpu: 2\ndata_cfg:\n  train:\n" + group + "  valid:\n" + group)
    it = build(exp, "valid")
    view = R.iterator_view(speech_md(F), "abs", data_len=F + "/idx2wav_len", ngpu=2, speechiter_fixes=True)
    assert [list(b) for b in it.batches] == view
