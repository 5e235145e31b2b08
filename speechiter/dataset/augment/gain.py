"""Gain: the waveform times ``10 ** (db / 20)``, ``db`` drawn uniformly in the range.

Draws: whether it applies (``prob``), then the gain. Samples are not clipped:
a positive gain may take them beyond [-1, 1), as a float waveform allows.
"""
from typing import Any, Dict

import numpy as np

from speechiter.dataset.augment.options import check_prob, check_range, fires


class Gain:
    """The ``gain`` step (see the module docstring)."""

    name = "gain"

    def __init__(self, db=(-6.0, 6.0), prob: float = 1.0, *, where: str, sample_rate: int, frame_samples: int):
        self.db = check_range(db, f"{where}.db", "dB")
        self.prob = check_prob(prob, f"{where}.prob")

    def __call__(self, wave: np.ndarray, generator: np.random.Generator, applied: Dict[str, Any]) -> np.ndarray:
        if not fires(generator, self.prob):
            return wave
        db = float(generator.uniform(*self.db))
        applied[self.name] = db
        return wave * np.float32(10.0 ** (db / 20.0))
