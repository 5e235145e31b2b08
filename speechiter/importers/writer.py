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
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Dict, Iterable, List

from speechiter.importers.utterance import InputError, Utterance

__all__ = ["write_corpus"]


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


def write_corpus(out_dir, utterances: Iterable[Utterance], absolute: bool = False) -> Dict[str, int]:
    """Write idx2wav, idx2wav_len, idx2dur, idx2text, idx2spk and spk_list
    (sorted by id, as tools/make_corpus.py does) into ``out_dir``; files with
    no entries are not written. Returns ``{file name: lines}``."""
    out_dir = Path(out_dir)
    utts: List[Utterance] = sorted(utterances, key=lambda u: u.id)
    if not utts:
        raise InputError("no utterances to write")
    for a, b in zip(utts, utts[1:]):
        if a.id == b.id:
            raise InputError(f"utterance id {a.id!r} occurs twice")
    columns = {
        "idx2wav": [(u.id, wav_value(u, out_dir, absolute)) for u in utts],
        "idx2wav_len": [(u.id, str(u.length)) for u in utts],
        "idx2dur": [(u.id, u.duration) for u in utts],
        "idx2text": _one_line((u.id, u.text) for u in utts),
        "idx2spk": _one_line((u.id, u.speaker) for u in utts),
    }
    for utt_id, value in columns["idx2spk"]:
        if " " in value:
            raise InputError(f"utterance {utt_id!r}: speaker {value!r} contains whitespace")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, rows in columns.items():
            if rows:
                _write_atomic(out_dir / name, "".join(f"{i} {v}\n" for i, v in rows))
                written[name] = len(rows)
        if columns["idx2spk"]:
            speakers = sorted({v for _, v in columns["idx2spk"]})
            _write_atomic(out_dir / "spk_list", "".join(f"{s}\n" for s in speakers))
            written["spk_list"] = len(speakers)
    except OSError as e:
        raise InputError(f"{out_dir}: cannot write ({e.strerror or e})") from None
    missing = {name: len(utts) - len(columns[name]) for name in ("idx2text", "idx2spk") if columns[name]}
    for name, count in missing.items():
        if count:
            warnings.warn(f"{count} of {len(utts)} utterances have no entry in {name}", stacklevel=2)
    return written


def _write_atomic(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
