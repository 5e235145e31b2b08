"""On-the-fly log-mel filterbank features (Kaldi ``compute-fbank-feats`` compatible).

``LogMel(sample_rate=16000, n_mels=80, ...)`` turns a mono waveform in
[-1, 1) into float32 ``(frames, n_mels)`` with ``num_frames(n)`` frames:

    frames = 1 + (n - window) // shift   (0 if n < window; Kaldi's snip_edges)

with ``window = int(sample_rate * 0.001 * frame_length)`` samples and
``shift = int(sample_rate * 0.001 * frame_shift)``.

# NOTE [ Kaldi-compatible fbank with torch ]
Each frame is processed as Kaldi's ``ProcessWindow``: the waveform is scaled
to 16-bit range (x 32768, so ``dither: 1.0`` is Kaldi's default of one LSB and
the values equal Kaldi's), dithered, its DC offset removed, pre-emphasised
(``x[i] -= p * x[i-1]``, ``x[0] -= p * x[0]``), windowed, zero-padded to
``n_fft``; the power spectrum goes through Kaldi's triangular mel banks
(mel = 1127 ln(1 + f / 700), the Nyquist bin unused) and ``log(max(e, eps))``.
tests/dataset/test_features.py checks the output against kaldi-native-fbank when it
is installed. torch (already a dependency) does the maths: ~5x faster than
kaldi-native-fbank from Python, see handbook.md "Speech front end".
Dither noise comes from the generator the caller passes (the batch's
``speechiter.rng()``), never from a global one.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Optional, Union

import numpy as np

from speechiter.checks import check_bool, check_int, check_number
from speechiter.config import read_yaml_file
from speechiter.errors import ConfigError
from speechiter.fbank import Workspace, utterance_log_mel
from speechiter.paths import PRESETS_DIR, find_preset, is_preset
from speechiter.registry import check_keywords

__all__ = ["LogMel", "load_feat_conf", "is_preset", "WINDOWS", "NORMALIZE", "CONFIG_DIR"]

WINDOWS = ("povey", "hanning", "hamming", "rectangular", "blackman")
NORMALIZE = ("utterance",)
#: the shipped presets (see speechiter.paths.find_preset)
CONFIG_DIR = PRESETS_DIR


def _mel(freq):
    return 1127.0 * np.log1p(np.asarray(freq, dtype=np.float64) / 700.0)


class LogMel:
    """Log-mel filterbank settings and the function computing them.

    Args (``feat_conf`` keys; times in milliseconds, frequencies in Hz):
        sample_rate: rate of the waveforms it is given.
        n_mels: number of mel bins.
        frame_length, frame_shift: window and hop.
        n_fft: FFT size; None is the next power of two >= the window.
        preemphasis: pre-emphasis coefficient (0 turns it off).
        dither: std of Gaussian noise added to each frame, in 16-bit units.
        normalize: None, or ``utterance`` (zero mean, unit variance per bin
            over the utterance's frames).
        window: povey, hanning, hamming, rectangular or blackman.
        low_freq: lowest mel-bank edge.
        high_freq: highest edge; 0 or negative counts from the Nyquist rate.
        remove_dc_offset: subtract each frame's mean before pre-emphasis.
        device: where: ``cpu`` in the loading workers, per utterance; ``cuda`` or
            ``cuda:N`` on the GPU, per batch, in the converter (speechiter/gpu_features.py).
    """

    def __init__(self, sample_rate: int, n_mels: int = 80, frame_length: float = 25.0,
                 frame_shift: float = 10.0, n_fft: Optional[int] = None, preemphasis: float = 0.97,
                 dither: float = 0.0, normalize: Optional[str] = None, window: str = "povey",
                 low_freq: float = 20.0, high_freq: float = 0.0, remove_dc_offset: bool = True,
                 device: str = "cpu"):
        w = "feat_conf"
        self.sample_rate = check_int(sample_rate, f"{w}.sample_rate")
        self.n_mels = check_int(n_mels, f"{w}.n_mels")
        self.frame_length = float(check_number(frame_length, f"{w}.frame_length", above=0))
        self.frame_shift = float(check_number(frame_shift, f"{w}.frame_shift", above=0))
        self.window_size = int(sample_rate * 0.001 * self.frame_length)
        self.window_shift = int(sample_rate * 0.001 * self.frame_shift)
        if self.window_size < 2 or self.window_shift < 1:
            raise ConfigError(f"{w}.frame_length", f"{frame_length} ms / {frame_shift} ms at {sample_rate} Hz "
                                                   f"give a window of {self.window_size} and a shift of "
                                                   f"{self.window_shift} samples; need at least 2 and 1")
        if n_fft is None:
            n_fft = 1 << (self.window_size - 1).bit_length()
        elif check_int(n_fft, f"{w}.n_fft") < self.window_size:
            raise ConfigError(f"{w}.n_fft", f"expected at least the window size ({self.window_size} samples), "
                                            f"got {n_fft}")
        self.n_fft = n_fft
        self.preemphasis = float(check_number(preemphasis, f"{w}.preemphasis", minimum=0))
        if self.preemphasis > 1:
            raise ConfigError(f"{w}.preemphasis", f"expected a coefficient in [0, 1], got {preemphasis!r}")
        self.dither = float(check_number(dither, f"{w}.dither", minimum=0))
        if normalize is not None and normalize not in NORMALIZE:
            raise ConfigError(f"{w}.normalize", f"expected null or one of {', '.join(NORMALIZE)}, "
                                                f"got {normalize!r}")
        self.normalize = normalize
        if window not in WINDOWS:
            raise ConfigError(f"{w}.window", f"expected one of {', '.join(WINDOWS)}, got {window!r}")
        self.window = window
        nyquist = sample_rate / 2
        self.low_freq = float(check_number(low_freq, f"{w}.low_freq", minimum=0))
        high = float(check_number(high_freq, f"{w}.high_freq"))
        self.high_freq = high if high > 0 else nyquist + high
        if not self.low_freq < self.high_freq <= nyquist:
            raise ConfigError(f"{w}.high_freq", f"need low_freq < high_freq <= {nyquist:g} (Nyquist), got "
                                                f"low_freq={low_freq}, high_freq={high_freq}")
        self.remove_dc_offset = check_bool(remove_dc_offset, f"{w}.remove_dc_offset")
        self.device = resolve_feature_device(device, f"{w}.device")  # NOTE [ Features on the GPU ]
        import torch  # here, not at module level: worker processes only import it when they compute features

        self.window_tensor = torch.from_numpy(self._window_function())
        self.banks_tensor = torch.from_numpy(self._mel_banks())
        self._workspace = Workspace()  # See NOTE [ Log-mel memory traffic ] in fbank.py

    @classmethod
    def from_conf(cls, conf: dict, sample_rate: Optional[int] = None) -> "LogMel":
        """Build from a ``feat_conf`` mapping; ``sample_rate`` fills a missing one."""
        if not isinstance(conf, dict):
            raise ConfigError("feat_conf", f"expected a mapping or a YAML file, got {conf!r}")
        check_keywords(conf, [cls.__init__], "feat_conf", reserved=["sample_rate"])
        conf = dict(conf)
        if conf.get("sample_rate") is None:
            if sample_rate is None:
                raise ConfigError("feat_conf.sample_rate", "unknown: set feat_conf.sample_rate or the dataset's "
                                                           "sample_rate")
            conf["sample_rate"] = sample_rate
        return cls(**conf)

    def conf(self) -> dict:
        """The settings, as a ``feat_conf`` mapping."""
        return {"sample_rate": self.sample_rate, "n_mels": self.n_mels, "frame_length": self.frame_length,
                "frame_shift": self.frame_shift, "n_fft": self.n_fft, "preemphasis": self.preemphasis,
                "dither": self.dither, "normalize": self.normalize, "window": self.window,
                "low_freq": self.low_freq, "high_freq": self.high_freq, "remove_dc_offset": self.remove_dc_offset,
                "device": self.device}

    def __repr__(self):
        return f"LogMel({', '.join(f'{k}={v!r}' for k, v in self.conf().items())})"

    def num_frames(self, num_samples):
        """Frames for ``num_samples`` samples (snip_edges); floats give floats' floor.
        Takes a number or a numpy array of numbers (element-wise)."""
        if isinstance(num_samples, np.ndarray):
            frames = 1 + (num_samples - self.window_size) // self.window_shift
            return np.where(num_samples < self.window_size, 0, frames)
        if num_samples < self.window_size:
            return 0
        return 1 + int((num_samples - self.window_size) // self.window_shift)

    def _window_function(self) -> np.ndarray:
        n = self.window_size
        a = 2 * np.pi * np.arange(n) / (n - 1)
        if self.window == "povey":
            w = (0.5 - 0.5 * np.cos(a)) ** 0.85
        elif self.window == "hanning":
            w = 0.5 - 0.5 * np.cos(a)
        elif self.window == "hamming":
            w = 0.54 - 0.46 * np.cos(a)
        elif self.window == "blackman":
            w = 0.42 - 0.5 * np.cos(a) + 0.08 * np.cos(2 * a)
        else:
            w = np.ones(n)
        return w.astype(np.float32)

    def _mel_banks(self) -> np.ndarray:
        """(n_fft // 2 + 1, n_mels) weights, Kaldi's MelBanks (the Nyquist row is 0)."""
        num_bins = self.n_fft // 2
        edges = np.linspace(_mel(self.low_freq), _mel(self.high_freq), self.n_mels + 2)
        left, center, right = edges[:-2], edges[1:-1], edges[2:]
        mel = _mel(np.arange(num_bins) * self.sample_rate / self.n_fft)[:, None]
        up = (mel - left) / (center - left)
        down = (right - mel) / (right - center)
        weights = np.where((mel > left) & (mel < right), np.where(mel <= center, up, down), 0.0)
        return np.concatenate([weights, np.zeros((1, self.n_mels))]).astype(np.float32)

    def __call__(self, wave: np.ndarray, generator: Optional[np.random.Generator] = None) -> np.ndarray:
        """Log-mel frames of a mono waveform ``(T,)`` or ``(T, 1)`` in [-1, 1).

        ``generator`` draws the dither noise (pass ``speechiter.rng()``);
        without one, ``dither`` must be 0.
        """
        wave = np.asarray(wave, dtype=np.float32).reshape(-1)
        frames_n = self.num_frames(wave.shape[0])
        if frames_n == 0:
            return np.zeros((0, self.n_mels), dtype=np.float32)
        if self.dither > 0 and generator is None:
            raise ValueError("LogMel with dither > 0 needs a generator (speechiter.rng())")
        return utterance_log_mel(self, wave, frames_n, generator, self._workspace)


def load_feat_conf(value: Union[dict, str, os.PathLike, None]) -> Optional[dict]:
    """A ``feat_conf`` value as a mapping: a mapping is returned as is; a
    string is a YAML file, looked up as given (the current folder), then
    among the shipped presets: ``config/feat/...`` or ``feat/...`` names the
    packaged copy in speechiter/presets/feat/..., installed or not."""
    if value is None or isinstance(value, dict):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError("feat_conf", f"expected a mapping or a YAML file path, got {value!r}")
    given = Path(value)
    path = given if given.is_file() else find_preset(given)
    if path is None:
        raise ConfigError("feat_conf", f"no such YAML file: {value} (looked in the current folder and "
                                       f"the shipped presets, {CONFIG_DIR})")
    try:
        conf = read_yaml_file(path)
    except ConfigError as e:
        raise ConfigError("feat_conf", f"cannot read {e}") from None
    if not isinstance(conf, dict):
        raise ConfigError("feat_conf", f"{path}: expected a mapping of feature settings, got {conf!r}")
    return conf


def resolve_feature_device(device: str, where: str = "feat_conf.device") -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; cuda without CUDA falls back to ``cpu`` with a warning (NOTE [ Features
    on the GPU ] in speechiter/gpu_features.py)."""
    if not isinstance(device, str) or not (device in ("cpu", "cuda") or (device.startswith("cuda:")
                                                                         and device[5:].isdigit())):
        raise ConfigError(where, f"expected cpu, cuda or cuda:N, got {device!r}")
    if device != "cpu" and not cuda_available():
        warnings.warn(f"{where} is {device!r} but CUDA is not available; log-mel is computed in the loading "
                      "workers (device: cpu)", RuntimeWarning, stacklevel=3)
        return "cpu"
    return device


def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()
