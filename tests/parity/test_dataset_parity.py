"""SpeechTextDataset against SpeeChain's dataset rules (issue 12, R4, R6, R7), on real files.

Expected values come from tests/parity/reference.py (parse_token_list,
trim_spaces, text_lengths) and from the rules in tests/parity/RULES.md,
worked examples included.
"""
import warnings

import numpy as np
import pytest
import soundfile as sf

import speechiter
from speechiter.io.samples import resampled_length
from speechiter.dataset.speech_text import SpeechTextDataset, perturbed_length
from speechiter.errors import DataError
from speechiter.seeding import seeded
from tests.parity import reference as R
from tests.recipes import entry

# the rules' worked example (R6): T = 1000 -> tokens HH AH0 <space> L OW1, feat[200:700]
TOKENS = ["<space>", "HH", "AH0", "<space>", "L", "OW1", "<space>"]
DURATIONS = [0.2, 0.1, 0.1, 0.05, 0.1, 0.15, 0.3]


def write(path, lines):
    path.write_text("".join(f"{k} {v}\n" for k, v in lines))
    return str(path)


def ramp(n):
    """A waveform whose samples say where they came from (exact in 16-bit PCM)."""
    return (np.arange(n) % 30000).astype(np.int16)


@pytest.fixture
def mfa(tmp_path):
    """SpeeChain's MFA layout for three utterances at 16 kHz: idx2wav, token-list idx2text, list idx2duration.
    ``s`` is nothing but <space>; ``q`` holds a token with a quote (Python's repr writes it in double quotes)."""
    lengths = {"w": 1000, "s": 400, "q": 600}
    for uid, n in lengths.items():
        sf.write(tmp_path / f"{uid}.wav", ramp(n), 16000, subtype="PCM_16")
    text = {"w": str(TOKENS), "s": str(["<space>", "<space>"]), "q": str(["<space>", "don't", "X"])}
    duration = {"w": str(DURATIONS), "s": "[0.5, 0.5]", "q": "[0.25, 0.5, 0.25]"}
    assert text["q"] == "['<space>', \"don't\", 'X']"
    return {"feat": write(tmp_path / "idx2wav", [(u, f"{u}.wav") for u in ("w", "q", "s")]),
            "text": write(tmp_path / "idx2text", text.items()),
            "duration": write(tmp_path / "idx2duration", duration.items()),
            "lengths": lengths, "raw_text": text, "raw_duration": duration}


def expected(mfa, uid, with_feat=True):
    tokens = R.parse_token_list(mfa["raw_text"][uid])
    durations = [float(x) for x in mfa["raw_duration"][uid][1:-1].split(", ")]
    return R.trim_spaces(tokens, durations, mfa["lengths"][uid] if with_feat else None)


# ----------------------------------------------------------------------------- R6: token lists and trimming

def test_worked_example_trims_tokens_durations_and_audio(mfa):
    dataset = SpeechTextDataset(main_data={k: mfa[k] for k in ("feat", "text", "duration")})
    item = dataset["w"]
    tokens, durations, (start, stop) = expected(mfa, "w")
    assert (tokens, (start, stop)) == (["HH", "AH0", "<space>", "L", "OW1"], (200, 700))
    assert item["text"] == tokens
    np.testing.assert_allclose(item["duration"], durations, rtol=1e-6)
    wave = sf.read(mfa["feat"].replace("idx2wav", "w.wav"), dtype="float32", always_2d=True)[0]
    np.testing.assert_array_equal(item["feat"], wave[start:stop])


def test_quoted_token_and_batch_layout(mfa):
    dataset = SpeechTextDataset(main_data={k: mfa[k] for k in ("feat", "text", "duration")})
    batch = dataset.get_batch(["q", "w"])
    (q_tokens, _, (q_start, q_stop)), (w_tokens, _, (w_start, w_stop)) = expected(mfa, "q"), expected(mfa, "w")
    assert batch["text"] == [q_tokens, w_tokens] == [['"don\'t"', "X"], w_tokens]
    assert batch["feat_len"].tolist() == [q_stop - q_start, w_stop - w_start] == [450, 500]
    assert batch["duration_len"].tolist() == [2, 5] and batch["duration"].shape == (2, 5)


def test_only_spaces_is_kept_untrimmed(mfa):
    # SpeeChain drops such an utterance from its batch (the batch shrinks); speechiter keeps it untrimmed
    assert expected(mfa, "s") is None
    dataset = SpeechTextDataset(main_data={k: mfa[k] for k in ("feat", "text", "duration")})
    batch = dataset.get_batch(["s", "w"])
    assert batch["text"][0] == ["<space>", "<space>"] and batch["feat_len"].tolist() == [400, 500]


def test_text_only_trims_tokens_and_durations(mfa):
    dataset = SpeechTextDataset(main_data={"text": mfa["text"], "duration": mfa["duration"]})
    tokens, durations, _ = expected(mfa, "w", with_feat=False)
    item = dataset["w"]
    assert item["text"] == tokens and "feat" not in item
    np.testing.assert_allclose(item["duration"], durations, rtol=1e-6)
    assert SpeechTextDataset(main_data={"text": mfa["text"]})["w"]["text"] == tokens


def test_trimming_audio_needs_durations_that_match_the_tokens(mfa, tmp_path):
    with pytest.raises(DataError, match=r"utterance w \(text from .*idx2text\): .*needs main_data.duration"):
        SpeechTextDataset(main_data={"feat": mfa["feat"], "text": mfa["text"]})["w"]
    short = write(tmp_path / "idx2short", [("w", "[0.2, 0.1]"), ("q", "[1, 1, 1]"), ("s", "[1, 1]")])
    with pytest.raises(DataError, match=r"utterance w \(duration from .*idx2short\): 2 durations for 7 tokens"):
        SpeechTextDataset(main_data={"feat": mfa["feat"], "text": mfa["text"], "duration": short})["w"]


def test_plain_and_bracketed_transcripts_stay_strings(tmp_path):
    # stricter than SpeeChain, which would split "[noise] hello [laugh]" as a token list
    text = write(tmp_path / "idx2text", [("a", "[noise] hello [laugh]"), ("b", "hello there"), ("c", "[]")])
    batch = SpeechTextDataset(main_data={"text": text}).get_batch(["a", "b", "c"])
    assert batch["text"] == ["[noise] hello [laugh]", "hello there", []]
    assert R.parse_token_list("['a', 'b']") == ["a", "b"]


# ----------------------------------------------------------------------------- R4: lengths from the raw text

def test_registered_lengths_are_len_of_the_raw_line(mfa, tmp_path):
    extra = write(tmp_path / "idx2extra", [("u", "héllo wörld"), ("v", "日本語"), ("w", "x")])
    dataset = SpeechTextDataset(main_data={"text": [mfa["text"], extra]})
    raw = dict(mfa["raw_text"], u="héllo wörld", v="日本語", w="x")       # the later file wins for "w"
    assert dataset.data_len.to_dict() == R.text_lengths(raw)
    assert R.text_lengths({"k": "['<space>', 'K', 'AE1', 'T']"}) == {"k": 28}
    assert SpeechTextDataset(main_data={"feat": mfa["feat"]}).data_len is None


def test_lm_valid_iterator_sorted_by_text_length(tmp_path, make_recipe):
    text = {"0": "the cat", "1": "a", "2": "ab", "3": "a b c d", "10": "xyz", "4": "ab"}
    path = write(tmp_path / "lm_text", text.items())
    group = entry(None, "abs.Iterator", data={"text": str(path)}, data_len=False, shuffle=False, batch_size=2)
    cfg = make_recipe(None, train=group, valid=group)
    it = speechiter.build_iterators(speechiter.load_config(str(cfg)), num_workers=0, groups=["valid"])["valid"]
    view = R.iterator_view({"text": path}, "abs", batch_size=2)
    assert [list(b) for b in it.batches] == view == [["0", "3"], ["10", "2"], ["4", "1"]]


# ----------------------------------------------------------------------------- R7: files and rates

def test_spk_feat_stored_as_1_by_d_gives_b_1_d(tmp_path):
    for i, uid in enumerate("ab"):
        np.save(tmp_path / f"{uid}.npy", np.full((1, 192), i, dtype=np.float32))   # speechbrain encode_batch row
    spk = write(tmp_path / "idx2spk_feat", [("a", "a.npy"), ("b", "b.npy")])
    text = write(tmp_path / "idx2text", [("a", "x"), ("b", "y")])
    batch = SpeechTextDataset(main_data={"text": text, "spk_feat": spk}).get_batch(["a", "b"])
    assert batch["spk_feat"].shape == (2, 1, 192) and batch["spk_feat"].dtype == np.float32


def test_npz_with_feat_and_sample_rate(tmp_path):
    # SpeeChain's feat_extractor.py: np.savez(path, feat=feat, sample_rate=sample_rate)
    logmel = np.random.default_rng(0).standard_normal((50, 80)).astype(np.float32)
    np.savez(tmp_path / "f.npz", feat=logmel, sample_rate=22050)
    np.savez(tmp_path / "w.npz", feat=np.sin(np.arange(22050) / 10).astype(np.float32), sample_rate=22050)
    np.savez(tmp_path / "bad.npz", feat=logmel, sample_rate=np.array([1, 2]))
    np.savez(tmp_path / "single.npz", logmel)                     # speechiter's own form: one array
    idx2 = write(tmp_path / "idx2feat", [(u, f"{u}.npz") for u in ("f", "w", "bad", "single")])
    at_22k = SpeechTextDataset(main_data={"feat": idx2}, sample_rate=22050)
    np.testing.assert_array_equal(at_22k["f"]["feat"], logmel)
    assert at_22k["w"]["feat"].shape == (22050, 1)
    default = SpeechTextDataset(main_data={"feat": idx2})         # 16000: the waveform is resampled
    assert default["w"]["feat"].shape == (resampled_length(22050, 22050, 16000), 1) == (16000, 1)
    np.testing.assert_array_equal(default["single"]["feat"], logmel)
    with pytest.raises(DataError, match=r"utterance f .*features extracted at 22050 Hz, but the dataset's "
                                        r"sample_rate is 16000"):
        default["f"]
    with pytest.raises(DataError, match=r"utterance bad .*sample_rate should be one positive number"):
        at_22k["bad"]


def test_default_sample_rate_is_16000(tmp_path):
    # SpeeChain resamples down to its default 16000 (and refuses lower rates; speechiter upsamples them)
    sf.write(tmp_path / "hi.wav", ramp(44100), 44100, subtype="PCM_16")
    sf.write(tmp_path / "lo.wav", ramp(8000), 8000, subtype="PCM_16")
    idx2 = write(tmp_path / "idx2wav", [("hi", "hi.wav"), ("lo", "lo.wav")])
    assert SpeechTextDataset(main_data={"feat": idx2}).get_batch(["hi", "lo"])["feat_len"].tolist() == [16000] * 2


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_factor_scales_the_length_as_speechain(tmp_path, factor):
    # SpeeChain resamples sample_rate -> int(sample_rate * factor): 1.1 lengthens by 10%
    sf.write(tmp_path / "a.wav", ramp(16000), 16000, subtype="PCM_16")
    dataset = SpeechTextDataset(main_data={"feat": write(tmp_path / "idx2wav", [("a", "a.wav")])},
                                use_speed_perturb=True, perturb_range=[factor])
    with seeded(0):
        n = dataset["a"]["feat"].shape[0]
    assert n == perturbed_length(16000, factor) == int(16000 * factor)


# ----------------------------------------------------------------------------- recipe-shaped: FastSpeech2 data

def test_fastspeech2_shaped_config_loads_trimmed_batches(tmp_path, mfa, make_recipe):
    # recipes/tts/ljspeech 22.05khz_mfa_fastspeech2 without pitch_conf: token-list text, list durations
    lengths = write(tmp_path / "idx2wav_len", mfa["lengths"].items())
    group = entry(None, data={k: str(mfa[k]) for k in ("feat", "text", "duration")},
                  dataset_conf={"sample_rate": 16000}, data_len=str(lengths), batch_len=100000, shuffle=False)
    cfg = make_recipe(None, train=group, valid=group)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        iterators = speechiter.build_iterators(speechiter.load_config(str(cfg)), num_workers=0, groups=["train"],
                                               engine="inline", out_type="null")
    try:
        assert [list(b) for b in iterators["train"].epoch_batches(1)] == [["w", "q", "s"]]   # longest first
        (batch,) = list(iterators["train"].build_loader(1))
    finally:
        speechiter.build.close_all(iterators)
    assert batch["text"] == [expected(mfa, "w")[0], expected(mfa, "q")[0], ["<space>", "<space>"]]
    assert batch["feat_len"].tolist() == [500, 450, 400]


@pytest.mark.slow  # process workers
@pytest.mark.timeout(120)
def test_token_lists_travel_through_process_workers(tmp_path, mfa, make_recipe):
    group = entry(None, "abs.Iterator", data={k: str(mfa[k]) for k in ("feat", "text", "duration")},
                  data_len=False, batch_size=2, shuffle=True)
    cfg = make_recipe(None, train=group, valid=group)

    def load(**settings):
        iterators = speechiter.build_iterators(speechiter.load_config(str(cfg)), groups=["train"], out_type="null",
                                               **settings)
        try:
            return [(b["text"], b["feat"].tobytes(), b["duration"].tobytes())
                    for epoch in (1, 2) for b in iterators["train"].build_loader(epoch)]
        finally:
            speechiter.build.close_all(iterators)

    inline = load(engine="inline")
    assert [["HH", "AH0", "<space>", "L", "OW1"]] in [b[0][:1] for b in inline] + [b[0][1:] for b in inline]
    assert load(num_workers=2, thread_type="proc") == inline
