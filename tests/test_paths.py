"""speechiter.paths: resolving data values against their idx2 file, chunk keys."""
import os

import pytest

from speechiter.paths import resolve_data_path, split_chunk_key


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
