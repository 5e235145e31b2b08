"""Generate a synthetic LibriSpeech-like corpus for tests and benchmarks.

    python tools/make_corpus.py OUT_DIR --num 400 --format flac
    python tools/make_corpus.py OUT_DIR --num 10000000 --lengths_only

Files written in OUT_DIR (SpeeChain layout, one ``<id> <value>`` per line,
sorted by id):

- ``idx2wav``: relative paths, ``wav/spk003/spk003-0001-0042.wav`` (``flac/...``
  for flac) or ``chunk_000.hdf5:spk003-0001-0042`` for hdf5 (``--chunk_size``
  utterances per chunk, 500 by default; int16 datasets with a ``sample_rate``
  attribute);
- ``idx2wav_len``: length in samples;
- ``idx2text``: random uppercase words, ~2.7 words per second;
- ``idx2spk``, ``idx2gen`` (``m``/``f``, one per speaker), and ``spk_list``.

Utterance ids are ``spk<S>-<C>-<I>``: speaker (from 1), chapter (100
utterances each, from 1), index in the chapter (from 1).

Duration law (seconds), LibriSpeech-train-like: a mixture of 75%
N(14.0, 1.8) clipped to [10, 17.5], 23% U(1, 10) and 2% U(17.5, 35). Over 1M
draws: mean 12.3 s, percentiles 5/25/50/75/95/99 = 2.9/10.5/13.4/14.9/17.2/26.3 s,
71% between 10 and 17 s, range 1-35 s. ``--min_sec/--max_sec`` replace it by
U(min_sec, max_sec) (short utterances for tests).

Audio is a speaker-specific tone (110-260 Hz, amplitude 0.05) plus uniform
noise (amplitude ~0.006), int16 PCM: cheap to make and to encode (400
utterances of flac in about 2 s).

The same seed gives the same files. The ids, idx2wav and idx2wav_len do not
depend on ``--lengths_only``, which writes only those two files (pointing to
files that do not exist), vectorised, for up to 10M utterances in seconds.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

FORMATS = ("wav", "flac", "hdf5")
CHAPTER_SIZE = 100
WORDS_PER_SECOND = 2.7
TONE_AMPLITUDE = 1600  # int16 units (~0.05 full scale)
NOISE_AMPLITUDE = 200
_ROWS_PER_BLOCK = 1 << 20  # lines formatted per numpy block in the writers

WORDS = (
    "THE AND OF TO A IN THAT HE WAS IT HIS HER YOU AS HAD WITH FOR SHE NOT AT BUT BE MY ON HAVE HIM IS SAID "
    "ME WHICH BY SO THIS ALL FROM THEY NO WERE IF WOULD OR WHEN WHAT THERE BEEN ONE COULD VERY AN WHO "
    "MORNING RIVER HOUSE LITTLE GREAT OLD NIGHT HAND EYES DOOR WINDOW LIGHT WATER SILENCE GARDEN LETTER "
    "STRANGE QUIETLY TOWARDS AFTERWARDS REMEMBERED ANSWERED CAPTAIN FATHER MOTHER CHILDREN COUNTRY "
    "THOUGHT WALKED LOOKED TURNED BEGAN SHOULD AGAIN NEVER ALWAYS BEFORE UNDER ANOTHER"
).split()


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr, exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


# ----------------------------------------------------------------- the plan


def _streams(seed):
    """Independent generators for each decision, so that changing one part
    (e.g. the duration override) does not shift the others."""
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed should be a non-negative integer, but got seed={seed!r}")
    speakers, durations, genders, text = np.random.SeedSequence(int(seed)).spawn(4)
    return (np.random.default_rng(speakers), np.random.default_rng(durations),
            np.random.default_rng(genders), np.random.default_rng(text))


def sample_durations(num, rng, min_sec=None, max_sec=None):
    """``num`` durations in seconds: the LibriSpeech-like law in the module
    docstring, or U(min_sec, max_sec) when both are given."""
    if min_sec is not None or max_sec is not None:
        if min_sec is None or max_sec is None or not 0 < min_sec <= max_sec:
            raise ValueError(f"need 0 < min_sec <= max_sec, but got min_sec={min_sec}, max_sec={max_sec}")
        return rng.uniform(min_sec, max_sec, num)
    pick = rng.random(num)
    main = np.clip(rng.normal(14.0, 1.8, num), 10.0, 17.5)
    short = rng.uniform(1.0, 10.0, num)
    long = rng.uniform(17.5, 35.0, num)
    return np.where(pick < 0.75, main, np.where(pick < 0.98, short, long))


def plan_corpus(num, sample_rate=16000, seed=0, speakers=10, min_sec=None, max_sec=None):
    """The corpus as arrays, sorted by id: a dict with ``speaker`` (1-based),
    ``chapter``, ``index``, ``num_samples`` (int64, length num) and the
    per-speaker ``gender`` (str array, length ``speakers``)."""
    for name, value in (("num", num), ("sample_rate", sample_rate), ("speakers", speakers)):
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} should be a positive integer, but got {name}={value!r}")
    spk_rng, dur_rng, gen_rng, _ = _streams(seed)
    counts = spk_rng.multinomial(num, np.full(speakers, 1.0 / speakers))
    speaker = np.repeat(np.arange(1, speakers + 1, dtype=np.int64), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    position = np.arange(num, dtype=np.int64) - starts
    seconds = sample_durations(num, dur_rng, min_sec, max_sec)
    num_samples = np.maximum(np.rint(seconds * sample_rate).astype(np.int64), 1)
    return {
        "speaker": speaker,
        "chapter": position // CHAPTER_SIZE + 1,
        "index": position % CHAPTER_SIZE + 1,
        "num_samples": num_samples,
        "gender": np.where(gen_rng.random(speakers) < 0.5, "f", "m"),
    }


# ----------------------------------------------------------- vectorised text
# Lines are built as (rows, width) uint8 matrices; byte 0 marks "no character"
# (number padding) and is dropped when the matrix is flattened.


def _ascii(text, rows):
    return np.broadcast_to(np.frombuffer(text.encode("ascii"), np.uint8), (rows, len(text)))


def _digits(values, width, pad=True):
    """Zero-padded decimal digits of ``values`` as a (rows, width) matrix;
    with ``pad=False`` leading zeros become byte 0 (dropped later)."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    digits = values[:, None] // powers % 10
    out = (digits + 48).astype(np.uint8)
    if not pad:
        leading = np.cumsum(digits != 0, axis=1) == 0
        leading[:, -1] = False
        out[leading] = 0
    return out


def _width(max_value, minimum):
    return max(minimum, len(str(int(max_value))))


class _IdFormat:
    def __init__(self, plan):
        self.spk_width = _width(plan["speaker"].max(initial=1), 3)
        self.chapter_width = _width(plan["chapter"].max(initial=1), 4)
        self.index_width = _width(plan["index"].max(initial=1), 4)

    def speaker(self, speaker):
        return np.concatenate([_ascii("spk", len(speaker)), _digits(speaker, self.spk_width)], axis=1)

    def utterance(self, plan, rows):
        n = rows.stop - rows.start
        return np.concatenate([
            self.speaker(plan["speaker"][rows]), _ascii("-", n),
            _digits(plan["chapter"][rows], self.chapter_width), _ascii("-", n),
            _digits(plan["index"][rows], self.index_width),
        ], axis=1)

    def speaker_id(self, speaker):
        return f"spk{speaker:0{self.spk_width}d}"


def _join(columns):
    matrix = np.concatenate(columns, axis=1)
    return matrix[matrix != 0].tobytes()


def _wav_column(fmt, ids, speaker_ids, rows, chunk_size):
    n = rows.stop - rows.start
    if fmt == "hdf5":
        chunk = np.arange(rows.start, rows.stop, dtype=np.int64) // chunk_size
        return [_ascii("chunk_", n), _digits(chunk, 3), _ascii(".hdf5:", n), ids]
    return [_ascii(f"{fmt}/", n), speaker_ids, _ascii("/", n), ids, _ascii(f".{fmt}", n)]


def write_index_files(out_dir, plan, fmt, chunk_size=500):
    """Write idx2wav and idx2wav_len for ``plan`` (vectorised, in blocks)."""
    out_dir = Path(out_dir)
    ids_format = _IdFormat(plan)
    num = len(plan["speaker"])
    len_width = _width(plan["num_samples"].max(initial=1), 1)
    with open(out_dir / "idx2wav", "wb") as wav_file, open(out_dir / "idx2wav_len", "wb") as len_file:
        for start in range(0, num, _ROWS_PER_BLOCK):
            rows = slice(start, min(num, start + _ROWS_PER_BLOCK))
            n = rows.stop - rows.start
            ids = ids_format.utterance(plan, rows)
            speaker_ids = ids_format.speaker(plan["speaker"][rows])
            space, newline = _ascii(" ", n), _ascii("\n", n)
            wav_file.write(_join([ids, space, *_wav_column(fmt, ids, speaker_ids, rows, chunk_size), newline]))
            lengths = _digits(plan["num_samples"][rows], len_width, pad=False)
            len_file.write(_join([ids, space, lengths, newline]))


# ------------------------------------------------------------------- audio


def _utterance_audio(seed, i, num_samples, tone):
    rng = np.random.default_rng([seed, 1, i])
    offset = int(rng.integers(len(tone)))
    x = np.resize(np.roll(tone, -offset), num_samples)
    x += rng.integers(-NOISE_AMPLITUDE, NOISE_AMPLITUDE + 1, num_samples, dtype=np.int16)
    return x


def _speaker_tone(speaker, sample_rate):
    freq = 110 + (37 * speaker) % 151  # integer Hz: one second is a whole number of periods
    t = np.arange(sample_rate) / sample_rate
    return np.rint(TONE_AMPLITUDE * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def _write_audio(out_dir, plan, ids, fmt, sample_rate, seed, chunk_size):
    import soundfile

    tones = {}
    h5_file = None
    try:
        for i, utt_id in enumerate(ids):
            speaker = int(plan["speaker"][i])
            if speaker not in tones:
                tones[speaker] = _speaker_tone(speaker, sample_rate)
            x = _utterance_audio(seed, i, int(plan["num_samples"][i]), tones[speaker])
            if fmt == "hdf5":
                if i % chunk_size == 0:
                    import h5py

                    if h5_file is not None:
                        h5_file.close()
                    h5_file = h5py.File(out_dir / f"chunk_{i // chunk_size:03d}.hdf5", "w")
                dataset = h5_file.create_dataset(utt_id, data=x)
                dataset.attrs["sample_rate"] = sample_rate
            else:
                folder = out_dir / fmt / utt_id.split("-", 1)[0]
                folder.mkdir(parents=True, exist_ok=True)
                soundfile.write(folder / f"{utt_id}.{fmt}", x, sample_rate, subtype="PCM_16", format=fmt.upper())
    finally:
        if h5_file is not None:
            h5_file.close()


def _write_lines(path, ids, values):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{i} {v}\n" for i, v in zip(ids, values)))


# -------------------------------------------------------------------- main


def make_corpus(out_dir, num, fmt="wav", sample_rate=16000, seed=0, speakers=10,
                min_sec=None, max_sec=None, lengths_only=False, chunk_size=500):
    """Write a corpus into ``out_dir`` (created if needed) and return its Path.

    See the module docstring for the files, the ids and the duration law.
    Raises ValueError for a bad argument.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt should be one of {FORMATS}, but got fmt={fmt!r}")
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size <= 0:
        raise ValueError(f"chunk_size should be a positive integer, but got chunk_size={chunk_size!r}")
    plan = plan_corpus(num, sample_rate, seed, speakers, min_sec, max_sec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_index_files(out_dir, plan, fmt, chunk_size)
    if lengths_only:
        return out_dir

    ids_format = _IdFormat(plan)
    ids = _join([ids_format.utterance(plan, slice(0, num)), _ascii("\n", num)]).decode("ascii").split()
    speaker_of = [ids_format.speaker_id(s) for s in range(1, speakers + 1)]
    utt_speakers = [speaker_of[s - 1] for s in plan["speaker"].tolist()]
    _write_audio(out_dir, plan, ids, fmt, sample_rate, seed, chunk_size)

    text_rng = _streams(seed)[3]
    num_words = np.maximum(np.rint(plan["num_samples"] / sample_rate * WORDS_PER_SECOND), 1).astype(np.int64)
    words = np.asarray(WORDS)[text_rng.integers(len(WORDS), size=int(num_words.sum()))].tolist()
    bounds = np.concatenate([[0], np.cumsum(num_words)]).tolist()
    _write_lines(out_dir / "idx2text", ids, (" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])))
    _write_lines(out_dir / "idx2spk", ids, utt_speakers)
    _write_lines(out_dir / "idx2gen", ids, (plan["gender"][s - 1] for s in plan["speaker"].tolist()))
    used = sorted(set(utt_speakers))
    with open(out_dir / "spk_list", "w", encoding="utf-8") as f:
        f.write("".join(f"{s}\n" for s in used))
    return out_dir


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("out_dir", type=Path, help="folder to write the corpus into (created if needed)")
    parser.add_argument("--num", type=int, required=True, help="number of utterances")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="wav", help="audio storage (default wav)")
    parser.add_argument("--sample_rate", type=int, default=16000, help="sample rate in Hz (default 16000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--speakers", type=int, default=10, help="number of speakers (default 10)")
    parser.add_argument("--min_sec", type=float, help="with --max_sec: uniform durations instead of the law")
    parser.add_argument("--max_sec", type=float, help="see --min_sec")
    parser.add_argument("--chunk_size", type=int, default=500, help="utterances per HDF5 chunk (default 500)")
    parser.add_argument("--lengths_only", action="store_true",
                        help="write only idx2wav (to files that do not exist) and idx2wav_len")
    args = parser.parse_args(argv)
    try:
        out_dir = make_corpus(args.out_dir, args.num, args.fmt, args.sample_rate, args.seed, args.speakers,
                              args.min_sec, args.max_sec, args.lengths_only, args.chunk_size)
    except (ValueError, OSError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.num} utterances to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
