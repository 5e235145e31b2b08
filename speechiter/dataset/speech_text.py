"""SpeechTextDataset: speech (waveforms or features) with transcripts and speakers.

main_data names (at least one of ``feat`` and ``text``):

- ``feat``: audio (wav, flac, ...) or features (npy, npz, ``file.npz:key``,
  ``file.hdf5:key``). Batched as float32 ``(B, T, C)``, zero-padded, with
  ``feat_len`` (int64, ``(B,)``). Mono audio has ``C == 1``.
- ``text``: transcripts, kept as a list of raw strings.
- ``spk_ids``: speaker ids (idx2spk), a list of strings.
- ``spk_feat``: speaker embeddings (npy or ``file.hdf5:key``), float32 ``(B, D)``.
- ``duration``: per-token durations (space-separated numbers), float32
  ``(B, L)`` zero-padded, with ``duration_len``.
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import soxr

from speechiter.dataset.abs import Dataset, collate_values
from speechiter.errors import ConfigError, DataError
from speechiter.readers import RESAMPLE_QUALITY, read_feat, read_vector
from speechiter.seeding import rng

KNOWN_KEYS = ("feat", "text", "spk_ids", "spk_feat", "duration")


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
    """

    path_keys = ("feat", "spk_feat")

    def dataset_init_fn(self, sample_rate: Optional[int] = None, use_speed_perturb: bool = False,
                        perturb_range: Sequence[float] = (0.9, 1.0, 1.1)):
        unknown = [k for k in self.main_data if k not in KNOWN_KEYS]
        if unknown:
            raise ConfigError("main_data", f"unknown data name {unknown[0]!r}; SpeechTextDataset reads "
                                           f"{', '.join(KNOWN_KEYS)}")
        if "feat" not in self.main_data and "text" not in self.main_data:
            raise ConfigError("main_data", "needs at least one of 'feat' and 'text'")
        if sample_rate is not None and (isinstance(sample_rate, bool) or not isinstance(sample_rate, int)
                                        or sample_rate <= 0):
            raise ConfigError("sample_rate", f"expected a positive integer, got {sample_rate!r}")
        factors = list(perturb_range) if isinstance(perturb_range, (list, tuple)) else None
        if not factors or any(isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0 for f in factors):
            raise ConfigError("perturb_range", f"expected a list of positive speed factors, got {perturb_range!r}")
        self.sample_rate = sample_rate
        self.use_speed_perturb = bool(use_speed_perturb)
        self.perturb_range = [float(f) for f in factors]

    def batch_length_fn(self, length: float) -> float:
        """With speed perturbation, budget the slowest factor: the longest
        possible result, so a perturbed batch never exceeds batch_len."""
        if self.use_speed_perturb:
            return length / min(self.perturb_range)
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
            raise self.data_error(key, uid, e) from None

    def _read_feat(self, uid: str, value: str) -> np.ndarray:
        feat = self._read("feat", uid, read_feat, value, self.sample_rate)
        if self.use_speed_perturb:
            factor = self.perturb_range[int(rng().integers(len(self.perturb_range)))]
            if factor != 1.0:
                # Playing the samples `factor` times faster = resampling to rate / factor.
                rate = 1_000_000
                feat = soxr.resample(feat, rate, int(round(rate / factor)), quality=RESAMPLE_QUALITY)
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
                feat = np.zeros((len(values), int(feat_len.max()), dims.pop()), dtype=np.float32)
                for row, value in zip(feat, values):
                    row[:value.shape[0]] = value
                batch["feat"], batch["feat_len"] = feat, feat_len
            elif key == "spk_feat":
                batch[key] = np.stack(values).astype(np.float32, copy=False)
            elif key == "duration":
                for name, value in collate_values(key, values):
                    batch[name] = value
                batch.setdefault("duration_len", np.array([len(v) for v in values], dtype=np.int64))
            else:
                batch[key] = list(values)
        return batch
