"""A Kaldi/ESPnet data directory as utterances: wav.scp, segments, text, utt2spk, spk2utt, utt2dur.

The command, its options and the files it writes: speechiter/importers/kaldi.py.
"""
from __future__ import annotations

import warnings
from decimal import Decimal
from pathlib import Path

from speechiter.importers.utterance import AudioInfo, InputError, Utterance, parse_seconds, resolve, seconds_text
from speechiter.importers.writer import write_corpus
from speechiter.io.kaldi_segments import check_wav_scp_entry
from speechiter.io.samples import compute_num_samples, sample_range

__all__ = ["import_kaldi", "read_table"]

_SEGMENT = ("segment", "its recording")  # a segment in messages (see sample_range)


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


def _recordings(data_dir: Path, root: Path):
    """``{recording id: ((location, relative), where)}`` from wav.scp."""
    wav_scp = data_dir / "wav.scp"
    if not wav_scp.is_file():
        raise InputError(f"{data_dir}: no wav.scp (is this a Kaldi data directory?)")
    recordings = {}
    for lineno, rec_id, value in read_table(wav_scp):
        where = f"{wav_scp}:{lineno}"
        if not value:
            raise InputError(f"{where}: recording {rec_id!r} has no path")
        check_wav_scp_entry(where, rec_id, value)  # the rule speechiter reads wav.scp by
        recordings[rec_id] = (resolve(value, root, where), where)
    if not recordings:
        raise InputError(f"{wav_scp}: lists no recordings (the file is empty)")
    return recordings


def _utterances(data_dir: Path, recordings, info: AudioInfo):
    """``{utt id: Utterance}`` for the segments, or for the whole recordings."""
    segments = data_dir / "segments"
    utts = {}
    if not segments.is_file():
        for rec_id, ((location, relative), where) in recordings.items():
            frames, rate = info(location, where)
            utts[rec_id] = Utterance(rec_id, location, frames, seconds_text(frames / rate), relative=relative,
                                     where=where)
        return utts
    for lineno, utt_id, (rec_id, start_text, end_text) in read_table(segments, fields=4):
        where = f"{segments}:{lineno}"
        if rec_id not in recordings:
            raise InputError(f"{where}: segment {utt_id!r}: recording {rec_id!r} is not in wav.scp")
        start, start_text = parse_seconds(start_text, where, "start")
        if end_text.strip() == "-1":
            end = end_text = None
        else:
            end, end_text = parse_seconds(end_text, where, "end")
            if end <= start:
                raise InputError(f"{where}: segment {utt_id!r} ends at {end_text} s, not after its start "
                                 f"({start_text} s)")
        (location, relative), rec_where = recordings[rec_id]
        frames, rate = info(location, rec_where)
        length = sample_range(start, end, frames, rate, where, _SEGMENT)[1]
        if end is None or length != compute_num_samples(end - start, rate):
            duration = seconds_text(length / rate)  # open or clipped: what exists
        else:
            duration = _decimal_text(Decimal(end_text) - Decimal(start_text))
        utts[utt_id] = Utterance(utt_id, location, length, duration, start_text, end_text, relative=relative,
                                 where=where)
    if not utts:
        raise InputError(f"{segments}: lists no segments (the file is empty)")
    return utts


def _decimal_text(value: Decimal) -> str:
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _attach(data_dir: Path, utts):
    """Add text, speakers and durations from the optional files."""
    dropped = {}

    def known(path, rows):
        kept = [r for r in rows if r[1] in utts]
        if len(kept) != len(rows):
            dropped[path.name] = len(rows) - len(kept)
        return kept

    text = data_dir / "text"
    if text.is_file():
        for _, utt_id, value in known(text, read_table(text)):
            utts[utt_id].text = value
    utt2spk, spk2utt = data_dir / "utt2spk", data_dir / "spk2utt"
    speakers = {}
    if utt2spk.is_file():
        for _, utt_id, (spk,) in known(utt2spk, read_table(utt2spk, fields=2)):
            speakers[utt_id] = spk
    if spk2utt.is_file():
        from_spk2utt = {}
        for lineno, spk, members in read_table(spk2utt):
            for utt_id in members.split():
                if utt_id in from_spk2utt:
                    raise InputError(f"{spk2utt}:{lineno}: utterance {utt_id!r} is listed under two speakers")
                if utt2spk.is_file() and utt_id in utts and speakers.get(utt_id) != spk:
                    raise InputError(f"{spk2utt}:{lineno}: utterance {utt_id!r} is under speaker {spk!r}, but "
                                     f"utt2spk says {speakers.get(utt_id)!r}")
                from_spk2utt[utt_id] = spk
        if not utt2spk.is_file():
            for utt_id, spk in from_spk2utt.items():
                if utt_id in utts:
                    speakers[utt_id] = spk
    for utt_id, spk in speakers.items():
        utts[utt_id].speaker = spk
    utt2dur = data_dir / "utt2dur"
    if utt2dur.is_file():
        for lineno, utt_id, (dur,) in known(utt2dur, read_table(utt2dur, fields=2)):
            seconds, utts[utt_id].duration = parse_seconds(dur, f"{utt2dur}:{lineno}", "duration")
            if seconds == 0:
                raise InputError(f"{utt2dur}:{lineno}: duration should be positive, but got {dur!r}")
    if dropped:
        warnings.warn("lines for utterances not in the data directory were dropped: "
                      + ", ".join(f"{n} in {name}" for name, n in dropped.items()), stacklevel=2)


def import_kaldi(data_dir, out_dir, root=".", absolute=False):
    """Convert ``data_dir`` into ``out_dir``; returns ``{file name: lines}``.
    Raises DataError (one line) for bad input."""
    data_dir, out_dir, root = Path(data_dir), Path(out_dir), Path(root).resolve()
    if not data_dir.is_dir():
        raise InputError(f"{data_dir}: no such data directory")
    recordings = _recordings(data_dir, root)
    utts = _utterances(data_dir, recordings, AudioInfo())
    _attach(data_dir, utts)
    return write_corpus(out_dir, utts.values(), absolute)
