"""Issue 29, item 4: log-mel on the device the batch goes to (NOTE [ Features on the GPU ] in
speechiter/gpu_features.py), checked on the CPU with the same functions: close to the workers' features
(|diff| <= 1e-4, 0 without normalisation here), the same lengths, ids and augment records, deterministic, and a
fallback with one warning where there is no GPU."""
import warnings

import numpy as np
import pytest
import torch

from speechiter import features, gpu_features
from speechiter.dataset.augment.spec_augment import SpecAugment
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError
from speechiter.features import LogMel
from speechiter.gpu_features import BatchLogMel, batch_log_mel
from speechiter.iterator.block import BlockIterator

TOLERANCE = 1e-4  # log-mel units; see the handbook's "Features on the GPU"
SPEC = {"type": "spec_augment", "freq_masks": 2, "freq_width": 10, "time_masks": 2, "time_width": 0.2,
        "time_warp": 5}


def waves(lengths=(400, 3217, 16000, 40001), seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-0.3, 0.3, n) * np.sin(np.arange(n) / 40)).astype(np.float32) for n in lengths]


def padded(rows):
    out = np.zeros((len(rows), max(len(w) for w in rows), 1), np.float32)
    for i, wave in enumerate(rows):
        out[i, :len(wave), 0] = wave
    return out


@pytest.mark.parametrize("conf", [{}, {"normalize": "utterance"}, {"preemphasis": 0.0, "window": "hamming"},
                                  {"remove_dc_offset": False, "n_mels": 40}])
def test_a_batch_on_the_cpu_is_the_workers_features(conf):
    mel = LogMel(16000, **conf)
    rows = waves()
    frames = [mel.num_frames(len(w)) for w in rows]
    feat = batch_log_mel(mel, torch.from_numpy(padded(rows))[..., 0], torch.tensor(frames), max(frames), None)
    assert feat.shape == (len(rows), max(frames), mel.n_mels) and feat.dtype == torch.float32
    for i, wave in enumerate(rows):
        np.testing.assert_allclose(feat[i, :frames[i]].numpy(), mel(wave), rtol=0, atol=TOLERANCE)
        assert not feat[i, frames[i]:].any()  # padding frames are zeros, as the collate pads


def test_spec_augment_on_the_batch_applies_the_workers_draws():
    mel = LogMel(16000)
    step = SpecAugment(**{k: v for k, v in SPEC.items() if k != "type"}, where="augment[0]", n_mels=80)
    rows = waves()
    frames = [mel.num_frames(len(w)) for w in rows]
    generator = np.random.default_rng(3)
    records = [step.draw(n, 80, generator) for n in frames]
    assert any("warp" in r and r["warp"][1] for r in records)
    rows_info = [{"frames": n, "seed": None, "spec": [r]} for n, r in zip(frames, records)]
    batch = BatchLogMel(mel.conf(), rows_info, [step])({"feat": torch.from_numpy(padded(rows))}, torch.device("cpu"))
    assert batch["feat_len"].tolist() == frames
    for i, wave in enumerate(rows):
        expected = step.apply(mel(wave), records[i])
        np.testing.assert_allclose(batch["feat"][i, :frames[i]].numpy(), expected, rtol=0, atol=TOLERANCE)


def test_dither_on_the_device_is_deterministic_and_of_the_right_size():
    mel, plain = LogMel(16000, dither=1.0), LogMel(16000)
    rows = waves(seed=1)
    frames = [mel.num_frames(len(w)) for w in rows]
    wave, lengths = torch.from_numpy(padded(rows))[..., 0], torch.tensor(frames)
    first, again = (batch_log_mel(mel, wave, lengths, max(frames), 7) for _ in range(2))
    other = batch_log_mel(mel, wave, lengths, max(frames), 8)
    assert torch.equal(first, again) and not torch.equal(first, other)
    cpu = mel(rows[2], np.random.default_rng(0))
    device_diff = np.abs(first[2, :frames[2]].numpy() - plain(rows[2])).mean()
    assert device_diff == pytest.approx(np.abs(cpu - plain(rows[2])).mean(), rel=0.2)  # as much noise as the CPU's


def iterator(corpus, device="cpu", augment=None, dither=0.0, **settings):
    conf = {"main_data": {"feat": str(corpus / "idx2wav")}, "feat_conf": {"dither": dither, "device": device}}
    if augment:
        conf["augment"] = augment
    return BlockIterator(dataset_type=SpeechTextDataset, dataset_conf=conf, data_len=str(corpus / "idx2wav_len"),
                         batch_len=300, seed=3, **{"engine": "inline", "num_workers": 0, "out_type": "cpu",
                                                   **settings})


def batches(it, epoch=1):
    try:
        return [(b["feat"].clone() if isinstance(b["feat"], torch.Tensor) else b["feat"].copy(),
                 np.asarray(b["feat_len"]).tolist(), b.ids, b.meta) for b in it.build_loader(epoch)]
    finally:
        it.close()


def test_without_cuda_it_falls_back_to_the_workers_with_one_warning(corpus, monkeypatch):
    monkeypatch.setattr(features, "cuda_available", lambda: False)
    expected = batches(iterator(corpus))
    with pytest.warns(RuntimeWarning, match="feat_conf.device is 'cuda' but CUDA is not available") as caught:
        got = batches(iterator(corpus, device="cuda"))
    assert len([w for w in caught if "CUDA" in str(w.message)]) == 1
    for (a, la, ia, _), (b, lb, ib, _) in zip(expected, got):
        assert torch.equal(a, b) and la == lb and ia == ib


@pytest.mark.parametrize("settings", [{}, {"engine": "msequence", "num_workers": 2, "thread_type": "thread"},
                                      {"engine": "torch", "num_workers": 0}, {"out_type": "null"}])
def test_features_in_the_converter_match_the_workers(corpus, monkeypatch, settings):
    monkeypatch.setattr(features, "cuda_available", lambda: True)  # keep device: cuda on this machine
    monkeypatch.setattr(gpu_features, "_warned_host", True)
    expected = batches(iterator(corpus, augment=[SPEC], **settings))
    got = batches(iterator(corpus, device="cuda", augment=[SPEC], **settings))
    assert len(got) == len(expected) > 1
    for (a, la, ia, ma), (b, lb, ib, mb) in zip(expected, got):
        assert la == lb and ia == ib and ma == mb  # the same lengths, ids and augment records
        assert type(a) is type(b) and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=TOLERANCE)


def test_features_delivered_to_the_cpu_warn_once(corpus, monkeypatch):
    monkeypatch.setattr(features, "cuda_available", lambda: True)
    monkeypatch.setattr(gpu_features, "_warned_host", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches(iterator(corpus, device="cuda"))
    assert [str(w.message) for w in caught if "main process" in str(w.message)] == [
        "feat_conf.device is cuda but batches are delivered to the CPU: log-mel is computed in the main process; "
        "set out_type: cuda"]


@pytest.mark.parametrize("device", ["gpu", "cuda:x", 3])
def test_a_bad_device_names_the_option(device):
    with pytest.raises(ConfigError, match="feat_conf.device: expected cpu, cuda or cuda:N"):
        LogMel(16000, device=device)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_device_step_crosses_from_process_workers(corpus, monkeypatch):
    monkeypatch.setattr(features, "cuda_available", lambda: True)
    monkeypatch.setattr(gpu_features, "_warned_host", True)
    settings = {"engine": "msequence", "num_workers": 2, "thread_type": "proc"}
    expected = batches(iterator(corpus, augment=[SPEC]))
    for (a, la, ia, ma), (b, lb, ib, mb) in zip(expected, batches(iterator(corpus, "cuda", [SPEC], **settings))):
        assert la == lb and ia == ib and ma == mb
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=TOLERANCE)


def test_each_settings_object_gets_its_own_device_tensors():
    """Short-lived LogMels of other settings reuse each other's ids: the window and banks follow the object."""
    import gc
    rows = waves((4000,))
    for i in range(12):
        mel = LogMel(16000, **[{}, {"preemphasis": 0.0, "window": "hamming"}, {"n_mels": 40}][i % 3])
        n = mel.num_frames(4000)
        feat = batch_log_mel(mel, torch.from_numpy(padded(rows))[..., 0], torch.tensor([n]), n, None)
        np.testing.assert_allclose(feat[0].numpy(), mel(rows[0]), rtol=0, atol=TOLERANCE)
        del mel, feat
        gc.collect()
