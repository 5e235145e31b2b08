"""Reverberation: the waveform convolved with a room impulse response from a list.

Draws: whether it applies (``prob``), then the RIR (uniform over the list).
The output is the full convolution shifted by the RIR's direct path (the
index of its largest absolute sample) and cut to the input's length, so the
speech keeps its timing against the transcript (Kaldi's ``wav-reverberate
--shift-output``, as Lhotse's ReverbWithImpulseResponse). With ``normalize``
(the default, as Lhotse's ``normalize_output``) each channel is scaled back to
its power before the reverberation. A mono RIR is applied to every channel.

# NOTE [ Overlap-add convolution ]
The convolution is computed by FFT, block by block (overlap-add): the input
is cut into blocks of ``n_fft - L + 1`` samples for an RIR of ``L`` samples,
``n_fft`` the power of two at or above ``4 L`` (or the whole convolution, when
shorter); all blocks go through one batched numpy ``rfft`` / ``irfft`` in
float32, and each block's tail is added to the head of the next. Blocks of
32k samples stay in the CPU's cache where one 230k-point FFT of the whole
convolution does not: on a 14 s utterance and a 0.5 s RIR this is about twice
as fast as numpy on the whole (and as fast as scipy.signal.fftconvolve, which
is not a dependency).

The forward transforms ask for ``norm="ortho"`` and the RIR's spectrum is
scaled back: numpy 2.4's transforms without a scale factor (a forward one
with the default norm) took 4-5 times as long as scaled ones here (8 rows of
32k: 12.7 ms against 2.3 ms), in float32 and float64 alike.

numpy's pocketfft, not torch's FFT, although torch's is up to twice as fast:
with more than one intra-op thread (the main process: inline loading, thread
workers) torch splits one transform across threads and its result changes in
the last bits, so a batch would depend on the engine. numpy computes each
transform in one thread, the same way everywhere.
"""
from typing import Any, Callable, Dict, Optional

import numpy as np

from speechiter.checks import check_bool
from speechiter.dataset.augment.cache import ArrayCache
from speechiter.dataset.augment.corpus import CACHE_MB, AudioList
from speechiter.dataset.augment.options import check_prob, fires


class Reverb:
    """The ``reverb`` step (see the module docstring)."""

    name = "reverb"

    def __init__(self, rir, prob: float = 1.0, normalize: bool = True, cache_mb: float = CACHE_MB, *, where: str,
                 sample_rate: int, frame_samples: int):
        self.prob = check_prob(prob, f"{where}.prob")
        self.normalize = check_bool(normalize, f"{where}.normalize")
        self.files = AudioList(rir, f"{where}.rir", "RIR", sample_rate, frame_samples, cache_mb)
        self.spectra = ArrayCache(SPECTRA_MB * 1e6)  # {(RIR id, n_fft): its scaled spectrum}

    def __call__(self, wave: np.ndarray, generator: np.random.Generator, applied: Dict[str, Any]) -> np.ndarray:
        if not fires(generator, self.prob):
            return wave
        name, rir = self.files.draw(generator)
        out = convolve_aligned(wave, rir, lambda n: self.spectra.get((name, n), lambda: spectrum(rir, n)))
        if self.normalize:
            before = np.einsum("tc,tc->c", wave, wave)  # no BLAS: see noise.power
            after = np.einsum("tc,tc->c", out, out)
            scale = np.sqrt(np.divide(before, after, out=np.zeros_like(before), where=after > 0))
            out *= scale.astype(np.float32)
        applied[self.name] = {"file": name}
        return out


#: RIR spectra kept per step and process (128 kB each for n_fft = 32k)
SPECTRA_MB = 32


def spectrum(rir: np.ndarray, n_fft: int) -> np.ndarray:
    """The RIR's rfft at ``n_fft``, times ``sqrt(n_fft)`` (see NOTE [ Overlap-add convolution ] on norm)."""
    return np.fft.rfft(rir, n=n_fft, norm="ortho") * np.float32(n_fft)


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


def convolve_aligned(wave: np.ndarray, rir: np.ndarray,
                     rir_spectrum: Optional[Callable[[int], np.ndarray]] = None) -> np.ndarray:
    """``full_convolution(wave, rir)[peak : peak + T]`` per channel, float32 ``(T, C)``, ``peak`` the
    index of the RIR's largest absolute sample (see NOTE [ Overlap-add convolution ]). ``rir_spectrum(n_fft)``
    gives :func:`spectrum` of ``rir`` (a cached one)."""
    length, channels = wave.shape
    size = rir.shape[0]
    peak = int(np.argmax(np.abs(rir)))
    n_fft = max(_pow2(2 * size), min(_pow2(4 * size), _pow2(length + size - 1)))
    block = n_fft - size + 1  # >= size - 1: a block's tail overlaps only the next block
    count = -(-length // block)
    x = np.zeros((channels, count * block), dtype=np.float32)
    x[:, :length] = wave.T
    # X / sqrt(n) times H * sqrt(n), then irfft's 1 / n: see NOTE [ Overlap-add convolution ] on norm
    product = np.fft.rfft(x.reshape(channels, count, block), n=n_fft, axis=-1, norm="ortho")
    product *= spectrum(rir, n_fft) if rir_spectrum is None else rir_spectrum(n_fft)
    blocks = np.fft.irfft(product, n=n_fft, axis=-1)
    full = np.zeros((channels, count + 1, block), dtype=np.float32)
    full[:, :count] = blocks[..., :block]
    full[:, 1:, :size - 1] += blocks[..., block:]
    return np.ascontiguousarray(full.reshape(channels, -1)[:, peak:peak + length].T)
