"""Kaldi ``segments`` files as data values: ``<utt> <recording> <start> <end>`` over the wav.scp beside them.

# NOTE [ Kaldi segments ]
A ``main_data`` file named ``segments`` (Kaldi's ``<utt> <recording> <start>
<end>``; end -1 is the end of the file) is read with the ``wav.scp`` in its
folder: each value becomes ``<wav.scp path>#t=<start>,<end>`` (see NOTE
[ Segment values ] in speechiter/io/source.py). It is the file name that says
so, as in Kaldi itself. Relative wav.scp paths resolve against the current
folder (Kaldi's rule: the recipe folder), and so do the input files of piped
entries (``flac -c -d -s a.flac |``, read natively: NOTE [ Piped values ] in
speechiter/io/pipes.py). Piped commands speechiter does not read natively are
refused, all at once, unless allowed (:func:`check_wav_scp`); ark offsets
are refused.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Dict, List, Tuple

from speechiter.errors import DataError
from speechiter.io.commands import refuse_commands
from speechiter.io.pipes import is_piped, parse_pipe
from speechiter.io.source import NPT
from speechiter.io.storage import is_url

__all__ = ["is_kaldi_segments", "read_wav_scp", "check_wav_scp", "check_wav_scp_entry", "kaldi_segment_value",
           "absolute_location"]

_ARK_RE = re.compile(r"\.ark:[0-9]+$")
_Lines = List[Tuple[str, str]]  # (file:line, why) of the piped commands not read natively; (file:line, path)
_wav_scp_cache: Dict[str, Tuple[Tuple[int, int], Dict[str, str], _Lines, _Lines]] = {}
_SHOWN = 3
_wav_scp_lock = threading.Lock()


def is_kaldi_segments(idx2_path: str) -> bool:
    return os.path.basename(idx2_path) == "segments"


def read_wav_scp(path: str) -> Dict[str, str]:
    """``{recording: path, URL or piped command}`` of a Kaldi wav.scp, cached
    per process (re-read when the file changes). Raises DataError naming the
    file and line for an ark offset, a missing path or a duplicate id."""
    return _read(path)[0]


def check_wav_scp(path: str, allow_commands: bool = False, how: str = "set the dataset's allow_commands: true") -> None:
    """Read ``path`` now (errors at build time, not in a worker, and not
    blamed on one utterance): refuse its local files that do not exist and
    its piped commands that are not read natively, each all at once (the
    latter unless ``allow_commands``; ``how`` says how to allow them)."""
    _, unknown, files = _read(path)
    missing = [(where, file) for where, file in files if not os.path.isfile(file)]
    if missing:
        shown = ", ".join(f"{where} ({file})" for where, file in missing[:_SHOWN])
        more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        relative = any(not os.path.isabs(file) for _, file in missing)
        rule = (f"; relative paths are read from the current folder, as in Kaldi, and were tried in {os.getcwd()}: "
                f"start the run from the recipe's folder, or import the directory (python -m "
                f"speechiter.importers.kaldi DIR OUT --root <folder>)" if relative else "")
        raise DataError(f"{len(missing)} audio file{'s' if len(missing) > 1 else ''} of {path} do"
                        f"{'' if len(missing) > 1 else 'es'} not exist: {shown}{more}{rule}")
    if not allow_commands:
        refuse_commands(unknown, how)


def _read(path: str) -> Tuple[Dict[str, str], _Lines, _Lines]:
    try:
        stat = os.stat(path)
    except OSError:
        raise DataError(f"{path}: no such file (a Kaldi segments file needs the wav.scp beside it)") from None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _wav_scp_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1:]
    with _wav_scp_lock:
        parsed = _parse_wav_scp(path)
        _wav_scp_cache[path] = (stamp, *parsed)
    return parsed


def _parse_wav_scp(path: str) -> Tuple[Dict[str, str], _Lines, _Lines]:
    try:
        with open(path, encoding="utf-8-sig") as f:  # -sig: a byte order mark is not part of the first id
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read wav.scp ({e})") from None
    table: Dict[str, str] = {}
    unknown: _Lines = []
    files: _Lines = []  # the local files read: paths and the input files of native commands
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
        file = location
        if is_piped(location):
            pipe = parse_pipe(location)
            if not pipe.native:
                unknown.append((where, pipe.reason))
            file = pipe.file
        if file is not None and not is_url(file):
            files.append((where, file))
    return table, unknown, files


def check_wav_scp_entry(where: str, rec: str, location: str) -> None:
    """Refuse the wav.scp entries speechiter never reads: ark offsets.
    ``where`` is ``file:line``."""
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
        if text != "-1" and not re.fullmatch(NPT, text):
            raise DataError(f"{segments_path}: recording {rec!r}: {text!r} is not a number of seconds")
    return f"{absolute_location(location)}#t={start}" + ("" if end == "-1" else f",{end}")


def absolute_location(location: str) -> str:
    """A wav.scp path, or the input file of a piped command read natively,
    made absolute against the current folder (URLs as they are)."""
    if is_piped(location):
        pipe = parse_pipe(location)
        if pipe.native and not is_url(pipe.file) and not os.path.isabs(pipe.file):
            return pipe.with_file(os.path.abspath(pipe.file)).value
        return location
    return location if is_url(location) else os.path.abspath(location)
