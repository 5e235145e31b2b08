"""Log-mel on the device a batch goes to: ``feat_conf: {device: cuda}`` (issue 29).

NOTE [ Features on the GPU ]
With ``device: cuda`` the workers decode, resample, speed-perturb and augment
waveforms as always, and stop there: their ``feat`` is the padded waveform
batch ``(B, T, 1)`` with ``feat_len`` in samples, and the batch carries a
:class:`BatchLogMel` device step (speechiter/device_steps.py). The
converter runs it on its side stream once the waveforms are on the GPU:
:func:`batch_log_mel` computes every row's log-mel at once with the CPU
kernel's arithmetic (fbank.py), SpecAugment is applied, and ``feat`` /
``feat_len`` become frames, as the CPU path gives them.

Randomness stays in the worker, in the CPU path's order per row: the speed
factor, the waveform steps, then one dither seed (where the CPU path draws
the dither noise itself), then the spec_augment draws, recorded in
``batch.meta["augment"]`` as the CPU path records them. The device draws the
dither noise from a generator seeded with the first row's seed. So a batch
is the same on a given GPU for a given seed, and, without dither, has the
CPU path's masks; with dither, the noise (and so the draws after it) differ.
Features are close to the CPU path's, not equal: another FFT and matrix
product round differently (see the handbook's "Features on the GPU").

Without CUDA, ``device: cuda`` falls back to the CPU path with one warning.
With ``out_type: cpu`` the step runs on the CPU, in the main process
(one warning: set ``out_type: cuda``); ``null`` gives numpy arrays back.
"""
import warnings
import weakref
from typing import Any, Dict, List, Optional

import numpy as np

from speechiter.fbank import EPS, NORM_EPS
from speechiter.io.pcm import PCM16_SCALE

#: the item key a row's draws travel under from extract_main_data_fn to the collate
DEFERRED_KEY = "__log_mel__"
_warned_host = False


def deferred_row(mel, augment, samples: int, applied: Dict[str, Any]) -> Dict[str, Any]:
    """A row's draws for its log-mel on the device (NOTE [ Features on the GPU ]), from ``speechiter.rng()``."""
    from speechiter.seeding import rng

    frames = mel.num_frames(samples)
    seed = int(rng().integers(1 << 62)) if mel.dither else None
    spec = augment.feature_draws(frames, mel.n_mels, applied) if augment is not None else []
    return {"frames": frames, "seed": seed, "spec": spec}


class BatchLogMel:
    """The device step of a batch whose features are computed where it is delivered. Small and picklable:
    the settings, and each row's frame count, dither seed and spec_augment records."""

    def __init__(self, conf: Dict[str, Any], rows: List[Dict[str, Any]], spec_steps: list, key: str = "feat"):
        self.conf = conf
        self.frames = [row["frames"] for row in rows]
        self.seed = rows[0]["seed"] if rows else None
        self.spec = [(step.fill, [row["spec"][i] for row in rows]) for i, step in enumerate(spec_steps)]
        self.key = key

    def __call__(self, batch, device):
        import torch
        global _warned_host
        target = device if device is not None else torch.device("cpu")
        if target.type != "cuda" and self.conf.get("device", "cpu") != "cpu" and not _warned_host:
            _warned_host = True
            warnings.warn("feat_conf.device is cuda but batches are delivered to the CPU: log-mel is computed "
                          "in the main process; set out_type: cuda", RuntimeWarning, stacklevel=2)
        mel = _log_mel(self.conf)
        wave = torch.as_tensor(batch[self.key]).to(target)[..., 0]
        lengths = torch.tensor(self.frames, dtype=torch.int64).to(target)
        with torch.no_grad():
            feat = batch_log_mel(mel, wave, lengths, max(self.frames), self.seed)
            for fill, records in self.spec:
                feat = spec_augment(feat, lengths, self.frames, records, fill)
        if device is None:
            feat, lengths = feat.numpy(), lengths.numpy()
        batch[self.key], batch[f"{self.key}_len"] = feat, lengths
        return batch


def batch_log_mel(mel, wave, frames, width: int, seed: Optional[int]):
    """Log-mel ``(B, width, n_mels)`` of the padded waveforms ``wave`` ``(B, T)`` whose rows have ``frames``
    frames (an int64 tensor on ``wave``'s device; ``width`` its largest), rows zero beyond their frames; the
    arithmetic of features.py's NOTE [ Kaldi-compatible fbank with torch ]. ``seed``: the dither noise's."""
    import torch

    device = wave.device
    window, banks = _device_tensors(mel, device)
    x = (wave * PCM16_SCALE)[:, :(width - 1) * mel.window_shift + mel.window_size]
    framed = x.unfold(1, mel.window_size, mel.window_shift)  # (B, width, window)
    if mel.dither > 0:
        generator = torch.Generator(device).manual_seed(seed)
        noise = torch.randn(framed.shape, generator=generator, device=device, dtype=framed.dtype)
        framed = framed + noise * mel.dither
    if mel.remove_dc_offset:
        framed = framed - framed.mean(dim=2, keepdim=True)
    if mel.preemphasis:
        first = framed[..., :1] * (1 - mel.preemphasis)
        framed = torch.cat([first, framed[..., 1:] - mel.preemphasis * framed[..., :-1]], dim=2)
    spectrum = torch.fft.rfft(framed * window, n=mel.n_fft)
    power = spectrum.real.square() + spectrum.imag.square()
    if device.type == "cuda":  # float64: a training script's TF32 setting must not change the features
        feat = (power.double() @ banks).float().clamp_min(EPS).log()
    else:
        feat = (power @ banks).clamp_min(EPS).log()
    valid = _valid(frames, width).unsqueeze(2)  # (B, width, 1)
    if mel.normalize == "utterance":
        counts = frames.to(feat.dtype).clamp_min(1)[:, None, None]
        mean = (feat * valid).sum(dim=1, keepdim=True) / counts
        std = ((feat - mean).square() * valid).sum(dim=1, keepdim=True).div(counts).sqrt()
        feat = (feat - mean) / std.clamp_min(NORM_EPS)
    return feat.masked_fill(~valid, 0.0)


def _valid(frames, width: int):
    """``(B, width)``: whether each frame is one of its row's."""
    import torch
    return torch.arange(width, device=frames.device)[None, :] < frames[:, None]


def spec_augment(feat, frames, counts: List[int], records: List[Optional[dict]], fill: str):
    """SpecAugment's warp and masks of ``records`` (one per row, None: not applied) on ``feat`` (B, F, M)
    whose rows have ``frames`` frames (on the device; ``counts`` on the host), as
    speechiter/dataset/augment/spec_augment.py applies them to one row."""
    import torch
    from speechiter.dataset.augment.spec_augment import warp_sources

    if not any(records):
        return feat
    feat = feat.clone()
    rows, width, bins = feat.shape
    times, bands = np.zeros((rows, width), dtype=bool), np.zeros((rows, bins), dtype=bool)
    for row, record in enumerate(records):
        if record is None:
            continue
        if "warp" in record and record["warp"][1] != 0:
            n = counts[row]
            low, high, weight = (torch.from_numpy(a).to(feat.device) for a in warp_sources(n, *record["warp"]))
            feat[row, :n] = feat[row, low] * (1 - weight) + feat[row, high] * weight
        for start, span in record["freq"]:
            bands[row, start:start + span] = True
        for start, span in record["time"]:
            times[row, start:start + span] = True
    if fill == "mean":
        value = (feat.sum(dim=(1, 2)) / (frames.to(feat.dtype).clamp_min(1) * bins))[:, None, None]  # pads: 0
    else:
        value = torch.zeros((), device=feat.device, dtype=feat.dtype)
    times, bands = torch.from_numpy(times).to(feat.device), torch.from_numpy(bands).to(feat.device)
    masked = (times[:, :, None] | bands[:, None, :]) & _valid(frames, width)[:, :, None]
    return torch.where(masked, value, feat)


_MELS: Dict[tuple, Any] = {}
_TENSORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # LogMel -> {device: (window, banks)}


def _log_mel(conf: Dict[str, Any]):
    """The LogMel of ``conf``, made once per process."""
    key = tuple(sorted(conf.items()))
    mel = _MELS.get(key)
    if mel is None:
        from speechiter.features import LogMel
        mel = _MELS[key] = LogMel(**{**conf, "device": "cpu"})
    return mel


def _device_tensors(mel, device):
    """``mel``'s window and mel banks on ``device``, kept as long as ``mel`` lives (keyed by the object: an id
    can be reused once it dies)."""
    tensors = _TENSORS.setdefault(mel, {})
    found = tensors.get(str(device))
    if found is None:
        banks = mel.banks_tensor.double() if device.type == "cuda" else mel.banks_tensor
        found = tensors[str(device)] = (mel.window_tensor.to(device), banks.to(device))
    return found
