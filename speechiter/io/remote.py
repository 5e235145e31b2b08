"""Audio at a URL: PCM16 / float32 WAV read with ranged requests, anything else through libsndfile.

A WAV's header is read once per URL (one 64 KB request, cached per process);
then a time range is one request for its bytes. Other formats (and WAV
layouts numpy cannot take as they are) are read by libsndfile from a file
object over fsspec (:func:`speechiter.io.url_file.open_url`).
"""
from __future__ import annotations

import io
from typing import Dict, Optional, Tuple

import numpy as np
import soundfile

from speechiter.errors import DataError
from speechiter.io.decode import Select, read_soundfile
from speechiter.io.storage import call, read_range, redact
from speechiter.io.url_file import open_url
from speechiter.io.wav import WavHeader, decode_pcm, read_wav_header

__all__ = ["read_url_audio", "url_audio_info", "clear_headers"]

_HEAD_BYTES = 1 << 16
_wav_headers: Dict[str, Optional[WavHeader]] = {}
_MAX_HEADERS = 1 << 16  # per process; cleared when full


def read_url_audio(url: str, select: Select, whole_file: bool) -> Tuple[np.ndarray, int]:
    """``(float32 (T, C), sample_rate)`` of the frames ``select`` picks of the
    audio at ``url``. ``whole_file``: all of it is wanted (a WAV whose header
    is not known yet is then read in one request, not two)."""
    where = redact(url)
    wav = url.lower().endswith(".wav")
    whole = read_range(url, 0, None) if wav and whole_file and url not in _wav_headers else None
    header = _wav_header(url, whole) if wav else None
    if header is not None:
        return _read_wav(url, header, select, whole)
    if whole is not None:
        return read_soundfile(io.BytesIO(whole), select, where)
    return call(url, lambda: _with_file(url, lambda f: read_soundfile(f, select, where)))


def url_audio_info(url: str) -> Tuple[int, int]:
    """``(frames, sample_rate)`` of the audio at ``url``, from its header."""
    header = _wav_header(url) if url.lower().endswith(".wav") else None
    if header is not None:
        return header.frames, header.rate
    info = call(url, lambda: _with_file(url, soundfile.info), "read the audio header")
    return int(info.frames), int(info.samplerate)


def clear_headers() -> None:
    """Forget the cached WAV headers (tests that change the objects behind URLs)."""
    _wav_headers.clear()


def _with_file(url: str, fn):
    f = open_url(url, quiet=True)  # See NOTE [ Errors in C callbacks ] in speechiter/io/url_file.py
    try:
        result = fn(f)
        f.check()
        return result
    except DataError:
        f.check()
        raise
    finally:
        f.close()


def _wav_header(url: str, head: Optional[bytes] = None) -> Optional[WavHeader]:
    """The header of a sized PCM16 / float32 WAV at ``url`` (from ``head``, its
    first bytes, or one 64 KB request; cached), or None for another layout."""
    if url in _wav_headers:
        return _wav_headers[url]
    head = read_range(url, 0, _HEAD_BYTES) if head is None else head
    header = read_wav_header(lambda pos, n: head[pos:pos + n])
    if header is not None and (header.dtype is None or not header.sized):
        header = None
    if len(_wav_headers) >= _MAX_HEADERS:
        _wav_headers.clear()
    _wav_headers[url] = header
    return header


def _read_wav(url: str, header: WavHeader, select: Select, whole: Optional[bytes]) -> Tuple[np.ndarray, int]:
    first, count = select(header.frames, header.rate)
    size = header.block_align
    start = header.offset + first * size
    raw = read_range(url, start, start + count * size) if whole is None else whole[start:start + count * size]
    if len(raw) != count * size:
        raise DataError(f"{redact(url)}: truncated audio: {len(raw) // size} of {count} frames")
    return decode_pcm(raw, header), header.rate
