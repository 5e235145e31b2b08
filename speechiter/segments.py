"""Utterances that are time ranges of a recording: ``<path or URL>#t=<start>,<end>``.

# NOTE [ Segment values ]
An idx2wav value may end in a W3C Media Fragments time range, in seconds
(the layout tools/import_kaldi.py and tools/import_lhotse.py write; see NOTE
[ Segment layout ] in tools/_idx2_out.py)::

    rec1.flac#t=12.34,15.67      samples of [12.34 s, 15.67 s)
    rec1.flac#t=12.34            from 12.34 s to the end of the file
    pack.hdf5:rec1#t=1.5,2.5     a range of an HDF5 dataset (its sample_rate attribute gives the rate)

The samples are Lhotse's (``compute_num_samples``): first sample
``half_up(start * sr)``, ``half_up((end - start) * sr)`` of them, where
``half_up`` rounds to 8 decimals and then halves away from zero. A range that
runs past the end of the file by at most :data:`MAX_OVERSHOOT` seconds (Kaldi's
``extract-segments`` default) is clipped to the file's end; a larger overshoot
or a start at or past the end is a DataError. Only the range is read: a seek
and a read, not a decode of the file.

# NOTE [ Kaldi segments ]
A ``main_data`` file named ``segments`` (Kaldi's ``<utt> <recording> <start>
<end>``; end -1 is the end of the file) is read with the ``wav.scp`` in its
folder: each value becomes ``<wav.scp path>#t=<start>,<end>``. It is the file
name that says so, as in Kaldi itself. Relative wav.scp paths resolve against
the current folder (Kaldi's rule: the recipe folder). Piped entries
(``... |``) and ark offsets are refused, never run.
"""
from __future__ import annotations

import io
import os
import re
import struct
import threading
from decimal import ROUND_HALF_UP, Decimal
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np
import soundfile

from speechiter import flac
from speechiter.errors import DataError
from speechiter.storage import call, is_url, open_url, read_range, redact

__all__ = ["MAX_OVERSHOOT", "Segment", "split_segment", "half_up", "segment_range", "is_kaldi_segments",
           "kaldi_segment_value", "read_wav_scp", "read_audio", "audio_header"]

MAX_OVERSHOOT = 0.5  # seconds
_NPT = r"[0-9]+(?:\.[0-9]*)?"
_FRAGMENT_RE = re.compile(rf"#t=(?:npt:)?({_NPT})(?:,({_NPT}))?$")
_ARK_RE = re.compile(r"\.ark:[0-9]+$")


class Segment(NamedTuple):
    start: float  # seconds
    end: Optional[float]  # seconds; None: to the end of the file


def split_segment(value: str) -> Tuple[str, Optional[Segment]]:
    """``"a.wav#t=1.5,2"`` -> ``("a.wav", Segment(1.5, 2.0))``; a value with
    no ``#t=`` suffix -> ``(value, None)``. Raises DataError for an empty range."""
    match = _FRAGMENT_RE.search(value)
    if match is None:
        return value, None
    start = float(match.group(1))
    end = None if match.group(2) is None else float(match.group(2))
    if end is not None and end <= start:
        raise DataError(f"{value}: the time range ends at {end} s, not after its start ({start} s)")
    return value[:match.start()], Segment(start, end)


def half_up(x: float) -> int:
    """Lhotse's rounding (compute_num_samples): 8 decimals, then halves up."""
    return int(Decimal(round(x, ndigits=8)).quantize(0, rounding=ROUND_HALF_UP))


def segment_range(segment: Segment, frames: int, sample_rate: int, where: str) -> Tuple[int, int]:
    """``(first sample, number of samples)`` of ``segment`` in a file of
    ``frames`` samples at ``sample_rate`` (see NOTE [ Segment values ])."""
    first = half_up(segment.start * sample_rate)
    if first >= frames:
        raise DataError(f"{where}: the time range starts at {segment.start} s, at or past the end of the "
                        f"file ({frames / sample_rate:.3f} s)")
    if segment.end is None:
        return first, frames - first
    count = half_up((segment.end - segment.start) * sample_rate)
    if first + count > frames:
        if segment.end - frames / sample_rate > MAX_OVERSHOOT:
            raise DataError(f"{where}: the time range ends at {segment.end} s, more than {MAX_OVERSHOOT} s "
                            f"past the end of the file ({frames / sample_rate:.3f} s)")
        count = frames - first
    return first, count


# ------------------------------------------------------------ Kaldi segments
# See NOTE [ Kaldi segments ].

_wav_scp_cache: Dict[str, Tuple[Tuple[int, int], Dict[str, str]]] = {}
_wav_scp_lock = threading.Lock()


def is_kaldi_segments(idx2_path: str) -> bool:
    return os.path.basename(idx2_path) == "segments"


def read_wav_scp(path: str) -> Dict[str, str]:
    """``{recording: path or URL}`` of a Kaldi wav.scp, cached per process
    (re-read when the file changes). Raises DataError naming the file and line
    for a piped entry, an ark offset, a missing path or a duplicate id."""
    try:
        stat = os.stat(path)
    except OSError:
        raise DataError(f"{path}: no such file (a Kaldi segments file needs the wav.scp beside it)") from None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _wav_scp_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    with _wav_scp_lock:
        table = _parse_wav_scp(path)
        _wav_scp_cache[path] = (stamp, table)
    return table


def _parse_wav_scp(path: str) -> Dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read wav.scp ({e})") from None
    table: Dict[str, str] = {}
    for lineno, line in enumerate(lines, 1):
        parts = line.strip().split(None, 1)
        if not parts:
            continue
        where = f"{path}:{lineno}"
        if len(parts) == 1:
            raise DataError(f"{where}: recording {parts[0]!r} has no path")
        rec, location = parts[0], parts[1].strip()
        check_wav_scp_entry(where, rec, location)
        if rec in table:
            raise DataError(f"{where}: duplicate recording id {rec!r}")
        table[rec] = location
    return table


def check_wav_scp_entry(where: str, rec: str, location: str) -> None:
    """Refuse the wav.scp entries speechiter never reads: piped commands
    (never run) and ark offsets. ``where`` is ``file:line``."""
    if location.endswith("|"):
        raise DataError(f"{where}: recording {rec!r} is a piped command, which is never run; write that "
                        f"audio to files and list their paths in wav.scp")
    if _ARK_RE.search(location):
        raise DataError(f"{where}: recording {rec!r} is an ark offset ({location}); write that audio to "
                        f"files and list their paths in wav.scp")


def kaldi_segment_value(value: str, segments_path: str) -> str:
    """A ``segments`` value ``"<recording> <start> <end>"`` as
    ``<wav.scp path>#t=<start>,<end>`` (end -1: open); a relative wav.scp
    path is made absolute against the current folder."""
    parts = value.split()
    if len(parts) != 3:
        raise DataError(f"{segments_path}: expected '<utt> <recording> <start> <end>', got a value {value!r}")
    rec, start, end = parts
    table = read_wav_scp(os.path.join(os.path.dirname(segments_path), "wav.scp"))
    location = table.get(rec)
    if location is None:
        raise DataError(f"{segments_path}: recording {rec!r} is not in the wav.scp beside it")
    for text in (start, end):
        if text != "-1" and not re.fullmatch(_NPT, text):
            raise DataError(f"{segments_path}: recording {rec!r}: {text!r} is not a number of seconds")
    if not is_url(location):
        location = os.path.abspath(location)
    return f"{location}#t={start}" + ("" if end == "-1" else f",{end}")


# ------------------------------------------------------------ ranged reads
# Audio only: the range is found from the header, then only it is read.

def _select(segment: Optional[Segment], where: str):
    """``(frames, sample_rate) -> (first, count)`` for ``segment`` (None: all)."""
    if segment is None:
        return lambda frames, rate: (0, frames)
    return lambda frames, rate: segment_range(segment, frames, rate, where)


def read_audio(file: str, segment: Optional[Segment]) -> Tuple[np.ndarray, int]:
    """``(float32 (T, C), sample_rate)`` of ``segment`` of the audio ``file``
    (a path or URL; None: all of it), read by seeking."""
    select = _select(segment, redact(file))
    if is_url(file):
        wav = file.lower().endswith(".wav")  # a whole one with no header known: one request, not two
        whole = read_range(file, 0, None) if wav and segment is None and file not in _wav_headers else None
        header = _remote_wav_header(file, whole) if wav else None
        if header is not None:
            return _read_remote_wav(file, header, select, whole)
        if whole is not None:
            return _read_soundfile(io.BytesIO(whole), select, redact(file))
        return call(file, lambda: _with_file(file, lambda f: _read_soundfile(f, select, redact(file))))
    if file.lower().endswith(".flac") and flac.available():
        return flac.read_flac(file, select)
    return _read_soundfile(file, select, file)


def audio_header(file: str) -> Tuple[int, int]:
    """``(frames, sample_rate)`` of the audio at a URL, from its header."""
    header = _remote_wav_header(file) if file.lower().endswith(".wav") else None
    if header is not None:
        return header.frames, header.rate
    info = call(file, lambda: _with_file(file, soundfile.info), "read the audio header")
    return int(info.frames), int(info.samplerate)


def _read_soundfile(file, select, where: str) -> Tuple[np.ndarray, int]:
    try:
        with soundfile.SoundFile(file) as f:
            first, count = select(f.frames, f.samplerate)
            if first:
                f.seek(first)
            if f.subtype == "PCM_16":  # the same bits as dtype=float32, faster (see audio._read_soundfile)
                x = f.read(count, dtype="int16", always_2d=True).astype(np.float32)
                x *= np.float32(1 / 32768)
            else:
                x = f.read(count, dtype="float32", always_2d=True)
            rate = f.samplerate
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        if getattr(file, "error", None) is not None:
            raise file.error from None  # a network error inside libsndfile: see storage._Guarded
        raise DataError(f"{where}: cannot read audio ({e})") from None
    if x.shape[0] != count:
        raise DataError(f"{where}: corrupt or truncated audio: read {x.shape[0]} of {count} frames")
    return x, rate


def _with_file(url: str, fn):
    f = open_url(url)
    try:
        result = fn(f)
        f.check()
        return result
    except DataError:
        f.check()
        raise
    finally:
        f.close()


class _WavHeader(NamedTuple):
    offset: int  # of the first sample
    frames: int
    rate: int
    channels: int
    dtype: str  # numpy dtype of one sample


_WAV_DTYPES = {(1, 16): "<i2", (3, 32): "<f4"}  # (format tag, bits) -> dtype; others: libsndfile
_HEAD_BYTES = 1 << 16
_wav_headers: Dict[str, Optional[_WavHeader]] = {}
_MAX_HEADERS = 1 << 16  # per process; cleared when full


def _remote_wav_header(url: str, head: Optional[bytes] = None) -> Optional[_WavHeader]:
    """The header of a PCM16 / float32 wav at ``url`` (from ``head``, its first
    bytes, or one 64 KB request; cached), or None for another layout (libsndfile)."""
    if url in _wav_headers:
        return _wav_headers[url]
    head = read_range(url, 0, _HEAD_BYTES) if head is None else head
    header, pos, fmt = None, 12, None
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        while pos + 8 <= len(head):
            chunk, size = head[pos:pos + 4], struct.unpack_from("<I", head, pos + 4)[0]
            if chunk == b"fmt " and size >= 16:
                tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", head, pos + 8)
                if tag == 0xFFFE and size >= 26:  # WAVE_FORMAT_EXTENSIBLE: the sub-format's tag
                    tag = struct.unpack_from("<H", head, pos + 32)[0]
                fmt = (tag, channels, rate, align, bits)
            elif chunk == b"data":
                dtype = fmt and _WAV_DTYPES.get((fmt[0], fmt[4]))
                if dtype and fmt[1] and fmt[3] == fmt[1] * fmt[4] // 8 and 0 < size < 0xFFFFFFFF:
                    header = _WavHeader(pos + 8, size // fmt[3], fmt[2], fmt[1], dtype)
                break
            pos += 8 + size + (size & 1)
    if len(_wav_headers) >= _MAX_HEADERS:
        _wav_headers.clear()
    _wav_headers[url] = header
    return header


def _read_remote_wav(url: str, header: _WavHeader, select, whole: Optional[bytes]) -> Tuple[np.ndarray, int]:
    first, count = select(header.frames, header.rate)
    size = header.channels * int(header.dtype[-1])
    start = header.offset + first * size
    raw = read_range(url, start, start + count * size) if whole is None else whole[start:start + count * size]
    if len(raw) != count * size:
        raise DataError(f"{redact(url)}: truncated audio: {len(raw) // size} of {count} frames")
    x = np.frombuffer(raw, header.dtype).reshape(count, header.channels).astype(np.float32)
    if header.dtype == "<i2":
        x *= np.float32(1 / 32768)
    return x, header.rate
