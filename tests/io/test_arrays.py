"""speechiter.io.arrays: npy / npz / HDF5 entries (read through read_feat too), the HDF5 handle cache, vectors."""
import multiprocessing

import h5py
import numpy as np
import pytest
import soundfile

from speechiter.io import arrays
from speechiter.io.arrays import read_vector
from speechiter.io.read import data_num_frames, read_feat
from speechiter.errors import DataError
from tests.processes import FORKS_ON_PURPOSE

from .test_audio import pcm


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
    first = arrays._h5_file(p)
    assert arrays._h5_file(p) is first
    arrays.close_h5_files()
    assert not first.id.valid
    assert arrays._h5_file(p) is not first
    arrays.close_h5_files()


def _child_reads_h5(path, inherited_id, queue):
    try:
        handle = arrays._h5_file(path)
        x = read_feat(f"{path}:a")
        queue.put((id(handle) != inherited_id, float(x.sum())))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", repr(e)))


@pytest.mark.slow  # forks
@FORKS_ON_PURPOSE
@pytest.mark.timeout(60)
def test_hdf5_cache_is_per_process_after_fork(tmp_path):
    p = str(make_h5(tmp_path / "c.hdf5", {"a": np.arange(5, dtype=np.float32)}))
    inherited = arrays._h5_file(p)
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
    assert arrays._h5_file(p) is inherited  # the parent's handle is untouched
    arrays.close_h5_files()


def test_hdf5_cache_notices_a_new_pid_without_the_fork_hook(tmp_path, monkeypatch):
    p = str(make_h5(tmp_path / "c.hdf5", {"a": np.zeros(3)}))
    first = arrays._h5_file(p)
    monkeypatch.setattr(arrays, "_h5_pid", -1)  # as if forked by a path that skipped at-fork hooks
    assert arrays._h5_file(p) is not first
    assert first.id.valid  # parked, not closed
    arrays.close_h5_files()


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
