"""Bad augmentation input: one line naming the YAML path (ConfigError) or the file (DataError), exit 2."""
from pathlib import Path

import numpy as np
import pytest

import speechiter
from speechiter.errors import ConfigError, DataError
from tests.dataset.augment_corpora import PRESET, noise_waves, rir_waves, write_list
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
PATH = "data_cfg.train.conf.dataset_conf"


def build(make_recipe, corpus, augment, **dataset_conf):
    cfg = make_recipe(corpus, data=("feat", "text"), dataset_conf={"augment": augment, **dataset_conf},
                      batch_len=20000)
    return speechiter.build_iterators(speechiter.load_config(cfg), groups=["train"], num_workers=0)["train"]


def first_batch(iterator):
    try:
        return next(iter(iterator.build_loader(epoch=1)))
    finally:
        iterator.close()


def noise_step(tmp_path, waves=None, name="noise", **options):
    files = write_list(tmp_path, name, noise_waves() if waves is None else waves)
    return {"type": "noise", "noise": str(files), **options}


@pytest.mark.parametrize("augment, path, message", [
    ({"type": "noise"}, "augment", "expected a list of steps"),
    (["noise"], "augment[0]", "expected a step {type: noise|reverb|gain|spec_augment, ...}"),
    ([{"type": "nosie", "noise": "x"}], "augment[0].type", "unknown step 'nosie'; did you mean 'noise'?"),
    ([{"type": "gain", "db": [6, -6]}], "augment[0].db", "the range is reversed: [6, -6] dB; write [-6, 6]"),
    ([{"type": "gain", "db": [1, 2, 3]}], "augment[0].db", "expected [low, high] in dB"),
    ([{"type": "gain", "prob": 1.5}], "augment[0].prob", "expected a probability in [0, 1], got 1.5"),
    ([{"type": "gain", "prob": -0.1}], "augment[0].prob", "expected a probability in [0, 1], got -0.1"),
    ([{"type": "gain", "decibels": 3}], "augment[0].decibels", "unknown option"),
    ([{"type": "gain", "where": 3}], "augment[0].where", "unknown option"),
    ([{"type": "noise"}], "augment[0].noise", "missing required option"),
    ([{"type": "spec_augment"}], "augment[0]", "spec_augment works on log-mel features: it needs feat_conf"),
    ([{"type": "spec_augment", "freq_masks": -1}], "augment[0].freq_masks", "non-negative integer"),
])
def test_bad_steps_name_their_yaml_path(make_recipe, corpus, augment, path, message):
    conf = {"feat_conf": PRESET} if "freq_masks" in str(augment) else {}
    with pytest.raises(ConfigError) as error:
        build(make_recipe, corpus, augment, **conf)
    assert error.value.path == f"{PATH}.{path}"
    assert message in error.value.message


def test_snr_range_reversed(tmp_path, make_recipe, corpus):
    with pytest.raises(ConfigError, match=r"augment\[0\]\.snr: the range is reversed: \[20, 5\] dB"):
        build(make_recipe, corpus, [noise_step(tmp_path, snr=[20, 5])])


def test_waveform_step_after_spec_augment(make_recipe, corpus):
    with pytest.raises(ConfigError, match=r"augment\[1\]\.type: gain works on the waveform and cannot come after "
                                          r"spec_augment"):
        build(make_recipe, corpus, [{"type": "spec_augment"}, {"type": "gain"}], feat_conf=PRESET)


def test_augment_needs_waveforms_and_a_sample_rate(tmp_path, make_recipe, corpus):
    cfg = make_recipe(corpus, data=("text",), data_len=False, dataset_conf={"augment": [{"type": "gain"}]})
    with pytest.raises(ConfigError, match=rf"{PATH}\.augment: needs waveforms in main_data.feat"):
        speechiter.build_iterators(speechiter.load_config(cfg), groups=["train"], num_workers=0)
    with pytest.raises(ConfigError, match=r"augment\[0\]: gain needs the dataset's sample_rate \(got null\)"):
        build(make_recipe, corpus, [{"type": "gain"}], sample_rate=None)
    with pytest.raises(ConfigError, match=rf"{PATH}\.views: expected a positive integer, got 0"):
        build(make_recipe, corpus, [], views=0)


def test_empty_and_unreadable_lists(tmp_path, make_recipe, corpus):
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match=rf"{PATH}\.augment\[0\]\.noise: .*empty: lists no noise file"):
        build(make_recipe, corpus, [{"type": "noise", "noise": str(tmp_path / "empty")}])
    with pytest.raises(ConfigError, match=rf"{PATH}\.augment\[0\]\.rir: .*missing: no such idx2 file"):
        build(make_recipe, corpus, [{"type": "reverb", "rir": str(tmp_path / "missing")}])
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match=r"augment\[0\]\.noise\[1\]: .*folder: is a folder"):
        build(make_recipe, corpus, [{"type": "noise", "noise": [str(write_list(tmp_path, "n", noise_waves())),
                                                                str(tmp_path / "folder")]}])
    with pytest.raises(ConfigError, match=r"augment\[0\]\.noise: expected an idx2 file of noise files"):
        build(make_recipe, corpus, [{"type": "noise", "noise": []}])


@pytest.mark.parametrize("kind, waves, problem", [
    ("noise", [np.zeros((8000, 2), np.float32) + 0.1], "n0.wav: has 2 channels; noise files must be mono"),
    ("noise", [np.zeros(8000, np.float32)], "n0.wav: is all silent (the SNR is undefined)"),
    ("noise", [np.full(300, 0.1, np.float32)], "n0.wav: 300 samples is shorter than one frame (400 samples at "
                                               "16000 Hz)"),
    ("reverb", [np.zeros(4000, np.float32)], "n0.wav: is all zeros"),
    ("reverb", [np.zeros((4000, 2), np.float32) + 0.1], "n0.wav: has 2 channels; RIR files must be mono"),
])
def test_bad_noise_and_rir_files_name_the_list_and_the_file(tmp_path, make_recipe, corpus, kind, waves, problem):
    files = str(write_list(tmp_path, "n", waves))
    step = {"type": kind, "noise" if kind == "noise" else "rir": files}
    with pytest.raises(DataError) as error:
        first_batch(build(make_recipe, corpus, [step]))
    option = "noise" if kind == "noise" else "rir"
    label = "noise" if kind == "noise" else "RIR"
    assert str(error.value).startswith(f"dataset_conf.augment[0].{option} ({label} n0 from {files}): ")
    assert str(error.value).endswith(problem)


def test_unreadable_noise_file(tmp_path, make_recipe, corpus):
    (tmp_path / "junk.wav").write_bytes(b"RIFF not really a wav file")  # a missing one: tests/dataset/test_augment_safety.py
    (tmp_path / "idx2noise").write_text("junk junk.wav\n")
    with pytest.raises(DataError, match=r"dataset_conf\.augment\[0\]\.noise \(noise junk from .*idx2noise\): "
                                        r".*junk\.wav: "):
        first_batch(build(make_recipe, corpus, [{"type": "noise", "noise": str(tmp_path / "idx2noise")}]))


def test_frame_is_feat_conf_window(tmp_path, make_recipe, corpus):
    files = str(write_list(tmp_path, "n", [np.full(420, 0.1, np.float32)]))  # 420 >= 400 (25 ms)
    first_batch(build(make_recipe, corpus, [{"type": "noise", "noise": files}]))
    conf = {"feat_conf": {"frame_length": 50}}  # 800 samples
    with pytest.raises(DataError, match="420 samples is shorter than one frame \\(800 samples at 16000 Hz\\)"):
        first_batch(build(make_recipe, corpus, [{"type": "noise", "noise": files}], **conf))


@pytest.mark.timeout(120)
def test_cli_exit_2_with_one_line(tmp_path, make_recipe, corpus):
    cfg = make_recipe(corpus, data=("feat",), dataset_conf={"augment": [{"type": "gain", "db": [6, -6]}]},
                      batch_len=20000)
    run = run_cli("--data_cfg", cfg, "--quiet")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert f"{PATH}.augment[0].db: the range is reversed" in run.stderr


@pytest.mark.slow  # a process worker
@pytest.mark.timeout(120)
def test_cli_exit_2_with_one_line_from_a_worker(tmp_path, make_recipe, corpus):
    silent = str(write_list(tmp_path, "n", [np.zeros(8000, np.float32)]))
    cfg = make_recipe(corpus, data=("feat",), dataset_conf={"augment": [{"type": "noise", "noise": silent}]},
                      batch_len=20000, name="silent.yaml")
    run = run_cli("--data_cfg", cfg, "--quiet", "--num_workers", 1)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "dataset_conf.augment[0].noise (noise n0 from" in run.stderr and "is all silent" in run.stderr
