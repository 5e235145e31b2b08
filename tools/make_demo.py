"""Regenerate the shipped demo corpus (demo/data) with espeak-ng.

    apt-get install -y espeak-ng
    python tools/make_demo.py            # writes demo/data/{train,valid,test}, demo/data/spk_list

36 utterances: 3 synthetic "speakers" (espeak-ng voices) x 12 sentences each,
with a small seeded speed jitter per utterance. espeak-ng speaks at its native
22050 Hz; the audio is resampled to 16 kHz with soxr (HQ) and stored as 16-bit
mono FLAC. Each speaker gives 8 utterances to train, 2 to valid and 2 to test
(24 / 6 / 6). Every split folder holds the flac files and idx2wav (relative
paths; named idx2wav although the files are flac, as in SpeeChain),
idx2wav_len (samples at 16 kHz), idx2text (uppercase, no punctuation but
apostrophes, as LibriSpeech), idx2spk and idx2gen; demo/data/spk_list lists the
speakers. The output depends only on the espeak-ng version.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
SEED = 0
SPLITS = (("train", 8), ("valid", 2), ("test", 2))  # utterances per speaker
IDX2_FILES = ("idx2wav", "idx2wav_len", "idx2text", "idx2spk", "idx2gen")

# (speaker id, espeak-ng voice, gender, base words per minute)
SPEAKERS = (
    ("spk001", "en-us", "m", 165),
    ("spk002", "en-gb+f3", "f", 150),
    ("spk003", "en-us+m3", "m", 175),
)

# Original sentences written for this demo (free to use).
SENTENCES = (
    "The old lighthouse keeper climbed the stairs before the storm arrived.",
    "A small boat drifted slowly across the quiet harbour at dawn.",
    "She wrote a long letter to her brother who lived by the sea.",
    "The children ran through the orchard picking ripe red apples.",
    "Every morning the baker opened his shop at half past five.",
    "Heavy rain fell on the village for three days and nights.",
    "The train to the northern city was delayed by fallen trees.",
    "He kept a map of the river folded inside his coat pocket.",
    "The garden behind the house was full of roses and tall grass.",
    "Nobody remembered who had built the stone bridge over the stream.",
    "The teacher asked the class to read the second chapter aloud.",
    "A cold wind blew the last leaves from the branches of the elm.",
    "They walked along the shore until the lights of the town appeared.",
    "The clock in the hall struck twelve as the guests sat down to dinner.",
    "My grandfather told stories about the winter the lake froze solid.",
    "The farmer led his horses into the barn before the snow began.",
    "A strange letter arrived one afternoon without a name or address.",
    "The library was silent except for the turning of pages.",
    "We could see the mountains clearly after the fog had lifted.",
    "The captain ordered the crew to lower the sails at once.",
    "Two owls called to each other across the dark valley.",
    "She found an old key hidden beneath the loose floorboard.",
    "The market square was crowded with traders selling fish and bread.",
    "He answered the question quietly and then looked out of the window.",
    "The path through the forest was narrow and covered with moss.",
    "After supper the family gathered around the fire to sing.",
    "The doctor arrived on horseback late in the evening.",
    "A bright star appeared low in the western sky.",
    "The ship's bell rang twice and the passengers came on deck.",
    "Fresh snow covered the fields as far as the eye could see.",
    "The young painter spent the summer drawing boats in the harbour.",
    "Please close the gate so the sheep do not wander onto the road.",
    "The professor explained the experiment with great patience.",
    "Water from the spring tasted cold and faintly of iron.",
    "They counted the coins twice before locking the wooden chest.",
    "The road to the castle wound slowly up the green hill.",
    "At noon the bells of the church rang out across the valley.",
    "The cat slept all afternoon in a patch of warm sunlight.",
    "It's easy to lose your way when the lanterns go out.",
    "The merchant's daughter could speak four languages fluently.",
)


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr, exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class DemoError(Exception):
    """A problem the user can fix (e.g. espeak-ng missing)."""


def normalise_text(sentence):
    """LibriSpeech style: uppercase words, apostrophes kept, no other punctuation."""
    return " ".join(re.sub(r"[^A-Z']+", " ", sentence.upper()).split())


def synthesise(espeak, text, voice, speed, workdir):
    """espeak-ng audio of ``text`` as float32 at espeak's rate, and that rate."""
    import soundfile

    wav = Path(workdir) / "utt.wav"
    cmd = [espeak, "-v", voice, "-s", str(speed), "-w", str(wav), text]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not wav.exists():
        raise DemoError(f"espeak-ng failed ({' '.join(cmd[:-1])}): {result.stderr.strip()}")
    audio, rate = soundfile.read(wav, dtype="float32")
    return audio, rate


def make_demo(out_dir, espeak=None):
    """Write the demo corpus into ``out_dir`` and return the number of utterances."""
    import soundfile
    import soxr

    espeak = espeak or shutil.which("espeak-ng")
    if espeak is None:
        raise DemoError("espeak-ng is not installed (apt-get install -y espeak-ng)")
    num_per_speaker = sum(n for _, n in SPLITS)
    if len(SENTENCES) < num_per_speaker * len(SPEAKERS):
        raise DemoError("not enough sentences for the demo")  # pragma: no cover
    out_dir = Path(out_dir)
    rng = np.random.default_rng(SEED)
    rows = {split: [] for split, _ in SPLITS}
    with tempfile.TemporaryDirectory() as workdir:
        for split, _ in SPLITS:
            folder = out_dir / split
            folder.mkdir(parents=True, exist_ok=True)
            for old in list(folder.glob("*.flac")) + [folder / name for name in IDX2_FILES]:
                old.unlink(missing_ok=True)
        sentence = 0
        for spk_id, voice, gender, base_speed in SPEAKERS:
            index = 0
            for split, count in SPLITS:
                for _ in range(count):
                    index += 1
                    utt_id = f"{spk_id}-0001-{index:04d}"
                    text = SENTENCES[sentence]
                    sentence += 1
                    speed = base_speed + int(rng.integers(-15, 16))
                    audio, rate = synthesise(espeak, text, voice, speed, workdir)
                    audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ")
                    audio = np.clip(audio, -1.0, 32767 / 32768)
                    soundfile.write(out_dir / split / f"{utt_id}.flac", audio, SAMPLE_RATE,
                                    subtype="PCM_16", format="FLAC")
                    rows[split].append((utt_id, f"{utt_id}.flac", len(audio), normalise_text(text), spk_id, gender))
    for split, split_rows in rows.items():
        split_rows.sort()
        folder = out_dir / split
        for column, name in enumerate(IDX2_FILES, start=1):
            with open(folder / name, "w", encoding="utf-8") as f:
                f.write("".join(f"{row[0]} {row[column]}\n" for row in split_rows))
    with open(out_dir / "spk_list", "w", encoding="utf-8") as f:
        f.write("".join(f"{spk_id}\n" for spk_id, *_ in SPEAKERS))
    return sum(len(r) for r in rows.values())


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "demo" / "data",
                        help="output folder (default: demo/data of this checkout)")
    parser.add_argument("--espeak", help="path of the espeak-ng binary (default: from PATH)")
    args = parser.parse_args(argv)
    try:
        num = make_demo(args.out, args.espeak)
    except (DemoError, OSError) as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {num} utterances to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
