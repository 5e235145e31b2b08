"""SpecAugment on log-mel frames ``(T, F)``: time warp, frequency masks, time masks (Park et al., 2019).

Draws, in order: whether it applies (``prob``); with ``time_warp: W`` (frames,
off by default) and ``T > 2 W``, the warp centre ``c`` in ``[W, T - W)`` and
the shift ``w`` in ``[-W, W]``; for each frequency mask a width in
``[0, freq_width]`` and its first bin; for each time mask a width in
``[0, max width]`` and its first frame. A time mask's max width is
``time_width`` frames, or ``floor(time_width * T)`` when ``time_width < 1``
(a proportion of the utterance), and at most ``T``.

Time warp moves frame ``c`` to ``c + w`` and stretches both sides linearly
to fit (linear interpolation between frames; the length is kept). Masked
values are the utterance's mean log-mel value (``fill: mean``, as Lhotse)
or 0 (``fill: zero``, as ESPnet; the mean too after ``normalize: utterance``).
"""
from typing import Any, Dict, List, Optional

import numpy as np

from speechiter.checks import check_choice, check_int, check_number
from speechiter.dataset.augment.options import check_prob, fires

FILLS = ("mean", "zero")


class SpecAugment:
    """The ``spec_augment`` step (see the module docstring)."""

    name = "spec_augment"

    def __init__(self, freq_masks: int = 2, freq_width: int = 27, time_masks: int = 2, time_width: float = 0.05,
                 time_warp: int = 0, fill: str = "mean", prob: float = 1.0, *, where: str, n_mels: int):
        self.freq_masks = check_int(freq_masks, f"{where}.freq_masks", minimum=0)
        self.freq_width = min(check_int(freq_width, f"{where}.freq_width", minimum=0), n_mels)
        self.time_masks = check_int(time_masks, f"{where}.time_masks", minimum=0)
        self.time_width = float(check_number(time_width, f"{where}.time_width", minimum=0))
        if self.time_width >= 1:
            self.time_width = float(check_int(time_width, f"{where}.time_width", minimum=0))
        self.time_warp = check_int(time_warp, f"{where}.time_warp", minimum=0)
        self.fill = check_choice(fill, f"{where}.fill", FILLS)
        self.prob = check_prob(prob, f"{where}.prob")

    def __call__(self, feat: np.ndarray, generator: np.random.Generator, applied: Dict[str, Any]) -> np.ndarray:
        record = self.draw(feat.shape[0], feat.shape[1], generator)
        if record is None:
            return feat
        applied[self.name] = record
        return self.apply(feat, record)

    def draw(self, frames: int, bins: int, generator: np.random.Generator) -> Optional[Dict[str, Any]]:
        """The draws for ``frames`` x ``bins`` features, as the applied record; None when it does not fire.
        (Features on the GPU draw in the worker and apply on the device: speechiter/gpu_features.py.)"""
        if not fires(generator, self.prob):
            return None
        record: Dict[str, Any] = {}
        if self.time_warp and frames > 2 * self.time_warp:
            centre = int(generator.integers(self.time_warp, frames - self.time_warp))
            shift = int(generator.integers(-self.time_warp, self.time_warp + 1))
            record["warp"] = [centre, shift]
        record["freq"] = _masks(generator, self.freq_masks, self.freq_width, bins)
        most = int(self.time_width) if self.time_width >= 1 else int(self.time_width * frames)
        record["time"] = _masks(generator, self.time_masks, min(most, frames), frames)
        return record

    def apply(self, feat: np.ndarray, record: Dict[str, Any]) -> np.ndarray:
        """``feat`` with ``record``'s warp and masks (a new array)."""
        feat = time_warp(feat, *record["warp"]) if "warp" in record else feat.copy()
        value = np.float32(feat.mean()) if self.fill == "mean" and feat.size else np.float32(0)
        for start, width in record["freq"]:
            feat[:, start:start + width] = value
        for start, width in record["time"]:
            feat[start:start + width] = value
        return feat


def _masks(generator: np.random.Generator, count: int, most: int, size: int) -> List[List[int]]:
    """``count`` masks ``[start, width]``, width uniform in [0, most], start uniform where it fits."""
    masks = []
    for _ in range(count):
        width = int(generator.integers(most + 1))
        masks.append([int(generator.integers(size - width + 1)), width])
    return masks


def time_warp(feat: np.ndarray, centre: int, shift: int) -> np.ndarray:
    """``feat`` with frame ``centre`` moved to ``centre + shift``, each side stretched linearly (same length)."""
    if shift == 0:
        return feat.copy()
    low, high, weight = warp_sources(feat.shape[0], centre, shift)
    return feat[low] * (1 - weight) + feat[high] * weight


def warp_sources(frames: int, centre: int, shift: int):
    """For each output frame of a warp: the two source frames and the weight of the second ``(frames, 1)``."""
    target = centre + shift
    out = np.arange(frames, dtype=np.float64)
    source = np.where(out < target, out * centre / target,
                      centre + (out - target) * (frames - 1 - centre) / max(frames - 1 - target, 1))
    low = np.clip(np.floor(source).astype(np.int64), 0, frames - 1)
    high = np.minimum(low + 1, frames - 1)
    return low, high, (source - low).astype(np.float32)[:, None]
