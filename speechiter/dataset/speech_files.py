"""SpeeChain's data files as SpeechTextDataset reads them: ``.npz`` features
written with their ``sample_rate``, and arrays (speaker embeddings) kept in
their stored shape.

SpeeChain's ``datasets/pyscripts/feat_extractor.py`` saves each utterance as
``np.savez(path, feat=feat, sample_rate=sample_rate)``; its speaker-embedding
extractor saves ``(1, D)`` rows as ``.npy``, which SpeeChain stacks to
``(B, 1, D)``. Errors are DataError naming the file; callers add the
utterance and idx2 file.
"""
import zipfile
from typing import Optional, Tuple

import numpy as np

from speechiter.io.arrays import is_array_file, read_array
from speechiter.io.read import read_feat
from speechiter.io.resample import resample
from speechiter.errors import DataError
from speechiter.io.source import split_chunk_key
from speechiter.paths import check_data_file


def npz_sample_rate(file: str) -> Optional[int]:
    """The ``sample_rate`` stored beside ``feat`` in a SpeeChain ``.npz``, or
    None when the file is not of that form."""
    try:
        with np.load(file, allow_pickle=False) as archive:
            if "feat" not in archive.files or "sample_rate" not in archive.files:
                return None
            rate = np.asarray(archive["sample_rate"])
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{file}: cannot read npz ({e})") from None
    if rate.size != 1 or rate.dtype.kind not in "iuf" or not float(rate.reshape(-1)[0]) > 0:
        raise DataError(f"{file}: sample_rate should be one positive number, got {rate.tolist()!r}")
    return int(rate.reshape(-1)[0])


def read_speech(value: str, sample_rate: Optional[int],
                allow_commands: bool = False) -> Tuple[np.ndarray, Optional[int]]:
    """``(float32 (T, C), the file's own rate or None)`` of a ``feat`` value.

    A SpeeChain ``.npz`` (``feat`` + ``sample_rate``) gives its ``feat``: a
    mono waveform (C == 1) is resampled to ``sample_rate`` like audio;
    features (C > 1) must have been extracted at ``sample_rate`` (SpeeChain
    would resample them along the wrong axis). Anything else is
    :func:`speechiter.io.read.read_feat`.
    """
    if not value.lower().endswith(".npz") or split_chunk_key(value)[1] is not None:
        return read_feat(value, sample_rate, allow_commands), None
    check_data_file(value)
    rate = npz_sample_rate(value)
    if rate is None:
        return read_feat(value, sample_rate, allow_commands), None
    feat = read_feat(f"{value}:feat")
    if feat.shape[0] == 0:
        raise DataError(f"{value}: feat has no frames")
    if sample_rate is not None and rate != int(sample_rate):
        if feat.shape[1] != 1:
            raise DataError(f"{value}: features extracted at {rate} Hz, but the dataset's sample_rate is "
                            f"{int(sample_rate)} (set sample_rate: {rate}, or null to take each file's rate)")
        feat = resample(feat, rate, int(sample_rate))
    return feat, rate


def read_stored(value: str) -> np.ndarray:
    """An array file (``.npy``, ``.npz[:key]``, ``.hdf5:key``) as float32, in
    the shape it was stored in (SpeeChain's ``spk_feat``)."""
    file, key = split_chunk_key(value)
    check_data_file(file)
    if not is_array_file(file):
        raise DataError(f"{file}: expected a .npy, .npz or .hdf5:key entry")
    array = np.asarray(read_array(file, key)[0])
    if array.dtype.kind not in "biuf":
        raise DataError(f"{value}: expected a numeric array, got dtype {array.dtype}")
    return array.astype(np.float32)
