"""Augmentation and mixing inputs an adversary would try: missing files (refused when the dataset is built),
NaN or infinite noise and RIRs, SNRs and gains float32 cannot hold, a weight no float holds. No NaN in any
batch: each is a clear error or a correct, finite result."""
import numpy as np
import pytest

import speechiter
from speechiter.errors import ConfigError, DataError
from tests.dataset.augment_corpora import noise_waves, rir_waves, write_list
from tests.dataset.test_augment_errors import PATH, build, first_batch
from tests.iterator.test_mix_errors import mix_conf
from tests.recipes import write_recipe


def test_missing_noise_and_rir_files_are_refused_when_the_dataset_is_built(tmp_path, make_recipe, corpus):
    listed = write_list(tmp_path, "n", noise_waves(count=6))
    for i in (0, 2, 3, 5):
        (listed.parent / f"n{i}.wav").unlink()
    with pytest.raises(DataError, match=rf"^dataset_conf.augment\[0\].noise: 4 of the 6 noise files {listed} lists "
                                        rf"do not exist: {listed}:1 \({listed.parent}/n0.wav\), {listed}:3 "
                                        rf"\({listed.parent}/n2.wav\), {listed}:4 \(.*n3.wav\) and 1 more$"):
        build(make_recipe, corpus, [{"type": "noise", "noise": str(listed)}])
    rirs = write_list(tmp_path, "r", rir_waves())
    (rirs.parent / "r1.wav").unlink()
    with pytest.raises(DataError, match=rf"^dataset_conf.augment\[1\].rir: 1 of the 2 RIR files {rirs} lists do "
                                        rf"not exist: {rirs}:2 \("):
        build(make_recipe, corpus, [{"type": "gain"}, {"type": "reverb", "rir": str(rirs)}])


@pytest.mark.parametrize("kind, bad, problem", [
    ("noise", np.nan, "sample 100 is nan (1 samples are NaN or infinite)"),
    ("noise", -np.inf, "sample 100 is -inf (1 samples are NaN or infinite)"),
    ("reverb", np.inf, "sample 100 is inf (1 samples are NaN or infinite)"),
])
def test_nan_or_infinite_noise_and_rirs_are_refused(tmp_path, make_recipe, corpus, kind, bad, problem):
    waves = noise_waves(count=1) if kind == "noise" else rir_waves(count=1)
    waves[0][100] = bad
    listed = str(write_list(tmp_path, "n", waves))
    with pytest.raises(DataError) as error:
        first_batch(build(make_recipe, corpus, [{"type": kind, "noise" if kind == "noise" else "rir": listed}]))
    assert str(error.value).endswith(f"n0.wav: {problem}") and error.value.exit_code == 2


@pytest.mark.parametrize("step, path", [
    ({"type": "noise", "snr": [-1e308, 5]}, "snr"), ({"type": "noise", "snr": 1e308}, "snr"),
    ({"type": "noise", "snr": [-400, -400]}, "snr"), ({"type": "gain", "db": [0, 800]}, "db"),
    ({"type": "gain", "db": 10 ** 400}, "db"),
])
def test_snrs_and_gains_past_float32_are_refused(tmp_path, make_recipe, corpus, step, path):
    if step["type"] == "noise":
        step = {**step, "noise": str(write_list(tmp_path, "n", noise_waves()))}
    with pytest.raises(ConfigError, match=rf"^{PATH}.augment\[0\].{path}: expected (a number|values within "
                                          rf"\[-120, 120\] dB), got"):
        build(make_recipe, corpus, [step])


def test_the_extreme_snrs_and_gains_allowed_give_finite_batches(tmp_path, make_recipe, corpus):
    noise = str(write_list(tmp_path, "n", noise_waves()))
    for low, high in ((-120, -120), (120, 120)):
        augment = [{"type": "noise", "noise": noise, "snr": [low, high]}, {"type": "gain", "db": [high, high]}]
        batch = first_batch(build(make_recipe, corpus, augment))
        feat = np.asarray(batch["feat"])
        assert np.isfinite(feat).all() and np.abs(feat).max() > 0


def test_a_weight_no_float_holds_is_a_config_error(tmp_path, make_corpus):
    a, b = make_corpus(tmp_path / "a", num=3), make_corpus(tmp_path / "b", num=3, seed=2)
    cfg = write_recipe(tmp_path / "mix.yaml", a, train=mix_conf(a, b, weights={"libri": 10 ** 400, "cv": 1}))
    with pytest.raises(ConfigError, match=r"^data_cfg.train.conf.weights.libri: expected a number, got 1000") as e:
        speechiter.build_iterators(speechiter.load_config(cfg), num_workers=0)
    assert len(str(e.value)) < 250
