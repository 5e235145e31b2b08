"""The speech front end end to end: resampling, speed perturbation, on-the-fly log-mel, HDF5/flac/wav
equivalence, reproducibility across workers, batch budgets, and the SpeeChain ASR recipe."""
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import speechiter
from speechiter.io.samples import resampled_length
from speechiter.dataset.speech_text import SpeechTextDataset, perturbed_length
from speechiter.errors import ConfigError, DataError
from tests.dataset.test_features import speech_like
from tests.inprocess import run_cli
from tests.recipes import entry, options, write_recipe

REPO = Path(__file__).resolve().parents[2]
PRESET = "config/feat/log_mel/80bin_25ms_10ms.yaml"
TRAIN_PRESET = "config/feat/log_mel/80bin_25ms_10ms_train.yaml"


def write_speech_corpus(root, sample_rate, seconds=(0.43, 0.8, 1.27), fmt="wav"):
    """Speech-like int16 files at ``sample_rate``; returns the idx2wav path."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, sec in enumerate(seconds):
        wave = np.round(speech_like(sec, sample_rate, seed=i) * 32767).astype(np.int16)
        sf.write(root / f"u{i}.{fmt}", wave, sample_rate)
        lines.append(f"u{i} u{i}.{fmt}\n")
    (root / "idx2wav").write_text("".join(lines))
    return root / "idx2wav"


def dominant_frequency(wave, sample_rate):
    spectrum = np.abs(np.fft.rfft(wave[:, 0] * np.hanning(len(wave))))
    return np.argmax(spectrum) * sample_rate / len(wave)


@pytest.mark.parametrize("source_rate", [22050, 44100, 48000, 8000])
def test_resampling_speech_to_16k(tmp_path, source_rate):
    idx2wav = write_speech_corpus(tmp_path, source_rate)
    dataset = SpeechTextDataset(main_data={"feat": str(idx2wav)}, sample_rate=16000)
    for uid in dataset.get_data_index():
        n = sf.info(str(tmp_path / f"{uid}.wav")).frames
        original = sf.read(str(tmp_path / f"{uid}.wav"), dtype="float32", always_2d=True)[0]
        feat = dataset[uid]["feat"]
        assert feat.dtype == np.float32 and feat.shape == (resampled_length(n, source_rate, 16000), 1)
        assert abs(feat.shape[0] - round(n * 16000 / source_rate)) <= 1
        # the content survives: same dominant (harmonic) frequency, same level
        assert abs(dominant_frequency(feat, 16000) - dominant_frequency(original, source_rate)) < 5
        assert np.std(feat) == pytest.approx(np.std(original), rel=0.05)


@pytest.mark.parametrize("factor", [0.9, 1.0, 1.1, 0.95])
def test_speed_perturbation_changes_length_by_the_factor(tmp_path, factor):
    # SpeeChain's direction: the waveform is resampled by the factor and keeps its rate, so 1.1 is 10% longer
    idx2wav = write_speech_corpus(tmp_path, 16000, seconds=(0.2003, 0.5, 1.0371))
    plain = SpeechTextDataset(main_data={"feat": str(idx2wav)})
    perturbed = SpeechTextDataset(main_data={"feat": str(idx2wav)}, use_speed_perturb=True, perturb_range=[factor])
    for uid in plain.get_data_index():
        n = plain[uid]["feat"].shape[0]
        with speechiter.seeding.seeded(0):
            out = perturbed[uid]["feat"]
        assert out.shape[0] == perturbed_length(n, factor) and abs(out.shape[0] - round(n * factor)) <= 1
        assert perturbed.max_batch_length_fn(n) == out.shape[0]
        assert perturbed.batch_length_fn(n) == n  # batching budgets the unperturbed length (SpeeChain)
        if factor != 1.0:  # tempo and pitch change together
            expected = dominant_frequency(plain[uid]["feat"], 16000) / factor
            assert abs(dominant_frequency(out, 16000) - expected) < 0.03 * expected + 5


def test_speed_factor_comes_from_the_batch_random_state(corpus):
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")}, use_speed_perturb=True)
    ids = dataset.get_data_index()[:8]
    lengths = []
    for seed in (1, 1, 2):
        with speechiter.seeding.seeded(seed):
            lengths.append(dataset.get_batch(ids)["feat_len"].tolist())
    assert lengths[0] == lengths[1] and lengths[0] != lengths[2]


def test_feat_conf_gives_log_mel_frames_and_exact_frame_lengths(corpus):
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")}, sample_rate=16000, feat_conf=PRESET)
    ids = dataset.get_data_index()[:5]
    batch = dataset.get_batch(ids)
    assert batch["feat"].dtype == np.float32 and batch["feat"].shape == (5, batch["feat_len"].max(), 80)
    lengths = dict(line.split() for line in (corpus / "idx2wav_len").read_text().splitlines())
    assert [dataset.batch_length_fn(int(lengths[uid])) for uid in ids] == batch["feat_len"].tolist()
    assert dataset.feat_extractor.sample_rate == 16000 and dataset.read_rate == 16000


def test_feat_conf_sample_rate_resamples_and_must_match(tmp_path):
    idx2wav = write_speech_corpus(tmp_path, 22050)
    dataset = SpeechTextDataset(main_data={"feat": str(idx2wav)}, feat_conf={"sample_rate": 16000, "n_mels": 40})
    n = sf.info(str(tmp_path / "u0.wav")).frames
    assert dataset["u0"]["feat"].shape == (dataset.feat_extractor.num_frames(resampled_length(n, 22050, 16000)), 40)
    with pytest.raises(ConfigError, match=r"feat_conf\.sample_rate: is 8000 but the dataset's sample_rate is 16000"):
        SpeechTextDataset(main_data={"feat": str(idx2wav)}, sample_rate=16000, feat_conf={"sample_rate": 8000})
    with pytest.raises(ConfigError, match=r"feat_conf\.sample_rate: unknown"):
        SpeechTextDataset(main_data={"feat": str(idx2wav)}, sample_rate=None, feat_conf={"n_mels": 40})
    # neither given: SpeeChain's default 16000
    assert SpeechTextDataset(main_data={"feat": str(idx2wav)}, feat_conf={"n_mels": 40}).read_rate == 16000
    text = tmp_path / "idx2text"
    text.write_text("u0 HI\n")
    with pytest.raises(ConfigError, match="feat_conf: needs waveforms in main_data.feat"):
        SpeechTextDataset(main_data={"text": str(text)}, sample_rate=16000, feat_conf=PRESET)


def test_feat_conf_data_errors_name_the_utterance(tmp_path):
    sf.write(tmp_path / "short.wav", np.ones(100, np.int16), 16000)
    sf.write(tmp_path / "stereo.wav", np.ones((1000, 2), np.int16), 16000)
    (tmp_path / "idx2wav").write_text("short short.wav\nstereo stereo.wav\n")
    dataset = SpeechTextDataset(main_data={"feat": str(tmp_path / "idx2wav")}, sample_rate=16000, feat_conf=PRESET)
    with pytest.raises(DataError, match=r"utterance short .*idx2wav.*100 samples is shorter than one frame"):
        dataset["short"]
    with pytest.raises(DataError, match=r"utterance stereo .*feat_conf needs mono waveforms, got 2 channels"):
        dataset["stereo"]


@pytest.mark.slow
@pytest.mark.parametrize("other", ["flac", "hdf5"])
def test_flac_and_hdf5_copies_give_identical_tensors(tmp_path, make_corpus, other):
    wav = make_corpus(tmp_path / "wav", num=8, fmt="wav")
    copy = make_corpus(tmp_path / other, num=8, fmt=other)
    for conf in ({}, {"feat_conf": PRESET, "sample_rate": 16000}):
        a = SpeechTextDataset(main_data={"feat": str(wav / "idx2wav")}, **conf)
        b = SpeechTextDataset(main_data={"feat": str(copy / "idx2wav")}, **conf)
        ids = a.get_data_index()
        assert ids == b.get_data_index()
        batch_a, batch_b = a.get_batch(ids), b.get_batch(ids)
        assert np.array_equal(batch_a["feat"], batch_b["feat"])
        assert np.array_equal(batch_a["feat_len"], batch_b["feat_len"])


def test_missing_speaker_entry_is_dropped_with_a_warning_naming_idx2spk(corpus, tmp_path):
    lines = (corpus / "idx2spk").read_text().splitlines()
    (tmp_path / "idx2spk").write_text("\n".join(lines[2:]) + "\n")
    with pytest.warns(UserWarning) as record:
        dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav"), "text": str(corpus / "idx2text"),
                                               "spk_ids": str(tmp_path / "idx2spk")})
    message = str(record[0].message)
    assert "2 of 20 utterances" in message and f"2 missing from spk_ids ({tmp_path / 'idx2spk'})" in message
    assert len(dataset) == 18
    batch = dataset.get_batch(dataset.get_data_index()[:3])
    assert batch["spk_ids"] == [line.split()[1] for line in lines[2:5]]
    assert isinstance(batch["text"][0], str)


# --- through build_iterators and the engine -----------------------------------------------------------

def write_cfg(path, corpus, dataset_conf, batch_len=40000):
    """A train (BlockIterator) + valid recipe on ``corpus``; ``dataset_conf`` is extra YAML lines."""
    return write_recipe(path, corpus, data=("feat", "text"), dataset_conf=options(dataset_conf), batch_len=batch_len,
                        valid=entry(corpus, "abs.Iterator"))


def load_batches(cfg, epochs=(1, 2), **settings):
    iterators = speechiter.build_iterators(speechiter.load_config(cfg), seed=3, groups=["train"], **settings)
    iterator = iterators["train"]
    try:
        return [dict(b) for epoch in epochs for b in iterator.build_loader(epoch=epoch)]
    finally:
        iterator.close()


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for key in x:
            if isinstance(x[key], np.ndarray):
                assert x[key].dtype == y[key].dtype and np.array_equal(x[key], y[key]), key
            else:
                assert x[key] == y[key], key


PERTURBED = {
    "waveform": "use_speed_perturb: true\nperturb_range: [0.9, 1.0, 1.1]\nsample_rate: 16000",
    "log-mel with dither": f"use_speed_perturb: true\nsample_rate: 16000\nfeat_conf: {REPO / TRAIN_PRESET}",
}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", PERTURBED)
def test_speed_perturbed_run_is_identical_across_workers(tmp_path, corpus, kind):
    cfg = write_cfg(tmp_path / "cfg.yaml", corpus, PERTURBED[kind])
    reference = load_batches(cfg, num_workers=0, out_type="null")
    assert len({b["feat_len"].tobytes() for b in reference}) > 1
    for num_workers, thread_type in [(1, "proc"), (2, "proc"), (2, "thread")]:
        batches = load_batches(cfg, num_workers=num_workers, thread_type=thread_type, out_type="null")
        assert_same_batches(reference, batches)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("conf", ["use_speed_perturb: true",
                                  f"use_speed_perturb: true\nsample_rate: 16000\nfeat_conf: {REPO / PRESET}",
                                  f"sample_rate: 16000\nfeat_conf: {REPO / PRESET}"])
def test_block_batches_never_exceed_batch_len(tmp_path, make_corpus, conf):
    corpus = make_corpus(tmp_path / "corpus", num=40, min_sec=0.3, max_sec=1.5)
    batch_len = 300 if "feat_conf" in conf else 48000
    cfg = write_cfg(tmp_path / "cfg.yaml", corpus, conf, batch_len=batch_len)
    cfg.write_text(cfg.read_text().replace("    batch_len:", "    batch_len_rule: never_exceed\n    batch_len:"))
    for epoch in (1, 2, 3):
        for batch in load_batches(cfg, epochs=(epoch,), num_workers=0, out_type="null"):
            assert len(batch["feat_len"]) == 1 or batch["feat_len"].sum() <= batch_len


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_hdf5_corpus_with_two_proc_workers_matches_inline(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "h5", num=24, fmt="hdf5", speakers=2)
    # open the chunk files in the parent first: the workers must not use these handles
    SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")}).get_batch(["spk001-0001-0001"])
    cfg = write_cfg(tmp_path / "cfg.yaml", corpus, "use_speed_perturb: true")
    assert_same_batches(load_batches(cfg, engine="inline", out_type="null"),
                        load_batches(cfg, num_workers=2, thread_type="proc", out_type="null"))


@pytest.mark.slow
def test_feat_conf_from_a_variable_a_preset_path_and_errors_with_yaml_path(tmp_path, corpus):
    cfg = tmp_path / "cfg.yaml"
    write_cfg(cfg, corpus, "sample_rate: 16000\nfeat_conf: !ref <feat_conf>")
    text = cfg.read_text()
    cfg.write_text("feat_conf:\n  n_mels: 40\n  frame_shift: 12.5\n" + text)
    by_variable = load_batches(cfg, epochs=(1,), num_workers=0, out_type="null")
    assert by_variable[0]["feat"].shape[2] == 40
    cfg.write_text(f"feat_conf: {PRESET}\n" + text)
    old = os.getcwd()
    os.chdir(tmp_path)  # the preset path resolves against the repo's folder from anywhere
    try:
        assert load_batches(cfg, epochs=(1,), num_workers=0, out_type="null")[0]["feat"].shape[2] == 80
    finally:
        os.chdir(old)
    for bad, match in [("n_mels: -3", r"^data_cfg\.train\.conf\.dataset_conf\.feat_conf\.n_mels: expected a "
                                      r"positive integer, got -3$"),
                       ("n_mel: 40", r"dataset_conf\.feat_conf\.n_mel: unknown option; did you mean 'n_mels'")]:
        cfg.write_text(f"feat_conf: {{{bad}}}\n" + text)
        with pytest.raises(ConfigError, match=match):
            load_batches(cfg, num_workers=0)


# --- the SpeeChain ASR recipe with speed perturbation -----------------------------------------------------

@pytest.mark.slow  # process workers
@pytest.mark.timeout(180)
def test_speechain_asr_recipe_with_speed_perturb_runs_unchanged(tmp_path, make_corpus):
    data = tmp_path / "librispeech" / "data" / "wav"
    for split, num in [("train-clean-100", 16), ("dev-clean", 6)]:
        folder = make_corpus(data / split, num=num, min_sec=0.3, max_sec=1.2)
        (folder / "idx2no-punc_text").write_text((folder / "idx2text").read_text())
    recipe = REPO / "tests" / "fixtures" / "speechain_asr_perturb.yaml"
    dumps = []
    for workers, thread_type in [(0, "proc"), (2, "proc"), (2, "thread")]:
        dump = tmp_path / f"dump{workers}{thread_type}.jsonl"
        result = run_cli("--data_cfg", recipe, "--set", f"dataset_path={tmp_path}", "--set", "batch_len=3.2e4",
                         "--num_workers", workers, "--thread_type", thread_type, "--epochs", 2, "--quiet",
                         "--dump_batches", dump)
        assert result.returncode == 0, result.stderr
        dumps.append(dump.read_text())
    assert dumps[0] == dumps[1] == dumps[2] and '"group": "train"' in dumps[0]


# --- the handbook's example ---------------------------------------------------------------------------

@pytest.mark.slow
def test_handbook_front_end_example(tmp_path, corpus, monkeypatch):
    section = (REPO / "handbook.md").read_text().split("## Speech front end", 1)[1].split("\n## ", 1)[0]
    yaml_text = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    (tmp_path / "recipe.yaml").write_text(yaml_text.replace("/path/to/corpus", str(corpus)))
    monkeypatch.chdir(REPO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        iterators = speechiter.build_iterators(speechiter.load_config(tmp_path / "recipe.yaml"), num_workers=0,
                                               out_type="null")
    try:
        train = iterators["train"]
        batches = list(train.build_loader(epoch=1))
        assert sum(len(b["feat_len"]) for b in batches) == 20
        # a batch closes once its (unperturbed) budget reaches batch_len: before its last utterance it was below,
        # and a speed factor makes an utterance at most 1.1x its budget
        assert all(b["feat"].shape[2] == 80 and b["feat_len"][:-1].sum() <= 1.1 * 1000 + 2 for b in batches)
        valid = list(iterators["valid"].build_loader(epoch=1))
        assert valid[0]["feat"].shape[2] == 80 and isinstance(valid[0]["text"][0], str)
    finally:
        speechiter.build.close_all(iterators)
