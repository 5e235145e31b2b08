"""Resampling with soxr, to exactly the length :func:`speechiter.io.samples.resampled_length` gives."""
from __future__ import annotations

import numpy as np

from speechiter.io.samples import resampled_length

__all__ = ["RESAMPLE_QUALITY", "resample"]

#: soxr quality preset used whenever audio is resampled (sample_rate and
#: speed perturbation). "HQ" (20-bit precision, flat passband to ~91% of
#: Nyquist) resamples 22.05 kHz -> 16 kHz at ~0.13 ms of CPU per second of
#: audio (~7500x real time on one core), negligible next to decoding FLAC.
#: "VHQ" costs ~35% more; "MQ"/"LQ" save <10%. Measured numbers: handbook.md,
#: "Speech front end".
RESAMPLE_QUALITY = "HQ"


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
