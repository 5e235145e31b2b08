"""Arrays stored in files: ``.npy``, ``.npz[:key]`` and ``.hdf5:key`` / ``.h5:key``.

Errors are :class:`~speechiter.errors.DataError` naming the file (and key).

# NOTE [ HDF5 handles and fork ]
Opening an HDF5 file for every utterance costs more than reading it, so open
``h5py.File`` objects are cached per process, keyed by path. A handle inherited
across ``fork`` must not be used in the child (HDF5 library state is not
fork-safe), so the cache belongs to one pid: a child process that forks from a
parent with open handles starts with an empty cache and opens its own. The
inherited handles are parked, not closed, so that nothing in the child touches
the parent's HDF5 state. h5py serialises calls with its own global lock, so
threads may share the handles.
"""
from __future__ import annotations

import os
import threading
import zipfile
from typing import Optional, Tuple

import numpy as np

from speechiter.errors import DataError
from speechiter.io.samples import sample_range
from speechiter.io.source import split_chunk_key
from speechiter.io.storage import call, is_url, redact
from speechiter.io.url_file import open_url
from speechiter.io.files import check_data_file

__all__ = ["is_array_file", "is_hdf5_file", "read_array", "array_num_frames", "read_vector", "close_h5_files"]

_H5_SUFFIXES = (".hdf5", ".h5")


def _suffix(file: str) -> str:
    return os.path.splitext(file)[1].lower()


def is_hdf5_file(file: str) -> bool:
    return _suffix(file) in _H5_SUFFIXES


def is_array_file(file: str) -> bool:
    return _suffix(file) in (*_H5_SUFFIXES, ".npz", ".npy")


def read_array(file: str, key: Optional[str], time_range=None) -> Tuple[np.ndarray, Optional[int]]:
    """``(array, stored sample rate or None)`` of a .hdf5/.h5 (with key), .npz
    or .npy file (a path or URL). ``time_range`` (see NOTE [ Segment values ] in
    speechiter/io/source.py) reads only its rows of an HDF5 dataset with a
    ``sample_rate`` attribute; npy/npz store no rate, so they take none."""
    suffix = _suffix(file)
    if suffix in _H5_SUFFIXES:
        return _read_h5_dataset(file, _h5_key(file, key), time_range)
    if time_range is not None:
        raise DataError(f"{redact(file)}: a #t= time range needs a sample rate, and npy/npz files store none "
                        f"(pack waveforms with tools/pack_hdf5.py)")
    if suffix == ".npz":
        return _load_npz_entry(file, key), None
    if key is not None:  # pragma: no cover - split_chunk_key only gives keys for chunk suffixes
        raise DataError(f"{file}:{key}: keys are only supported for .hdf5/.h5/.npz files")
    return _load_npy(file), None


def array_num_frames(file: str, key: Optional[str]) -> Tuple[int, Optional[int]]:
    """``(num_frames, stored sample rate or None)`` of an array file, without
    reading it: HDF5 dataset shapes (rate from the dataset's ``sample_rate``
    attribute), npy headers (memory-mapped) and npz arrays."""
    suffix = _suffix(file)
    if suffix in _H5_SUFFIXES:
        dataset = _h5_dataset(file, _h5_key(file, key))
        rate = dataset.attrs.get("sample_rate")
        return int(dataset.shape[0]) if dataset.shape else 1, None if rate is None else int(rate)
    if suffix == ".npz":
        return int(np.shape(_load_npz_entry(file, key))[0]), None
    return int(_load_npy(file, mmap_mode="r").shape[0]), None


def read_vector(value: str) -> np.ndarray:
    """Read a speaker embedding (``spk_feat``) as a 1-D float32 array.

    ``value`` is a ``.npy`` file, ``file.npz[:key]`` or ``file.hdf5:key``. An
    array of shape (D,), (1, D) or (D, 1) is accepted.
    """
    file, key = split_chunk_key(value)
    check_data_file(file)
    if not is_array_file(file):
        raise DataError(f"{file}: a vector must be a .npy, .npz or .hdf5:key entry")
    array, _ = read_array(file, key)
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise DataError(f"{value}: expected a numeric vector, got dtype {array.dtype}")
    if sum(1 for n in array.shape if n != 1) > 1:
        raise DataError(f"{value}: expected a vector, got shape {array.shape}")
    return array.reshape(-1).astype(np.float32)


def _h5_key(file: str, key: Optional[str]) -> str:
    if key is None:
        raise DataError(f"{file}: an HDF5 entry needs a key, as '{file}:<key>'")
    return key


def _load_npy(file: str, mmap_mode: Optional[str] = None) -> np.ndarray:
    if is_url(file):
        return call(file, lambda: _load_remote(file, lambda f: np.load(f, allow_pickle=False)))
    try:
        return np.load(file, mmap_mode=mmap_mode, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{file}: cannot read npy ({e})") from None


def _load_remote(url: str, load):
    f = open_url(url)
    try:
        try:
            return load(f)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            f.check()
            raise DataError(f"{redact(url)}: cannot read array file ({e})") from None
    finally:
        f.close()


def _load_npz_entry(file: str, key: Optional[str]) -> np.ndarray:
    if is_url(file):  # the zip directory and the one member: ranged reads
        return call(file, lambda: _load_remote(file, lambda f: _npz_entry(f, file, key)))
    try:
        return _npz_entry(file, file, key)
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{file}: cannot read npz ({e})") from None


def _npz_entry(source, file: str, key: Optional[str]) -> np.ndarray:
    file = redact(file)
    with np.load(source, allow_pickle=False) as archive:
        names = archive.files
        if key is None:
            if len(names) != 1:
                raise DataError(f"{file}: npz holds {len(names)} arrays {names[:5]}, name one as '{file}:<key>'")
            key = names[0]
        elif key not in names:
            raise DataError(f"{file}: npz has no array {key!r} (it has {len(names)}: {names[:5]})")
        return archive[key]


# --------------------------------------------------------------------- HDF5
# See NOTE [ HDF5 handles and fork ] at the top of this module.

_h5_files = {}
_h5_pid = os.getpid()
_h5_lock = threading.Lock()
_h5_inherited = []  # handles from a parent process: kept alive, never used


def _forget_inherited_h5():
    global _h5_pid, _h5_lock
    _h5_lock = threading.Lock()  # the parent's lock may have been held at fork
    if _h5_files:
        _h5_inherited.append(dict(_h5_files))
        _h5_files.clear()
    _h5_pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_h5)


def _h5_file(file: str):
    """The open h5py.File for ``file`` in this process (opened on first use)."""
    if os.getpid() != _h5_pid:  # forked without the at-fork hook
        _forget_inherited_h5()
    handle = _h5_files.get(file)
    if handle is not None:
        return handle
    import h5py

    with _h5_lock:
        handle = _h5_files.get(file)
        if handle is None:
            if is_url(file):  # pages of the file, read as HDF5 asks for them
                handle = call(file, lambda: h5py.File(open_url(file, block_size=1 << 16), "r"), "open HDF5 file")
            else:
                try:
                    handle = h5py.File(file, "r")
                except OSError as e:
                    raise DataError(f"{file}: cannot open HDF5 file ({e})") from None
            _h5_files[file] = handle
    return handle


def _h5_dataset(file: str, key: str):
    import h5py

    handle = _h5_file(file)
    try:
        dataset = handle[key]
    except KeyError:
        raise DataError(f"{file}: HDF5 file has no dataset {key!r}") from None
    if not isinstance(dataset, h5py.Dataset):
        raise DataError(f"{file}: {key!r} is an HDF5 group, not a dataset")
    return dataset


def _read_h5_dataset(file: str, key: str, time_range=None) -> Tuple[np.ndarray, Optional[int]]:
    dataset = _h5_dataset(file, key)
    rate = dataset.attrs.get("sample_rate")
    rate = None if rate is None else int(rate)
    where = f"{redact(file)}:{key}"
    rows = slice(None)
    if time_range is not None:  # See NOTE [ Segment values ] in speechiter/io/source.py
        if rate is None or not dataset.shape:
            raise DataError(f"{where}: a #t= time range needs the dataset's sample_rate attribute")
        first, count = sample_range(time_range.start, time_range.end, int(dataset.shape[0]), rate, where)
        rows = slice(first, first + count)
    if is_url(file):
        return call(file, lambda: dataset[rows] if dataset.shape else dataset[()], "read HDF5 dataset"), rate
    try:
        array = dataset[rows] if dataset.shape else dataset[()]
    except OSError as e:
        raise DataError(f"{where}: cannot read HDF5 dataset ({e})") from None
    return array, rate


def close_h5_files() -> None:
    """Close this process's cached HDF5 handles (they reopen on next use)."""
    if os.getpid() != _h5_pid:
        _forget_inherited_h5()
        return
    with _h5_lock:
        handles = list(_h5_files.values())
        _h5_files.clear()
    for handle in handles:
        handle.close()
