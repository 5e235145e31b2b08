"""How many samples: of a time range (Lhotse's rule), and after resampling.

The readers and the importers count with these functions and no others, so
an imported corpus's ``idx2wav_len`` is what the reader returns.

# NOTE [ Segment samples ]
Samples follow Lhotse's rule (``lhotse.utils.compute_num_samples``, used by
``Recording.load_audio(offset, duration)`` and its soundfile backend), so a
time range reads the very samples Lhotse reads::

    first sample = half_up(start * sr)
    num samples  = half_up((end - start) * sr)       (idx2wav_len)

where ``half_up(x)`` rounds ``x`` to 8 decimals, then halves away from zero
(not Python's round(), which rounds halves to even). Note the off-by-one: the
last sample read is NOT always ``half_up(end * sr) - 1``. At 22050 Hz,
``#t=0.01,0.02`` reads samples 221..441 (221 of them), while
``half_up(0.02 * 22050) = 441``. A reader must take the count from the
duration, as here. An open end reads ``frames - first sample`` samples.

A range that runs past the end of its file by at most :data:`MAX_OVERSHOOT`
seconds (0.5 s, Kaldi's ``extract-segments --max-overshoot`` default) is
clipped to the file's end (the importers' idx2wav_len counts the samples that
exist; the ``#t=`` suffix keeps the source's end); a larger overshoot, or a
start at or past the end, is a DataError.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Optional, Tuple

from speechiter.errors import DataError

__all__ = ["MAX_OVERSHOOT", "half_up", "compute_num_samples", "sample_range", "resampled_length"]

MAX_OVERSHOOT = 0.5  # seconds


def half_up(x: float) -> int:
    """Lhotse's rounding (compute_num_samples): 8 decimals, then halves up."""
    return int(Decimal(round(x, ndigits=8)).quantize(0, rounding=ROUND_HALF_UP))


def compute_num_samples(duration: float, sample_rate: int) -> int:
    """Samples in ``duration`` seconds at ``sample_rate`` (Lhotse's function of that name)."""
    return half_up(duration * sample_rate)


def sample_range(start: float, end: Optional[float], frames: int, sample_rate: int, where: str,
                 names: Tuple[str, str] = ("the time range", "the file")) -> Tuple[int, int]:
    """``(first sample, number of samples)`` of ``[start, end)`` seconds (end
    None: open) in a file of ``frames`` samples (see NOTE [ Segment samples ]).
    ``names`` are the range and the file in a message: ``where: <range>
    starts at 5.0 s, at or past the end of <file> (4.000 s)``."""
    what, whole = names
    # the float checks first: a time no sample count can be (1e30 s, inf) is an error, not a rounding failure
    first = half_up(start * sample_rate) if start * sample_rate < frames else frames
    if first >= frames:
        raise DataError(f"{where}: {what} starts at {start} s, at or past the end of {whole} "
                        f"({frames / sample_rate:.3f} s)")
    if end is None:
        return first, frames - first
    far = end - frames / sample_rate > MAX_OVERSHOOT
    count = frames + 1 if far else compute_num_samples(end - start, sample_rate)
    if first + count > frames:
        if far:
            raise DataError(f"{where}: {what} ends at {end} s, more than {MAX_OVERSHOOT} s past the end of "
                            f"{whole} ({frames / sample_rate:.3f} s)")
        count = frames - first
    return first, count


def resampled_length(num_frames: int, sr_in: int, sr_out: int) -> int:
    """``round(num_frames * sr_out / sr_in)`` (halves round up), the length a
    resampled read returns, exactly."""
    num_frames, sr_in, sr_out = int(num_frames), int(sr_in), int(sr_out)
    return (2 * num_frames * sr_out + sr_in) // (2 * sr_in)
