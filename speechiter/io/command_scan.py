"""Unknown piped commands among a dataset's idx2 values, found when the dataset is built.

# NOTE [ Commands refused at build ]
A piped value speechiter does not read natively (NOTE [ Piped values ] in
speechiter/io/pipes.py) is refused unless ``allow_commands`` is set; that
refusal must come when the dataset is built, all at once, not when some worker
first reads one hours into a run. A direct Kaldi ``segments`` file has its
wav.scp read then (speechiter/io/kaldi_segments.py); an idx2wav written by the
Kaldi importer holds the commands itself (``sox ... |#t=1,2``). So the dataset
scans its audio column's values for ``|``: the bytes of each idx2 file are
compared in blocks (a file mapped from the plan cache is read with ``pread``,
not through its mapping, so the scan leaves no mapped pages behind), only the
values holding a ``|`` are decoded, and each distinct command is parsed once
(segments of one recording share it). No ``|`` in the file: one pass over its
bytes, nothing more.
"""
from __future__ import annotations

import os
from typing import Dict, Iterator, List, Tuple

import numpy as np

from speechiter.idx2_lines import numbered_entries
from speechiter.io.commands import refuse_commands
from speechiter.io.kaldi_segments import check_wav_scp, is_kaldi_segments
from speechiter.io.pipes import parse_pipe, split_piped_value

__all__ = ["unknown_commands", "check_commands"]

_BLOCK = 16 << 20  # bytes compared at once
_BAR = ord("|")
SHOWN = 3  # values named by file:line in an error (refuse_commands names three)


def _blocks(buffer: np.ndarray, file: str) -> Iterator[Tuple[int, np.ndarray]]:
    """``(offset, bytes)`` blocks of an idx2 file's contents: read from ``file`` when ``buffer`` maps it."""
    if isinstance(buffer, np.memmap) and os.path.isfile(file):
        scratch = bytearray(_BLOCK)
        with open(file, "rb", buffering=0) as f:
            offset = 0
            while offset < len(buffer):
                n = f.readinto(scratch)
                if not n:
                    return
                yield offset, np.frombuffer(scratch, np.uint8, n)
                offset += n
        return
    for offset in range(0, len(buffer), _BLOCK):
        yield offset, np.asarray(buffer[offset:offset + _BLOCK])


def _bars(buffer: np.ndarray, file: str) -> np.ndarray:
    """Byte offsets of every ``|`` in an idx2 file's contents."""
    found = [np.flatnonzero(block == _BAR) + offset for offset, block in _blocks(buffer, file)]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def unknown_commands(column) -> List[Tuple[str, str]]:
    """``[(where, why)]`` of the values of ``column`` (a :class:`speechiter.ids.Column`, its rows as the
    dataset keeps them) that are piped commands speechiter does not read natively, in file order; the first
    :data:`SHOWN` name their ``file:line``, the others their file."""
    found: List[Tuple[int, int, int, str]] = []  # (file number, start, row, why)
    parsed: Dict[str, str] = {}  # command -> why it is unknown ("" when native)
    for f, (buffer, file) in enumerate(zip(column.buffers, column.files)):
        bars = _bars(buffer, file)
        if not len(bars):
            continue
        rows = np.arange(len(column.starts)) if column.file_no is None else np.flatnonzero(column.file_no == f)
        order = rows[np.argsort(column.starts[rows], kind="stable")]
        at = np.searchsorted(column.starts[order], bars, side="right") - 1
        inside = at >= 0
        inside[inside] = bars[inside] < column.ends[order[at[inside]]]
        for row in np.unique(order[at[inside]]).tolist():
            start = int(column.starts[row])
            value = bytes(buffer[start:int(column.ends[row])]).decode("utf-8", "replace")
            piped = split_piped_value(value.rstrip())
            if piped is None:
                continue
            why = parsed.get(piped[0])
            if why is None:
                pipe = parse_pipe(piped[0])
                why = parsed[piped[0]] = "" if pipe.native else pipe.reason
            if why:
                found.append((f, start, row, why))
    found.sort()
    return [(_where(column, f, row) if i < SHOWN else column.files[f], why)
            for i, (f, _, row, why) in enumerate(found)]


def _where(column, f: int, row: int) -> str:
    """``file:line`` of a row (the error path only: the file is read again to find the line)."""
    file, uid = column.files[f], column.index.ids[row].decode("utf-8")
    try:
        with open(file, encoding="utf-8-sig", errors="replace") as text:
            return next((f"{file}:{n}" for n, line_id, _ in numbered_entries(text.read()) if line_id == uid), file)
    except OSError:
        return file


def check_commands(sources: List[str], column, allow_commands: bool) -> None:
    """At build (See NOTE [ Commands refused at build ]): read the wav.scp behind each Kaldi ``segments``
    file of ``sources`` (its missing files and unknown commands refused, all at once), and, unless
    ``allow_commands``, refuse the unknown commands among ``column``'s values."""
    how = "set the dataset's allow_commands: true"
    for source in sources:
        if is_kaldi_segments(source):
            check_wav_scp(os.path.join(os.path.dirname(source), "wav.scp"), allow_commands, how)
    if not allow_commands and column is not None and hasattr(column, "buffers"):
        refuse_commands(unknown_commands(column), how)
