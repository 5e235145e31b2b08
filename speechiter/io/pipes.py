"""Kaldi's piped audio (``sox a.wav -t wav -r 8000 - |``) as what it asks for: a file, a channel, a rate.

# NOTE [ Piped values ]
A wav.scp entry (or an idx2wav value) that ends in ``|`` is a shell command
whose standard output is the audio. The commands recipes write are read
natively, with no shell, by reading their input file and doing what the
command asks that speechiter can do exactly::

    flac -c -d -s F |                         F
    cat F |                                   F
    sph2pipe -f wav [-p] [-c N] F |           F (NIST SPHERE), channel N
    sox [-t T] F -t wav [-r R] [-c 1] [-b 16] [-e signed-integer] - [remix N] [rate R] |
                                              F; channel N, the mean of the channels (-c 1), resampled to R,
                                              rounded to 16 bits (-b 16)
    ffmpeg [-nostdin] [-y] [-hide_banner] [-loglevel L] -i F [-ar R] [-ac 1] [-acodec pcm_s16le] -f wav - |

The program is recognised by its base name (``/opt/kaldi/tools/sph2pipe_v2.5/
sph2pipe`` is sph2pipe). Resampling is speechiter's (soxr HQ, to exactly
``resampled_length`` samples), not sox's: close to the command's output (sox
also dithers to 16 bits), not bit for bit, and so is a mix of channels (-c 1,
-ac 1: their mean). Decoding and taking one channel give the command's samples
exactly. A time range (``#t=``, Kaldi segments) applies to the command's
output, at its rate. A path inside a command is taken as written (relative:
the current folder, as in Kaldi, also in an idx2 file: the path resolver
leaves a piped value as it is). Anything else (another
program or option, a pipeline, a redirection) is an unknown command: never run
unless the user opts in (the import's ``--allow_commands``, a dataset's
``allow_commands: true``), see :mod:`speechiter.io.commands`.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["Pipe", "is_piped", "parse_pipe", "split_piped_value"]

_SHELL = re.compile(r"[|;&<>$`\n]")  # a pipeline, a redirection, a variable: not one plain command
_RATE = re.compile(r"^([0-9]+(?:\.[0-9]*)?)(k?)$")


@dataclass(frozen=True)
class Pipe:
    """One piped value. ``file`` None: a command speechiter does not read
    natively (``reason`` says why), run only when allowed."""

    command: str  # as written, without the trailing "|"
    file: Optional[str] = None  # the input file the command reads
    rate: Optional[int] = None  # resample to this rate
    channel: Optional[int] = None  # take this channel (0-based)
    mono: bool = False  # the mean of the channels
    pcm16: bool = False  # round to 16-bit samples
    sphere: bool = False  # NIST SPHERE input (sph2pipe)
    reason: str = ""
    tokens: Tuple[str, ...] = field(default=(), repr=False)
    file_index: int = field(default=-1, repr=False)

    @property
    def native(self) -> bool:
        return self.file is not None

    @property
    def plain(self) -> bool:
        """The command's output is the file's samples, unchanged: idx2wav may name the file itself."""
        return self.native and self.rate is None and self.channel is None and not self.mono and not self.pcm16

    def with_file(self, file: str) -> "Pipe":
        """This command reading ``file`` (an input path made absolute, say)."""
        tokens = list(self.tokens)
        tokens[self.file_index] = file
        return replace(self, command=shlex.join(tokens), file=file, tokens=tuple(tokens))

    @property
    def value(self) -> str:
        return f"{self.command} |"


def is_piped(value: str) -> bool:
    """Whether a wav.scp / idx2wav value is a piped command: ``cmd ... |``,
    also with a ``#t=`` suffix after the ``|`` (a segment of its output)."""
    return "|" in value and split_piped_value(value.rstrip()) is not None


def split_piped_value(value: str) -> Optional[Tuple[str, str]]:
    """``(command, suffix)`` of a value ``cmd ... |`` with an optional ``#t=``
    suffix after the ``|``; None for any other value."""
    head, sep, tail = value.rpartition("|")
    if not sep or (tail.strip() and not tail.startswith("#t=")):
        return None
    return head.strip(), tail


def parse_pipe(command: str) -> Pipe:
    """The :class:`Pipe` of a command (the value without its trailing ``|``)."""
    command = command.strip()
    if command.endswith("|"):
        command = command[:-1].strip()
    if _SHELL.search(command):
        return Pipe(command, reason="a pipeline, redirection or shell variable")
    try:
        tokens = shlex.split(command)
    except ValueError as e:
        return Pipe(command, reason=f"cannot split it into words ({e})")
    if not tokens:
        return Pipe(command, reason="no command")
    program = os.path.basename(tokens[0])
    parser = _PROGRAMS.get(program)
    if parser is None:
        return Pipe(command, reason=f"program {program!r}")
    try:
        index, options = parser(tokens[1:])
    except _Unknown as e:
        return Pipe(command, reason=f"{program} {e}", tokens=tuple(tokens))
    return Pipe(command, file=tokens[index + 1], tokens=tuple(tokens), file_index=index + 1, **options)


class _Unknown(Exception):
    """A part of a command that is not read natively (the message says which)."""


def _one_file(positional: List[int], args: Sequence[str]) -> int:
    if len(positional) != 1:
        raise _Unknown(f"with {len(positional)} file arguments {[args[i] for i in positional]}")
    return positional[0]


def _rate(text: str, what: str) -> int:
    match = _RATE.match(text)
    value = float(match.group(1)) * (1000 if match.group(2) else 1) if match else 0
    if not value or value != int(value):
        raise _Unknown(f"{what} {text!r}")
    return int(value)


def _channel(text: str, what: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise _Unknown(f"{what} {text!r}")
    return int(text) - 1


def _cat(args):
    return _one_file([i for i, a in enumerate(args)], args), {}


def _flac(args):
    flags, positional = set(), []
    for i, a in enumerate(args):
        if a.startswith("--"):
            flags.add({"--decode": "d", "--stdout": "c", "--silent": "s"}.get(a, a))
        elif a.startswith("-") and len(a) > 1:
            flags.update(a[1:])
        else:
            positional.append(i)
    unknown = flags - {"c", "d", "s"}
    if unknown or not {"c", "d"} <= flags:
        raise _Unknown(f"options {sorted(flags)} (reads natively: -c -d [-s])")
    return _one_file(positional, args), {}


def _sph2pipe(args):
    options: Dict = {"sphere": True}
    positional, fmt, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a in ("-f", "-c") and i + 1 < len(args):
            if a == "-f":
                fmt = args[i + 1]
            else:
                options["channel"] = _channel(args[i + 1], "channel")
            i += 2
            continue
        if a == "-p":
            pass  # 16-bit PCM out: libsndfile decodes u-law / a-law to the same values
        elif a.startswith("-"):
            raise _Unknown(f"option {a}")
        else:
            positional.append(i)
        i += 1
    if fmt not in ("wav", "rif"):
        raise _Unknown(f"output format {fmt!r} (reads natively: -f wav)")
    return _one_file(positional, args), options


def _output_format(options: Dict, name: str, value: str) -> None:
    """sox / ffmpeg output options: rate, channels, 16-bit signed integer."""
    if name == "rate":
        options["rate"] = _rate(value, "rate")
    elif name == "channels":
        if value != "1":
            raise _Unknown(f"channels {value!r} (reads natively: 1)")
        options["mono"] = True
    elif name == "bits":
        if value != "16":
            raise _Unknown(f"bits {value!r} (reads natively: 16)")
        options["pcm16"] = True
    elif value not in ("signed-integer", "signed"):
        raise _Unknown(f"encoding {value!r} (reads natively: signed-integer)")


_SOX_OPTIONS = {"-r": "rate", "-c": "channels", "-b": "bits", "-e": "encoding"}


def _sox(args):
    options: Dict = {}
    i, positional, out_type = 0, [], None
    while i < len(args) and args[i] != "-":
        a = args[i]
        if a == "-t" and i + 1 < len(args):
            if positional:
                out_type = args[i + 1]
            i += 2
            continue
        if a in _SOX_OPTIONS and i + 1 < len(args) and positional:  # output options (input ones change meaning)
            _output_format(options, _SOX_OPTIONS[a], args[i + 1])
            i += 2
            continue
        if a.startswith("-"):
            raise _Unknown(f"option {a}")
        positional.append(i)
        i += 1
    if i == len(args) or out_type != "wav":
        raise _Unknown("without '-t wav -' (WAV to standard output)")
    effects = args[i + 1:]
    while effects:
        if len(effects) >= 2 and effects[0] == "remix":
            options["channel"] = _channel(effects[1], "remix")
        elif len(effects) >= 2 and effects[0] == "rate":
            options["rate"] = _rate(effects[1], "rate")
        else:
            raise _Unknown(f"effect {' '.join(effects)!r}")
        effects = effects[2:]
    return _one_file(positional, args), options


_FFMPEG_FLAGS = ("-nostdin", "-y", "-hide_banner", "-vn")
_FFMPEG_VALUES = {"-ar": "rate", "-ac": "channels", "-loglevel": None, "-v": None, "-acodec": "codec", "-c:a": "codec",
                  "-f": "format", "-i": "input"}


def _ffmpeg(args):
    options: Dict = {}
    i, file_index, fmt, out = 0, None, None, None
    while i < len(args):
        a = args[i]
        if a in _FFMPEG_FLAGS:
            i += 1
            continue
        if a in _FFMPEG_VALUES and i + 1 < len(args):
            name, value = _FFMPEG_VALUES[a], args[i + 1]
            if name not in (None, "input") and file_index is None:
                raise _Unknown(f"input option {a}")  # before -i: how to read the input, not what to write
            if name == "input":
                if file_index is not None:
                    raise _Unknown("with two inputs")
                file_index = i + 1
            elif name == "format":
                fmt = value
            elif name == "codec":
                if value != "pcm_s16le":
                    raise _Unknown(f"codec {value!r} (reads natively: pcm_s16le)")
                options["pcm16"] = True
            elif name is not None:
                _output_format(options, name, value)
            i += 2
            continue
        if a in ("-", "pipe:", "pipe:1") and i == len(args) - 1:
            out = a
            i += 1
            continue
        raise _Unknown(f"option {a}")
    if file_index is None or fmt != "wav" or out is None:
        raise _Unknown("without '-i FILE ... -f wav -' (WAV to standard output)")
    return file_index, options


_PROGRAMS: Dict[str, Callable] = {"cat": _cat, "flac": _flac, "sph2pipe": _sph2pipe, "sox": _sox, "ffmpeg": _ffmpeg}
