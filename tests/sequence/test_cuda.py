"""Issue 29, items 3 and 4 on a GPU (marked ``cuda``: skipped without one). Batches of ``out_type: cuda``
are bit-identical to ``cpu`` ones and come straight from page-locked slots (NOTE [ Pinned slots ] in
speechiter/sequence/shm/pinning.py), which are all unregistered after the run; features computed on the GPU
are close to the workers' (NOTE [ Features on the GPU ] in speechiter/gpu_features.py)."""
import numpy as np
import pytest
import torch

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.block import BlockIterator
from speechiter.sequence import shm

pytestmark = [pytest.mark.cuda, pytest.mark.slow]  # GPU, and loading worker processes
GPU_TOLERANCE = 2e-3  # log-mel units: cuFFT and cuBLAS against MKL (see the handbook)


def iterator(corpus, feat_conf=None, augment=None, **settings):
    conf = {"main_data": {"feat": str(corpus / "idx2wav")}}
    if feat_conf is not None:
        conf["feat_conf"] = feat_conf
    if augment is not None:
        conf["augment"] = augment
    return BlockIterator(dataset_type=SpeechTextDataset, dataset_conf=conf, data_len=str(corpus / "idx2wav_len"),
                         batch_len=200 if feat_conf else 32000, seed=1, **settings)


def load(it, epochs=2):
    out = []
    try:
        for epoch in range(1, epochs + 1):
            for batch in it.build_loader(epoch):
                out.append({key: value for key, value in batch.items()})
                out[-1]["ids"], out[-1]["meta"] = batch.ids, batch.meta
    finally:
        it.close()
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("feat_conf", [None, {}])
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_cuda_batches_are_the_cpu_bits_from_pinned_slots(corpus, monkeypatch, feat_conf, thread_type):
    pins = []
    made = shm.cuda_host_pins

    def counted():
        pins.append(made())
        return pins[-1]

    monkeypatch.setattr(shm, "cuda_host_pins", counted)
    settings = {"num_workers": 2, "thread_type": thread_type}
    cpu = load(iterator(corpus, feat_conf, out_type="cpu", **settings))
    cuda = load(iterator(corpus, feat_conf, out_type="cuda", **settings))
    assert len(cpu) == len(cuda) > 2
    for a, b in zip(cpu, cuda):
        assert a["ids"] == b["ids"] and a["meta"] == b["meta"]
        for key, value in a.items():
            if isinstance(value, torch.Tensor):
                assert b[key].is_cuda and torch.equal(b[key].cpu(), value), key
    if thread_type == "proc":
        assert pins and all(len(p) == 0 and not p.failed for p in pins)  # used, and all unregistered


@pytest.mark.timeout(240)
@pytest.mark.parametrize("dither", [0.0, 1.0])
def test_features_on_the_gpu_are_close_to_the_workers(corpus, dither):
    settings = {"num_workers": 2, "out_type": "cuda", "augment": [{"type": "spec_augment", "time_warp": 5}]}
    cpu = load(iterator(corpus, {"dither": dither}, **settings), epochs=1)
    gpu = load(iterator(corpus, {"dither": dither, "device": "cuda"}, **settings), epochs=1)
    again = load(iterator(corpus, {"dither": dither, "device": "cuda"}, **settings), epochs=1)
    worst = 0.0
    for a, b, c in zip(cpu, gpu, again):
        assert torch.equal(b["feat"], c["feat"])  # deterministic on a GPU
        assert torch.equal(a["feat_len"].cpu(), b["feat_len"].cpu()) and a["ids"] == b["ids"]
        assert b["feat"].is_cuda and b["feat"].shape == a["feat"].shape
        if not dither:
            worst = max(worst, float((a["feat"] - b["feat"]).abs().max()))
            assert a["meta"] == b["meta"]
    assert worst <= GPU_TOLERANCE, f"largest difference {worst:.2e}"
