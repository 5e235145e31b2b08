"""Integer PCM to float32 in [-1, 1), as libsndfile reads it: the one scale of the package."""
from __future__ import annotations

import numpy as np

from speechiter.errors import DataError

__all__ = ["PCM16_SCALE", "pcm16_to_float32", "to_float32_2d"]

#: Full scale of 16-bit PCM: an int16 sample divided by it is in [-1, 1),
#: as libsndfile reads it; a float sample times it is in 16-bit units.
PCM16_SCALE = 32768.0
# Integer PCM is scaled to [-1, 1) like soundfile does for wav, so a waveform
# stored as int16 in HDF5/npy reads the same as the wav it came from.
_PCM_SCALE = {np.dtype(np.int16): 1.0 / PCM16_SCALE, np.dtype(np.int32): 1.0 / 2147483648.0}


def pcm16_to_float32(x: np.ndarray) -> np.ndarray:
    """int16 samples as float32 ``x / PCM16_SCALE``: the bits libsndfile's
    float read gives, 4x faster than letting it convert."""
    out = x.astype(np.float32)
    out *= np.float32(1 / PCM16_SCALE)
    return out


def to_float32_2d(array, where: str) -> np.ndarray:
    """A numeric array as float32 (T, C): 1-D becomes (T, 1); int16/int32 are
    taken as PCM and scaled. Raises DataError naming ``where`` otherwise."""
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
