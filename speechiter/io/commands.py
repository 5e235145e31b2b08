"""Piped commands speechiter does not read natively, run when (and only when) the user allows it.

# NOTE [ Running commands ]
A command in wav.scp or idx2wav is arbitrary shell: ``rm -rf ~ |`` is a
valid line. So an unknown command (see NOTE [ Piped values ] in
speechiter/io/pipes.py) is refused unless the user opts in: the Kaldi
import's ``--allow_commands``, a dataset's ``allow_commands: true``, for data
the user trusts like code. An allowed command runs through ``/bin/sh`` with
no standard input, in its own process group, killed with the group when it
runs longer than the timeout; it must write WAV (or any format libsndfile
reads) to standard output. A failure is a DataError with the command, its
exit status and the last lines of its standard error.
"""
from __future__ import annotations

import io
import os
import signal
import subprocess
from typing import Sequence, Tuple

import numpy as np
import soundfile

from speechiter.errors import DataError

__all__ = ["COMMAND_TIMEOUT", "run_command", "refuse_commands"]

#: seconds an allowed command may run before it is killed
COMMAND_TIMEOUT = 300.0
_SHOWN = 3  # unknown commands named in a refusal


def refuse_commands(unknown: Sequence[Tuple[str, str]], how: str) -> None:
    """Raise one DataError for all the unknown commands ``[(file:line,
    reason)]``, naming the first few; ``how`` says how to opt in."""
    if not unknown:
        return
    shown = ", ".join(f"{where} ({reason})" for where, reason in unknown[:_SHOWN])
    more = f" and {len(unknown) - _SHOWN} more" if len(unknown) > _SHOWN else ""
    count = f"{len(unknown)} piped command{'s' if len(unknown) > 1 else ''}"
    raise DataError(f"{count} that speechiter does not read natively, never run by default: {shown}{more}; "
                    f"{how} to run them (they run as shell commands: only for data you trust), or convert "
                    f"that audio to files")


def run_command(command: str, timeout: float = COMMAND_TIMEOUT) -> Tuple[np.ndarray, int]:
    """``(float32 (T, C), sample_rate)`` of the audio ``command`` writes to
    its standard output (See NOTE [ Running commands ])."""
    proc = subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the shell and what it started
            proc.communicate()
            raise DataError(f"command {command!r} did not finish in {timeout:g} s (killed)") from None
    stderr = " / ".join(err.decode("utf-8", "replace").strip().splitlines()[-_SHOWN:])
    if proc.returncode != 0:
        raise DataError(f"command {command!r} failed (exit status {proc.returncode})"
                        + (f": {stderr}" if stderr else ""))
    try:
        x, rate = soundfile.read(io.BytesIO(out), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise DataError(f"command {command!r} did not write audio to its standard output "
                        f"({len(out)} bytes: {e})" + (f"; its stderr: {stderr}" if stderr else "")) from None
    if x.shape[0] == 0:
        raise DataError(f"command {command!r} wrote audio with no frames")
    return x, int(rate)
