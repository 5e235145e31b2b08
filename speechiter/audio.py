"""Waveforms and features in, float32 ``(T, C)`` out: decoding, resampling, header lengths.

:func:`read_feat` reads any data value (see :mod:`speechiter.paths`): audio
files through libsndfile (FLAC through dr_flac, see :mod:`speechiter.flac`),
arrays through :mod:`speechiter.arrays`. :func:`data_num_frames` gives a
value's length from headers alone. Errors are
:class:`~speechiter.errors.DataError` naming the file; callers add the
utterance id and the idx2 file it came from.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np
import soundfile

from speechiter.arrays import array_num_frames, is_array_file, is_hdf5_file, read_array
from speechiter.errors import DataError
from speechiter.flac import read_flac
from speechiter.headers import check_decoded
from speechiter.paths import check_data_file, split_chunk_key
from speechiter.segments import audio_header, read_audio, segment_range, split_segment
from speechiter.storage import is_url, redact

__all__ = ["RESAMPLE_QUALITY", "PCM16_SCALE", "read_feat", "resampled_length", "resample", "audio_info",
           "audio_num_frames", "data_num_frames"]

#: soxr quality preset used whenever audio is resampled (sample_rate and
#: speed perturbation). "HQ" (20-bit precision, flat passband to ~91% of
#: Nyquist) resamples 22.05 kHz -> 16 kHz at ~0.13 ms of CPU per second of
#: audio (~7500x real time on one core), negligible next to decoding FLAC.
#: "VHQ" costs ~35% more; "MQ"/"LQ" save <10%. Measured numbers: handbook.md,
#: "Speech front end".
RESAMPLE_QUALITY = "HQ"

#: Full scale of 16-bit PCM: an int16 sample divided by it is in [-1, 1),
#: as libsndfile reads it; a float sample times it is in 16-bit units.
PCM16_SCALE = 32768.0
# Integer PCM is scaled to [-1, 1) like soundfile does for wav, so a waveform
# stored as int16 in HDF5/npy reads the same as the wav it came from.
_PCM_SCALE = {np.dtype(np.int16): 1.0 / PCM16_SCALE, np.dtype(np.int32): 1.0 / 2147483648.0}
_AUDIO_ERRORS = (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError)


def read_feat(value: str, sample_rate: Optional[int] = None) -> np.ndarray:
    """Read one data file into a float32 array of shape (T, C).

    ``value`` is a resolved path (see :func:`speechiter.paths.resolve_data_path`):

    - audio (wav, flac, ogg, anything libsndfile reads; FLAC with dr_flac,
      see :mod:`speechiter.flac`): decoded to float32 in [-1, 1); if
      ``sample_rate`` is given and the file has another rate it is resampled
      with soxr at :data:`RESAMPLE_QUALITY` (~0.15 ms of CPU per second of
      audio) to exactly ``resampled_length(T, sr, sample_rate)`` frames;
    - ``.npy``: a 2-D array is kept, a 1-D one becomes (T, 1);
    - ``.npz``: its single array, or ``file.npz:key``;
    - ``file.hdf5:key`` / ``file.h5:key``: the dataset ``key``. If the dataset
      has a ``sample_rate`` attribute and ``sample_rate`` is given, it is
      resampled like audio;
    - any of these with a time range ``#t=<start>,<end>`` (seconds; see NOTE
      [ Segment values ] in speechiter/segments.py): only that range is read;
    - URLs (``s3://``, ``gs://``, ``http(s)://``) for any of these, read
      through fsspec (see :mod:`speechiter.storage`).

    ``sample_rate`` does not apply to npy/npz (features, or waveforms already
    at the right rate). int16/int32 arrays are taken as PCM and scaled to
    [-1, 1) like a wav, so an int16 waveform stored in HDF5 reads exactly like
    its wav.

    Raises DataError naming the file for a missing or unreadable file, audio
    with no frames, or a missing npz/HDF5 key.
    """
    value, segment = split_segment(value)
    file, key = split_chunk_key(value)
    check_data_file(file)
    if not is_array_file(file):
        return _read_audio(file, sample_rate, segment)
    array, stored_rate = read_array(file, key, segment)
    x = _to_float32_2d(array, value)
    if is_hdf5_file(file):
        if x.shape[0] == 0:
            raise DataError(f"{value}: dataset has no frames")
        if sample_rate is not None and stored_rate is not None and int(stored_rate) != int(sample_rate):
            x = resample(x, stored_rate, sample_rate)
    return x


def resampled_length(num_frames: int, sr_in: int, sr_out: int) -> int:
    """``round(num_frames * sr_out / sr_in)`` (halves round up), the length
    :func:`read_feat` returns after resampling, exactly."""
    num_frames, sr_in, sr_out = int(num_frames), int(sr_in), int(sr_out)
    return (2 * num_frames * sr_out + sr_in) // (2 * sr_in)


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
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


def _to_float32_2d(array, where: str) -> np.ndarray:
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


def _read_audio(file: str, sample_rate: Optional[int], segment=None) -> np.ndarray:
    flac = None
    if segment is not None or is_url(file):  # See NOTE [ Segment values ] in speechiter/segments.py
        flac = read_audio(file, segment)
    elif file.lower().endswith(".flac"):
        flac = read_flac(file)
    if flac is not None:
        x, sr = flac
    else:
        x, sr = _read_soundfile(file)
    if x.shape[0] == 0:
        raise DataError(f"{file}: audio has no frames")
    if segment is None and not is_url(file):  # whole local files only: a segment reads part of one
        check_decoded(file, x.shape[0])  # never a silently shorter or mis-rated utterance
    if sample_rate is not None and int(sr) != int(sample_rate):
        x = resample(x, sr, sample_rate)
    return x


def _read_soundfile(file: str) -> Tuple[np.ndarray, int]:
    try:
        with soundfile.SoundFile(file) as f:
            sr = f.samplerate
            if f.subtype == "PCM_16":
                # libsndfile's own int16 -> float32 (x / PCM16_SCALE) is 4x slower than numpy's; same bits.
                x = f.read(dtype="int16", always_2d=True).astype(np.float32)
                x *= np.float32(1 / PCM16_SCALE)
            else:
                x = f.read(dtype="float32", always_2d=True)
    except _AUDIO_ERRORS as e:
        raise DataError(f"{file}: cannot read audio ({e})") from None
    return x, sr


def audio_info(path) -> Tuple[int, int]:
    """``(num_frames, sample_rate)`` of an audio file, from its header."""
    path = os.fspath(path)
    if is_url(path):
        return audio_header(path)
    check_data_file(path)
    try:
        info = soundfile.info(path)
    except _AUDIO_ERRORS as e:
        raise DataError(f"{path}: cannot read audio header ({e})") from None
    return int(info.frames), int(info.samplerate)


def audio_num_frames(path) -> int:
    """Number of frames of an audio file, from its header (no decoding)."""
    return audio_info(path)[0]


def data_num_frames(value: str) -> Tuple[int, Optional[int]]:
    """``(num_frames, sample_rate or None)`` of any data value, without
    decoding: audio headers, and array shapes (see
    :func:`speechiter.arrays.array_num_frames`); for a ``#t=`` time range, the
    number of samples it reads."""
    value, segment = split_segment(value)
    file, key = split_chunk_key(value)
    check_data_file(file)
    frames, rate = array_num_frames(file, key) if is_array_file(file) else audio_info(file)
    if segment is None:
        return frames, rate
    if rate is None:
        raise DataError(f"{redact(value)}: a #t= time range needs a sample rate, and this array stores none")
    return segment_range(segment, frames, rate, redact(value))[1], rate
