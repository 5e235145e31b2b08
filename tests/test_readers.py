"""speechiter.readers: idx2 parsing, path resolution, array reading, HDF5 cache."""
import multiprocessing
import os

import h5py
import numpy as np
import pytest
import soundfile

from speechiter import readers
from speechiter.errors import DataError
from speechiter.readers import (
    audio_info,
    audio_num_frames,
    data_num_frames,
    read_feat,
    read_idx2,
    read_vector,
    resampled_length,
    resolve_data_path,
    split_chunk_key,
)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def pcm(num, channels=1, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-20000, 20000, size=(num, channels), dtype=np.int16)


# --------------------------------------------------------------------- idx2


def test_read_idx2_values_keep_inner_spaces_and_skip_blank_lines(tmp_path):
    p = write(tmp_path / "idx2text", "a HELLO  WORLD \n\n  \nb\tTAB SEPARATED\r\nc x\n")
    ids, values = read_idx2(p)
    assert ids == ["a", "b", "c"]
    assert values == ["HELLO  WORLD", "TAB SEPARATED", "x"]


def test_read_idx2_without_final_newline(tmp_path):
    assert read_idx2(write(tmp_path / "f", "a 1\nb 2"), int) == (["a", "b"], [1, 2])


def test_read_idx2_int_accepts_float_strings(tmp_path):
    p = write(tmp_path / "idx2wav_len", "a 16000\nb 123.0\nc 99.6\nd 1e3\n")
    assert read_idx2(p, int) == (["a", "b", "c", "d"], [16000, 123, 100, 1000])


def test_read_idx2_other_value_type(tmp_path):
    assert read_idx2(write(tmp_path / "f", "a 0.5\n"), float) == (["a"], [0.5])


def test_read_idx2_empty_file(tmp_path):
    assert read_idx2(write(tmp_path / "f", "\n\n"), int) == ([], [])


def test_read_idx2_line_without_value(tmp_path):
    p = write(tmp_path / "idx2wav", "a x.wav\n\nlonely   \nc y.wav\n")
    with pytest.raises(DataError, match=rf"^{p}:3: id 'lonely' has no value"):
        read_idx2(p)


def test_read_idx2_duplicate_id(tmp_path):
    p = write(tmp_path / "idx2wav", "a x.wav\nb y.wav\n\na z.wav\n")
    with pytest.raises(DataError, match=rf"^{p}:4: duplicate id 'a' \(first on line 1\)"):
        read_idx2(p)


@pytest.mark.parametrize("bad", ["12x", "nan", "inf", "-"])
def test_read_idx2_bad_int(tmp_path, bad):
    p = write(tmp_path / "idx2wav_len", f"a 1\nb 2\n\nc {bad}\n")
    with pytest.raises(DataError, match=rf"^{p}:4: value '{bad}' of id 'c' is not a valid int"):
        read_idx2(p, int)


def test_read_idx2_missing_file(tmp_path):
    with pytest.raises(DataError, match=rf"^{tmp_path / 'nope'}: no such idx2 file"):
        read_idx2(tmp_path / "nope")


def test_read_idx2_folder(tmp_path):
    with pytest.raises(DataError, match=rf"^{tmp_path}: is a folder"):
        read_idx2(tmp_path)


def test_read_idx2_not_utf8(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"a \xff\xfe\n")
    with pytest.raises(DataError, match=rf"^{p}: cannot read idx2 file"):
        read_idx2(p)


def test_read_idx2_large_file(tmp_path):
    # Speed is measured by tools/bench.py, not here.
    p = tmp_path / "idx2wav_len"
    p.write_text("".join(f"spk{i % 100:03d}-0001-{i:07d} {16000 + i}\n" for i in range(200_000)))
    ids, values = read_idx2(p, int)
    assert len(ids) == 200_000 and values[-1] == 16000 + 199_999


# --------------------------------------------------------------------- paths


@pytest.mark.parametrize("value, expected", [
    ("wav/a.wav", "/data/train/wav/a.wav"),
    ("../a.flac", "/data/a.flac"),
    ("/abs/a.wav", "/abs/a.wav"),
    ("chunk_000.hdf5:spk1-0001-0001", "/data/train/chunk_000.hdf5:spk1-0001-0001"),
    ("feats/x.H5:grp/key", "/data/train/feats/x.H5:grp/key"),
    ("f.npz:emb", "/data/train/f.npz:emb"),
    ("/abs/c.hdf5:k", "/abs/c.hdf5:k"),
])
def test_resolve_data_path(value, expected):
    assert resolve_data_path(value, "/data/train/idx2wav") == expected


def test_resolve_data_path_relative_idx2():
    assert resolve_data_path("a.wav", "idx2wav") == "a.wav"
    assert resolve_data_path("a.wav", os.path.join("d", "idx2wav")) == os.path.join("d", "a.wav")


def test_split_chunk_key():
    assert split_chunk_key("x/c.hdf5:a:b") == ("x/c.hdf5", "a:b")
    assert split_chunk_key("x/a.wav") == ("x/a.wav", None)
    assert split_chunk_key("x/c.hdf5") == ("x/c.hdf5", None)


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


# --------------------------------------------------------------------- npy / npz


def test_npy_round_trips(tmp_path):
    feat = np.random.default_rng(0).standard_normal((50, 80)).astype(np.float64)
    np.save(tmp_path / "f.npy", feat)
    x = read_feat(str(tmp_path / "f.npy"), sample_rate=16000)  # no resampling of features
    assert x.dtype == np.float32 and x.shape == (50, 80)
    np.testing.assert_array_equal(x, feat.astype(np.float32))
    np.save(tmp_path / "w.npy", np.arange(10, dtype=np.float32))
    assert read_feat(str(tmp_path / "w.npy")).shape == (10, 1)
    assert data_num_frames(str(tmp_path / "f.npy")) == (50, None)


def test_int16_npy_is_pcm(tmp_path):
    data = pcm(100)
    np.save(tmp_path / "w.npy", data[:, 0])
    np.testing.assert_array_equal(read_feat(str(tmp_path / "w.npy")), data.astype(np.float32) / 32768)


def test_npy_bad_rank(tmp_path):
    np.save(tmp_path / "f.npy", np.zeros((2, 3, 4)))
    with pytest.raises(DataError, match=r"f\.npy: expected a 1-D or 2-D array, got shape \(2, 3, 4\)"):
        read_feat(str(tmp_path / "f.npy"))


def test_npy_not_numeric(tmp_path):
    np.save(tmp_path / "f.npy", np.array(["a", "b"]))
    with pytest.raises(DataError, match=r"f\.npy: expected a numeric array"):
        read_feat(str(tmp_path / "f.npy"))


def test_corrupt_npy(tmp_path):
    p = tmp_path / "f.npy"
    p.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DataError, match=rf"^{p}: cannot read npy"):
        read_feat(str(p))
    with pytest.raises(DataError, match=rf"^{p}: cannot read npy"):
        data_num_frames(str(p))


def test_npz_round_trips(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.savez(tmp_path / "one.npz", feat=a)
    np.savez(tmp_path / "two.npz", a=a, b=a[:, :1] * 2)
    np.testing.assert_array_equal(read_feat(str(tmp_path / "one.npz")), a)
    np.testing.assert_array_equal(read_feat(f"{tmp_path / 'two.npz'}:b"), a[:, :1] * 2)
    assert data_num_frames(f"{tmp_path / 'two.npz'}:a") == (6, None)


def test_npz_missing_key(tmp_path):
    p = tmp_path / "two.npz"
    np.savez(p, a=np.zeros(3), b=np.zeros(3))
    with pytest.raises(DataError, match=rf"^{p}: npz has no array 'c'"):
        read_feat(f"{p}:c")
    with pytest.raises(DataError, match=rf"^{p}: npz holds 2 arrays"):
        read_feat(str(p))


def test_corrupt_npz(tmp_path):
    p = tmp_path / "f.npz"
    p.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(DataError, match=rf"^{p}: cannot read npz"):
        read_feat(str(p))


# --------------------------------------------------------------------- HDF5


def make_h5(path, entries, sample_rate=None):
    with h5py.File(path, "w") as f:
        for key, data in entries.items():
            dataset = f.create_dataset(key, data=data)
            if sample_rate is not None:
                dataset.attrs["sample_rate"] = sample_rate
    return path


def test_hdf5_int16_reads_like_its_wav(tmp_path):
    data = pcm(5000)
    soundfile.write(tmp_path / "a.wav", data, 16000, subtype="PCM_16")
    p = make_h5(tmp_path / "c.hdf5", {"utt1": data[:, 0], "group/feat": np.ones((4, 3))}, sample_rate=16000)
    np.testing.assert_array_equal(read_feat(f"{p}:utt1", sample_rate=16000), read_feat(str(tmp_path / "a.wav")))
    feat = read_feat(f"{p}:group/feat", sample_rate=8000)  # resampled: it has a sample_rate attribute
    assert feat.shape == (2, 3)
    assert data_num_frames(f"{p}:utt1") == (5000, 16000)


def test_hdf5_without_sample_rate_is_not_resampled(tmp_path):
    p = make_h5(tmp_path / "c.h5", {"f": np.ones((10, 2), np.float32)})
    assert read_feat(f"{p}:f", sample_rate=8000).shape == (10, 2)
    assert data_num_frames(f"{p}:f") == (10, None)


def test_hdf5_resampled_with_its_sample_rate_attribute(tmp_path):
    p = make_h5(tmp_path / "c.hdf5", {"u": pcm(22050)[:, 0]}, sample_rate=22050)
    assert read_feat(f"{p}:u", sample_rate=16000).shape == (16000, 1)
    assert read_feat(f"{p}:u").shape == (22050, 1)


def test_hdf5_missing_key(tmp_path):
    p = make_h5(tmp_path / "c.hdf5", {"a": np.zeros(3)})
    with pytest.raises(DataError, match=rf"^{p}: HDF5 file has no dataset 'b'"):
        read_feat(f"{p}:b")


def test_hdf5_group_key(tmp_path):
    p = make_h5(tmp_path / "c.hdf5", {"g/a": np.zeros(3)})
    with pytest.raises(DataError, match=rf"^{p}: 'g' is an HDF5 group"):
        read_feat(f"{p}:g")


def test_hdf5_without_key(tmp_path):
    p = make_h5(tmp_path / "c.hdf5", {"a": np.zeros(3)})
    with pytest.raises(DataError, match=rf"^{p}: an HDF5 entry needs a key"):
        read_feat(str(p))
    with pytest.raises(DataError, match="needs a key"):
        data_num_frames(str(p))


def test_hdf5_empty_dataset(tmp_path):
    p = make_h5(tmp_path / "c.hdf5", {"a": np.zeros((0,), np.int16)})
    with pytest.raises(DataError, match=rf"^{p}:a: dataset has no frames"):
        read_feat(f"{p}:a")


def test_corrupt_hdf5(tmp_path):
    p = tmp_path / "c.hdf5"
    p.write_bytes(b"not hdf5 at all")
    with pytest.raises(DataError, match=rf"^{p}: cannot open HDF5 file"):
        read_feat(f"{p}:a")


def test_hdf5_handles_are_cached_and_closable(tmp_path):
    p = str(make_h5(tmp_path / "c.hdf5", {"a": np.zeros(3)}))
    read_feat(f"{p}:a")
    first = readers._h5_file(p)
    assert readers._h5_file(p) is first
    readers.close_h5_files()
    assert not first.id.valid
    assert readers._h5_file(p) is not first
    readers.close_h5_files()


def _child_reads_h5(path, inherited_id, queue):
    try:
        handle = readers._h5_file(path)
        x = read_feat(f"{path}:a")
        queue.put((id(handle) != inherited_id, float(x.sum())))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", repr(e)))


@pytest.mark.timeout(60)
def test_hdf5_cache_is_per_process_after_fork(tmp_path):
    p = str(make_h5(tmp_path / "c.hdf5", {"a": np.arange(5, dtype=np.float32)}))
    inherited = readers._h5_file(p)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_reads_h5, args=(p, id(inherited), queue))
    child.start()
    try:
        result = queue.get(timeout=30)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert result == (True, 10.0)
    assert child.exitcode == 0
    assert readers._h5_file(p) is inherited  # the parent's handle is untouched
    readers.close_h5_files()


def test_hdf5_cache_notices_a_new_pid_without_the_fork_hook(tmp_path, monkeypatch):
    p = str(make_h5(tmp_path / "c.hdf5", {"a": np.zeros(3)}))
    first = readers._h5_file(p)
    monkeypatch.setattr(readers, "_h5_pid", -1)  # as if forked by a path that skipped at-fork hooks
    assert readers._h5_file(p) is not first
    assert first.id.valid  # parked, not closed
    readers.close_h5_files()


# --------------------------------------------------------------------- vectors


def test_read_vector(tmp_path):
    v = np.arange(4, dtype=np.float64)
    np.save(tmp_path / "v.npy", v[None, :])
    np.savez(tmp_path / "v.npz", spk1=v)
    p = make_h5(tmp_path / "v.hdf5", {"spk1": v[:, None]})
    for value in (str(tmp_path / "v.npy"), f"{tmp_path / 'v.npz'}:spk1", f"{p}:spk1"):
        out = read_vector(value)
        assert out.dtype == np.float32 and out.shape == (4,)
        np.testing.assert_array_equal(out, v)


def test_read_vector_errors(tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((2, 3)))
    with pytest.raises(DataError, match=r"m\.npy: expected a vector, got shape \(2, 3\)"):
        read_vector(str(tmp_path / "m.npy"))
    np.save(tmp_path / "s.npy", np.array(["x"]))
    with pytest.raises(DataError, match="expected a numeric vector"):
        read_vector(str(tmp_path / "s.npy"))
    soundfile.write(tmp_path / "a.wav", pcm(10), 16000)
    with pytest.raises(DataError, match=r"a\.wav: a vector must be"):
        read_vector(str(tmp_path / "a.wav"))
    with pytest.raises(DataError, match="no such file"):
        read_vector(str(tmp_path / "none.npy"))
    p = make_h5(tmp_path / "v.hdf5", {"a": np.zeros(3)})
    with pytest.raises(DataError, match="needs a key"):
        read_vector(str(p))
    with pytest.raises(DataError, match="no dataset 'b'"):
        read_vector(f"{p}:b")


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
