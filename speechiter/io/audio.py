"""Audio files (local or at a URL), whole or a time range: samples and header lengths.

Local whole files are checked against their headers after decoding
(:mod:`speechiter.io.headers`): never a silently shorter or mis-rated
utterance. A time range is found from the header, then only it is read (see
NOTE [ Segment values ] in speechiter/io/source.py).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np
import soundfile

from speechiter.errors import DataError
from speechiter.io.decode import AUDIO_ERRORS, Select, decode_file
from speechiter.io.headers import check_decoded
from speechiter.io.remote import read_url_audio, url_audio_info
from speechiter.io.samples import sample_range
from speechiter.io.source import TimeRange
from speechiter.io.sphere import check_sphere
from speechiter.io.storage import is_url, redact
from speechiter.io.files import check_data_file

__all__ = ["read_audio", "audio_info", "audio_num_frames", "range_select"]


def read_audio(file: str, time_range: Optional[TimeRange] = None) -> Tuple[np.ndarray, int]:
    """``(float32 (T, C), sample_rate)`` of the audio ``file`` (a path or URL),
    or of ``time_range`` of it. Raises DataError naming the file for audio
    with no frames or one that disagrees with its header."""
    url = is_url(file)
    if url:
        x, rate = read_url_audio(file, range_select(time_range, redact(file)), time_range is None)
    else:
        x, rate = decode_file(file, None if time_range is None else range_select(time_range, file))
    if x.shape[0] == 0:
        raise DataError(f"{redact(file)}: audio has no frames")
    if time_range is None and not url:  # whole local files only: a range reads part of one
        check_decoded(file, x.shape[0])
    return x, rate


def range_select(time_range: Optional[TimeRange], where: str) -> Select:
    """``(frames, sample_rate) -> (first, count)`` for ``time_range`` (None: all)."""
    if time_range is None:
        return lambda frames, rate: (0, frames)
    return lambda frames, rate: sample_range(time_range.start, time_range.end, frames, rate, where)


def audio_info(path) -> Tuple[int, int]:
    """``(num_frames, sample_rate)`` of an audio file or URL, from its header."""
    path = os.fspath(path)
    if is_url(path):
        return url_audio_info(path)
    check_data_file(path)
    try:
        info = soundfile.info(path)
    except AUDIO_ERRORS as e:
        check_sphere(path)  # a compressed SPHERE file: say what to do
        raise DataError(f"{path}: cannot read audio header ({e})") from None
    return int(info.frames), int(info.samplerate)


def audio_num_frames(path) -> int:
    """Number of frames of an audio file, from its header (no decoding)."""
    return audio_info(path)[0]
