"""speechiter.io.flac: dr_flac decoding gives libsndfile's bits, and bad files still raise."""
import numpy as np
import pytest
import soundfile

from speechiter.io import flac
from speechiter.io.read import read_feat
from speechiter.errors import DataError


def write_flac(path, frames=40000, channels=1, rate=16000, subtype="PCM_16", seed=0):
    rng = np.random.default_rng(seed)
    data = rng.uniform(-0.9, 0.9, size=(frames, channels)).astype(np.float32)
    soundfile.write(path, data, rate, subtype=subtype)
    return str(path)


def libsndfile(path):
    return soundfile.read(path, dtype="float32", always_2d=True)[0]


@pytest.mark.parametrize("subtype", ["PCM_S8", "PCM_16", "PCM_24"])
@pytest.mark.parametrize("channels", [1, 2])
def test_dr_flac_gives_the_same_bits_as_libsndfile(tmp_path, subtype, channels):
    path = write_flac(tmp_path / "a.flac", channels=channels, rate=22050, subtype=subtype)
    x, rate = flac.read_flac(path)
    assert rate == 22050
    assert x.dtype == np.float32 and x.shape == (40000, channels)
    np.testing.assert_array_equal(x, libsndfile(path))
    np.testing.assert_array_equal(read_feat(path), libsndfile(path))


def test_resampling_after_dr_flac_matches_resampling_after_libsndfile(tmp_path, monkeypatch):
    path = write_flac(tmp_path / "a.flac", rate=22050)
    fast = read_feat(path, sample_rate=16000)
    monkeypatch.setattr(flac, "_lib", None)
    np.testing.assert_array_equal(fast, read_feat(path, sample_rate=16000))


def test_truncated_flac_is_an_error_naming_the_file(tmp_path):
    path = write_flac(tmp_path / "a.flac")
    data = (tmp_path / "a.flac").read_bytes()
    (tmp_path / "a.flac").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"a\.flac: corrupt or truncated FLAC: decoded \d+ of the 40000"):
        read_feat(path)


def test_a_flipped_bit_in_the_audio_is_an_error_not_silence(tmp_path):
    path = write_flac(tmp_path / "a.flac")
    data = bytearray((tmp_path / "a.flac").read_bytes())
    data[len(data) // 2] ^= 0x10  # fails that frame's CRC
    (tmp_path / "a.flac").write_bytes(bytes(data))
    with pytest.raises(DataError, match="corrupt or truncated FLAC"):
        read_feat(path)


def test_a_file_that_is_not_flac_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "a.flac").write_bytes(b"RIFF" + bytes(100))
    with pytest.raises(DataError, match=r"a\.flac: cannot read audio"):
        read_feat(str(tmp_path / "a.flac"))


@pytest.mark.parametrize("block", [1 << 20, 1000])
def test_a_streamed_flac_without_its_length_in_the_header_is_read_whole(tmp_path, monkeypatch, block):
    monkeypatch.setattr(flac, "_STREAMED_BLOCK", block)
    path = write_flac(tmp_path / "a.flac", frames=5000)
    expected = libsndfile(path)
    data = bytearray((tmp_path / "a.flac").read_bytes())
    # STREAMINFO's 36-bit total sample count: low nibble of byte 21, bytes 22-25.
    data[21] &= 0xF0
    data[22:26] = bytes(4)
    (tmp_path / "a.flac").write_bytes(bytes(data))
    np.testing.assert_array_equal(read_feat(path), expected)


def test_without_miniaudio_flac_is_read_by_libsndfile(tmp_path, monkeypatch):
    path = write_flac(tmp_path / "a.flac", channels=2)
    monkeypatch.setattr(flac, "_lib", None)
    assert flac.read_flac(path) is None
    np.testing.assert_array_equal(read_feat(path), libsndfile(path))
