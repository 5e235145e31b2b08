"""A Kaldi data directory's tables, and its recordings: wav.scp (paths, URLs, piped commands) and reco2dur.

What idx2wav holds for a piped recording (see NOTE [ Piped values ] in
speechiter/io/pipes.py): the input file itself when the command's output is
that file's samples unchanged (``flac -c -d -s a.flac |``, ``sox a.wav -t wav
- |`` ...; a relative path then stays relative, as any wav.scp path); else
the command with its input file made absolute (``sox /data/a.wav -t wav -r
8000 - |``), which the reader runs natively. Commands speechiter does not read
natively are refused all at once unless ``--allow_commands``; then idx2wav
keeps them as written and they run at import (for their lengths) and when
read.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import soundfile

from speechiter.errors import DataError
from speechiter.importers.utterance import AudioInfo, InputError, parse_seconds, resolve
from speechiter.io.commands import refuse_commands
from speechiter.io.kaldi_segments import check_wav_scp_entry
from speechiter.io.piped import check_channel
from speechiter.io.pipes import Pipe, is_piped, parse_pipe
from speechiter.io.sphere import check_sphere
from speechiter.io.storage import is_url

__all__ = ["Recording", "read_table", "read_recordings", "check_reco2dur", "RECO2DUR_TOLERANCE"]

#: seconds a reco2dur value may differ from the recording's length
RECO2DUR_TOLERANCE = 0.1
_SHOWN = 3
_PCM16 = ("PCM_16", "PCM_S8", "PCM_U8")  # 16-bit rounding leaves these samples as they are


class Recording(NamedTuple):
    location: str  # absolute path, URL, or a piped value
    relative: bool  # the path was relative in wav.scp
    where: str  # wav.scp:line


def read_table(path: Path, fields=None):
    """``[(lineno, id, rest)]`` of a Kaldi table file: ``rest`` is the rest of
    the line (``fields=None``) or a list of exactly ``fields - 1`` fields.
    Raises InputError for a malformed line or a duplicate id. A UTF-8 byte
    order mark at the start is not part of the first id."""
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    rows, seen = [], {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if fields is None:
            parts = line.split(None, 1)
            rest = parts[1].strip() if len(parts) == 2 else ""
        else:
            parts = line.split()
            if len(parts) != fields:
                raise InputError(f"{path}:{lineno}: expected {fields} fields, got {len(parts)}: {line.strip()!r}")
            rest = parts[1:]
        utt_id = parts[0]
        if utt_id in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {utt_id!r} (first on line {seen[utt_id]})")
        seen[utt_id] = lineno
        rows.append((lineno, utt_id, rest))
    return rows


def read_recordings(data_dir, root, allow_commands: bool = False) -> Dict[str, Recording]:
    """``{recording id: Recording}`` from ``data_dir/wav.scp``."""
    wav_scp = data_dir / "wav.scp"
    if not wav_scp.is_file():
        raise InputError(f"{data_dir}: no wav.scp (is this a Kaldi data directory?)")
    recordings, unknown = {}, []
    for lineno, rec_id, value in read_table(wav_scp):
        where = f"{wav_scp}:{lineno}"
        if not value:
            raise InputError(f"{where}: recording {rec_id!r} has no path")
        check_wav_scp_entry(where, rec_id, value)  # the rule speechiter reads wav.scp by
        if not is_piped(value):
            recordings[rec_id] = Recording(*resolve(value, root, where), where)
            continue
        pipe = parse_pipe(value)
        if not pipe.native:
            unknown.append((where, pipe.reason))
            recordings[rec_id] = Recording(pipe.value, False, where)
            continue
        recordings[rec_id] = _native(pipe, root, where)
    if not recordings:
        raise InputError(f"{wav_scp}: lists no recordings (the file is empty)")
    if not allow_commands:
        refuse_commands(unknown, "pass --allow_commands")
    return recordings


def _native(pipe: Pipe, root, where: str) -> Recording:
    file, relative = resolve(pipe.file, root, where)
    if not is_url(file) and not os.path.isfile(file):
        raise InputError(f"{where}: no such audio file: {file} (the input of {pipe.command!r})")
    if pipe.sphere:
        try:
            check_sphere(file)
        except DataError as e:
            raise InputError(f"{where}: {e}") from None
    if _same_samples(pipe, file, where):
        return Recording(file, relative, where)
    return Recording(pipe.with_file(file).value, False, where)


def _same_samples(pipe: Pipe, file: str, where: str) -> bool:
    """Whether the command's output is ``file``'s samples as they are."""
    if pipe.plain:
        return True
    if is_url(file):
        return False
    try:
        info = soundfile.info(file)
    except (soundfile.LibsndfileError, RuntimeError) as e:
        raise InputError(f"{where}: {file}: cannot read audio header ({e}); the input of {pipe.command!r} "
                         f"must be a format speechiter decodes (WAV, FLAC, SPHERE, ...), or pass "
                         f"--allow_commands to run the command") from None
    try:
        check_channel(pipe, info.channels)
    except DataError as e:
        raise InputError(f"{where}: {e}") from None
    return ((pipe.channel is None or info.channels == 1) and (not pipe.mono or info.channels == 1)
            and pipe.rate in (None, info.samplerate) and (not pipe.pcm16 or info.subtype in _PCM16))


def check_reco2dur(data_dir, recordings: Dict[str, Recording], info: AudioInfo) -> List[str]:
    """Check ``data_dir/reco2dur`` (when present) against the recordings'
    lengths; raises InputError naming the first few that disagree by more than
    :data:`RECO2DUR_TOLERANCE`. Returns the ids it lists that are not in wav.scp."""
    path = data_dir / "reco2dur"
    if not path.is_file():
        return []
    bad: List[Tuple[str, str]] = []
    extra = []
    for lineno, rec_id, (text,) in read_table(path, fields=2):
        where = f"{path}:{lineno}"
        seconds = parse_seconds(text, where, "duration")[0]
        recording: Optional[Recording] = recordings.get(rec_id)
        if recording is None:
            extra.append(rec_id)
            continue
        frames, rate = info(recording.location, recording.where)
        if abs(frames / rate - seconds) > RECO2DUR_TOLERANCE:
            bad.append((where, f"recording {rec_id!r} is {frames / rate:.3f} s long ({frames} samples at "
                               f"{rate} Hz), but reco2dur says {text} s"))
    if bad:
        shown = "; ".join(f"{where}: {what}" for where, what in bad[:_SHOWN])
        more = f" (and {len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
        raise InputError(f"{shown}{more}: more than {RECO2DUR_TOLERANCE} s apart; is the audio truncated, at "
                         f"another sample rate, or reco2dur stale?")
    return extra
