"""Additive noise at a drawn SNR, from a noise corpus.

Draws, in order: whether it applies (``prob``), the noise file (uniform over
the list), the SNR (uniform in ``snr`` dB), the offset in the file. A file
at least as long as the utterance is cropped at the offset; a shorter one is
looped from the offset to the utterance's length. The noise is scaled so that
``10 log10(P_speech / P_noise) = snr`` over the utterance (powers are mean
squares over every sample and channel) and added to every channel. A silent
utterance stays silent (its noise scale is 0), as does a silent stretch of
noise.
"""
from typing import Any, Dict

import numpy as np

from speechiter.dataset.augment.corpus import CACHE_MB, AudioList
from speechiter.dataset.augment.options import check_prob, check_range, fires


class Noise:
    """The ``noise`` step (see the module docstring)."""

    name = "noise"

    def __init__(self, noise, snr=(5.0, 20.0), prob: float = 1.0, cache_mb: float = CACHE_MB, *, where: str,
                 sample_rate: int, frame_samples: int):
        self.snr = check_range(snr, f"{where}.snr", "dB")
        self.prob = check_prob(prob, f"{where}.prob")
        self.files = AudioList(noise, f"{where}.noise", "noise", sample_rate, frame_samples, cache_mb)

    def __call__(self, wave: np.ndarray, generator: np.random.Generator, applied: Dict[str, Any]) -> np.ndarray:
        if not fires(generator, self.prob):
            return wave
        name, noise = self.files.draw(generator)  # then the SNR and the offset
        snr = float(generator.uniform(*self.snr))
        length, size = wave.shape[0], noise.shape[0]
        if size >= length:
            offset = int(generator.integers(size - length + 1))
            piece = noise[offset:offset + length]
        else:
            offset = int(generator.integers(size))
            piece = np.tile(noise, -(-(offset + length) // size))[offset:offset + length]
        speech_power = power(wave)
        noise_power = power(piece)
        scale = np.sqrt(speech_power / (noise_power * 10.0 ** (snr / 10.0))) if noise_power > 0 else 0.0
        applied[self.name] = {"file": name, "snr": snr, "offset": offset}
        return wave + (np.float32(scale) * piece)[:, None]


def power(wave: np.ndarray) -> float:
    """The mean square of every sample (float32 sums in a fixed order: no BLAS, whose threads change the bits)."""
    if not wave.size:
        return 0.0
    subscripts = "tc,tc->" if wave.ndim == 2 else "t,t->"
    return float(np.einsum(subscripts, wave, wave)) / wave.size
