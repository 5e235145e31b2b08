"""Tiny corpora for the SpeeChain parity suite (numpy + soundfile only).

Every idx2 file is written in a deliberately scrambled line order (never
sorted by id, and in a different order per file), ids mix case and digit
widths so that Python's ``str`` order differs from "natural" order
(``"B3" < "a1"``, ``"u10" < "u2"``), and lengths tie, so the three SpeeChain
ordering rules (id-sorted reading, stable length sort, ties in id order)
all show.

The same layout is what tests/parity/test_rules.py's expected values were
computed on with SpeeChain's own iterator classes (see
tests/parity/RULES.md, "How the expected values were obtained").
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

import numpy as np

SAMPLE_RATE = 16000

# id -> number of samples (the idx2wav_len value). Ties: 500 x3, 300 x2, 200 x2.
WAV_LEN: Dict[str, int] = {
    "u07": 300, "u2": 500, "u10": 500, "a1": 200, "B3": 700, "u11": 300,
    "u05": 100, "u3": 500, "z9": 900, "u01": 200, "u12": 400, "c4": 600,
}
# id -> transcript. len(text) ties: 5 x3 (u2, u10, c4), 11 x2 (u07, z9), 3 x2 (a1, u05).
TEXT: Dict[str, str] = {
    "u07": "hello there", "u2": "a cat", "u10": "a dog", "a1": "hey", "B3": "good morning all",
    "u11": "see you soon", "u05": "yes", "u3": "one two three four", "z9": "long speech", "u01": "no no no no",
    "u12": "quiet", "c4": "fine.",
}
SPK: Dict[str, str] = {
    "u07": "s1", "u2": "s2", "u10": "s1", "a1": "s3", "B3": "s2", "u11": "s3",
    "u05": "s1", "u3": "s2", "z9": "s3", "u01": "s1", "u12": "s2", "c4": "s3",
}
# numeric metadata for data_selection; "u3", "z9" and "c4" are deliberately missing.
META: Dict[str, float] = {
    "u07": 3.0, "u2": 1.5, "u10": 9.0, "a1": 0.5, "B3": 7.0, "u11": 2.0,
    "u05": 4.0, "u01": 6.0, "u12": 8.0,
}

# the order the lines are written in (a fixed scramble, different per file)
LINE_ORDER_A: List[str] = ["u2", "z9", "u07", "a1", "u10", "B3", "u05", "u3", "c4", "u11", "u01", "u12"]
LINE_ORDER_B: List[str] = ["c4", "u11", "a1", "u3", "u2", "u07", "z9", "u12", "u05", "B3", "u10", "u01"]

# LM text corpus: numeric ids as SpeeChain's LibriSpeech LM text ("0".."11"); str order 0,1,10,11,2,...
LM_TEXT: Dict[str, str] = {
    "0": "the cat sat", "1": "on the mat", "2": "a b", "3": "a long sentence here", "4": "to be",
    "5": "or not to be", "6": "c d", "7": "that is the question", "8": "the end", "9": "xy",
    "10": "it is", "11": "one more line",
}
LM_LINE_ORDER: List[str] = ["3", "11", "0", "7", "10", "2", "9", "5", "1", "8", "6", "4"]


def _write(path: Path, table: Dict[str, object], order: List[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for uid in order:
            if uid in table:
                f.write(f"{uid} {table[uid]}\n")
    return path


def make_speech_corpus(root, subset: str = "train", with_wavs: bool = True) -> Path:
    """Write ``<root>/librispeech/data/wav/<subset>/`` (SpeeChain's layout):
    idx2wav (absolute paths), idx2wav_len, idx2no-punc_text, idx2spk,
    idx2meta (missing u3, z9, c4) and the wav files. Returns the folder."""
    import soundfile as sf

    folder = Path(root) / "librispeech" / "data" / "wav" / subset
    folder.mkdir(parents=True, exist_ok=True)
    wav_paths = {}
    for number, (uid, n) in enumerate(sorted(WAV_LEN.items())):
        path = folder / "audio" / f"{uid}.wav"
        if with_wavs and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            t = np.arange(n) / SAMPLE_RATE
            wave = (0.3 * np.sin(2 * np.pi * (200 + 50 * number) * t)).astype(np.float32)
            sf.write(str(path), wave, SAMPLE_RATE, subtype="PCM_16")
        wav_paths[uid] = os.fspath(path.absolute())
    _write(folder / "idx2wav", wav_paths, LINE_ORDER_A)
    _write(folder / "idx2wav_len", WAV_LEN, LINE_ORDER_B)
    _write(folder / "idx2no-punc_text", TEXT, LINE_ORDER_B[::-1])
    _write(folder / "idx2spk", SPK, LINE_ORDER_A[::-1])
    _write(folder / "idx2meta", META, LINE_ORDER_B)
    return folder


def make_lm_corpus(root) -> Path:
    """Write ``<root>/librispeech/data/lm_text/no-punc_lm_text`` (ids "0".."11", scrambled)."""
    path = Path(root) / "librispeech" / "data" / "lm_text" / "no-punc_lm_text"
    return _write(path, LM_TEXT, LM_LINE_ORDER)
