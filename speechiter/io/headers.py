"""Audio headers checked against what the decoder delivered.

Decoders are lenient where a training set must not be: libsndfile reads a WAV
whose data chunk is shorter than its header says up to the end of the file,
and both libsndfile and dr_flac take a FLAC file's sample rate from its
STREAMINFO block even when every frame header says another one, so a flipped
bit in that block gives an utterance at the wrong rate and, once resampled,
of the wrong length. :func:`check_decoded` reads the few header bytes again
and raises a DataError naming the file where they disagree.

Streamed files, whose headers leave sizes out (0 or a placeholder), pass.
"""
from __future__ import annotations

import io
from typing import Optional

from speechiter.errors import DataError
from speechiter.io.wav import read_wav_header

__all__ = ["check_decoded", "check_decoded_bytes"]

_HEAD = 4096  # bytes read at once: every header of a plain file
# FLAC frame header codes (RFC 9639, 9.1): sample rate, then bits per sample.
_FRAME_RATES = {1: 88200, 2: 176400, 3: 192000, 4: 8000, 5: 16000, 6: 22050, 7: 24000, 8: 32000, 9: 44100,
                10: 48000, 11: 96000}
_FRAME_BITS = {1: 8, 2: 12, 4: 16, 5: 20, 6: 24, 7: 32}


def check_decoded(file: str, num_frames: int) -> None:
    """Raise DataError naming ``file`` if ``num_frames`` decoded frames or
    the header that gave them disagree with the file's WAV or FLAC header;
    other formats pass."""
    with open(file, "rb", buffering=0) as f:
        problem = _problem(f, num_frames)
    if problem:
        raise DataError(f"{file}: {problem}")


def check_decoded_bytes(data: bytes, where: str, num_frames: int) -> None:
    """:func:`check_decoded` of an audio file held in memory (``where`` names it)."""
    problem = _problem(io.BytesIO(data), num_frames)
    if problem:
        raise DataError(f"{where}: {problem}")


def _problem(f, num_frames: int) -> Optional[str]:
    head = f.read(_HEAD)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return _wav_problem(_Bytes(f, head), num_frames)
    if head[:4] == b"fLaC":
        return _flac_problem(_Bytes(f, head), num_frames)
    return None


class _Bytes:
    """``at(pos, n)``: n bytes of the file from pos, from its first bytes
    when they hold them (one read for almost every file)."""

    def __init__(self, f, head: bytes):
        self.f, self.head = f, head

    def at(self, pos: int, n: int) -> bytes:
        if pos + n <= len(self.head):
            return self.head[pos:pos + n]
        self.f.seek(pos)
        return self.f.read(n)

    def size(self) -> int:
        """The file's size in bytes (asked only for an error message: no stat per file read)."""
        return self.f.seek(0, io.SEEK_END)


def _wav_problem(data: _Bytes, num_frames: int) -> Optional[str]:
    header = read_wav_header(data.at)
    if header is None or not header.sized:
        return None
    promised = header.frames
    if promised > num_frames:
        return (f"truncated WAV: its header gives {promised} frames ({header.data_size} bytes of data) but "
                f"only {num_frames} were decoded ({data.size() - header.offset} bytes are left in the file)")
    return None


def _flac_problem(data: _Bytes, num_frames: int) -> Optional[str]:
    pos, info, last = 4, None, False
    while not last:
        block = data.at(pos, 4)
        if len(block) < 4:
            return None
        length, last = int.from_bytes(block[1:4], "big"), bool(block[0] & 0x80)
        if block[0] & 0x7F == 0 and length >= 34:
            info = data.at(pos + 4, 34)
        pos += 4 + length
    if info is None or len(info) < 34:
        return None
    rate = int.from_bytes(info[10:13], "big") >> 4
    channels = ((info[12] >> 1) & 7) + 1
    bits = (((info[12] & 1) << 4) | (info[13] >> 4)) + 1
    total = int.from_bytes(info[13:18], "big") & 0xFFFFFFFFF
    if total and num_frames != total:
        return f"corrupt or truncated FLAC: decoded {num_frames} of the {total} frames its header gives"
    frame = _frame_header(data.at(pos, 16))
    if frame is None:
        return None
    for name, unit, streaminfo, first in (("sample rate", " Hz", rate, frame[0]), ("channel count", "", channels,
                                          frame[1]), ("bits per sample", "", bits, frame[2])):
        if first is not None and first != streaminfo:
            return (f"corrupt FLAC header: STREAMINFO gives a {name} of {streaminfo}{unit} but the first frame "
                    f"says {first}{unit}")
    return None


def _frame_header(h: bytes):
    """``(sample rate, channels, bits)`` of a FLAC frame header (None where
    it defers to STREAMINFO), or None if ``h`` is not a valid one."""
    size, h = len(h), h.ljust(16, b"\0")
    if h[0] != 0xFF or h[1] & 0xFE != 0xF8:
        return None
    size_code, rate_code, channel_code, bits_code = h[2] >> 4, h[2] & 15, h[3] >> 4, (h[3] >> 1) & 7
    pos = 5 + (0 if h[4] < 0x80 else max(0, 8 - (h[4] ^ 0xFF).bit_length() - 1))  # coded frame number
    pos += {6: 1, 7: 2}.get(size_code, 0)
    rate = _FRAME_RATES.get(rate_code)
    if rate_code == 12:
        rate, pos = h[pos] * 1000, pos + 1
    elif rate_code in (13, 14):
        rate, pos = int.from_bytes(h[pos:pos + 2], "big") * (1 if rate_code == 13 else 10), pos + 2
    if rate_code == 15 or channel_code > 10 or bits_code == 3 or pos >= size or _crc8(h[:pos]) != h[pos]:
        return None
    return rate, (channel_code + 1 if channel_code < 8 else 2), _FRAME_BITS.get(bits_code)


def _crc8_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return bytes(table)


_CRC8 = _crc8_table()


def _crc8(data: bytes) -> int:
    """CRC-8 (polynomial x^8 + x^2 + x + 1) of a FLAC frame header."""
    crc = 0
    for byte in data:
        crc = _CRC8[crc ^ byte]
    return crc
