"""Pitch (f0) contours for TTS: SpeechTextDataset's ``pitch_conf``.

SpeeChain's rule (``convert_wav_to_pitch``): pyworld ``dio`` then
``stonemask`` on the float64 waveform, one value every ``hop_length``
samples, ``int(T / hop_length) + 1`` frames (dio's own count). With
``continuous_f0`` the unvoiced frames are filled in: before the first voiced
frame with its f0, after the last with its f0, gaps linearly over frame
indices. Batched as float32 ``pitch`` ``(B, Pmax)`` zero-padded and int64
``pitch_len``.

pyworld is an optional extra: ``pip install 'speechiter[tts]'``.
"""
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from speechiter.checks import check_bool, check_int, check_number
from speechiter.dataset.collate import pad_stack
from speechiter.errors import ConfigError, DataError

INSTALL_HINT = "pip install 'speechiter[tts]' (or: pip install pyworld)"
#: pitch_conf keys and their defaults (SpeeChain's convert_wav_to_pitch)
DEFAULTS = {"hop_length": 256, "f0min": 80, "f0max": 400, "continuous_f0": True}


def import_pyworld(where: str = "pitch_conf"):
    """The pyworld module, or a ConfigError that says what to install."""
    try:
        with warnings.catch_warnings():  # pyworld 0.3.5 imports pkg_resources, which warns on every import
            warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
            import pyworld
    except ImportError as e:
        missing = getattr(e, "name", None)
        if missing == "pkg_resources":  # pyworld 0.3.5's __init__ imports it; setuptools>=81 has none
            raise ConfigError(where, "pyworld is installed but cannot be imported: it needs pkg_resources, "
                                     "which setuptools 81 removed; pip install 'setuptools<81'") from None
        raise ConfigError(where, f"pitch extraction needs pyworld, which is not installed ({e}); "
                                 f"{INSTALL_HINT}") from None
    return pyworld


@dataclass(frozen=True)
class PitchExtractor:
    """f0 of a mono waveform with pyworld dio + stonemask (see the module docstring)."""

    sr: int
    hop_length: int
    f0min: float = 80
    f0max: float = 400
    continuous_f0: bool = True

    @classmethod
    def from_conf(cls, conf: Optional[Dict[str, Any]], sample_rate: Optional[int],
                  has_feat: bool = True, feat_conf: Any = None) -> Optional["PitchExtractor"]:
        """Check ``pitch_conf`` (None: no pitch) against the dataset's options."""
        if conf is None:
            return None
        if not isinstance(conf, dict):
            raise ConfigError("pitch_conf", f"expected a mapping of pitch options, got {conf!r}")
        unknown = [k for k in conf if k not in (*DEFAULTS, "sr")]
        if unknown:
            raise ConfigError(f"pitch_conf.{unknown[0]}", f"unknown option; accepted: "
                                                          f"{', '.join([*DEFAULTS, 'sr'])}")
        if not has_feat:
            raise ConfigError("pitch_conf", "needs waveforms in main_data.feat")
        if feat_conf is not None:
            raise ConfigError("pitch_conf", "needs waveforms, but feat_conf turns them into log-mel frames; "
                                            "use one of the two (SpeeChain computes features in the model)")
        if sample_rate is None:
            raise ConfigError("pitch_conf", "needs the dataset's sample_rate (the rate the waveforms are read at)")
        options = {**DEFAULTS, **conf}
        sr = options.pop("sr", sample_rate)
        if sr != sample_rate:
            raise ConfigError("pitch_conf.sr", f"is {sr!r} but the dataset's sample_rate is {sample_rate}; "
                                               f"they must match (or leave sr out)")
        hop = options["hop_length"]
        if isinstance(hop, float):  # SpeeChain: a float is seconds
            check_number(hop, "pitch_conf.hop_length", above=0)
            hop = int(hop * sample_rate)
        hop = check_int(hop, "pitch_conf.hop_length")
        f0min = check_number(options["f0min"], "pitch_conf.f0min", above=0)
        f0max = check_number(options["f0max"], "pitch_conf.f0max", above=0)
        if f0max <= f0min:
            raise ConfigError("pitch_conf.f0max", f"must be above f0min ({f0min}), got {f0max!r}")
        import_pyworld()  # fail at build time, not in a worker
        return cls(int(sample_rate), hop, f0min, f0max, check_bool(options["continuous_f0"],
                                                                   "pitch_conf.continuous_f0"))

    @property
    def frame_period(self) -> float:
        """dio's frame period in milliseconds."""
        return 1000 * self.hop_length / self.sr

    def num_frames(self, num_samples: int) -> int:
        """Frames of a waveform of ``num_samples`` samples: ``int(T / hop) + 1``."""
        return int(num_samples / self.hop_length) + 1

    def __call__(self, wave: np.ndarray, uid: str = "?") -> np.ndarray:
        """float32 f0 ``(frames,)`` of ``wave`` ``(T,)`` or ``(T, 1)``."""
        if wave.ndim == 2:
            if wave.shape[1] != 1:
                raise DataError(f"utterance {uid}: pitch_conf needs mono waveforms, got {wave.shape[1]} channels")
            wave = wave[:, 0]
        pyworld = import_pyworld()
        wave = np.ascontiguousarray(wave, dtype=np.float64)
        f0, times = pyworld.dio(wave, self.sr, f0_floor=self.f0min, f0_ceil=self.f0max,
                                frame_period=self.frame_period)
        f0 = pyworld.stonemask(wave, f0, times, self.sr)
        if self.continuous_f0:
            f0 = continuous(f0, uid)
        return f0.astype(np.float32)


def continuous(f0: np.ndarray, uid: str = "?") -> np.ndarray:
    """Fill unvoiced (zero) frames: the first / last voiced f0 at the ends,
    linear interpolation over frame indices in between.

    An utterance with no voiced frame keeps its all-zero contour (SpeeChain
    drops it from the batch) and a warning names it.
    """
    voiced = np.flatnonzero(f0 != 0)
    if not len(voiced):
        warnings.warn(f"utterance {uid}: no voiced frame, its pitch stays all zero", stacklevel=2)
        return f0
    return np.interp(np.arange(len(f0)), voiced, f0[voiced])


def collate_pitch(values: List[np.ndarray]) -> Dict[str, np.ndarray]:
    """``pitch`` float32 ``(B, Pmax)`` zero-padded and ``pitch_len`` int64 ``(B,)``."""
    return {"pitch": pad_stack(values, np.float32),
            "pitch_len": np.array([len(v) for v in values], dtype=np.int64)}
