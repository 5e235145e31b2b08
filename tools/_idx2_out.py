"""What tools/import_kaldi.py and tools/import_lhotse.py share: one utterance
record, the segment rules, audio headers, and the writer of the idx2 files.

Standalone on purpose (numpy-free, only soundfile, and fsspec for URLs): the
importers do not depend on the package's internals.

# NOTE [ Segment layout ]

An utterance that is a time range of a recording is written in ``idx2wav`` as
the recording's path or URL followed by a W3C Media Fragments time suffix::

    utt1 /data/rec1.flac#t=12.340,15.670    # seconds [start, end)
    utt2 /data/rec1.flac#t=15.670           # open end: to the end of the file
    utt3 /data/rec2.flac                    # a whole recording: no suffix

The times are written as the source gives them (Kaldi's text as it stands in
``segments``; Lhotse's float ``start`` and ``end``, shortest repr), never
rounded further. Paths containing ``#`` are refused, so a ``#`` in an idx2wav
value always starts the fragment.

# NOTE [ Segment samples ]

Samples follow Lhotse's rule (``lhotse.utils.compute_num_samples``, used by
``Recording.load_audio(offset, duration)`` and its soundfile backend), so an
imported corpus reads the very samples Lhotse reads:

    first sample = half_up(start * sr)
    num samples  = half_up((end - start) * sr)       (idx2wav_len)

where ``half_up(x)`` rounds ``x`` to 8 decimals, then halves away from zero
(not Python's round(), which rounds halves to even). Note the off-by-one: the
last sample read is NOT always ``half_up(end * sr) - 1``. At 22050 Hz,
``#t=0.01,0.02`` reads samples 221..441 (221 of them), while
``half_up(0.02 * 22050) = 441``. A reader must take the count from the
duration, as here. An open end reads ``frames - first sample`` samples.

A segment that runs past the end of its file by at most ``MAX_OVERSHOOT``
seconds (0.5 s, Kaldi's ``extract-segments --max-overshoot`` default) is
clipped to the file's end (idx2wav_len counts the samples that exist; the
``#t=`` suffix keeps the source's end); a larger overshoot, or a start at or
past the end, is an error.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import warnings
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

MAX_OVERSHOOT = 0.5  # seconds; see NOTE [ Segment samples ]
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_NPT_RE = re.compile(r"^[0-9]+(\.[0-9]*)?$")  # Media Fragments npt-sec, no hh:mm:ss


class InputError(Exception):
    """Bad input: the tools print it as one line and exit with code 2."""


class Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr, exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


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


# ------------------------------------------------------------------ numbers


def half_up(x: float) -> int:
    """Lhotse's rounding (compute_num_samples): 8 decimals, then halves up."""
    return int(Decimal(round(x, ndigits=8)).quantize(0, rounding=ROUND_HALF_UP))


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


def segment_samples(start: float, end: Optional[float], frames: int, sample_rate: int, where: str) -> int:
    """The number of samples of a segment (see NOTE [ Segment samples ])."""
    first = half_up(start * sample_rate)
    if first >= frames:
        raise InputError(f"{where}: segment starts at {start} s, at or past the end of its recording "
                         f"({frames / sample_rate:.3f} s)")
    if end is None:
        return frames - first
    count = half_up((end - start) * sample_rate)
    if first + count > frames:
        if end - frames / sample_rate > MAX_OVERSHOOT:
            raise InputError(f"{where}: segment ends at {end} s, more than {MAX_OVERSHOOT} s past the end "
                             f"of its recording ({frames / sample_rate:.3f} s)")
        count = frames - first
    return count


# -------------------------------------------------------------- locations


def is_url(value: str) -> bool:
    return bool(_URL_RE.match(value))


def resolve(value: str, root: Path, where: str) -> Tuple[str, bool]:
    """``(location, relative)`` of an audio path or URL from a manifest: URLs
    and absolute paths as they are, relative paths joined to ``root``, paths
    normalised. Refuses ``#`` (see NOTE [ Segment layout ])."""
    if "#" in value:
        raise InputError(f"{where}: {value!r} contains '#', which idx2wav reserves for the #t= time suffix")
    if is_url(value):
        return value, False
    value = os.path.expanduser(value)
    return os.path.normpath(os.path.join(os.fspath(root), value)), not os.path.isabs(value)


def output_value(utt: Utterance, out_dir: Path, absolute: bool) -> str:
    """What idx2wav holds for ``utt``'s audio: URLs and absolute paths as
    they are; relative paths relative to ``out_dir`` (an idx2 value resolves
    against its file's folder), or absolute when ``absolute``."""
    if not utt.relative or absolute:
        return utt.location
    return os.path.relpath(utt.location, os.path.abspath(out_dir))


class AudioInfo:
    """``(frames, sample_rate)`` from audio headers, once per location
    (soundfile.info; URLs through fsspec)."""

    def __init__(self):
        self._cache: Dict[str, Tuple[int, int]] = {}

    def __call__(self, location: str, where: str) -> Tuple[int, int]:
        info = self._cache.get(location)
        if info is None:
            info = self._cache[location] = _header(location, where)
        return info


def _header(location, where):
    import soundfile

    try:
        if is_url(location):
            try:
                import fsspec
            except ImportError:
                raise InputError(f"{where}: reading {location} needs fsspec (pip install 'speechiter[s3]')") from None
            with fsspec.open(location, "rb") as f:
                info = soundfile.info(f)
        else:
            if not os.path.isfile(location):
                raise InputError(f"{where}: no such audio file: {location}")
            info = soundfile.info(location)
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{where}: no such audio file: {location}") from None
    except Exception as e:  # soundfile/fsspec raise many kinds; all mean "cannot read this header"
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{where}: cannot read the audio header of {location} ({reason})") from None
    if info.frames <= 0:
        raise InputError(f"{where}: {location} has no audio frames")
    return int(info.frames), int(info.samplerate)


# ------------------------------------------------------------------ writing


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


def run_main(parser, convert, args) -> int:
    """Shared tail of main(): one error line and exit code 2 for bad input,
    warnings as one line each, a summary on success."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            written = convert(args)
        except InputError as e:
            error = e
        else:
            error = None
    for w in caught:
        print(f"{parser.prog}: warning: {w.message}", file=sys.stderr)
    if error is not None:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(f'{name} ({n})' for name, n in written.items())} to {args.out_dir}")
    return 0
