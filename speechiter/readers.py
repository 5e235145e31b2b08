"""Turning paths into arrays: idx2 files and the data files they point to.

An idx2 file maps utterance ids to values, one ``<id> <value>`` per line
(SpeeChain convention: ``idx2wav``, ``idx2wav_len``, ``idx2text``, ...).
A data value is a file path, relative to the idx2 file's folder or absolute,
optionally naming an entry of a chunk file: ``chunk_000.hdf5:<key>``,
``feats.npz:<key>``.

Errors about the input are :class:`~speechiter.errors.DataError` and name the
file (and line). Callers add the utterance id and the idx2 file they came from.

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

import contextlib
import gc
import math
import os
import re
import threading
import zipfile

import numpy as np
import soundfile

from speechiter.errors import DataError
from speechiter.flac import read_flac

__all__ = [
    "RESAMPLE_QUALITY",
    "read_idx2",
    "resolve_data_path",
    "split_chunk_key",
    "read_feat",
    "read_vector",
    "audio_num_frames",
    "audio_info",
    "data_num_frames",
    "resampled_length",
    "resample",
    "close_h5_files",
]

#: soxr quality preset used whenever audio is resampled (sample_rate and
#: speed perturbation). "HQ" (20-bit precision, flat passband to ~91% of
#: Nyquist) resamples 22.05 kHz -> 16 kHz at ~0.13 ms of CPU per second of
#: audio (~7500x real time on one core), negligible next to decoding FLAC.
#: "VHQ" costs ~35% more; "MQ"/"LQ" save <10%. Measured numbers: handbook.md,
#: "Speech front end".
RESAMPLE_QUALITY = "HQ"

_CHUNK_SUFFIXES = (".hdf5", ".h5", ".npz")
_CHUNK_RE = re.compile(r"^(.*?\.(?:hdf5|h5|npz)):(.+)$", re.IGNORECASE)
_H5_SUFFIXES = (".hdf5", ".h5")
# Integer PCM is scaled to [-1, 1) like soundfile does for wav, so a waveform
# stored as int16 in HDF5/npy reads the same as the wav it came from.
_PCM_SCALE = {np.dtype(np.int16): 1.0 / 32768.0, np.dtype(np.int32): 1.0 / 2147483648.0}


# --------------------------------------------------------------------- idx2


def read_idx2(path, value_type=str):
    """Read an idx2 file into ``(ids, values)`` in file order.

    Each non-blank line is ``<id> <value>``: the value is the rest of the line
    after the first run of whitespace, stripped (it may contain spaces, as a
    transcript does). ``value_type`` converts each value; ``int`` also accepts
    float strings such as ``"123.0"`` and rounds them.

    Raises DataError naming the file (and line) for a missing or unreadable
    file, a line without a value, a duplicate id, or a value that
    ``value_type`` rejects.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such idx2 file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected an idx2 file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read idx2 file ({e})") from None

    with _gc_paused():
        # split("\n"), not splitlines(): the latter also splits on \x0b,
        # \x1c, \u2028 ..., which may appear inside a transcript.
        lines = text.split("\n")
        if lines and not lines[-1]:
            lines.pop()  # the final newline
        pairs = [line.split(None, 1) for line in lines]
        del lines
        if not all(len(p) == 2 for p in pairs):
            for lineno, parts in enumerate(pairs, 1):
                if len(parts) == 1:
                    raise DataError(f"{path}:{lineno}: id {parts[0]!r} has no value (expected '<id> <value>')")
            pairs = [p for p in pairs if p]  # blank lines
        ids = [p[0] for p in pairs]
        values = [p[1].rstrip() for p in pairs]
        del pairs
        if len(set(ids)) != len(ids):
            _raise_duplicate(path, text)
        if value_type is not str:
            convert = _int_value if value_type is int else value_type
            try:
                values = [convert(v) for v in values]
            except (ValueError, TypeError, OverflowError):
                _raise_bad_value(path, text, convert, value_type)
    return ids, values


@contextlib.contextmanager
def _gc_paused():
    # Building millions of small lists triggers the cyclic GC over and over
    # (2-4x the parse time); none of them can form a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _int_value(text):
    try:
        return int(text)
    except ValueError:
        value = float(text)  # ValueError for non-numbers
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {text!r}") from None
        return round(value)


def _numbered_entries(text):
    for lineno, line in enumerate(text.split("\n"), 1):
        parts = line.split(None, 1)
        if len(parts) == 2:
            yield lineno, parts[0], parts[1].rstrip()


def _raise_duplicate(path, text):
    first_line = {}
    for lineno, utt_id, _ in _numbered_entries(text):
        if utt_id in first_line:
            raise DataError(f"{path}:{lineno}: duplicate id {utt_id!r} (first on line {first_line[utt_id]})")
        first_line[utt_id] = lineno
    raise AssertionError("unreachable: ids were not unique")  # pragma: no cover


def _raise_bad_value(path, text, convert, value_type):
    name = getattr(value_type, "__name__", repr(value_type))
    for lineno, utt_id, value in _numbered_entries(text):
        try:
            convert(value)
        except (ValueError, TypeError, OverflowError):
            raise DataError(f"{path}:{lineno}: value {value!r} of id {utt_id!r} is not a valid {name}") from None
    raise AssertionError("unreachable: every value converted")  # pragma: no cover


# --------------------------------------------------------------------- paths


def split_chunk_key(value):
    """Split ``"file.hdf5:key"`` / ``"file.npz:key"`` into ``(file, key)``;
    any other value gives ``(value, None)``."""
    value = os.fspath(value)
    match = _CHUNK_RE.match(value)
    if match is None:
        return value, None
    return match.group(1), match.group(2)


def resolve_data_path(value, idx2_path):
    """Resolve a data value from an idx2 file against that file's folder.

    Relative file paths are joined to ``dirname(idx2_path)``; for chunk
    entries (``file.hdf5:key``, ``file.npz:key``) only the file part is
    resolved and the key is kept. Absolute paths are returned unchanged.
    """
    file, key = split_chunk_key(value)
    if os.path.isabs(file):
        return os.fspath(value)
    file = os.path.normpath(os.path.join(os.path.dirname(os.fspath(idx2_path)), file))
    return file if key is None else f"{file}:{key}"


# --------------------------------------------------------------------- arrays


def resampled_length(num_frames, sr_in, sr_out):
    """``round(num_frames * sr_out / sr_in)`` (halves round up), the length
    :func:`read_feat` returns after resampling, exactly."""
    num_frames, sr_in, sr_out = int(num_frames), int(sr_in), int(sr_out)
    return (2 * num_frames * sr_out + sr_in) // (2 * sr_in)


def resample(x, sr_in, sr_out):
    """Resample (T, C) float32 from sr_in to sr_out with soxr; the output has
    exactly resampled_length(T, sr_in, sr_out) frames. Only the ratio of the
    two (integer) rates matters, so speed perturbation passes a fraction."""
    import soxr

    target = resampled_length(x.shape[0], sr_in, sr_out)
    y = soxr.resample(np.ascontiguousarray(x), sr_in, sr_out, quality=RESAMPLE_QUALITY)
    y = np.asarray(y, dtype=np.float32)
    if y.ndim == 1:
        y = y[:, None]
    # soxr gives round(T * out / in) up to the rounding of halves; fix the
    # last sample so the length is the documented one.
    if y.shape[0] > target:
        y = y[:target]
    elif y.shape[0] < target:
        if y.shape[0] == 0:
            y = np.zeros((target, x.shape[1]), dtype=np.float32)
        else:
            y = np.concatenate([y, np.repeat(y[-1:], target - y.shape[0], axis=0)])
    return y


def _to_float32_2d(array, where):
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise DataError(f"{where}: expected a numeric array, got dtype {array.dtype}")
    scale = _PCM_SCALE.get(array.dtype)
    if array.ndim == 1:
        array = array[:, None]
    elif array.ndim != 2:
        raise DataError(f"{where}: expected a 1-D or 2-D array, got shape {array.shape}")
    out = array.astype(np.float32)
    if scale is not None:
        out *= np.float32(scale)
    return out


def _check_file(file):
    if not os.path.exists(file):
        raise DataError(f"{file}: no such file")
    if os.path.isdir(file):
        raise DataError(f"{file}: is a folder, expected a data file")


def _read_audio(file, sample_rate):
    flac = read_flac(file) if file.lower().endswith(".flac") else None
    if flac is not None:
        x, sr = flac
    else:
        x, sr = _read_soundfile(file)
    if x.shape[0] == 0:
        raise DataError(f"{file}: audio has no frames")
    if sample_rate is not None and int(sr) != int(sample_rate):
        x = resample(x, sr, sample_rate)
    return x


def _read_soundfile(file):
    try:
        with soundfile.SoundFile(file) as f:
            sr = f.samplerate
            if f.subtype == "PCM_16":
                # libsndfile's own int16 -> float32 (x / 32768) is 4x slower than numpy's; same bits.
                x = f.read(dtype="int16", always_2d=True).astype(np.float32)
                x *= np.float32(1 / 32768)
            else:
                x = f.read(dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise DataError(f"{file}: cannot read audio ({e})") from None
    return x, sr


def _load_npy(file):
    try:
        return np.load(file, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{file}: cannot read npy ({e})") from None


def _load_npz_entry(file, key):
    try:
        with np.load(file, allow_pickle=False) as archive:
            names = archive.files
            if key is None:
                if len(names) != 1:
                    raise DataError(
                        f"{file}: npz holds {len(names)} arrays {names[:5]}, name one as '{file}:<key>'")
                key = names[0]
            elif key not in names:
                raise DataError(f"{file}: npz has no array {key!r} (it has {len(names)}: {names[:5]})")
            return archive[key]
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{file}: cannot read npz ({e})") from None


def read_feat(value, sample_rate=None):
    """Read one data file into a float32 array of shape (T, C).

    ``value`` is a resolved path (see :func:`resolve_data_path`):

    - audio (wav, flac, ogg, anything libsndfile reads; FLAC with dr_flac,
      see :mod:`speechiter.flac`): decoded to float32 in [-1, 1); if
      ``sample_rate`` is given and the file has another rate it is resampled
      with soxr at :data:`RESAMPLE_QUALITY` (~0.15 ms of CPU per second of
      audio) to exactly ``resampled_length(T, sr, sample_rate)`` frames;
    - ``.npy``: a 2-D array is kept, a 1-D one becomes (T, 1);
    - ``.npz``: its single array, or ``file.npz:key``;
    - ``file.hdf5:key`` / ``file.h5:key``: the dataset ``key``. If the dataset
      has a ``sample_rate`` attribute and ``sample_rate`` is given, it is
      resampled like audio.

    ``sample_rate`` does not apply to npy/npz (features, or waveforms already
    at the right rate). int16/int32 arrays are taken as PCM and scaled to
    [-1, 1) like a wav, so an int16 waveform stored in HDF5 reads exactly like
    its wav.

    Raises DataError naming the file for a missing or unreadable file, audio
    with no frames, or a missing npz/HDF5 key.
    """
    file, key = split_chunk_key(value)
    _check_file(file)
    if not _is_array_file(file):
        return _read_audio(file, sample_rate)
    array, stored_rate = _read_array(file, key)
    x = _to_float32_2d(array, value)
    if os.path.splitext(file)[1].lower() in _H5_SUFFIXES:
        if x.shape[0] == 0:
            raise DataError(f"{value}: dataset has no frames")
        if sample_rate is not None and stored_rate is not None and int(stored_rate) != int(sample_rate):
            x = resample(x, stored_rate, sample_rate)
    return x


def _is_array_file(file: str) -> bool:
    return os.path.splitext(file)[1].lower() in (*_H5_SUFFIXES, ".npz", ".npy")


def _read_array(file: str, key):
    """``(array, stored sample rate or None)`` of a .hdf5/.h5 (with key), .npz or .npy file."""
    suffix = os.path.splitext(file)[1].lower()
    if suffix in _H5_SUFFIXES:
        if key is None:
            raise DataError(f"{file}: an HDF5 entry needs a key, as '{file}:<key>'")
        return _read_h5_dataset(file, key)
    if suffix == ".npz":
        return _load_npz_entry(file, key), None
    if key is not None:  # pragma: no cover - _CHUNK_RE only matches chunk suffixes
        raise DataError(f"{file}:{key}: keys are only supported for .hdf5/.h5/.npz files")
    return _load_npy(file), None


def read_vector(value):
    """Read a speaker embedding (``spk_feat``) as a 1-D float32 array.

    ``value`` is a ``.npy`` file, ``file.npz[:key]`` or ``file.hdf5:key``. An
    array of shape (D,), (1, D) or (D, 1) is accepted.
    """
    file, key = split_chunk_key(value)
    _check_file(file)
    if not _is_array_file(file):
        raise DataError(f"{file}: a vector must be a .npy, .npz or .hdf5:key entry")
    array, _ = _read_array(file, key)
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise DataError(f"{value}: expected a numeric vector, got dtype {array.dtype}")
    if sum(1 for n in array.shape if n != 1) > 1:
        raise DataError(f"{value}: expected a vector, got shape {array.shape}")
    return array.reshape(-1).astype(np.float32)


# --------------------------------------------------------------------- lengths


def audio_info(path):
    """``(num_frames, sample_rate)`` of an audio file, from its header."""
    path = os.fspath(path)
    _check_file(path)
    try:
        info = soundfile.info(path)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise DataError(f"{path}: cannot read audio header ({e})") from None
    return int(info.frames), int(info.samplerate)


def audio_num_frames(path):
    """Number of frames of an audio file, from its header (no decoding)."""
    return audio_info(path)[0]


def data_num_frames(value):
    """``(num_frames, sample_rate or None)`` of any data value, without
    decoding: audio headers, HDF5 dataset shapes (rate from the dataset's
    ``sample_rate`` attribute), npy headers (memory-mapped) and npz arrays."""
    file, key = split_chunk_key(value)
    _check_file(file)
    suffix = os.path.splitext(file)[1].lower()
    if suffix in _H5_SUFFIXES:
        if key is None:
            raise DataError(f"{file}: an HDF5 entry needs a key, as '{file}:<key>'")
        dataset = _h5_dataset(file, key)
        rate = dataset.attrs.get("sample_rate")
        return int(dataset.shape[0]) if dataset.shape else 1, None if rate is None else int(rate)
    if suffix == ".npz":
        return int(np.shape(_load_npz_entry(file, key))[0]), None
    if suffix == ".npy":
        try:
            array = np.load(file, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"{file}: cannot read npy ({e})") from None
        return int(array.shape[0]), None
    return audio_info(file)


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


def _h5_file(file):
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
            try:
                handle = h5py.File(file, "r")
            except OSError as e:
                raise DataError(f"{file}: cannot open HDF5 file ({e})") from None
            _h5_files[file] = handle
    return handle


def _h5_dataset(file, key):
    import h5py

    handle = _h5_file(file)
    try:
        dataset = handle[key]
    except KeyError:
        raise DataError(f"{file}: HDF5 file has no dataset {key!r}") from None
    if not isinstance(dataset, h5py.Dataset):
        raise DataError(f"{file}: {key!r} is an HDF5 group, not a dataset")
    return dataset


def _read_h5_dataset(file, key):
    dataset = _h5_dataset(file, key)
    try:
        array = dataset[()]
    except OSError as e:
        raise DataError(f"{file}:{key}: cannot read HDF5 dataset ({e})") from None
    rate = dataset.attrs.get("sample_rate")
    return array, None if rate is None else int(rate)


def close_h5_files():
    """Close this process's cached HDF5 handles (they reopen on next use)."""
    if os.getpid() != _h5_pid:
        _forget_inherited_h5()
        return
    with _h5_lock:
        handles = list(_h5_files.values())
        _h5_files.clear()
    for handle in handles:
        handle.close()
