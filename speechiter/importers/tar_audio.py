"""An audio member of a tar shard: its length from its header (a WAV's sizes, a FLAC's STREAMINFO), else decoded.

See NOTE [ Tar shards read in place ] in speechiter/importers/tar_index.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

from speechiter.errors import DataError
from speechiter.importers.utterance import InputError, Utterance, seconds_text
from speechiter.io.embedded import read_embedded
from speechiter.io.source import ByteRange, Source
from speechiter.io.wav import read_wav_header

if TYPE_CHECKING:
    from speechiter.importers.tar_index import Member, TarShard

__all__ = ["audio_length", "audio_utterance"]

_HEAD = 4096  # bytes of a member read for its audio header


def audio_length(shard: TarShard, member: Member, where: str) -> Tuple[int, int]:
    """``(frames, sample_rate)`` of the audio ``member`` holds, from its header
    (See NOTE [ Tar shards read in place ]). InputError naming ``where`` when it is not audio."""
    def at(pos, n):
        return shard.pread(member.first + pos, min(n, member.size - pos)) if pos < member.size else b""

    head = at(0, _HEAD)
    if head[:4] == b"RIFF":
        header = read_wav_header(at)
        if header is not None and header.sized:
            if header.offset + header.data_size > member.size:
                raise InputError(f"{where}: truncated WAV: its header gives {header.data_size} bytes of audio, "
                                 f"the member holds {max(0, member.size - header.offset)}")
            return header.frames, header.rate
    elif head[:4] == b"fLaC" and len(head) >= 42 and head[4] & 0x7F == 0:  # STREAMINFO comes first
        info = head[8:42]
        total = int.from_bytes(info[13:18], "big") & 0xFFFFFFFFF
        if total:
            return total, int.from_bytes(info[10:13], "big") >> 4
    source = Source(shard.location, byte_range=ByteRange(member.first, member.last))
    try:
        x, rate = read_embedded(source, None)
    except DataError as e:
        raise InputError(f"{where}: not audio speechiter reads ({str(e).rsplit(': ', 1)[-1]})") from None
    if rate is None:
        raise InputError(f"{where}: not audio (an npy array)")
    return int(x.shape[0]), int(rate)


def audio_utterance(uid: str, shard: TarShard, member: Member, where: str) -> Utterance:
    """The utterance of an audio member (its text and speaker set afterwards)."""
    frames, rate = audio_length(shard, member, where)
    if frames <= 0:
        raise InputError(f"{where}: the audio has no frames")
    return Utterance(uid, shard.value(member), frames, seconds_text(frames / rate), relative=shard.relative,
                     where=where)
