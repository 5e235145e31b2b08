"""Speed perturbation as SpeeChain's: a factor resamples the waveform and keeps its rate.

Factors are used as fractions (0.9 -> 9/10, see :func:`speed_fraction`), so
the perturbed length is exact and known before a waveform is read (batching
budgets with :func:`perturbed_length`).
"""
from fractions import Fraction

import numpy as np

from speechiter.io.resample import resample
from speechiter.io.samples import resampled_length

#: speed factors are used as fractions num/den with den <= this
MAX_FACTOR_DENOMINATOR = 1000


def speed_fraction(factor: float) -> Fraction:
    """A speed factor as the fraction soxr resamples by (0.9 -> 9/10)."""
    return Fraction(factor).limit_denominator(MAX_FACTOR_DENOMINATOR)


def perturbed_length(num_samples, factor: float):
    """Length after speed perturbation by ``factor``: exactly
    ``round(n * num / den)`` for ``factor = num / den`` (halves round up);
    a non-integer length (an estimate) is multiplied by the factor. Takes a
    number or a numpy array of numbers (element-wise)."""
    fraction = speed_fraction(factor)
    if isinstance(num_samples, np.ndarray):
        whole = np.floor(num_samples) == num_samples
        exact = (2 * num_samples * fraction.numerator + fraction.denominator) // (2 * fraction.denominator)
        return np.where(whole, exact, num_samples * factor)
    if float(num_samples).is_integer():
        return resampled_length(int(num_samples), fraction.denominator, fraction.numerator)
    return num_samples * factor


def speed_perturb(wave: np.ndarray, factor: float) -> np.ndarray:
    """Speed perturbation as SpeeChain's: resample ``wave`` (T, C) by the
    fraction ``factor`` with soxr and keep the rate, so it lasts ``factor``
    times as long (1.1: 10% slower and lower; tempo and pitch change
    together), exactly ``perturbed_length(T, factor)`` frames."""
    fraction = speed_fraction(factor)
    if fraction == 1:
        return wave
    return resample(wave, fraction.denominator, fraction.numerator)
