"""An utterance's decoded length against its waveform length file.

NOTE [ Length files are checked ]
A waveform length file (``idx2wav_len``, or ``segments_len`` beside a Kaldi
segments file: the names SpeeChain and tools/data_len.py write) says how many
samples each utterance has, and sorting and batching trust it. When the
decoded waveform has another length, the file is stale or the audio changed,
and a DataError says so with both numbers, never a batch planned on a wrong
length. The file may count the stored audio or the audio resampled to the
dataset's ``sample_rate``: either agrees. Length files of other names (frames,
tokens) are not checked. When the two lengths differ by the ratio of two
common sample rates, the message says at which rate the file was written (an
import or data_len run without the dataset's ``sample_rate``).
"""
import os
from typing import Mapping, Optional, Sequence, Tuple

from speechiter.io.read import data_num_frames
from speechiter.io.samples import resampled_length
from speechiter.errors import DataError

CHECKED_NAMES = ("wav_len", "segments_len")
COMMON_RATES = (16000, 8000, 22050, 24000, 44100, 48000, 32000, 11025, 12000)


def checked(files: Sequence[str]) -> bool:
    """Whether the length files ``files`` count waveform samples (see NOTE [ Length files are checked ])."""
    return bool(files) and all(os.path.basename(str(f)).endswith(CHECKED_NAMES) for f in files)


def length_problem(lengths: Mapping, files: Sequence[str], uid: str, value: str, decoded: int) -> Optional[str]:
    """None when ``decoded`` agrees with ``lengths[uid]`` (as read, or as stored before resampling)."""
    expected = lengths.get(uid)
    if expected is None or expected == decoded:
        return None
    try:
        stored, rate = data_num_frames(value)
    except DataError:
        stored = rate = None
    if stored == expected:
        return None
    message = f"decoded {decoded} samples, but {', '.join(map(str, files))} says {expected}"
    rates = rate_ratio(decoded, expected, stored, rate)
    if rates is not None:
        return (f"{message}, which is this audio at {rates[1]} Hz while it is read at {rates[0]} Hz: the length "
                f"file was written at {rates[1]} Hz; write it at {rates[0]} Hz (the importers' --sample_rate, "
                f"tools/data_len.py --sample_rate) or read at {rates[1]} Hz (sample_rate: {rates[1]})")
    return f"{message}; the length file is stale or the audio changed"


def rate_ratio(decoded: int, expected: int, stored: Optional[int] = None,
               rate: Optional[int] = None) -> Optional[Tuple[int, int]]:
    """``(read rate, written rate)``: two common sample rates whose ratio is
    ``decoded / expected`` (to the rounding of one sample at each), those that
    agree with the stored audio (``stored`` samples at ``rate``) first; None
    when no pair fits."""
    pairs = [(a, b) for a in COMMON_RATES for b in COMMON_RATES
             if a != b and abs(decoded * b - expected * a) <= (a + b) / 2]
    if stored is not None and rate:
        exact = [(a, b) for a, b in pairs
                 if resampled_length(stored, rate, a) == decoded and resampled_length(stored, rate, b) == expected]
        pairs = exact or pairs
    return pairs[0] if pairs and min(decoded, expected) >= 100 else None  # a few samples prove nothing
