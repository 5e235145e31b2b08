"""Reading a piped value: its input file decoded natively, or (when allowed) the command run.

What each command asks for and how it is read: NOTE [ Piped values ] in
speechiter/io/pipes.py; unknown commands: NOTE [ Running commands ] in
speechiter/io/commands.py.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import soundfile

from speechiter.errors import DataError
from speechiter.io.audio import audio_info, read_audio
from speechiter.io.commands import COMMAND_TIMEOUT, run_command
from speechiter.io.pipes import Pipe
from speechiter.io.resample import resample
from speechiter.io.samples import resampled_length, sample_range
from speechiter.io.sphere import check_sphere
from speechiter.io.source import TimeRange
from speechiter.io.storage import is_url

__all__ = ["read_piped", "piped_info", "check_channel"]


def _refused(pipe: Pipe) -> DataError:
    return DataError(f"{pipe.command} |: a piped command speechiter does not read natively ({pipe.reason}), never "
                     f"run by default; set the dataset's allow_commands: true to run it (a shell command: only "
                     f"for data you trust), or convert that audio to a file")


def _shape(pipe: Pipe, x: np.ndarray, rate: int) -> np.ndarray:
    """Channel selection, mean of the channels, resampling and 16-bit rounding, in sox's order."""
    if pipe.channel is not None:
        check_channel(pipe, x.shape[1])
        x = x[:, pipe.channel:pipe.channel + 1]
    if pipe.mono and x.shape[1] > 1:
        x = x.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
    if pipe.rate is not None and pipe.rate != rate:
        x = resample(x, rate, pipe.rate)
    if pipe.pcm16:
        x = (np.clip(np.round(x * 32768.0), -32768, 32767) / 32768.0).astype(np.float32)
    return np.ascontiguousarray(x)


def read_piped(pipe: Pipe, time_range: Optional[TimeRange], allow_commands: bool = False,
               timeout: float = COMMAND_TIMEOUT) -> Tuple[np.ndarray, int]:
    """``(float32 (T, C), sample_rate)`` of a piped value's output, or of
    ``time_range`` of it (at the output's rate)."""
    if not pipe.native:
        if not allow_commands:
            raise _refused(pipe)
        x, rate = run_command(pipe.command, timeout)
        return _cut(x, rate, time_range, pipe.command), rate
    if pipe.sphere:
        check_sphere(pipe.file)
    if pipe.rate is None or (time_range is not None and audio_info(pipe.file)[1] == pipe.rate):
        x, rate = read_audio(pipe.file, time_range)  # no resampling: only the range is read
        return _shape(pipe, x, rate), rate
    x, rate = read_audio(pipe.file)  # resampled as a whole, then cut, as the command's output would be
    return _cut(_shape(pipe, x, rate), pipe.rate, time_range, pipe.file), pipe.rate


def _cut(x: np.ndarray, rate: int, time_range: Optional[TimeRange], where: str) -> np.ndarray:
    if time_range is None:
        return x
    first, count = sample_range(time_range.start, time_range.end, x.shape[0], rate, where)
    return x[first:first + count]


def piped_info(pipe: Pipe, allow_commands: bool = False, timeout: float = COMMAND_TIMEOUT) -> Tuple[int, int]:
    """``(frames, sample_rate)`` of a piped value's output: from the input
    file's header, or (an allowed unknown command) by running it."""
    if not pipe.native:
        if not allow_commands:
            raise _refused(pipe)
        x, rate = run_command(pipe.command, timeout)
        return x.shape[0], rate
    if pipe.sphere:
        check_sphere(pipe.file)
    frames, rate = audio_info(pipe.file)
    if pipe.channel is not None and not is_url(pipe.file):
        check_channel(pipe, soundfile.info(pipe.file).channels)  # audio_info has read this header
    if pipe.rate is not None and pipe.rate != rate:
        return resampled_length(frames, rate, pipe.rate), pipe.rate
    return frames, rate


def check_channel(pipe: Pipe, channels: int) -> None:
    """Raise DataError when the command takes a channel the file (of ``channels``) does not have."""
    if pipe.channel is not None and pipe.channel >= channels:
        raise DataError(f"{pipe.file}: the command takes channel {pipe.channel + 1}, but the file has {channels}")
