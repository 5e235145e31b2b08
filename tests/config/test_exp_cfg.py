"""$SPEECHAIN_ROOT paths and an exp_cfg's data_cfg path and run settings, on a real corpus."""
import warnings

import pytest

import speechiter
from speechiter.build import build_iterators, close_all
from speechiter.paths import speechain_root_path
from speechiter.errors import ConfigError
from speechiter.run import main
from tests.parity.corpus import make_speech_corpus

SUB = "librispeech/data/wav/train"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("sc_root")
    make_speech_corpus(path)
    return path


def group(main_data: str, data_len: str, extra: str = "") -> str:
    return ("    type: abs.Iterator\n    conf:\n      dataset_type: speech_text.SpeechTextDataset\n"
            f"      dataset_conf:\n        main_data:\n          feat: {main_data}\n{extra}"
            f"      data_len: {data_len}\n      shuffle: false\n")


def built(cfg, **kwargs):
    iterators = build_iterators(speechiter.load_config(str(cfg)), out_type="null", **kwargs)
    close_all(iterators)
    return iterators


def test_speechain_root_path_rule(monkeypatch):
    monkeypatch.delenv("SPEECHAIN_ROOT", raising=False)
    assert speechain_root_path("datasets/x") is None
    monkeypatch.setenv("SPEECHAIN_ROOT", "/opt/sc")
    assert speechain_root_path("datasets//librispeech/idx2wav") == "/opt/sc/datasets//librispeech/idx2wav"
    for value in ("./x", "../x", ".hidden/x", "/abs/x", "", None):
        assert speechain_root_path(value) is None


def test_root_relative_paths_from_any_folder(root, tmp_path, monkeypatch):
    cfg = tmp_path / "d.yaml"
    body = group(f"{SUB}/idx2wav", f"{SUB}/idx2wav_len")
    cfg.write_text("train:\n" + body + "valid:\n" + body)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(root))
    monkeypatch.chdir(tmp_path)
    train = built(cfg)["train"]
    assert train.dataset.main_data_files["feat"] == [str(root / SUB / "idx2wav")]


def test_root_relative_missing_file_names_the_rule(root, tmp_path, monkeypatch):
    cfg = tmp_path / "d.yaml"
    body = group(f"{SUB}/idx2wav", f"{SUB}/nope_len")
    cfg.write_text("train:\n" + body + "valid:\n" + body)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(root))
    with pytest.raises(ConfigError, match=r"data_cfg\.train\.conf\.data_len.*\$SPEECHAIN_ROOT"):
        built(cfg)


def test_root_joins_data_selection_meta_and_lists(root, tmp_path, monkeypatch):
    cfg = tmp_path / "d.yaml"
    body = group(f"[{SUB}/idx2wav]", f"{SUB}/idx2wav_len",
                 extra=f"        data_selection: [min, 0.5, {SUB}/missing_meta]\n")
    cfg.write_text("train:\n" + body + "valid:\n" + body)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(root))
    with pytest.raises(ConfigError, match=r"dataset_conf\.data_selection\[0\].*missing_meta.*SPEECHAIN_ROOT"):
        built(cfg)


def test_dot_paths_are_not_joined_to_root(root, tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "d.yaml"
    body = group(f"./{SUB}/idx2wav", f"./{SUB}/idx2wav_len")
    cfg.write_text("train:\n" + body + "valid:\n" + body)
    monkeypatch.setenv("SPEECHAIN_ROOT", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert built(cfg)["train"].dataset.main_data_files["feat"][0].endswith(f"{SUB}/idx2wav")
    assert "YAML file's folder" not in capsys.readouterr().err  # SpeeChain's rule, so no warning


def exp_with_data_file(root, tmp_path, exp_top: str):
    data = tmp_path / "data" / "d.yaml"
    data.parent.mkdir()
    sub = f"{root}/{SUB}"
    data.write_text("bs: 3\ntest:\n  s:\n" + "\n".join("  " + line for line in group(
        f"{sub}/idx2wav", f"{sub}/idx2wav_len", extra="").splitlines()) + "\n        batch_size: !ref <bs>\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text(exp_top + "data_cfg: data/d.yaml\n")
    return exp


def test_exp_cfg_data_cfg_path_relative_to_exp_folder_with_its_own_variables(root, tmp_path, monkeypatch):
    monkeypatch.delenv("SPEECHAIN_ROOT", raising=False)
    exp = exp_with_data_file(root, tmp_path, "ngpu: 1\nseed: 7\ntest_num_workers: 0\n")
    cfg = speechiter.load_config(str(exp), ["test.s.conf.batch_size=5"])
    assert cfg.settings == {"ngpu": 1, "seed": 7, "test_num_workers": 0}
    assert cfg.variables["bs"] == 3 and cfg["test"]["s"]["conf"]["batch_size"] == 5  # the override reached the file
    it = built(exp)["test"]["s"]
    assert it.seed == 7 and it.engine_settings.num_workers == 0
    assert {len(b) for b in it.batches[:-1]} == {3}


def test_exp_cfg_data_cfg_path_missing_and_cycle(tmp_path, monkeypatch):
    monkeypatch.delenv("SPEECHAIN_ROOT", raising=False)
    exp = tmp_path / "exp.yaml"
    exp.write_text("data_cfg: nope.yaml\n")
    with pytest.raises(ConfigError, match="relative to the exp_cfg's folder.*no such file"):
        speechiter.load_config(str(exp))
    exp.write_text("data_cfg: exp.yaml\n")
    with pytest.raises(ConfigError, match="already being loaded"):
        speechiter.load_config(str(exp))


def test_exp_cfg_bad_setting(root, tmp_path):
    exp = exp_with_data_file(root, tmp_path, "ngpu: 0\n")
    with pytest.raises(ConfigError, match="ngpu"):
        speechiter.load_config(str(exp))


def test_explicit_arguments_win_over_exp_settings(root, tmp_path):
    exp = exp_with_data_file(root, tmp_path, "ngpu: 2\nseed: 7\nnum_workers: 0\n")
    it = built(exp, seed=1, num_workers=0, ngpu=1)["test"]["s"]
    assert (it.seed, it.ngpu) == (1, 1)
    assert built(exp)["test"]["s"].ngpu == 2


def test_cli_uses_exp_settings_only_without_flags(root, tmp_path, capsys):
    import json
    exp = exp_with_data_file(root, tmp_path, "ngpu: 2\nseed: 7\ntest_num_workers: 0\n")
    report = tmp_path / "r.json"
    assert main(["--data_cfg", str(exp), "--engine", "inline", "--out_type", "null", "--quiet",
                 "--report", str(report)]) == 0
    settings = json.loads(report.read_text())
    text = json.dumps(settings)
    assert '"seed": 7' in text and '"ngpu": 2' in text and '"num_workers": 0' in text
    assert main(["--data_cfg", str(exp), "--engine", "inline", "--out_type", "null", "--quiet", "--seed", "3",
                 "--ngpu", "1", "--report", str(report)]) == 0
    text = report.read_text()
    assert '"seed": 3' in text and '"ngpu": 1' in text
