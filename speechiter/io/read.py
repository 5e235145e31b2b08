"""Any data value in, float32 ``(T, C)`` out; or its length from headers alone.

:func:`read_feat` reads a resolved data value (see
:func:`speechiter.paths.resolve_data_path` and
:func:`speechiter.io.source.parse_source`): audio through
:mod:`speechiter.io.audio`, arrays through :mod:`speechiter.io.arrays`.
:func:`data_num_frames` gives a value's length without decoding. Errors are
:class:`~speechiter.errors.DataError` naming the file; callers add the
utterance id and the idx2 file it came from.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from speechiter.errors import DataError
from speechiter.io.arrays import array_num_frames, is_array_file, is_hdf5_file, read_array
from speechiter.io.audio import audio_info, range_select, read_audio
from speechiter.io.embedded import embedded_info, read_embedded
from speechiter.io.parquet import cell_info, is_parquet_file, read_cell
from speechiter.io.pcm import to_float32_2d
from speechiter.io.piped import piped_info, read_piped
from speechiter.io.resample import resample
from speechiter.io.samples import sample_range
from speechiter.io.source import parse_source
from speechiter.io.storage import redact
from speechiter.io.files import check_data_file

__all__ = ["read_feat", "data_num_frames"]


def read_feat(value: str, sample_rate: Optional[int] = None, allow_commands: bool = False) -> np.ndarray:
    """Read one data value into a float32 array of shape (T, C).

    - audio (wav, flac, ogg, anything libsndfile reads; FLAC with dr_flac,
      see :mod:`speechiter.io.flac`): decoded to float32 in [-1, 1); if
      ``sample_rate`` is given and the file has another rate it is resampled
      with soxr at :data:`speechiter.io.resample.RESAMPLE_QUALITY` (~0.15 ms
      of CPU per second of audio) to exactly ``resampled_length(T, sr,
      sample_rate)`` frames;
    - ``.npy``: a 2-D array is kept, a 1-D one becomes (T, 1);
    - ``.npz``: its single array, or ``file.npz:key``;
    - ``file.hdf5:key`` / ``file.h5:key``: the dataset ``key``. If the dataset
      has a ``sample_rate`` attribute and ``sample_rate`` is given, it is
      resampled like audio;
    - any of these with a time range ``#t=<start>,<end>`` (seconds; see NOTE
      [ Segment values ] in speechiter/io/source.py): only that range is read;
    - any of these but HDF5 / npz in a byte range ``#bytes=<first>-<last>`` of
      a bigger object, a pack shard (see NOTE [ Byte-range values ] in
      speechiter/io/source.py), decoded from memory;
    - audio in a cell of a Parquet file, ``file.parquet:<column>#row=<n>``
      (see NOTE [ Parquet cells ] in speechiter/io/parquet.py);
    - URLs (``s3://``, ``gs://``, ``http(s)://``) for any of these, read
      through fsspec (see :mod:`speechiter.io.storage`);
    - Kaldi piped commands (``flac -c -d -s a.flac |``, ``sox ... |``,
      ``sph2pipe ... |``, ...), read natively (NOTE [ Piped values ] in
      speechiter/io/pipes.py); other commands run only with
      ``allow_commands`` (NOTE [ Running commands ] in
      speechiter/io/commands.py).

    ``sample_rate`` does not apply to npy/npz (features, or waveforms already
    at the right rate). int16/int32 arrays are taken as PCM and scaled to
    [-1, 1) like a wav, so an int16 waveform stored in HDF5 reads exactly like
    its wav.

    Raises DataError naming the file for a missing or unreadable file, audio
    with no frames, or a missing npz/HDF5 key.
    """
    source = parse_source(value)
    if source.pipe is not None:
        x, rate = read_piped(source.pipe, source.time_range, allow_commands)
        return x if sample_rate is None or int(rate) == int(sample_rate) else resample(x, rate, sample_rate)
    check_data_file(source.file)
    if source.byte_range is not None or not is_array_file(source.file):
        select = None if source.time_range is None else range_select(source.time_range, redact(source.entry))
        if source.row is not None or (source.byte_range is None and is_parquet_file(source.file)):
            x, rate = read_cell(source, select)
        elif source.byte_range is None:
            x, rate = read_audio(source.file, source.time_range)
        else:  # audio (or a .npy: no rate) from memory
            x, rate = read_embedded(source, select)
        if rate is not None and sample_rate is not None and int(rate) != int(sample_rate):
            x = resample(x, rate, sample_rate)
        return x
    array, stored_rate = read_array(source.file, source.key, source.time_range)
    where = source.entry
    x = to_float32_2d(array, where)
    if is_hdf5_file(source.file):
        if x.shape[0] == 0:
            raise DataError(f"{where}: dataset has no frames")
        if sample_rate is not None and stored_rate is not None and int(stored_rate) != int(sample_rate):
            x = resample(x, stored_rate, sample_rate)
    return x


def data_num_frames(value: str, allow_commands: bool = False) -> Tuple[int, Optional[int]]:
    """``(num_frames, sample_rate or None)`` of any data value, without
    decoding: audio headers, and array shapes (see
    :func:`speechiter.io.arrays.array_num_frames`); for a ``#t=`` time range,
    the number of samples it reads."""
    source = parse_source(value)
    if source.pipe is None:
        check_data_file(source.file)
    if source.pipe is not None:
        frames, rate = piped_info(source.pipe, allow_commands)
    elif source.byte_range is not None:
        frames, rate = embedded_info(source)
    elif source.row is not None or is_parquet_file(source.file):
        frames, rate = cell_info(source)
    elif is_array_file(source.file):
        frames, rate = array_num_frames(source.file, source.key)
    else:
        frames, rate = audio_info(source.file)
    if source.time_range is None:
        return frames, rate
    where = redact(source.entry)
    if rate is None:
        raise DataError(f"{where}: a #t= time range needs a sample rate, and this array stores none")
    return sample_range(source.time_range.start, source.time_range.end, frames, rate, where)[1], rate
