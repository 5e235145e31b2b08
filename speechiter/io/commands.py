"""Piped commands speechiter does not read natively, run when (and only when) the user allows it.

# NOTE [ Running commands ]
A command in wav.scp or idx2wav is arbitrary shell: ``rm -rf ~ |`` is a
valid line. So an unknown command (see NOTE [ Piped values ] in
speechiter/io/pipes.py) is refused unless the user opts in: the Kaldi
import's ``--allow_commands``, a dataset's ``allow_commands: true``, for data
the user trusts like code. An allowed command runs through ``/bin/sh`` with
no standard input, in its own process group; it must write WAV (or any format
libsndfile reads) to standard output. It is bounded: killed with its group
when it runs longer than the timeout or writes more than
:data:`COMMAND_MAX_BYTES`, and its group is killed when it ends however it
ends (an exit, an error, Ctrl-C), so nothing it started in the background
outlives it. The pipes are read with one deadline, so a process that left the
group holding them cannot make the wait longer. A failure is one DataError
line with the command, its exit status and the last lines of its standard
error (at most 400 characters of them).
"""
from __future__ import annotations

import io
import os
import selectors
import signal
import subprocess
import time
from typing import Sequence, Tuple

import numpy as np
import soundfile

from speechiter.errors import DataError

__all__ = ["COMMAND_TIMEOUT", "COMMAND_MAX_BYTES", "run_command", "refuse_commands"]

#: seconds an allowed command may run before it is killed
COMMAND_TIMEOUT = 300.0
#: the most an allowed command may write to its standard output (about 9 hours of 16 kHz 16-bit mono)
COMMAND_MAX_BYTES = 1 << 30
_SHOWN = 3  # unknown commands named in a refusal; lines of a failed command's stderr shown
_STDERR_KEPT = 64 << 10  # bytes of a command's stderr kept (its end)
_MESSAGE_CHARS = 400  # characters of a command's stderr (or decoder message) in an error


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
    try:
        out, err = _collect(proc, command, timeout)
    finally:  # done, failed, timed out or interrupted: nothing it started outlives it
        _end(proc)
    stderr = _tail(err)
    if proc.returncode != 0:
        raise DataError(f"command {command!r} failed (exit status {proc.returncode})"
                        + (f": {stderr}" if stderr else ""))
    try:
        x, rate = soundfile.read(io.BytesIO(out), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise DataError(f"command {command!r} did not write audio to its standard output "
                        f"({len(out)} bytes: {_cut(str(e))})" + (f"; its stderr: {stderr}" if stderr else "")) from None
    if x.shape[0] == 0:
        raise DataError(f"command {command!r} wrote audio with no frames")
    return x, int(rate)


def _collect(proc: subprocess.Popen, command: str, timeout: float) -> Tuple[bytes, bytes]:
    """The command's standard output (at most :data:`COMMAND_MAX_BYTES`) and the end of its standard error,
    once it has exited and closed both; DataError past the timeout or the size."""
    deadline = time.monotonic() + timeout
    out, err = bytearray(), b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, "out")
        selector.register(proc.stderr, selectors.EVENT_READ, "err")
        while selector.get_map():
            left = deadline - time.monotonic()
            ready = selector.select(left) if left > 0 else []
            if not ready:
                raise DataError(f"command {command!r} did not finish in {timeout:g} s (killed)")
            for key, _ in ready:
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data == "err":
                    err = (err + chunk)[-_STDERR_KEPT:]
                else:
                    out += chunk
                    if len(out) > COMMAND_MAX_BYTES:
                        raise DataError(f"command {command!r} wrote more than {COMMAND_MAX_BYTES / 2 ** 20:g} MiB to its "
                                        f"standard output (killed); convert that audio to files")
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise DataError(f"command {command!r} did not finish in {timeout:g} s (killed)") from None
    return bytes(out), err


def _end(proc: subprocess.Popen) -> None:
    """Kill the command's process group (what it left running, even after it exited) and reap the shell;
    never wait on pipes that a process which left the group may hold."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone: everything in it exited
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a SIGKILLed shell is reaped at once
        pass


def _tail(err: bytes) -> str:
    """The last lines of a command's standard error, as one bounded line."""
    return _cut(" / ".join(err.decode("utf-8", "replace").strip().splitlines()[-_SHOWN:]))


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else "..." + text[-_MESSAGE_CHARS:]
