"""use_g2p and unk_mask_prob of SpeechTextDataset (issue 12, R9)."""
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import speechiter
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError, DataError
from speechiter.seeding import seeded
from speechiter.text import G2P, TextTransforms, mask_words, parse_token_list
from tests.inprocess import run_cli
from tests.recipes import entry, write_recipe

REPO = Path(__file__).resolve().parents[2]
WORDS = ["HH AH0", "L OW1", "W ER1 L D", "T EH1 S T", "AH0", "K AE1 T", "D AO1 G", "S AH1 N"]


def token_list(words):
    tokens = []
    for i, word in enumerate(words):
        tokens += (["<space>"] if i else []) + word.split()
    return "[" + ", ".join(f"'{t}'" for t in tokens) + "]"


@pytest.fixture
def text_corpus(tmp_path):
    lines = [f"u{i:02d} {token_list(WORDS[i % 5:i % 5 + 3 + i % 3])}" for i in range(16)]
    (tmp_path / "idx2text").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_parse_token_list():
    assert parse_token_list("['<space>', 'HH', \"'S\", 'AH0']") == ["<space>", "HH", "\"'S\"", "AH0"]


def test_mask_words_worked_example():
    tokens = ["HH", "AH0", "<space>", "L", "OW1"]
    text, duration = mask_words(tokens, [0.1, 0.104, 0.05, 0.1, 0.15], [True, False])
    assert text == ["<unk>", "<space>", "L", "OW1"] and duration == [0.2, 0.05, 0.1, 0.15]
    assert mask_words(tokens, None, [False, True]) == (["HH", "AH0", "<space>", "<unk>"], None)


def test_probability_one_masks_every_word_and_keeps_array_durations():
    transforms = TextTransforms.from_options(False, 1.0, has_text=True)
    item = {"text": ["A", "<space>", "B", "C"], "duration": np.array([0.5, 0.1, 0.25, 0.25], np.float32)}
    with seeded(3):
        transforms("u", item)
    assert item["text"] == ["<unk>", "<space>", "<unk>"]
    assert item["duration"].dtype == np.float32 and item["duration"].tolist() == pytest.approx([0.5, 0.1, 0.5])


def test_off_by_default():
    assert TextTransforms.from_options(False, 0.0, has_text=True) is None
    assert TextTransforms.from_options(False, 0, has_text=False) is None


@pytest.mark.parametrize("use_g2p, prob, has_text, match", [
    (False, 1.5, True, "unk_mask_prob: expected a probability in \\[0, 1\\], got 1.5"),
    (False, -0.1, True, "unk_mask_prob: expected a non-negative number"),
    (False, "0.1", True, "unk_mask_prob: expected a number"),
    ("yes", 0.0, True, "use_g2p: expected true or false"),
    (False, 0.2, False, "unk_mask_prob: needs text in main_data"),
    (True, 0.0, False, "use_g2p: needs text in main_data"),
])
def test_option_errors(use_g2p, prob, has_text, match):
    with pytest.raises(ConfigError, match=match):
        TextTransforms.from_options(use_g2p, prob, has_text)


def test_masking_needs_token_list_text():
    with pytest.raises(DataError, match="utterance u7: unk_mask_prob needs token-list text"):
        TextTransforms(None, 0.5)("u7", {"text": "hello world"})


def test_masking_needs_one_duration_per_token():
    with pytest.raises(DataError, match="utterance u8: 3 tokens but 2 durations"):
        TextTransforms(None, 0.5)("u8", {"text": ["A", "<space>", "B"], "duration": [0.1, 0.2]})


def build_text_iterator(root, num_workers=0, thread_type="proc", prob=0.5):
    text = dict(type="abs.Iterator", data=("text",), data_len=False, batch_size=3)
    write_recipe(root / "cfg.yaml", root, **text, dataset_conf={"unk_mask_prob": prob}, shuffle=True,
                 valid=entry(root, **text), exp_cfg={})
    return speechiter.build_iterators(speechiter.load_config(str(root / "cfg.yaml")), seed=7,
                                      num_workers=num_workers, thread_type=thread_type, out_type="null")["train"]


def texts(iterator, epoch, start_step=0):
    try:
        return [batch["text"] for batch in iterator.build_loader(epoch, start_step)]
    finally:
        iterator.close()


@pytest.mark.slow  # process workers
@pytest.mark.timeout(120)
def test_masks_are_the_same_for_any_worker_count_and_resume_point(text_corpus):
    reference = {epoch: texts(build_text_iterator(text_corpus), epoch) for epoch in (1, 2)}
    flat = [token for batch in reference[1] for text in batch for token in text]
    assert 0 < flat.count("<unk>") < flat.count("<space>") + 16  # some words masked, not all
    assert reference[1] != reference[2]  # the masks follow the epoch
    for num_workers, thread_type in [(1, "proc"), (2, "proc"), (2, "thread")]:
        assert texts(build_text_iterator(text_corpus, num_workers, thread_type), 2) == reference[2]
    assert texts(build_text_iterator(text_corpus, 2), 2, start_step=3) == reference[2][3:]


# --- use_g2p -------------------------------------------------------------------------------------

def fake_nltk(has_data: bool):
    def find(name):
        if not has_data:
            raise LookupError(f"Resource {name} not found")
        return name
    return types.SimpleNamespace(data=types.SimpleNamespace(find=find))


def test_g2p_without_nltk_or_g2p_en_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk", None)
    with pytest.raises(ConfigError, match=r"use_g2p: use_g2p needs g2p_en and nltk.*speechiter\[g2p\].*nltk.downloader"):
        TextTransforms.from_options(True, 0.0, has_text=True)


def test_g2p_without_nltk_data_says_what_to_fetch(monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk", fake_nltk(has_data=False))
    with pytest.raises(ConfigError, match="NLTK data corpora/cmudict, taggers/averaged_perceptron_tagger_eng is "
                                          "missing.*NLTK_DATA"):
        G2P().check()


def test_g2p_en_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk", fake_nltk(has_data=True))
    monkeypatch.setitem(sys.modules, "g2p_en", None)
    with pytest.raises(ConfigError, match=r"use_g2p needs g2p_en, which is not installed.*speechiter\[g2p\]"):
        G2P().check()


def test_g2p_en_that_cannot_run_says_what_to_install(monkeypatch):
    class BrokenG2p:
        def __init__(self):
            raise LookupError("Resource cmudict not found.\n  Please use the NLTK Downloader")
    monkeypatch.setitem(sys.modules, "nltk", fake_nltk(has_data=True))
    monkeypatch.setitem(sys.modules, "g2p_en", types.SimpleNamespace(G2p=BrokenG2p))
    with pytest.raises(ConfigError, match="g2p_en cannot run \\(LookupError: Resource cmudict not found. Please"):
        G2P().check()


def test_g2p_output_mapping_with_a_stand_in_model(monkeypatch):
    g2p = G2P()
    g2p._model = lambda text: ["HH", "AH0", " ", "W", "ER1", " ", ". . .", "."]
    assert g2p("hello world ...") == ["HH", "AH0", "<space>", "W", "ER1", "<space>", "."]
    assert pickle_roundtrip(g2p)._model is None  # workers make their own


def pickle_roundtrip(obj):
    import pickle
    return pickle.loads(pickle.dumps(obj))


@pytest.mark.timeout(120)
def test_cli_with_use_g2p_but_no_g2p_en_exits_2(tmp_path):
    try:
        G2P().check()
        pytest.skip("g2p_en works here")
    except ConfigError:
        pass
    (tmp_path / "idx2text").write_text("a hello world\n")
    (tmp_path / "cfg.yaml").write_text(f"""
data_cfg:
  test:
    set1:
      type: abs.Iterator
      conf:
        dataset_type: speech_text.SpeechTextDataset
        dataset_conf: {{main_data: {{text: {tmp_path}/idx2text}}, use_g2p: true}}
""")
    result = run_cli("--data_cfg", tmp_path / "cfg.yaml", "--mode", "test", "--quiet")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "data_cfg.test.set1.conf.dataset_conf.use_g2p" in result.stderr and "speechiter[g2p]" in result.stderr


def test_real_g2p_en(tmp_path):
    pytest.importorskip("g2p_en")
    try:
        G2P().check()
    except ConfigError as e:
        pytest.skip(f"g2p_en is installed but cannot run here: {e}")
    (tmp_path / "idx2text").write_text("a hello world\n")
    dataset = SpeechTextDataset(main_data={"text": str(tmp_path / "idx2text")}, use_g2p=True)
    text = dataset.get_batch(["a"])["text"][0]
    assert text[:2] == ["HH", "AH0"] and "<space>" in text
