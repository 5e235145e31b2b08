"""An utterance's decoded length against its waveform length file.

NOTE [ Length files are checked ]
A waveform length file (``idx2wav_len``, or ``segments_len`` beside a Kaldi
segments file: the names SpeeChain and tools/data_len.py write) says how many
samples each utterance has, and sorting and batching trust it. When the
decoded waveform has another length, the file is stale or the audio changed,
and a DataError says so with both numbers, never a batch planned on a wrong
length. The file may count the stored audio or the audio resampled to the
dataset's ``sample_rate``: either agrees. Length files of other names (frames,
tokens) are not checked.
"""
import os
from typing import Mapping, Optional, Sequence

from speechiter.io.read import data_num_frames
from speechiter.errors import DataError

CHECKED_NAMES = ("wav_len", "segments_len")


def checked(files: Sequence[str]) -> bool:
    """Whether the length files ``files`` count waveform samples (see NOTE [ Length files are checked ])."""
    return bool(files) and all(os.path.basename(str(f)).endswith(CHECKED_NAMES) for f in files)


def length_problem(lengths: Mapping, files: Sequence[str], uid: str, value: str, decoded: int) -> Optional[str]:
    """None when ``decoded`` agrees with ``lengths[uid]`` (as read, or as stored before resampling)."""
    expected = lengths.get(uid)
    if expected is None or expected == decoded:
        return None
    try:
        stored = data_num_frames(value)[0]
    except DataError:
        stored = None
    if stored == expected:
        return None
    return f"decoded {decoded} samples, but {', '.join(map(str, files))} says {expected}; the length file is stale or the audio changed"
