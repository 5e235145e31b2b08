"""What the importers share before writing: the utterance record, times as text, paths, audio headers."""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Dict, Optional, Tuple

from speechiter.errors import DataError
from speechiter.io.audio import audio_info
from speechiter.io.commands import COMMAND_TIMEOUT
from speechiter.io.piped import piped_info
from speechiter.io.pipes import is_piped, parse_pipe
from speechiter.io.storage import is_url

__all__ = ["InputError", "Utterance", "seconds_text", "parse_seconds", "resolve", "AudioInfo"]

_NPT_RE = re.compile(r"^[0-9]+(\.[0-9]*)?$")  # Media Fragments npt-sec, no hh:mm:ss


class InputError(DataError):
    """Bad importer input: the commands print it as one line and exit with code 2."""


@dataclasses.dataclass
class Utterance:
    """One line of each idx2 file. ``location`` is the audio's absolute path
    or URL (resolved), ``relative`` says whether the source gave a relative
    path; ``start``/``end`` are the times as text, or None (whole recording;
    ``end`` None alone: open end)."""

    id: str
    location: str
    length: int
    duration: str
    start: Optional[str] = None
    end: Optional[str] = None
    text: Optional[str] = None
    speaker: Optional[str] = None
    relative: bool = False
    where: str = ""  # the input it came from, for errors: "DIR/segments:3", "cuts.jsonl: item 3"
    rate: Optional[int] = None  # the sample rate ``length`` counts at (None: not known)


def seconds_text(value: float) -> str:
    """``value`` (seconds, >= 0) as a Media Fragments number: the shortest
    repr that reads back as the same float, without an exponent."""
    text = repr(float(value))
    if "e" in text or "E" in text:
        text = f"{value:.17f}".rstrip("0")
    if text.endswith(".0"):
        text = text[:-2]
    return text


def parse_seconds(text: str, where: str, what: str) -> Tuple[float, str]:
    """``(value, text to write)`` of a time in seconds from a text file: the
    text as written when it is a plain decimal, else a normalised form."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: {what} should be a number of seconds, but got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise InputError(f"{where}: {what} should be a non-negative number of seconds, but got {text!r}")
    return value, (text if _NPT_RE.match(text) else seconds_text(value))


def resolve(value: str, root: Path, where: str) -> Tuple[str, bool]:
    """``(location, relative)`` of an audio path or URL from a manifest: URLs
    and absolute paths as they are, relative paths joined to ``root``, paths
    normalised. Refuses ``#`` (see NOTE [ Segment layout ] in
    speechiter/importers/writer.py)."""
    if "#" in value:
        raise InputError(f"{where}: {value!r} contains '#', which idx2wav reserves for the #t= time suffix")
    if is_url(value):
        return value, False
    value = os.path.expanduser(value)
    return os.path.normpath(os.path.join(os.fspath(root), value)), not os.path.isabs(value)


class AudioInfo:
    """``(frames, sample_rate)`` from audio headers, once per location, read
    as speechiter reads them (:func:`speechiter.io.audio.audio_info`; a piped
    value: :func:`speechiter.io.piped.piped_info`, which runs an unknown
    command when ``allow_commands``)."""

    def __init__(self, allow_commands: bool = False, timeout: float = COMMAND_TIMEOUT):
        self._cache: Dict[str, Tuple[int, int]] = {}
        self.allow_commands, self.timeout = allow_commands, timeout

    def __call__(self, location: str, where: str) -> Tuple[int, int]:
        info = self._cache.get(location)
        if info is None:
            info = self._cache[location] = _header(location, where, self.allow_commands, self.timeout)
        return info


def _header(location: str, where: str, allow_commands: bool, timeout: float) -> Tuple[int, int]:
    if is_piped(location):
        try:
            frames, rate = piped_info(parse_pipe(location), allow_commands, timeout)
        except DataError as e:
            raise InputError(f"{where}: {e}") from None
        if frames <= 0:
            raise InputError(f"{where}: {location} gives no audio frames")
        return frames, rate
    if not is_url(location) and not os.path.isfile(location):
        raise InputError(f"{where}: no such audio file: {location}")
    try:
        frames, rate = audio_info(location)
    except DataError as e:
        raise InputError(f"{where}: {e}") from None
    if frames <= 0:
        raise InputError(f"{where}: {location} has no audio frames")
    return frames, rate
