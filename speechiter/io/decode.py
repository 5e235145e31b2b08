"""The decoder: encoded audio (a local path or a file object) to float32 ``(T, C)`` in [-1, 1).

FLAC files on disk go through dr_flac (:mod:`speechiter.io.flac`, 1.6x
libsndfile's speed), everything else through libsndfile. ``select(frames,
sample_rate) -> (first, count)`` picks the frames of a time range (a seek and
a read of ``count``); without it the whole file is read.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np
import soundfile

from speechiter.errors import DataError
from speechiter.io import flac
from speechiter.io.pcm import pcm16_to_float32
from speechiter.io.sphere import check_sphere

__all__ = ["AUDIO_ERRORS", "Select", "decode_file", "read_soundfile"]

AUDIO_ERRORS = (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError)
Select = Callable[[int, int], Tuple[int, int]]  # (frames, sample_rate) -> (first, count)


def decode_file(file: str, select: Optional[Select]) -> Tuple[np.ndarray, int]:
    """``(float32 (T, C), sample_rate)`` of a local audio file."""
    if file.lower().endswith(".flac") and flac.available():
        return flac.read_flac(file, select)
    return read_soundfile(file, select, file)


def read_soundfile(file, select: Optional[Select], where: str) -> Tuple[np.ndarray, int]:
    """Decode with libsndfile; ``file`` is a path or a file object (a URL's,
    see :func:`speechiter.io.url_file.open_url`). ``where`` names it in errors."""
    try:
        with soundfile.SoundFile(file) as f:
            first, count = (0, -1) if select is None else select(f.frames, f.samplerate)
            if first:
                f.seek(first)
            if f.subtype == "PCM_16":
                # libsndfile's own int16 -> float32 is 4x slower than numpy's; the same bits.
                x = pcm16_to_float32(f.read(count, dtype="int16", always_2d=True))
            else:
                x = f.read(count, dtype="float32", always_2d=True)
            rate = f.samplerate
    except AUDIO_ERRORS as e:
        if getattr(file, "error", None) is not None:
            raise file.error from None  # kept by a URL's file object: See NOTE [ Errors in C callbacks ] in url_file.py
        if isinstance(file, str):
            check_sphere(file)  # a compressed SPHERE file: say what to do
        raise DataError(f"{where}: cannot read audio ({e})") from None
    if select is not None and x.shape[0] != count:
        raise DataError(f"{where}: corrupt or truncated audio: read {x.shape[0]} of {count} frames")
    return x, rate
