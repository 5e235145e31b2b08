"""SpeechTextDataset: speech (waveforms or features) with transcripts and speakers.

main_data names (at least one of ``feat`` and ``text``):

- ``feat``: audio (wav, flac, ...) or features (npy, npz, SpeeChain's npz of
  ``feat`` + ``sample_rate``, ``file.npz:key``, ``file.hdf5:key``). Batched
  as float32 ``(B, T, C)``, zero-padded, with ``feat_len`` (int64, ``(B,)``).
  Mono audio has ``C == 1``. With ``feat_conf``, mono waveforms become
  log-mel frames ``(B, frames, n_mels)`` and ``feat_len`` counts frames.
- ``text``: transcripts, a list of raw strings; a token list as SpeeChain's
  MFA / G2P preparation writes it (``['<space>', 'HH', 'AH0']``) becomes a
  list of tokens (see token_text.py). Without ``data_len``, ``len(text)`` of
  the raw line is each utterance's length (as SpeeChain).
- ``spk_ids``: speaker ids (idx2spk), a list of strings.
- ``spk_feat``: speaker embeddings (npy, npz or ``file.hdf5:key``) stacked
  as stored, float32: ``(B, 1, D)`` for SpeeChain's ``(1, D)`` files.
- ``duration``: per-token durations (``[0.1, 0.2]`` or ``0.1 0.2``), float32
  ``(B, L)`` zero-padded, with ``duration_len``.
"""
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from speechiter.batch_context import current_batch
from speechiter.checks import check_bool, check_optional_int
from speechiter.dataset.abs import Dataset
from speechiter.dataset.augment import Augmentation
from speechiter.dataset.augment.record import RECORD_KEY
from speechiter.dataset.augment.views import decoded_once, decoding_once
from speechiter.dataset.collate import collate_values, pad_stack
from speechiter.dataset.length_check import length_problem
from speechiter.dataset.prefetch import prepare, reading_together, take
from speechiter.dataset.speech_files import read_speech, read_stored
from speechiter.dataset.speed_perturb import (MAX_FACTOR_DENOMINATOR, perturbed_length,
                                              speed_fraction, speed_perturb)
from speechiter.dataset.token_text import (SPACE, is_token_list, parse_durations, parse_token_list, space_trim,
                                           text_lengths, trim_fraction)
from speechiter.errors import ConfigError, DataError
from speechiter.device_steps import DEVICE_STEPS
from speechiter.features import LogMel, load_feat_conf
from speechiter.gpu_features import DEFERRED_KEY, BatchLogMel, deferred_row
from speechiter.ids import LengthMap
from speechiter.paths import YAML_FILE
from speechiter.dataset.pitch import PitchExtractor, collate_pitch
from speechiter.seeding import rng
from speechiter.io.command_scan import check_commands
from speechiter.io.storage import redact
from speechiter.text import TextTransforms

KNOWN_KEYS = ("feat", "text", "spk_ids", "spk_feat", "duration")


class _DefaultRate(int):
    """The default ``sample_rate`` (16000, SpeeChain's), told apart from an explicit 16000."""


DEFAULT_SAMPLE_RATE = _DefaultRate(16000)
#: arrays cut with the text when leading / trailing <space> tokens are trimmed
TRIMMED_WITH_TEXT = ("feat", "pitch")


class SpeechTextDataset(Dataset):
    """Speech-text pairs for ASR and TTS.

    Args (``dataset_conf``):
        sample_rate: audio stored at another rate is resampled to it (soxr,
            up or down). Default 16000 (SpeeChain's), or ``feat_conf``'s
            sample_rate when only that is given; None keeps every file's rate.
        use_speed_perturb: pick one factor from ``perturb_range`` per
            utterance and resample the waveform by it, so its length changes
            by the factor (SpeeChain's direction: 1.1 is 10% longer). The
            factor comes from the batch's random state (reproducible).
        perturb_range: the factors to choose from.
        feat_conf: log-mel settings (a mapping, or a YAML file such as
            ``config/feat/log_mel/80bin_25ms_10ms.yaml``), see
            :class:`speechiter.features.LogMel`. None keeps waveforms.
        allow_commands: run the piped commands in wav.scp / idx2wav that
            speechiter does not read natively (arbitrary shell: only for data
            you trust; NOTE [ Running commands ] in speechiter/io/commands.py).
        augment: the augmentation chain (noise, reverb, gain after speed
            perturbation; spec_augment on the log-mel frames), and
        views: copies of each utterance per batch, each with its own draws;
            see speechiter/dataset/augment/ and handbook.md "Augmentation".
    """

    path_keys = ("feat", "spk_feat")
    file_options = {"feat_conf": YAML_FILE}

    def dataset_init_fn(self, sample_rate: Optional[int] = DEFAULT_SAMPLE_RATE, use_speed_perturb: bool = False,
                        perturb_range: Sequence[float] = (0.9, 1.0, 1.1),
                        feat_conf: Union[dict, str, None] = None,
                        pitch_conf: Optional[dict] = None, use_g2p: bool = False, unk_mask_prob: float = 0.0,
                        allow_commands: bool = False, augment: Optional[list] = None, views: int = 1):
        unknown = [k for k in self.main_data if k not in KNOWN_KEYS]
        if unknown:
            raise ConfigError("main_data", f"unknown data name {unknown[0]!r}; SpeechTextDataset reads "
                                           f"{', '.join(KNOWN_KEYS)}")
        if "feat" not in self.main_data and "text" not in self.main_data:
            raise ConfigError("main_data", "needs at least one of 'feat' and 'text'")
        rate_given = sample_rate is not DEFAULT_SAMPLE_RATE
        sample_rate = check_optional_int(sample_rate, "sample_rate")
        factors = list(perturb_range) if isinstance(perturb_range, (list, tuple)) else None
        if not factors or any(isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0 for f in factors):
            raise ConfigError("perturb_range", f"expected a list of positive speed factors, got {perturb_range!r}")
        if any(speed_fraction(f) == 0 for f in factors):
            raise ConfigError("perturb_range", f"speed factors below 1/{MAX_FACTOR_DENOMINATOR} are not "
                                               f"supported, got {perturb_range!r}")
        self.allow_commands = check_bool(allow_commands, "allow_commands")
        # unknown piped commands refused now, not in a worker: See NOTE [ Commands refused at build ]
        check_commands(self.main_data_files.get("feat", []), self.main_data.get("feat"), self.allow_commands)
        conf = load_feat_conf(feat_conf)
        if not rate_given and conf is not None and conf.get("sample_rate") is not None:
            sample_rate = conf["sample_rate"]  # feat_conf's rate stands in for the default
        self.sample_rate = sample_rate
        self.use_speed_perturb = check_bool(use_speed_perturb, "use_speed_perturb")
        self.perturb_range = [float(f) for f in factors]
        self.feat_extractor = self._feat_extractor(conf, sample_rate)
        # audio is read at this rate (resampled if stored at another one)
        self.read_rate = self.feat_extractor.sample_rate if self.feat_extractor else sample_rate
        # pitch_conf: speechiter/dataset/pitch.py; use_g2p, unk_mask_prob: speechiter/text.py
        self.pitch = PitchExtractor.from_conf(pitch_conf, sample_rate, "feat" in self.main_data, feat_conf)
        self.text_transforms = TextTransforms.from_options(use_g2p, unk_mask_prob, "text" in self.main_data)
        self.augment = Augmentation.from_conf(augment, views, sample_rate=self.read_rate, has_feat="feat" in
                                              self.main_data, feat_extractor=self.feat_extractor)
        self.views = self.augment.views if self.augment is not None else 1

    def _feat_extractor(self, conf: Optional[dict], sample_rate) -> Optional[LogMel]:
        if conf is None:
            return None
        if "feat" not in self.main_data:
            raise ConfigError("feat_conf", "needs waveforms in main_data.feat")
        feat_rate = conf.get("sample_rate")
        if sample_rate is not None and feat_rate is not None and feat_rate != sample_rate:
            raise ConfigError("feat_conf.sample_rate", f"is {feat_rate!r} but the dataset's sample_rate is "
                                                       f"{sample_rate}; they must match")
        return LogMel.from_conf(conf, sample_rate)

    def data_len_register_fn(self, main_data) -> Optional[LengthMap]:
        """With ``text``: ``len`` of each raw text line (characters, token
        lists unparsed), as SpeeChain registers it; the Iterator sorts and
        batches by it when no ``data_len`` is given."""
        text = main_data.get("text")
        if text is None:
            return None
        return LengthMap(text.index, text_lengths(text))

    def batch_length_fn(self, length: float) -> float:
        """An utterance of ``length`` samples as batching budgets it: with
        ``feat_conf`` its frame count. Speed perturbation is left out, as
        SpeeChain budgets the unperturbed length (see max_batch_length_fn).
        With ``views: N``, N times that (NOTE [ Views ] in augment/views.py)."""
        if self.feat_extractor is not None:
            length = self.feat_extractor.num_frames(length)
        return length * self.views if self.views > 1 else length

    def max_batch_length_fn(self, length: float) -> float:
        """The longest an utterance of ``length`` samples can become: with
        speed perturbation the longest factor's length, then, with
        ``feat_conf``, its frame count (hard-bound batching rules use it)."""
        if self.use_speed_perturb:
            length = perturbed_length(length, max(self.perturb_range))
        return self.batch_length_fn(length)

    def extract_main_data_fn(self, main_data: Dict[str, str]) -> Dict[str, Any]:
        # Random draws per row, in this order: speed factor, waveform augmentation, dither, spec_augment (rng()).
        uid = main_data.pop("id")
        item: Dict[str, Any] = {}
        applied: Dict[str, Any] = {}  # NOTE [ The applied record ] in augment/record.py
        for key, value in main_data.items():
            if key == "feat":
                item["feat"] = self._read_wave(uid, value, applied)
                if self.pitch is not None:  # f0 of the waveform read (perturbed and augmented)
                    item["pitch"] = self.pitch(item["feat"], uid)
            elif key == "spk_feat":
                item["spk_feat"] = self._read(key, uid, read_stored, value)
            elif key == "duration":
                item["duration"] = self._parse_duration(uid, value)
            elif key == "text" and is_token_list(value):
                item["text"] = parse_token_list(value)
            else:
                item[key] = value
        self._trim_spaces(uid, item)
        if "duration" in item:
            item["duration"] = item["duration"].astype(np.float32)
        if "feat" in item and self.feat_extractor is not None:
            item["feat"] = self._log_mel(uid, item, applied)
        if self.text_transforms is not None:  # use_g2p, then unk_mask_prob
            self.text_transforms(uid, item)
        if self.augment is not None and self.augment.records:
            item[RECORD_KEY] = applied
        return item

    def _read(self, key: str, uid: str, reader, *args):
        try:
            return reader(*args)
        except DataError as e:
            raise self.data_error(key, uid, redact(e)) from None

    def get_batch(self, ids: Sequence[str]) -> Dict[str, Any]:
        with reading_together(self.main_data.get("feat"), ids, self._read_speech), decoding_once(self.views):
            return super().get_batch(ids)  # reads: prefetch.py; views: augment/views.py

    def prepare_batch(self, ids: Sequence[str]) -> bool:
        return prepare(self.main_data.get("feat"), ids, self._read_speech)  # NOTE [ Reading ahead ] in prefetch.py

    def _read_speech(self, value: str):
        return read_speech(value, self.read_rate, self.allow_commands)

    def _read_wave(self, uid: str, value: str, applied: Dict[str, Any]) -> np.ndarray:
        """Decoded (resampled to ``read_rate``), speed-perturbed and augmented."""
        feat, _ = decoded_once(value, lambda: self._read("feat", uid, take, value, self._read_speech))
        expected = current_batch().expected_lengths  # NOTE [ Length files are checked ] in length_check.py
        if expected is not None:
            problem = length_problem(*expected, uid, value, feat.shape[0])
            if problem is not None:
                raise self.data_error("feat", uid, problem)
        if self.use_speed_perturb:
            factor = self.perturb_range[int(rng().integers(len(self.perturb_range)))]
            feat = speed_perturb(feat, factor)
        if self.augment is not None:
            feat = self.augment.waveform(feat, applied)
        return feat

    def _log_mel(self, uid: str, item: Dict[str, Any], applied: Dict[str, Any]) -> np.ndarray:
        feat = item["feat"]
        if feat.shape[1] != 1:
            raise self.data_error("feat", uid, f"feat_conf needs mono waveforms, got {feat.shape[1]} channels")
        if feat.shape[0] < self.feat_extractor.window_size:
            raise self.data_error("feat", uid, f"{feat.shape[0]} samples is shorter than one frame "
                                               f"({self.feat_extractor.window_size} samples)")
        if self.feat_extractor.device != "cpu":  # the converter computes it: NOTE [ Features on the GPU ]
            item[DEFERRED_KEY] = deferred_row(self.feat_extractor, self.augment, feat.shape[0], applied)
            return feat
        feat = self.feat_extractor(feat, rng() if self.feat_extractor.dither else None)
        return self.augment.features(feat, applied) if self.augment is not None else feat

    def _trim_spaces(self, uid: str, item: Dict[str, Any]):
        """SpeeChain's silence trim: a token list that starts or ends with
        ``<space>`` loses those tokens and their durations, and ``feat`` (and
        ``pitch``) lose the same fraction of their length at that end. An
        utterance of nothing but ``<space>`` stays untrimmed (SpeeChain drops
        it from its batch)."""
        tokens = item.get("text")
        if not isinstance(tokens, list) or not tokens or SPACE not in (tokens[0], tokens[-1]):
            return
        durations = item.get("duration")
        if durations is None and "feat" in item:
            raise self.data_error("text", uid, "the tokens start or end with <space>: trimming the audio with "
                                               "them needs main_data.duration")
        if durations is not None and len(durations) != len(tokens):
            raise self.data_error("duration", uid, f"{len(durations)} durations for {len(tokens)} tokens")
        trimmed = space_trim(tokens, durations)
        if trimmed is None:
            return
        item["text"], durations, front, tail = trimmed
        if durations is not None:
            item["duration"] = durations
        for key in TRIMMED_WITH_TEXT:
            if key in item:
                item[key] = trim_fraction(item[key], front, tail)

    def _parse_duration(self, uid: str, value: str) -> np.ndarray:
        try:
            return parse_durations(value)
        except ValueError:
            raise self.data_error("duration", uid, f"expected a list of numbers ([0.1, 0.2] or 0.1 0.2), "
                                                   f"got {value!r}") from None

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
                shapes = {v.shape for v in values}
                if len(shapes) > 1:
                    raise DataError(f"spk_feat: utterances of one batch have embeddings of different shapes "
                                    f"{sorted(shapes)}")
                batch[key] = np.stack(values).astype(np.float32, copy=False)
            elif key == "pitch":
                batch.update(collate_pitch(values))
            elif key == DEFERRED_KEY:
                steps = self.augment.feature_steps if self.augment is not None else []
                batch[DEVICE_STEPS] = [BatchLogMel(self.feat_extractor.conf(), values, steps)]
            elif key == "duration":
                for name, value in collate_values(key, values):
                    batch[name] = value
                batch.setdefault("duration_len", np.array([len(v) for v in values], dtype=np.int64))
            else:  # text, spk_ids (lists) and a subclass's own fields: numbers become arrays, as in the base
                batch.update(collate_values(key, values))
        return batch

