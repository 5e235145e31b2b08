"""pitch_conf: pyworld dio + stonemask f0 in the batch (issue 12, R8)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import speechiter
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError, DataError
from speechiter.dataset.pitch import PitchExtractor, collate_pitch, continuous, import_pyworld
from tests.inprocess import run_cli
from tests.recipes import entry, write_recipe

pyworld = pytest.importorskip("pyworld")
interpolate = pytest.importorskip("scipy.interpolate")

REPO = Path(__file__).resolve().parents[2]
SR = 16000


def voiced_wave(num_samples: int, seed: int, silence=(0.3, 0.45), sr: int = SR) -> np.ndarray:
    """A harmonic tone whose f0 glides 120 -> 210 Hz, silent over ``silence``
    (fractions of the length) so that some frames are unvoiced."""
    t = np.arange(num_samples) / sr
    f0 = np.linspace(120, 210, num_samples) + 5 * seed
    phase = 2 * np.pi * np.cumsum(f0) / sr
    wave = sum(0.3 / k * np.sin(k * phase) for k in range(1, 6))
    wave *= 0.5 + 0.5 * np.sin(2 * np.pi * 2 * t) ** 2
    a, b = (int(x * num_samples) for x in silence)
    wave[a:b] = np.random.default_rng(seed).normal(0, 1e-4, b - a)
    return wave.astype(np.float32)


@pytest.fixture
def wav_corpus(tmp_path):
    lengths = {"u1": 16000, "u2": 16255, "u3": 12000, "u4": 9000}
    lines = []
    for i, (uid, n) in enumerate(lengths.items()):
        sf.write(tmp_path / f"{uid}.wav", voiced_wave(n, i), SR, subtype="PCM_16")
        lines.append(f"{uid} {uid}.wav")
    (tmp_path / "idx2wav").write_text("\n".join(lines) + "\n")
    (tmp_path / "idx2wav_len").write_text("".join(f"{u} {n}\n" for u, n in lengths.items()))
    return tmp_path, lengths


def speechain_pitch(path, hop=256, f0min=80, f0max=400, continuous_f0=True) -> np.ndarray:
    """SpeeChain's convert_wav_to_pitch procedure, written out with pyworld and scipy directly."""
    wave, sr = sf.read(path, dtype="float32", always_2d=True)
    wave = wave[:, 0].astype(np.float64)
    f0, t = pyworld.dio(wave, sr, f0_floor=f0min, f0_ceil=f0max, frame_period=1000 * hop / sr)
    f0 = pyworld.stonemask(wave, f0, t, sr)
    if continuous_f0:
        start, end = f0[f0 != 0][0], f0[f0 != 0][-1]
        first, last = np.where(f0 == start)[0][0], np.where(f0 == end)[0][-1]
        f0[:first], f0[last:] = start, end
        voiced = np.where(f0 != 0)[0]
        f0 = interpolate.interp1d(voiced, f0[voiced], bounds_error=False, fill_value=(start, end))(
            np.arange(len(f0)))
    return f0.astype(np.float32)


@pytest.mark.parametrize("continuous_f0", [True, False])
def test_batch_pitch_equals_pyworld_called_directly(wav_corpus, continuous_f0):
    root, lengths = wav_corpus
    dataset = SpeechTextDataset(main_data={"feat": str(root / "idx2wav")}, sample_rate=SR,
                                pitch_conf={"hop_length": 256, "continuous_f0": continuous_f0})
    batch = dataset.get_batch(list(lengths))
    assert batch["pitch"].dtype == np.float32 and batch["pitch_len"].dtype == np.int64
    assert batch["pitch"].shape == (4, max(batch["pitch_len"]))
    for row, uid in enumerate(lengths):
        expected = speechain_pitch(root / f"{uid}.wav", continuous_f0=continuous_f0)
        n = batch["pitch_len"][row]
        assert n == len(expected) == int(lengths[uid] / 256) + 1
        np.testing.assert_allclose(batch["pitch"][row, :n], expected, rtol=1e-6)
        assert not batch["pitch"][row, n:].any()
        assert (batch["pitch"][row, :n] > 0).all() == continuous_f0  # the silence is unvoiced


def test_frame_count_rule_of_speechain():
    extractor = PitchExtractor(sr=SR, hop_length=256, continuous_f0=False)
    for samples, frames in [(16000, 63), (16255, 64), (16256, 64), (1000, 4)]:
        assert extractor.num_frames(samples) == frames
        assert len(extractor(voiced_wave(samples, 0, silence=(0, 0)))) == frames


def test_options_defaults_and_seconds_hop():
    extractor = PitchExtractor.from_conf({"hop_length": 0.016, "sr": SR}, SR)
    assert extractor == PitchExtractor(sr=SR, hop_length=256, f0min=80, f0max=400, continuous_f0=True)
    assert PitchExtractor.from_conf(None, SR) is None


def test_pitch_len_even_when_lengths_are_equal():
    out = collate_pitch([np.ones(5, np.float32), np.ones(5, np.float32)])
    assert out["pitch"].shape == (2, 5) and out["pitch_len"].tolist() == [5, 5]


def test_no_voiced_frame_keeps_zeros_and_warns():
    with pytest.warns(UserWarning, match="utterance z: no voiced frame"):
        assert not continuous(np.zeros(7), "z").any()


def test_stereo_is_a_data_error():
    with pytest.raises(DataError, match="utterance s: pitch_conf needs mono"):
        PitchExtractor(sr=SR, hop_length=256)(np.zeros((1000, 2), np.float32), "s")


@pytest.mark.parametrize("conf, kwargs, match", [
    ({"hop_length": 256, "sr": 22050}, {}, "pitch_conf.sr: is 22050 but the dataset's sample_rate is 16000"),
    ({"hop": 256}, {}, "pitch_conf.hop: unknown option"),
    ({"hop_length": 0}, {}, "pitch_conf.hop_length: expected a positive integer"),
    ({"f0min": 300, "f0max": 200}, {}, "pitch_conf.f0max: must be above f0min"),
    ({"continuous_f0": "yes"}, {}, "pitch_conf.continuous_f0: expected true or false"),
    ([256], {}, "pitch_conf: expected a mapping"),
    ({}, {"sample_rate": None}, "pitch_conf: needs the dataset's sample_rate"),
    ({}, {"feat_conf": {"n_mels": 80}}, "pitch_conf: needs waveforms, but feat_conf"),
])
def test_config_errors(wav_corpus, conf, kwargs, match):
    root, _ = wav_corpus
    options = dict(main_data={"feat": str(root / "idx2wav")}, sample_rate=SR, pitch_conf=conf)
    with pytest.raises(ConfigError, match=match):
        SpeechTextDataset(**{**options, **kwargs})


def test_needs_feat(tmp_path):
    (tmp_path / "idx2text").write_text("a hello\n")
    with pytest.raises(ConfigError, match="pitch_conf: needs waveforms in main_data.feat"):
        SpeechTextDataset(main_data={"text": str(tmp_path / "idx2text")}, sample_rate=SR, pitch_conf={})


def test_missing_pyworld_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyworld", None)  # import pyworld -> ImportError
    with pytest.raises(ConfigError, match=r"pitch_conf: pitch extraction needs pyworld.*speechiter\[tts\]"):
        import_pyworld()


def test_pyworld_without_pkg_resources_says_what_to_install(monkeypatch):
    real_import = __import__

    def fake_import(name, *args, **kwargs):
        if name == "pyworld":
            raise ModuleNotFoundError("No module named 'pkg_resources'", name="pkg_resources")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr("builtins.__import__", fake_import)
    with pytest.raises(ConfigError, match=r"needs pkg_resources.*setuptools<81"):
        import_pyworld()


@pytest.mark.slow  # a fresh process: the warning comes when pyworld is first imported
def test_importing_pyworld_prints_no_pkg_resources_warning():
    pytest.importorskip("pyworld")
    code = "from speechiter.dataset.pitch import import_pyworld; import_pyworld()"
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "pkg_resources" not in done.stderr, done.stderr


def write_config(root):
    """An exp_cfg whose train and valid iterators both compute pitch."""
    dataset_conf = {"sample_rate": 16000, "pitch_conf": {"hop_length": 256}}
    valid = entry(root, "abs.Iterator", dataset_conf=dataset_conf, data_len=False, batch_size=2)
    return write_recipe(root / "cfg.yaml", root, dataset_conf=dataset_conf, batch_len=30000, valid=valid,
                        exp_cfg={})


@pytest.mark.timeout(120)
def test_cli_without_pyworld_exits_2_with_one_line(wav_corpus, monkeypatch):
    root, _ = wav_corpus
    write_config(root)
    monkeypatch.setitem(sys.modules, "pyworld", None)
    result = run_cli("--data_cfg", root / "cfg.yaml", "--epochs", 1, "--quiet")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "pip install 'speechiter[tts]'" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_workers, thread_type", [(0, "proc"), (2, "proc"), (2, "thread")])
def test_pitch_through_iterators_is_the_same_for_any_worker_count(wav_corpus, num_workers, thread_type):
    root, lengths = wav_corpus
    write_config(root)
    iterators = speechiter.build_iterators(speechiter.load_config(str(root / "cfg.yaml")), num_workers=num_workers,
                                           thread_type=thread_type, out_type="null")
    train = iterators["train"]
    try:
        batches = list(train.build_loader(1))
    finally:
        train.close()
    plan = [list(ids) for ids in train.epoch_batches(1)]
    assert sorted(uid for ids in plan for uid in ids) == sorted(lengths)
    for ids, batch in zip(plan, batches):
        for row, uid in enumerate(ids):
            expected = speechain_pitch(root / f"{uid}.wav")
            np.testing.assert_allclose(batch["pitch"][row, :batch["pitch_len"][row]], expected, rtol=1e-6)


# --- the recipe-shaped FastSpeech2 config (tests/parity/recipes/) -----------------------------------

RECIPES = REPO / "tests" / "parity" / "recipes"
FASTSPEECH2_KEYS = {"feat", "feat_len", "text", "duration", "duration_len", "pitch", "pitch_len"}
MFA_PHONES = ["HH", "AH0", "L", "OW1", "W", "ER1", "D", "T", "EH1", "S"]


def write_tts_subset(wav_dir: Path, mfa_dir: Path, prefix: str, num: int, sr: int, seed: int = 0) -> list:
    """A SpeeChain-shaped TTS subset: wavs with idx2wav / idx2wav_len in ``wav_dir`` and MFA token-list
    idx2text with list-form idx2duration (both starting and ending with <space>) in ``mfa_dir``."""
    rng = np.random.default_rng(seed)
    wav_dir.mkdir(parents=True, exist_ok=True)
    mfa_dir.mkdir(parents=True, exist_ok=True)
    ids = [f"{prefix}_{i:03d}" for i in range(num)]
    wav, wav_len, text, duration = [], [], [], []
    for i, uid in enumerate(ids):
        n = int(sr * rng.uniform(0.4, 1.0))
        sf.write(wav_dir / f"{uid}.wav", voiced_wave(n, i, sr=sr), sr, subtype="PCM_16")
        tokens = ["<space>"]
        for _ in range(1 + i % 3):
            tokens += list(rng.choice(MFA_PHONES, size=int(rng.integers(2, 5)))) + ["<space>"]
        parts = rng.uniform(0.5, 1.5, len(tokens))
        seconds = np.round(parts / parts.sum() * n / sr, 2)
        wav.append(f"{uid} {wav_dir / f'{uid}.wav'}")
        wav_len.append(f"{uid} {n}")
        text.append(f"{uid} [{', '.join(repr(str(t)) for t in tokens)}]")
        duration.append(f"{uid} [{', '.join(str(float(d)) for d in seconds)}]")
    for folder, name, lines in [(wav_dir, "idx2wav", wav), (wav_dir, "idx2wav_len", wav_len),
                                (mfa_dir, "idx2text", text), (mfa_dir, "idx2duration", duration)]:
        (folder / name).write_text("\n".join(lines[::-1]) + "\n")  # not in id order
    return ids


@pytest.fixture
def ljspeech_root(tmp_path, monkeypatch):
    data = tmp_path / "datasets" / "ljspeech" / "data"
    for subset, num in [("train", 6), ("valid", 3)]:
        write_tts_subset(data / "wav" / subset, data / "mfa" / "acoustic=ljspeech_lexicon=librispeech" / subset
                         / "stress" / "no-punc", f"LJ{subset}", num, sr=22050)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # recipe paths are relative to the SpeeChain root
    return tmp_path


def recipe_batches(config: Path, groups=("train", "valid")):
    iterators = speechiter.build_iterators(speechiter.load_config(str(config)), num_workers=0, out_type="null")
    try:
        return {group: list(iterators[group].build_loader(1)) for group in groups}
    finally:
        speechiter.build.close_all(iterators)


def test_fastspeech2_recipe_builds(ljspeech_root):
    iterators = speechiter.build_iterators(speechiter.load_config(str(RECIPES / "tts_ljspeech_fastspeech2.yaml")),
                                           num_workers=0)
    assert iterators["train"].dataset.pitch == PitchExtractor(sr=22050, hop_length=256)
    speechiter.build.close_all(iterators)


def test_fastspeech2_recipe_batches_have_pitch(ljspeech_root):
    batches = recipe_batches(RECIPES / "tts_ljspeech_fastspeech2.yaml")
    for group in ("train", "valid"):
        for batch in batches[group]:
            assert FASTSPEECH2_KEYS <= set(batch)
            assert batch["pitch"].dtype == np.float32 and batch["pitch"].shape[0] == batch["feat"].shape[0]
