"""SpeechTextDataset: speech (waveforms or features) with transcripts and speakers.

main_data names (at least one of ``feat`` and ``text``):

- ``feat``: audio (wav, flac, ...) or features (npy, npz, ``file.npz:key``,
  ``file.hdf5:key``). Batched as float32 ``(B, T, C)``, zero-padded, with
  ``feat_len`` (int64, ``(B,)``). Mono audio has ``C == 1``. With
  ``feat_conf``, mono waveforms become log-mel frames ``(B, frames, n_mels)``
  and ``feat_len`` counts frames.
- ``text``: transcripts, kept as a list of raw strings.
- ``spk_ids``: speaker ids (idx2spk), a list of strings.
- ``spk_feat``: speaker embeddings (npy or ``file.hdf5:key``), float32 ``(B, D)``.
- ``duration``: per-token durations (space-separated numbers), float32
  ``(B, L)`` zero-padded, with ``duration_len``.
"""
import os
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from speechiter.arrays import read_vector
from speechiter.audio import read_feat, resample, resampled_length
from speechiter.checks import check_bool, check_optional_int
from speechiter.dataset.abs import Dataset
from speechiter.dataset.collate import collate_values, pad_stack
from speechiter.errors import ConfigError, DataError
from speechiter.features import LogMel, load_feat_conf
from speechiter.seeding import rng
from speechiter.segments import is_kaldi_segments, read_wav_scp
from speechiter.storage import redact

KNOWN_KEYS = ("feat", "text", "spk_ids", "spk_feat", "duration")
#: speed factors are used as fractions num/den with den <= this
MAX_FACTOR_DENOMINATOR = 1000


def speed_fraction(factor: float) -> Fraction:
    """A speed factor as the fraction soxr resamples by (0.9 -> 9/10)."""
    return Fraction(factor).limit_denominator(MAX_FACTOR_DENOMINATOR)


def perturbed_length(num_samples, factor: float):
    """Length after speed perturbation by ``factor``: exactly
    ``round(n * den / num)`` for ``factor = num / den`` (halves round up);
    a non-integer length (an estimate) is divided by the factor. Takes a
    number or a numpy array of numbers (element-wise)."""
    fraction = speed_fraction(factor)
    if isinstance(num_samples, np.ndarray):
        whole = np.floor(num_samples) == num_samples
        exact = (2 * num_samples * fraction.denominator + fraction.numerator) // (2 * fraction.numerator)
        return np.where(whole, exact, num_samples / factor)
    if float(num_samples).is_integer():
        return resampled_length(int(num_samples), fraction.numerator, fraction.denominator)
    return num_samples / factor


def speed_perturb(wave: np.ndarray, factor: float) -> np.ndarray:
    """Play ``wave`` (T, C) ``factor`` times faster (tempo and pitch, as Kaldi's
    speed perturbation): resample it by the fraction ``factor`` with soxr, to
    exactly ``perturbed_length(T, factor)`` frames."""
    fraction = speed_fraction(factor)
    if fraction == 1:
        return wave
    return resample(wave, fraction.numerator, fraction.denominator)


class SpeechTextDataset(Dataset):
    """Speech-text pairs for ASR and TTS.

    Args (``dataset_conf``):
        sample_rate: audio stored at another rate is resampled to it (soxr).
            None keeps every file's own rate.
        use_speed_perturb: pick one factor from ``perturb_range`` per
            utterance and resample the waveform by it, so its length changes
            by 1/factor (Kaldi-style speed perturbation: tempo and pitch). The
            factor comes from the batch's random state (reproducible).
        perturb_range: the factors to choose from.
        feat_conf: log-mel settings (a mapping, or a YAML file such as
            ``config/feat/log_mel/80bin_25ms_10ms.yaml``), see
            :class:`speechiter.features.LogMel`. None keeps waveforms.
    """

    path_keys = ("feat", "spk_feat")

    def dataset_init_fn(self, sample_rate: Optional[int] = None, use_speed_perturb: bool = False,
                        perturb_range: Sequence[float] = (0.9, 1.0, 1.1),
                        feat_conf: Union[dict, str, None] = None):
        unknown = [k for k in self.main_data if k not in KNOWN_KEYS]
        if unknown:
            raise ConfigError("main_data", f"unknown data name {unknown[0]!r}; SpeechTextDataset reads "
                                           f"{', '.join(KNOWN_KEYS)}")
        if "feat" not in self.main_data and "text" not in self.main_data:
            raise ConfigError("main_data", "needs at least one of 'feat' and 'text'")
        sample_rate = check_optional_int(sample_rate, "sample_rate")
        factors = list(perturb_range) if isinstance(perturb_range, (list, tuple)) else None
        if not factors or any(isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0 for f in factors):
            raise ConfigError("perturb_range", f"expected a list of positive speed factors, got {perturb_range!r}")
        if any(speed_fraction(f) == 0 for f in factors):
            raise ConfigError("perturb_range", f"speed factors below 1/{MAX_FACTOR_DENOMINATOR} are not "
                                               f"supported, got {perturb_range!r}")
        for source in self.sources.get("feat", ()):  # refuse piped wav.scp entries now, not in a worker
            if is_kaldi_segments(source):
                read_wav_scp(os.path.join(os.path.dirname(source), "wav.scp"))
        self.sample_rate = sample_rate
        self.use_speed_perturb = check_bool(use_speed_perturb, "use_speed_perturb")
        self.perturb_range = [float(f) for f in factors]
        self.feat_extractor = self._feat_extractor(feat_conf, sample_rate)
        # audio is read at this rate (resampled if stored at another one)
        self.read_rate = self.feat_extractor.sample_rate if self.feat_extractor else sample_rate

    def _feat_extractor(self, feat_conf, sample_rate) -> Optional[LogMel]:
        conf = load_feat_conf(feat_conf)
        if conf is None:
            return None
        if "feat" not in self.main_data:
            raise ConfigError("feat_conf", "needs waveforms in main_data.feat")
        feat_rate = conf.get("sample_rate")
        if sample_rate is not None and feat_rate is not None and feat_rate != sample_rate:
            raise ConfigError("feat_conf.sample_rate", f"is {feat_rate!r} but the dataset's sample_rate is "
                                                       f"{sample_rate}; they must match")
        return LogMel.from_conf(conf, sample_rate)

    def batch_length_fn(self, length: float) -> float:
        """The longest result of an utterance of ``length`` samples: with
        speed perturbation the slowest factor's length (so a perturbed batch
        never exceeds batch_len), then, with ``feat_conf``, its frame count."""
        if self.use_speed_perturb:
            length = perturbed_length(length, min(self.perturb_range))
        if self.feat_extractor is not None:
            length = self.feat_extractor.num_frames(length)
        return length

    def extract_main_data_fn(self, main_data: Dict[str, str]) -> Dict[str, Any]:
        uid = main_data.pop("id")
        item: Dict[str, Any] = {}
        for key, value in main_data.items():
            if key == "feat":
                item["feat"] = self._read_feat(uid, value)
            elif key == "spk_feat":
                item["spk_feat"] = self._read(key, uid, read_vector, value)
            elif key == "duration":
                item["duration"] = self._parse_duration(uid, value)
            else:
                item[key] = value
        return item

    def _read(self, key: str, uid: str, reader, *args):
        try:
            return reader(*args)
        except DataError as e:
            raise self.data_error(key, uid, redact(e)) from None

    def _read_feat(self, uid: str, value: str) -> np.ndarray:
        # Random draws per utterance, in this order: speed factor, dither noise (both rng()).
        feat = self._read("feat", uid, read_feat, value, self.read_rate)
        if self.use_speed_perturb:
            factor = self.perturb_range[int(rng().integers(len(self.perturb_range)))]
            feat = speed_perturb(feat, factor)
        if self.feat_extractor is not None:
            if feat.shape[1] != 1:
                raise self.data_error("feat", uid, f"feat_conf needs mono waveforms, got {feat.shape[1]} "
                                                   f"channels")
            if feat.shape[0] < self.feat_extractor.window_size:
                raise self.data_error("feat", uid, f"{feat.shape[0]} samples is shorter than one frame "
                                                   f"({self.feat_extractor.window_size} samples)")
            feat = self.feat_extractor(feat, rng() if self.feat_extractor.dither else None)
        return feat

    def _parse_duration(self, uid: str, value: str) -> np.ndarray:
        try:
            return np.array([float(x) for x in value.split()], dtype=np.float32)
        except ValueError:
            raise self.data_error("duration", uid, f"expected space-separated numbers, got {value!r}") from None

    def collate_main_data_fn(self, batch_dict: Dict[str, List]) -> Dict[str, Any]:
        batch: Dict[str, Any] = {}
        for key, values in batch_dict.items():
            if key == "feat":
                feat_len = np.array([v.shape[0] for v in values], dtype=np.int64)
                dims = {v.shape[1] for v in values}
                if len(dims) > 1:
                    raise DataError(f"feat: utterances of one batch have different channel/feature "
                                    f"dimensions {sorted(dims)}")
                batch["feat"], batch["feat_len"] = pad_stack(values, np.float32), feat_len
            elif key == "spk_feat":
                batch[key] = np.stack(values).astype(np.float32, copy=False)
            elif key == "duration":
                for name, value in collate_values(key, values):
                    batch[name] = value
                batch.setdefault("duration_len", np.array([len(v) for v in values], dtype=np.int64))
            else:
                batch[key] = list(values)
        return batch
