"""A file held in a byte range of a bigger object: its bytes, decoded from memory.

See NOTE [ Byte-range values ] in speechiter/io/source.py. The bytes come from
the batch's coalesced reads when they hold them (NOTE [ Coalesced reads ] in
speechiter/io/coalesce.py), else from one read of their own
(:func:`speechiter.io.shards.read_bytes`). What they hold is told by their
first bytes: ``.npy`` (``\\x93NUMPY``), FLAC (dr_flac from memory), a PCM16 /
float32 WAV (numpy), anything else libsndfile reads. Whole files are checked
against their headers, as files on disk are (speechiter/io/headers.py).
"""
from __future__ import annotations

import io
from typing import Optional, Tuple

import numpy as np
import soundfile

from speechiter.batch_context import current_batch
from speechiter.errors import DataError
from speechiter.io import flac
from speechiter.io.decode import AUDIO_ERRORS, Select, read_soundfile
from speechiter.io.headers import check_decoded_bytes
from speechiter.io.pcm import to_float32_2d
from speechiter.io.shards import read_bytes
from speechiter.io.source import Source
from speechiter.io.storage import redact
from speechiter.io.wav import decode_pcm, read_wav_header

__all__ = ["range_bytes", "read_embedded", "decode_embedded", "embedded_info", "bytes_info"]

_NPY_MAGIC = b"\x93NUMPY"


def range_bytes(source: Source) -> bytes:
    """The bytes of ``source.byte_range`` of ``source.file``."""
    first, last = source.byte_range
    started = current_batch().reads  # NOTE [ Batch context ]
    reads = None if started is None else started.ranges
    data = None if reads is None else reads.get(source.file, first, last)
    return read_bytes(source.file, first, last) if data is None else data


def read_embedded(source: Source, select: Optional[Select]) -> Tuple[np.ndarray, Optional[int]]:
    """``(float32 (T, C), sample_rate)`` of the audio in ``source``'s byte range
    (``select``: the frames of a time range), or ``(array, None)`` for a ``.npy``."""
    return decode_embedded(range_bytes(source), select, redact(source.entry))


def decode_embedded(data: bytes, select: Optional[Select], where: str) -> Tuple[np.ndarray, Optional[int]]:
    """:func:`read_embedded` of a file held in ``data`` (``where`` names it in errors)."""
    if data[:6] == _NPY_MAGIC:
        if select is not None:
            raise DataError(f"{where}: a #t= time range needs a sample rate, and npy files store none")
        return to_float32_2d(_load_npy(data, where), where), None
    if data[:4] == b"fLaC" and flac.available():
        x, rate = flac.read_flac_bytes(data, select, where)
    else:
        header = read_wav_header(lambda pos, n: data[pos:pos + n])
        if header is not None and header.dtype is not None and header.sized:
            x, rate = _read_wav(data, header, select, where), header.rate
        else:
            x, rate = read_soundfile(io.BytesIO(data), select, where)
            if select is None:
                check_decoded_bytes(data, where, x.shape[0])
    if x.shape[0] == 0:
        raise DataError(f"{where}: audio has no frames")
    return x, rate


def _read_wav(data: bytes, header, select: Optional[Select], where: str) -> np.ndarray:
    first, count = (0, header.frames) if select is None else select(header.frames, header.rate)
    start = header.offset + first * header.block_align
    raw = data[start:start + count * header.block_align]
    if len(raw) != count * header.block_align:
        raise DataError(f"{where}: truncated WAV: its header gives {header.frames} frames but the range holds "
                        f"{max(0, len(data) - header.offset) // header.block_align}")
    return decode_pcm(raw, header)


def _load_npy(data: bytes, where: str) -> np.ndarray:
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{where}: cannot read npy ({e})") from None


def embedded_info(source: Source) -> Tuple[int, Optional[int]]:
    """``(num_frames, sample_rate or None)`` of what ``source``'s byte range holds, from its header."""
    return bytes_info(range_bytes(source), redact(source.entry))


def bytes_info(data: bytes, where: str) -> Tuple[int, Optional[int]]:
    """:func:`embedded_info` of a file held in ``data``."""
    if data[:6] == _NPY_MAGIC:
        return int(_load_npy(data, where).shape[0]), None
    try:
        info = soundfile.info(io.BytesIO(data))
    except AUDIO_ERRORS as e:
        raise DataError(f"{where}: cannot read audio header ({e})") from None
    return int(info.frames), int(info.samplerate)
