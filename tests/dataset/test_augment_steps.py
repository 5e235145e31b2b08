"""The augmentation steps one by one: noise at its SNR (cropped or looped), reverb aligned on the direct path,
gain, SpecAugment's masks and time warp, and the noise / RIR lists (reading layer, resampling, cache)."""
import pickle

import h5py
import numpy as np
import pytest

from speechiter.dataset.augment.corpus import AudioList
from speechiter.dataset.augment.gain import Gain
from speechiter.dataset.augment.noise import Noise
from speechiter.dataset.augment.reverb import Reverb, convolve_aligned
from speechiter.dataset.augment.spec_augment import SpecAugment, time_warp
from tests.dataset.augment_corpora import noise_waves, rir_waves, write_list
from tests.dataset.test_features import speech_like

RATE = 16000


def speech(seconds=1.0, channels=1):
    wave = speech_like(seconds, RATE)[:, None]
    return np.repeat(wave, channels, axis=1)


def snr_of(clean, noisy):
    noise = noisy - clean
    return 10 * np.log10(np.mean(clean.astype(np.float64) ** 2) / np.mean(noise.astype(np.float64) ** 2))


@pytest.mark.parametrize("seconds", [0.5, 3.0])  # noise longer (cropped) and shorter (looped) than the noise file
def test_noise_is_added_at_the_drawn_snr(tmp_path, seconds):
    step = Noise(str(write_list(tmp_path, "noise", noise_waves(1, seconds=(2.0,)))), snr=[5, 20], where="augment[0]",
                 sample_rate=RATE, frame_samples=400)
    clean = speech(seconds)
    applied = {}
    noisy = step(clean, np.random.default_rng(0), applied)
    assert noisy.shape == clean.shape and noisy.dtype == np.float32
    record = applied["noise"]
    assert record["file"] == "noise0" and 5 <= record["snr"] <= 20
    assert snr_of(clean, noisy) == pytest.approx(record["snr"], abs=1e-3)
    source = noise_waves(1, seconds=(2.0,))[0]
    added = (noisy - clean)[:, 0]
    expected = np.resize(np.roll(source, -record["offset"]), len(added))  # looped from the offset
    scale = np.dot(added, expected) / np.dot(expected, expected)
    assert np.allclose(added, scale * expected, atol=1e-6)


def test_noise_on_every_channel_and_prob_zero_changes_nothing(tmp_path):
    files = str(write_list(tmp_path, "noise", noise_waves(2)))
    clean = speech(0.5, channels=2)
    applied = {}
    noisy = Noise(files, where="w", sample_rate=RATE, frame_samples=400)(clean, np.random.default_rng(1), applied)
    assert np.array_equal(noisy[:, 0] - clean[:, 0], noisy[:, 1] - clean[:, 1])
    applied = {}
    off = Noise(files, prob=0.0, where="w", sample_rate=RATE, frame_samples=400)
    assert off(clean, np.random.default_rng(1), applied) is clean and applied == {}


def test_silent_utterance_stays_silent(tmp_path):
    step = Noise(str(write_list(tmp_path, "noise", noise_waves(1))), where="w", sample_rate=RATE, frame_samples=400)
    silent = np.zeros((800, 1), np.float32)
    assert not step(silent, np.random.default_rng(0), {}).any()


@pytest.mark.parametrize("length, rir_size", [(22400, 4000), (1000, 4000), (20000, 9001), (3000, 2)])
def test_overlap_add_convolution_equals_the_direct_one(length, rir_size):
    rng = np.random.default_rng(length)
    wave = rng.standard_normal((length, 2)).astype(np.float32)
    rir = rng.standard_normal(rir_size).astype(np.float32)
    peak = int(np.argmax(np.abs(rir)))
    expected = np.stack([np.convolve(wave[:, c].astype(np.float64), rir)[peak:peak + length] for c in range(2)], 1)
    out = convolve_aligned(wave, rir)
    assert out.shape == wave.shape and out.dtype == np.float32
    assert np.abs(out - expected).max() < 1e-5 * np.abs(expected).max()


def test_reverb_keeps_the_timing_and_the_power(tmp_path):
    delayed = np.zeros(4000, np.float32)
    delayed[123] = 0.5  # a pure delay: aligned on its direct path, the speech comes out unchanged (after normalize)
    files = str(write_list(tmp_path, "rir", [delayed]))
    clean = speech(0.5)
    applied = {}
    out = Reverb(files, where="w", sample_rate=RATE, frame_samples=400)(clean, np.random.default_rng(0), applied)
    assert applied == {"reverb": {"file": "rir0"}}
    assert np.allclose(out, clean, atol=1e-5)
    rir_files = str(write_list(tmp_path, "rirs", rir_waves(1)))
    out = Reverb(rir_files, where="w", sample_rate=RATE, frame_samples=400)(clean, np.random.default_rng(0), {})
    assert np.mean(out.astype(np.float64) ** 2) == pytest.approx(np.mean(clean.astype(np.float64) ** 2), rel=1e-4)
    raw = Reverb(rir_files, normalize=False, where="w", sample_rate=RATE, frame_samples=400)
    first = raw(clean, np.random.default_rng(0), {})
    assert np.allclose(first, convolve_aligned(clean, rir_waves(1)[0]), atol=1e-6)
    assert len(raw.spectra) == 1 and np.array_equal(raw(clean, np.random.default_rng(0), {}), first)  # cached


def test_gain_scales_by_the_drawn_decibels():
    clean = speech(0.3)
    applied = {}
    out = Gain(db=[-6, 6], where="w", sample_rate=RATE, frame_samples=400)(clean, np.random.default_rng(4), applied)
    assert -6 <= applied["gain"] <= 6
    assert np.allclose(out, clean * 10 ** (applied["gain"] / 20), rtol=1e-6)
    assert np.allclose(Gain(db=3, where="w", sample_rate=RATE, frame_samples=400)(clean, np.random.default_rng(), {}),
                       clean * 10 ** (3 / 20), rtol=1e-6)


def masked_cells(feat, value):
    return feat == value


@pytest.mark.parametrize("time_width, most", [(0.1, 20), (7, 7)])
def test_spec_augment_masks_within_their_widths(time_width, most):
    feat = np.random.default_rng(0).standard_normal((200, 80)).astype(np.float32) + 5
    step = SpecAugment(freq_masks=2, freq_width=27, time_masks=3, time_width=time_width, where="w", n_mels=80)
    for seed in range(20):
        applied = {}
        out = step(feat, np.random.default_rng(seed), applied)
        record = applied["spec_augment"]
        assert len(record["freq"]) == 2 and len(record["time"]) == 3 and "warp" not in record
        expected = feat.copy()
        for start, width in record["freq"]:
            assert 0 <= width <= 27 and start + width <= 80
            expected[:, start:start + width] = feat.mean()
        for start, width in record["time"]:
            assert 0 <= width <= most and start + width <= 200
            expected[start:start + width] = feat.mean()
        assert np.array_equal(out, expected)
    assert feat.min() > -10  # the input is left as it was


def test_spec_augment_zero_fill_prob_and_time_warp():
    feat = np.tile(np.arange(100, dtype=np.float32)[:, None], (1, 40))  # frame t holds t
    applied = {}
    out = SpecAugment(freq_masks=1, time_masks=0, fill="zero", where="w", n_mels=40)(
        feat, np.random.default_rng(2), applied)
    start, width = applied["spec_augment"]["freq"][0]
    assert (out[:, start:start + width] == 0).all()
    applied = {}
    assert SpecAugment(prob=0.0, where="w", n_mels=40)(feat, np.random.default_rng(), applied) is feat
    assert applied == {}
    applied = {}
    warped = SpecAugment(freq_masks=0, time_masks=0, time_warp=10, where="w", n_mels=40)(
        feat, np.random.default_rng(3), applied)
    centre, shift = applied["spec_augment"]["warp"]
    assert 10 <= centre < 90 and -10 <= shift <= 10 and warped.shape == feat.shape
    assert warped[centre + shift, 0] == pytest.approx(centre)  # the centre frame moved by the shift
    assert warped[0, 0] == 0 and warped[-1, 0] == pytest.approx(99)
    assert np.all(np.diff(warped[:, 0]) >= 0)
    assert np.array_equal(time_warp(feat, 50, 0), feat)
    short = np.ones((15, 40), np.float32)  # T <= 2 W: no warp
    applied = {}
    SpecAugment(freq_masks=0, time_masks=0, time_warp=10, where="w", n_mels=40)(short, np.random.default_rng(), applied)
    assert "warp" not in applied["spec_augment"]


def test_lists_read_other_rates_resampled_hdf5_entries_and_time_ranges(tmp_path):
    noise = noise_waves(1, seconds=(1.0,), sample_rate=8000)[0]
    files = AudioList(str(write_list(tmp_path, "n8k", [noise], sample_rate=8000)), "w", "noise", RATE, 400)
    assert files.load(0).shape == (16000,)  # resampled to the dataset's rate, as speech is
    with h5py.File(tmp_path / "noise.hdf5", "w") as f:
        f.create_dataset("a", data=(noise * 32767).astype(np.int16)).attrs["sample_rate"] = 8000
    (tmp_path / "idx2h5").write_text("a noise.hdf5:a\nb noise.hdf5:a#t=0.25,0.75\n")
    files = AudioList(str(tmp_path / "idx2h5"), "w", "noise", RATE, 400)
    assert files.load(0).shape == (16000,) and files.load(1).shape == (8000,)
    assert files.ids == ["a", "b"]


def test_list_cache_is_bounded_per_process_and_not_pickled(tmp_path):
    waves = noise_waves(3, seconds=(1.0,))  # 64 kB each
    files = AudioList(str(write_list(tmp_path, "noise", waves)), "w", "noise", RATE, 400, cache_mb=0.15)
    for index in (0, 1, 2, 0):
        assert np.array_equal(files.load(index), waves[index])
    assert files.cache.nbytes <= 150_000 and files.cache.keys() == [2, 0]
    assert files.load(0) is files.load(0)  # a hit
    assert not files.load(0).flags.writeable
    copy = pickle.loads(pickle.dumps(files))
    assert copy.cache.nbytes == 0 and not len(copy.cache) and np.array_equal(copy.load(1), waves[1])
