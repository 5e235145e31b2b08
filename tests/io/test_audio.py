"""speechiter.io: decoding, resampling, header lengths."""
import numpy as np
import pytest
import soundfile

from speechiter.io.audio import audio_info, audio_num_frames
from speechiter.io.read import data_num_frames, read_feat
from speechiter.io.samples import resampled_length
from speechiter.errors import DataError


def pcm(num, channels=1, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-20000, 20000, size=(num, channels), dtype=np.int16)


# --------------------------------------------------------------------- audio


def test_wav_and_flac_of_the_same_pcm_read_identically(tmp_path):
    data = pcm(12345, channels=2)
    soundfile.write(tmp_path / "a.wav", data, 16000, subtype="PCM_16")
    soundfile.write(tmp_path / "a.flac", data, 16000, subtype="PCM_16")
    a = read_feat(str(tmp_path / "a.wav"))
    b = read_feat(str(tmp_path / "a.flac"))
    assert a.dtype == np.float32 and a.shape == (12345, 2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, data.astype(np.float32) / 32768)


def test_ogg_reads(tmp_path):
    t = np.arange(16000) / 16000
    soundfile.write(tmp_path / "a.ogg", 0.3 * np.sin(2 * np.pi * 440 * t), 16000, format="OGG")
    x = read_feat(str(tmp_path / "a.ogg"))
    assert x.dtype == np.float32 and x.shape[1] == 1 and abs(x.shape[0] - 16000) < 1000


@pytest.mark.parametrize("sr_in", [22050, 44100, 48000, 8000, 16000])
@pytest.mark.parametrize("num", [1001, 22050 * 2 + 7])
def test_resampling_length(tmp_path, sr_in, num):
    soundfile.write(tmp_path / "a.wav", pcm(num), sr_in, subtype="PCM_16")
    x = read_feat(str(tmp_path / "a.wav"), sample_rate=16000)
    assert x.dtype == np.float32 and x.shape[1] == 1
    assert abs(x.shape[0] - round(num * 16000 / sr_in)) <= 1
    assert x.shape[0] == resampled_length(num, sr_in, 16000)


def test_resampling_keeps_a_tone(tmp_path):
    t = np.arange(22050) / 22050
    soundfile.write(tmp_path / "a.wav", 0.5 * np.sin(2 * np.pi * 440 * t), 22050, subtype="FLOAT")
    x = read_feat(str(tmp_path / "a.wav"), sample_rate=16000)[:, 0]
    expected = 0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
    assert np.abs(x[200:-200] - expected[200:-200]).max() < 1e-3


def test_resampled_length_rounds_halves_up():
    assert resampled_length(1, 2, 1) == 1
    assert resampled_length(3, 2, 1) == 2
    assert resampled_length(66167, 22050, 16000) == round(66167 * 16000 / 22050)


def test_audio_num_frames_from_header(tmp_path):
    soundfile.write(tmp_path / "a.flac", pcm(777), 22050, subtype="PCM_16")
    assert audio_num_frames(tmp_path / "a.flac") == 777
    assert audio_info(str(tmp_path / "a.flac")) == (777, 22050)
    assert data_num_frames(str(tmp_path / "a.flac")) == (777, 22050)


def test_missing_audio(tmp_path):
    with pytest.raises(DataError, match=rf"^{tmp_path / 'a.wav'}: no such file"):
        read_feat(str(tmp_path / "a.wav"))
    with pytest.raises(DataError, match=rf"^{tmp_path / 'a.wav'}: no such file"):
        audio_num_frames(tmp_path / "a.wav")


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(DataError, match=rf"^{tmp_path}: is a folder"):
        read_feat(str(tmp_path))


def test_corrupt_wav(tmp_path):
    p = tmp_path / "bad.wav"
    p.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunkjunkjunk")
    with pytest.raises(DataError, match=rf"^{p}: cannot read audio"):
        read_feat(str(p))
    with pytest.raises(DataError, match=rf"^{p}: cannot read audio header"):
        audio_num_frames(p)


def test_empty_wav(tmp_path):
    p = tmp_path / "empty.wav"
    soundfile.write(p, np.zeros((0, 1), np.int16), 16000, subtype="PCM_16")
    with pytest.raises(DataError, match=rf"^{p}: audio has no frames"):
        read_feat(str(p))


@pytest.mark.parametrize("fmt, subtype", [("wav", "PCM_16"), ("flac", "PCM_16"), ("wav", "PCM_24"), ("wav", "FLOAT")])
def test_read_feat_matches_soundfile_float32_bit_for_bit(tmp_path, fmt, subtype):
    # PCM_16 takes a faster int16 path; the samples must be the same as libsndfile's float32 read.
    x = np.concatenate([np.array([-32768, 32767, 0, 1, -1], dtype=np.int16),
                        np.random.default_rng(3).integers(-32768, 32768, 5000).astype(np.int16)])
    path = tmp_path / f"a.{fmt}"
    soundfile.write(path, np.stack([x, x[::-1]], axis=1), 16000, subtype=subtype)
    expected, _ = soundfile.read(path, dtype="float32", always_2d=True)
    got = read_feat(str(path))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
