"""A Kaldi/ESPnet data directory as utterances: wav.scp, segments, text, utt2spk, spk2utt, utt2dur, reco2dur.

The command, its options and the files it writes: speechiter/importers/kaldi.py.
"""
from __future__ import annotations

import warnings
from decimal import Decimal
from pathlib import Path

from speechiter.importers.kaldi_recordings import check_reco2dur, read_recordings, read_table
from speechiter.importers.utterance import AudioInfo, InputError, Utterance, parse_seconds, seconds_text
from speechiter.importers.writer import write_corpus
from speechiter.io.commands import COMMAND_TIMEOUT
from speechiter.io.samples import compute_num_samples, sample_range

__all__ = ["import_kaldi", "read_table"]


def _utterances(data_dir: Path, recordings, info: AudioInfo):
    """``{utt id: Utterance}`` for the segments, or for the whole recordings."""
    segments = data_dir / "segments"
    utts = {}
    if not segments.is_file():
        for rec_id, (location, relative, where) in recordings.items():
            frames, rate = info(location, where)
            utts[rec_id] = Utterance(rec_id, location, frames, seconds_text(frames / rate), relative=relative,
                                     where=where, rate=rate)
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
        location, relative, rec_where = recordings[rec_id]
        frames, rate = info(location, rec_where)
        length = sample_range(start, end, frames, rate, where, (f"segment {utt_id!r}", f"recording {rec_id!r}"))[1]
        if end is None or length != compute_num_samples(end - start, rate):
            duration = seconds_text(length / rate)  # open or clipped: what exists
        else:
            duration = _decimal_text(Decimal(end_text) - Decimal(start_text))
        utts[utt_id] = Utterance(utt_id, location, length, duration, start_text, end_text, relative=relative,
                                 where=where, rate=rate)
    if not utts:
        raise InputError(f"{segments}: lists no segments (the file is empty)")
    return utts


def _decimal_text(value: Decimal) -> str:
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _attach(data_dir: Path, utts, extra_recordings=()):
    """Add text, speakers and durations from the optional files (an empty
    transcript is kept as ""; see write_corpus)."""
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
    if extra_recordings:
        dropped["reco2dur"] = len(extra_recordings)
    if dropped:
        warnings.warn("lines for utterances not in the data directory were dropped: "
                      + ", ".join(f"{n} in {name}" for name, n in dropped.items()), stacklevel=2)


def import_kaldi(data_dir, out_dir, root=".", absolute=False, sample_rate=None, allow_commands=False,
                 command_timeout=COMMAND_TIMEOUT):
    """Convert ``data_dir`` into ``out_dir``; returns ``{file name: lines}``.
    ``sample_rate``: write idx2wav_len at that rate (None: each recording's
    own). ``allow_commands``: run piped commands that are not read natively
    (for at most ``command_timeout`` seconds each). Raises DataError (one
    line) for bad input."""
    data_dir, out_dir, root = Path(data_dir), Path(out_dir), Path(root).resolve()
    if not data_dir.is_dir():
        raise InputError(f"{data_dir}: no such data directory")
    recordings = read_recordings(data_dir, root, allow_commands)
    info = AudioInfo(allow_commands, command_timeout)
    utts = _utterances(data_dir, recordings, info)
    extra = check_reco2dur(data_dir, recordings, info)
    _attach(data_dir, utts, extra)
    return write_corpus(out_dir, utts.values(), absolute, sample_rate=sample_rate)
