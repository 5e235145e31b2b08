"""The augmentation chain of a dataset_conf: its YAML form parsed into steps, and applied per row.

```yaml
augment:                      # applied in this order
  - {type: noise, noise: data/musan/idx2wav, snr: [5, 20], prob: 0.8}
  - {type: reverb, rir: data/rirs/idx2wav, prob: 0.5}
  - {type: gain, db: [-6, 6], prob: 1.0}
  - {type: spec_augment, freq_masks: 2, freq_width: 27, time_masks: 2, time_width: 0.05}
views: 1
```

Waveform steps (noise, reverb, gain) run on the waveform as read, resampled
and speed-perturbed; feature steps (spec_augment) on the log-mel frames of
``feat_conf``, so they come after every waveform step. Each step draws from
the batch's generator (``speechiter.rng()``) only, so a batch is the same for
any worker count, engine and resume point. The steps live in noise.py,
reverb.py, gain.py and spec_augment.py; what they applied is recorded per row
(see NOTE [ The applied record ] in record.py); views in views.py.
"""
from typing import Any, Dict, List, Optional

import numpy as np

from speechiter.checks import check_int, did_you_mean
from speechiter.dataset.augment.gain import Gain
from speechiter.dataset.augment.noise import Noise
from speechiter.dataset.augment.reverb import Reverb
from speechiter.dataset.augment.spec_augment import SpecAugment
from speechiter.errors import ConfigError
from speechiter.registry import check_keywords
from speechiter.seeding import rng

WAVEFORM_STEPS = {"noise": Noise, "reverb": Reverb, "gain": Gain}
FEATURE_STEPS = {"spec_augment": SpecAugment}
STEPS = {**WAVEFORM_STEPS, **FEATURE_STEPS}
#: a noise or RIR file must hold one frame: feat_conf's window, or this many seconds without feat_conf
FRAME_SECONDS = 0.025


class Augmentation:
    """The parsed chain: ``waveform_steps``, ``feature_steps`` and ``views``."""

    def __init__(self, waveform_steps: List[Any], feature_steps: List[Any], views: int = 1):
        self.waveform_steps = waveform_steps
        self.feature_steps = feature_steps
        self.views = views

    @classmethod
    def from_conf(cls, augment: Optional[list], views: Any, *, sample_rate: Optional[int], feat_extractor,
                  has_feat: bool) -> Optional["Augmentation"]:
        """The chain of ``dataset_conf.augment`` and ``views``, or None for neither. ConfigErrors name
        ``augment[i].<option>`` (the dataset's builder adds the path above)."""
        views = check_int(views, "views")
        if augment is None:
            augment = []
        if not isinstance(augment, list):
            raise ConfigError("augment", f"expected a list of steps ({{type: noise, ...}}), got {augment!r}")
        if augment and not has_feat:
            raise ConfigError("augment", "needs waveforms in main_data.feat")
        waveform, features = [], []
        for i, conf in enumerate(augment):
            step = _step(conf, f"augment[{i}]", sample_rate, feat_extractor)
            if isinstance(step, SpecAugment):
                features.append(step)
            elif features:
                raise ConfigError(f"augment[{i}].type", f"{step.name} works on the waveform and cannot come after "
                                                        f"{features[0].name}, which works on features")
            else:
                waveform.append(step)
        if not augment and views == 1:
            return None
        return cls(waveform, features, views)

    @property
    def records(self) -> bool:
        """Whether rows carry an applied record (there are steps)."""
        return bool(self.waveform_steps or self.feature_steps)

    def waveform(self, wave: np.ndarray, applied: Dict[str, Any]) -> np.ndarray:
        """The waveform steps on float32 ``(T, C)``, recording into ``applied``."""
        for step in self.waveform_steps:
            wave = step(wave, rng(), applied)
        return wave

    def features(self, feat: np.ndarray, applied: Dict[str, Any]) -> np.ndarray:
        """The feature steps on log-mel ``(frames, n_mels)``, recording into ``applied``."""
        for step in self.feature_steps:
            feat = step(feat, rng(), applied)
        return feat

    def feature_draws(self, frames: int, bins: int, applied: Dict[str, Any]) -> List[Optional[Dict[str, Any]]]:
        """The feature steps' draws for ``frames`` x ``bins`` features (one record per step, None where it
        does not fire), recorded into ``applied``; applied later on the device (speechiter/gpu_features.py)."""
        records = []
        for step in self.feature_steps:
            records.append(step.draw(frames, bins, rng()))
            if records[-1] is not None:
                applied[step.name] = records[-1]
        return records

    def __repr__(self):
        steps = [step.name for step in self.waveform_steps + self.feature_steps]
        return f"Augmentation(steps={steps}, views={self.views})"


def _step(conf: Any, where: str, sample_rate: Optional[int], feat_extractor):
    if not isinstance(conf, dict) or "type" not in conf:
        raise ConfigError(where, f"expected a step {{type: {'|'.join(STEPS)}, ...}}, got {conf!r}")
    kind = conf["type"]
    if kind not in STEPS:
        raise ConfigError(f"{where}.type", f"unknown step {kind!r}{did_you_mean(str(kind), STEPS)} "
                                           f"accepted: {', '.join(STEPS)}")
    options = {k: v for k, v in conf.items() if k != "type"}
    cls = STEPS[kind]
    check_keywords(options, [_user_options(cls)], where)
    if cls is SpecAugment:
        if feat_extractor is None:
            raise ConfigError(where, "spec_augment works on log-mel features: it needs feat_conf")
        return cls(**options, where=where, n_mels=feat_extractor.n_mels)
    if sample_rate is None:
        raise ConfigError(where, f"{kind} needs the dataset's sample_rate (got null): noise and RIR files are "
                                 f"read at that rate")
    frame = feat_extractor.window_size if feat_extractor is not None else int(FRAME_SECONDS * sample_rate)
    return cls(**options, where=where, sample_rate=sample_rate, frame_samples=max(frame, 1))


def _user_options(cls):
    """``cls.__init__`` without its keyword-only parameters (given by the dataset, not the YAML)."""
    import inspect

    signature = inspect.signature(cls.__init__)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.KEYWORD_ONLY]

    def options(*args, **kwargs):  # pragma: no cover - only its signature is read
        pass

    options.__signature__ = signature.replace(parameters=params)
    options.__qualname__ = f"{cls.__name__}.__init__"
    return options
