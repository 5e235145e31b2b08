"""The WAV header reader: the chunk walk that finds ``fmt `` and ``data``.

Used where libsndfile's own header read is not enough: the check of a
decoded file against its header (:mod:`speechiter.io.headers`) and URLs,
whose PCM16 / float32 samples are read with one ranged request and no
libsndfile (:mod:`speechiter.io.remote`).
"""
from __future__ import annotations

import struct
from typing import Callable, NamedTuple, Optional

import numpy as np

from speechiter.io.pcm import pcm16_to_float32

__all__ = ["WavHeader", "read_wav_header", "decode_pcm"]

_PLACEHOLDER = 0x7FFFF000  # data sizes from here up are "unknown" (streamed writers)
_DTYPES = {(1, 16): "<i2", (3, 32): "<f4"}  # (format tag, bits) -> numpy dtype; others: libsndfile
_EXTENSIBLE = 0xFFFE


class WavHeader(NamedTuple):
    offset: int  # byte of the first sample
    data_size: int  # bytes of sample data, as the data chunk's header gives them
    tag: int  # format tag (for WAVE_FORMAT_EXTENSIBLE, the sub-format's)
    channels: int
    rate: int
    block_align: int  # bytes per frame
    bits: int  # per sample

    @property
    def sized(self) -> bool:
        """Whether the header gives the length (streamed writers leave 0 or a placeholder)."""
        return self.block_align > 0 and 0 < self.data_size < _PLACEHOLDER

    @property
    def frames(self) -> int:
        return self.data_size // self.block_align

    @property
    def dtype(self) -> Optional[str]:
        """numpy dtype of one sample of packed PCM16 / float32 data, else None."""
        dtype = _DTYPES.get((self.tag, self.bits))
        packed = self.channels and self.block_align == self.channels * self.bits // 8
        return dtype if packed else None


def read_wav_header(at: Callable[[int, int], bytes]) -> Optional[WavHeader]:
    """The header of a RIFF/WAVE file, or None for another format (or no
    ``fmt `` chunk before ``data``). ``at(pos, n)`` returns up to ``n`` bytes
    of the file from byte ``pos`` (fewer at its end)."""
    head = at(0, 12)
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos, fmt = 12, None
    while True:
        chunk = at(pos, 8)
        if len(chunk) < 8:
            return None
        size = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"fmt ":
            body = at(pos + 8, min(size, 26))
            if len(body) >= 16:
                tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", body)
                if tag == _EXTENSIBLE and len(body) >= 26:
                    tag = struct.unpack_from("<H", body, 24)[0]
                fmt = (tag, channels, rate, align, bits)
        elif chunk[:4] == b"data":
            return None if fmt is None else WavHeader(pos + 8, size, *fmt)
        pos += 8 + size + (size & 1)


def decode_pcm(raw: bytes, header: WavHeader) -> np.ndarray:
    """float32 (T, C) of whole frames of packed sample bytes (``header.dtype`` not None)."""
    x = np.frombuffer(raw, header.dtype).reshape(-1, header.channels)
    return pcm16_to_float32(x) if header.dtype == "<i2" else x.astype(np.float32)
