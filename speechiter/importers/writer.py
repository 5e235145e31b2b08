"""The importers' writer: utterances in, idx2wav / idx2wav_len / idx2dur / idx2text / idx2spk / spk_list out.

# NOTE [ Segment layout ]

An utterance that is a time range of a recording is written in ``idx2wav`` as
the recording's path or URL followed by a W3C Media Fragments time suffix::

    utt1 /data/rec1.flac#t=12.340,15.670    # seconds [start, end)
    utt2 /data/rec1.flac#t=15.670           # open end: to the end of the file
    utt3 /data/rec2.flac                    # a whole recording: no suffix

The times are written as the source gives them (Kaldi's text as it stands in
``segments``; Lhotse's float ``start`` and ``end``, shortest repr), never
rounded further. Paths containing ``#`` are refused, so a ``#`` in an idx2wav
value always starts the fragment. ``idx2wav_len`` counts samples by NOTE
[ Segment samples ] in speechiter/io/samples.py, the rule the reader uses.

# NOTE [ Whole imports ]

An import either writes files that load or writes nothing: every id and value
is checked (:func:`check_utterance`) before the first byte is written, and an
error names the input line the utterance came from. The files are written
into a new folder beside OUT_DIR; a new OUT_DIR is that folder renamed (it
appears whole). Into an existing OUT_DIR (which may hold other files, even
the audio) the new files are moved one by one, and the importer's files that
the new import does not write (an earlier import's idx2text, say) are removed
first, so no file of an earlier import stays beside the new idx2wav.
"""
from __future__ import annotations

import math
import os
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from speechiter.importers.utterance import InputError, Utterance
from speechiter.io.samples import resampled_length

__all__ = ["IMPORTER_FILES", "check_utterance", "write_corpus"]

#: Every file an importer writes; an import replaces all of them (NOTE [ Whole imports ]).
IMPORTER_FILES = ("idx2wav", "idx2wav_len", "idx2dur", "idx2text", "idx2spk", "spk_list")


def output_value(utt: Utterance, out_dir: Path, absolute: bool) -> str:
    """What idx2wav holds for ``utt``'s audio: URLs and absolute paths as
    they are; relative paths relative to ``out_dir`` (an idx2 value resolves
    against its file's folder), or absolute when ``absolute``."""
    if not utt.relative or absolute:
        return utt.location
    return os.path.relpath(utt.location, os.path.abspath(out_dir))


def wav_value(utt: Utterance, out_dir: Path, absolute: bool) -> str:
    value = output_value(utt, out_dir, absolute)
    if utt.start is None:
        return value
    return f"{value}#t={utt.start}" + ("" if utt.end is None else f",{utt.end}")


def _one_line(rows):
    """``[(id, value)]`` with whitespace runs made single spaces; rows whose
    value is None or blank are left out (counted as missing)."""
    rows = [(i, " ".join(v.split())) for i, v in rows if v is not None]
    return [(i, v) for i, v in rows if v]


def _seconds(text: Optional[str]) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def check_utterance(utt: Utterance) -> None:
    """Raise InputError naming ``utt.where`` (its input line) unless every
    file speechiter reads would take ``utt`` as it is: an id that is one
    non-empty word, one-line paths, a positive length and duration, a finite
    start that is not negative and an end after it."""
    where = f"{utt.where}: " if utt.where else ""
    if not utt.id or any(c.isspace() or c == "\0" for c in utt.id):
        raise InputError(f"{where}utterance id {utt.id!r} is empty or contains whitespace or a NUL; "
                         f"idx2 files need an id of one word")
    if "\n" in utt.location or "\r" in utt.location:
        raise InputError(f"{where}utterance {utt.id!r}: its audio path {utt.location!r} contains a line break")
    if not isinstance(utt.length, int) or utt.length <= 0:
        raise InputError(f"{where}utterance {utt.id!r} has {utt.length} samples; it should have at least one")
    duration = _seconds(utt.duration)
    if not (math.isfinite(duration) and duration > 0):
        raise InputError(f"{where}utterance {utt.id!r} has duration {utt.duration} s; it should be a positive, "
                         f"finite number of seconds")
    if utt.start is not None:
        start, end = _seconds(utt.start), _seconds(utt.end) if utt.end is not None else None
        if not (math.isfinite(start) and start >= 0):
            raise InputError(f"{where}utterance {utt.id!r} starts at {utt.start} s; a start should be a finite "
                             f"number of seconds, not negative")
        if end is not None and not (math.isfinite(end) and end > start):
            raise InputError(f"{where}utterance {utt.id!r} ends at {utt.end} s, not after its start "
                             f"({utt.start} s)")


def write_corpus(out_dir, utterances: Iterable[Utterance], absolute: bool = False,
                 extra: Optional[Dict[str, str]] = None, sample_rate: Optional[int] = None) -> Dict[str, int]:
    """Check every utterance, then write idx2wav, idx2wav_len, idx2dur,
    idx2text, idx2spk and spk_list (sorted by id, as tools/make_corpus.py
    does) into ``out_dir`` as a whole (NOTE [ Whole imports ]); files with no
    entries are not written. ``extra``: more files (name: text) written with
    them. ``sample_rate``: idx2wav_len at that rate (See NOTE [ One sample
    rate ]). Returns ``{file name: lines}``."""
    out_dir = Path(out_dir)
    utts: List[Utterance] = sorted(utterances, key=lambda u: u.id)
    if not utts:
        raise InputError("no utterances to write")
    for utt in utts:
        check_utterance(utt)
    for a, b in zip(utts, utts[1:]):
        if a.id == b.id:
            raise InputError(f"{b.where + ': ' if b.where else ''}utterance id {a.id!r} occurs twice")
    columns = {
        "idx2wav": [(u.id, wav_value(u, out_dir, absolute)) for u in utts],
        "idx2wav_len": [(u.id, str(_length(u, sample_rate))) for u in utts],
        "idx2dur": [(u.id, u.duration) for u in utts],
        "idx2text": _one_line((u.id, u.text) for u in utts),
        "idx2spk": _one_line((u.id, u.speaker) for u in utts),
    }
    for utt_id, value in columns["idx2spk"]:
        if " " in value:
            raise InputError(f"utterance {utt_id!r}: speaker {value!r} contains whitespace")
    files = {name: "".join(f"{i} {v}\n" for i, v in rows) for name, rows in columns.items() if rows}
    written = {name: len(rows) for name, rows in columns.items() if rows}
    if columns["idx2spk"]:
        speakers = sorted({v for _, v in columns["idx2spk"]})
        files["spk_list"], written["spk_list"] = "".join(f"{s}\n" for s in speakers), len(speakers)
    files.update(extra or {})
    _replace_files(out_dir, files)
    empty = [u for u in utts if u.text is not None and not u.text.strip()]
    missing = {name: len(utts) - len(columns[name]) for name in ("idx2text", "idx2spk") if columns[name]}
    missing["idx2text"] = missing.get("idx2text", 0) - len(empty)
    for name, count in missing.items():
        if count:
            warnings.warn(f"{count} of {len(utts)} utterances have no entry in {name}", stacklevel=2)
    if empty:
        warnings.warn(f"{len(empty)} of {len(utts)} utterances have an empty transcript (first: {empty[0].id!r}, "
                      f"{empty[0].where or 'no line'}); an idx2 line needs a value, so idx2text leaves them out "
                      f"(idx2wav, idx2wav_len and idx2dur keep them), and a dataset that reads main_data text "
                      f"drops them", stacklevel=2)
    if sample_rate is None:
        _warn_mixed_rates(utts)
    return written


# NOTE [ One sample rate ]
# idx2wav_len counts the samples a dataset reads, and a dataset reads at one
# rate (its sample_rate), resampling what is stored at another. So an import
# with sample_rate writes each length as the resampler will produce it,
# resampled_length(length, rate, sample_rate) (speechiter/io/samples.py); one
# without it writes each at its recording's rate and warns when those differ.


def _length(utt: Utterance, sample_rate: Optional[int]) -> int:
    if sample_rate is None or utt.rate is None or utt.rate == sample_rate:
        return utt.length
    return resampled_length(utt.length, utt.rate, sample_rate)


def _warn_mixed_rates(utts: List[Utterance]) -> None:
    counts: Dict[int, int] = {}
    for utt in utts:
        if utt.rate is not None:
            counts[utt.rate] = counts.get(utt.rate, 0) + 1
    if len(counts) > 1:
        rates = ", ".join(f"{rate} Hz ({n})" for rate, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        warnings.warn(f"utterances at several sample rates: {rates}; idx2wav_len counts each at its own rate, so "
                      f"a dataset reading at one sample_rate would batch on wrong lengths: pass --sample_rate "
                      f"(the dataset's) to write them all at that rate", stacklevel=2)


def _replace_files(out_dir: Path, files: Dict[str, str]) -> None:
    """Write ``files`` into ``out_dir``, replacing the importer's files there
    as a whole (See NOTE [ Whole imports ])."""
    parent = out_dir.absolute().parent
    tmp = parent / f".{out_dir.name}.import-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(tmp)  # not mkdtemp: the folder may become OUT_DIR, with the usual permissions
        try:
            for name, text in files.items():
                with open(tmp / name, "w", encoding="utf-8") as f:
                    f.write(text)
            if not os.path.lexists(out_dir):
                os.rename(tmp, out_dir)
                return
            for name in IMPORTER_FILES:
                if name not in files and os.path.lexists(out_dir / name):
                    os.unlink(out_dir / name)
            for name in files:
                os.replace(tmp / name, out_dir / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise InputError(f"{out_dir}: cannot write ({e.strerror or e})") from None
