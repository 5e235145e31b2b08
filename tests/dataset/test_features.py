"""speechiter.features: Kaldi-compatible log-mel, frame counts, dither, feat_conf checks and presets."""
from pathlib import Path

import numpy as np
import pytest

from speechiter.errors import ConfigError
from speechiter.features import CONFIG_DIR, LogMel, load_feat_conf

PRESETS = sorted((CONFIG_DIR / "feat" / "log_mel").glob("*.yaml"))


def speech_like(seconds, sample_rate, seed=0):
    """Harmonics of a gliding f0 (100-220 Hz) with a slow envelope, plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 160 + 60 * np.sin(2 * np.pi * 1.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    wave = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return (0.1 * wave + 0.003 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.mark.parametrize("sample_rate, conf", [
    (16000, {}),
    (16000, {"n_mels": 40, "window": "hamming", "low_freq": 0, "high_freq": -400, "preemphasis": 0.0}),
    (8000, {"n_mels": 23}),
    (22050, {"window": "hanning", "remove_dc_offset": False}),
    (16000, {"window": "blackman", "frame_length": 50, "frame_shift": 12.5}),
    (16000, {"window": "rectangular", "n_mels": 64}),
])
def test_matches_kaldi_native_fbank(sample_rate, conf):
    knf = pytest.importorskip("kaldi_native_fbank")
    wave = speech_like(1.234, sample_rate)
    logmel = LogMel(sample_rate=sample_rate, **conf)
    opts = knf.FbankOptions()
    frame = opts.frame_opts
    frame.dither, frame.samp_freq, frame.window_type = 0.0, sample_rate, logmel.window
    frame.preemph_coeff, frame.remove_dc_offset = logmel.preemphasis, logmel.remove_dc_offset
    frame.frame_length_ms, frame.frame_shift_ms = logmel.frame_length, logmel.frame_shift
    opts.mel_opts.num_bins, opts.mel_opts.low_freq = logmel.n_mels, logmel.low_freq
    opts.mel_opts.high_freq = conf.get("high_freq", 0.0)
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(sample_rate, (wave * 32768).tolist())
    fbank.input_finished()
    expected = np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])
    feat = logmel(wave)
    assert feat.dtype == np.float32 and feat.shape == expected.shape
    np.testing.assert_allclose(feat, expected, atol=1e-3)


@pytest.mark.parametrize("sample_rate, frame_length, frame_shift", [
    (16000, 25, 10), (22050, 25, 10), (8000, 20, 7.5), (16000, 32, 8)])
def test_num_frames_is_the_real_frame_count(sample_rate, frame_length, frame_shift):
    logmel = LogMel(sample_rate=sample_rate, n_mels=20, frame_length=frame_length, frame_shift=frame_shift)
    window, shift = logmel.window_size, logmel.window_shift
    assert window == int(sample_rate * 0.001 * frame_length) and shift == int(sample_rate * 0.001 * frame_shift)
    for n in [window - 1, window, window + 1, window + shift - 1, window + shift, 12345, 16000]:
        feat = logmel(np.zeros(n, np.float32) + 0.01)
        assert feat.shape == (logmel.num_frames(n), 20)
        assert logmel.num_frames(n) == (0 if n < window else 1 + (n - window) // shift)


def test_default_n_fft_is_the_next_power_of_two():
    assert LogMel(sample_rate=16000).n_fft == 512
    assert LogMel(sample_rate=8000).n_fft == 256
    assert LogMel(sample_rate=16000, n_fft=1024).n_fft == 1024


def test_dither_comes_from_the_generator_only():
    logmel = LogMel(sample_rate=16000, dither=1.0)
    wave = speech_like(0.5, 16000)
    a = logmel(wave, np.random.default_rng(7))
    np.random.seed(0)
    b = logmel(wave, np.random.default_rng(7))
    np.random.seed(1)
    c = logmel(wave, np.random.default_rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.array_equal(a, LogMel(sample_rate=16000)(wave))
    silence = np.zeros(4000, np.float32)
    assert np.isfinite(logmel(silence, np.random.default_rng(0))).all()
    with pytest.raises(ValueError, match="needs a generator"):
        logmel(wave)


def test_utterance_normalisation():
    feat = LogMel(sample_rate=16000, normalize="utterance")(speech_like(1.0, 16000))
    np.testing.assert_allclose(feat.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(feat.std(axis=0), 1, atol=1e-3)


def test_too_short_input_gives_no_frames():
    assert LogMel(sample_rate=16000, n_mels=10)(np.zeros(100, np.float32)).shape == (0, 10)


@pytest.mark.parametrize("conf, match", [
    ({"n_mels": -3}, r"^feat_conf\.n_mels: expected a positive integer, got -3$"),
    ({"n_mels": 2.5}, r"feat_conf\.n_mels: expected a positive integer, got 2\.5"),
    ({"n_mel": 80}, r"feat_conf\.n_mel: unknown option; did you mean 'n_mels'\?"),
    ({"frame_length": 0}, r"feat_conf\.frame_length: expected a positive number, got 0"),
    ({"frame_shift": "10ms"}, r"feat_conf\.frame_shift: expected a number, got '10ms'"),
    ({"frame_length": 0.05}, r"feat_conf\.frame_length: .*need at least 2 and 1"),
    ({"n_fft": 256}, r"feat_conf\.n_fft: expected at least the window size \(400 samples\), got 256"),
    ({"preemphasis": 1.5}, r"feat_conf\.preemphasis: expected a coefficient in \[0, 1\]"),
    ({"dither": -1}, r"feat_conf\.dither: expected a non-negative number, got -1"),
    ({"normalize": "global"}, r"feat_conf\.normalize: expected null or one of utterance, got 'global'"),
    ({"window": "hann"}, r"feat_conf\.window: expected one of povey, hanning"),
    ({"high_freq": 9000}, r"feat_conf\.high_freq: need low_freq < high_freq <= 8000"),
    ({"low_freq": 5000, "high_freq": 4000}, r"feat_conf\.high_freq: need low_freq < high_freq"),
    ({"sample_rate": 0}, r"feat_conf\.sample_rate: expected a positive integer, got 0"),
])
def test_feat_conf_errors_name_the_key(conf, match):
    with pytest.raises(ConfigError, match=match):
        LogMel.from_conf(conf, 16000)


def test_sample_rate_must_be_known():
    with pytest.raises(ConfigError, match=r"feat_conf\.sample_rate: unknown"):
        LogMel.from_conf({"n_mels": 80})
    with pytest.raises(ConfigError, match=r"^feat_conf: expected a mapping"):
        LogMel.from_conf([80])
    assert LogMel.from_conf({"sample_rate": 8000}, 16000).sample_rate == 8000


def test_conf_round_trips():
    logmel = LogMel(sample_rate=16000, n_mels=40, dither=1.0, normalize="utterance")
    assert LogMel(**logmel.conf()).conf() == logmel.conf()
    assert "n_mels=40" in repr(logmel)


@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_presets_load_and_build(preset):
    conf = load_feat_conf(str(preset))
    logmel = LogMel.from_conf(conf, 16000)
    assert logmel.frame_length == 25 and logmel.frame_shift == 10
    assert logmel.n_mels == int(preset.name.split("bin")[0])


def test_preset_paths_resolve_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = load_feat_conf(str(CONFIG_DIR / "feat/log_mel/80bin_25ms_10ms.yaml"))
    assert load_feat_conf("config/feat/log_mel/80bin_25ms_10ms.yaml") == expected
    assert load_feat_conf("feat/log_mel/80bin_25ms_10ms.yaml") == expected
    (tmp_path / "mine.yaml").write_text("n_mels: 64\ndither: 1e-1\n")
    assert load_feat_conf("mine.yaml") == {"n_mels": 64, "dither": 0.1}
    assert load_feat_conf({"n_mels": 2}) == {"n_mels": 2} and load_feat_conf(None) is None


@pytest.mark.parametrize("text, match", [
    (None, r"^feat_conf: no such YAML file: nothere\.yaml"),
    ("- 1\n- 2\n", r"^feat_conf: .*expected a mapping of feature settings"),
    ("a: [1,\n", r"^feat_conf: cannot read"),
])
def test_bad_feat_conf_files(tmp_path, monkeypatch, text, match):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        Path("nothere.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_feat_conf("nothere.yaml")
    with pytest.raises(ConfigError, match=r"^feat_conf: expected a mapping or a YAML file path, got 3"):
        load_feat_conf(3)


def test_feat_conf_files_are_read_with_the_config_checks(tmp_path, monkeypatch):
    """A duplicate key is an error naming both lines, as in a recipe; a BOM at the start is dropped."""
    monkeypatch.chdir(tmp_path)
    Path("dup.yaml").write_text("n_mels: 40\ndither: 0.0\nn_mels: 80\n")
    with pytest.raises(ConfigError, match=r"^feat_conf: cannot read .*dup\.yaml:3:1: duplicate key 'n_mels', "
                                          r"first on line 1"):
        load_feat_conf("dup.yaml")
    Path("bom.yaml").write_bytes(b"\xef\xbb\xbfn_mels: 40\n")
    assert load_feat_conf("bom.yaml") == {"n_mels": 40}
