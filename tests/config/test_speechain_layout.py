"""A SpeeChain checkout's layout, run as a SpeeChain user would: from its root without $SPEECHAIN_ROOT,
from another folder without it, and with it; idx2 files whose values are relative to SpeeChain's root.

The root holds tests/fixtures/config/exp_cfg_asr.yaml (a trimmed SpeeChain exp_cfg, its paths
``datasets//librispeech/data/wav/<set>/...``) under recipes/asr/librispeech/train-clean-100/exp_cfg/, and the
parity corpus (tests/parity/corpus.py) as datasets/librispeech/data/wav/{train-clean-100,dev-clean}/.
"""
import os
import shutil
from pathlib import Path

import pytest

import speechiter
from speechiter.build import build_iterators, close_all
from speechiter.errors import ConfigError, DataError, WorkerError
from tests.inprocess import run_cli
from tests.parity.corpus import make_speech_corpus

REPO = Path(__file__).resolve().parents[2]
RECIPE = "recipes/asr/librispeech/train-clean-100/exp_cfg/asr.yaml"
TRAIN = "datasets/librispeech/data/wav/train-clean-100"


@pytest.fixture(scope="module")
def speechain(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layout") / "SpeeChain"
    for subset in ("train-clean-100", "dev-clean"):
        make_speech_corpus(root / "datasets", subset)
    (root / RECIPE).parent.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "config" / "exp_cfg_asr.yaml", root / RECIPE)
    return root


def build(recipe, **settings):
    iterators = build_iterators(speechiter.load_config(str(recipe)), num_workers=0, groups=("train", "valid"),
                                out_type="null", **settings)
    close_all(iterators)
    return iterators


def warnings_in(stderr: str):
    return [line for line in stderr.splitlines() if "warning" in line]


def test_from_the_root_without_the_variable_one_warning_line(speechain, monkeypatch, capsys):
    monkeypatch.delenv("SPEECHAIN_ROOT", raising=False)
    monkeypatch.chdir(speechain)
    iterators = build(RECIPE)
    assert iterators["train"].dataset.main_data_files["feat"] == ["datasets//librispeech/data/wav/train-clean-100/idx2wav"]
    assert warnings_in(capsys.readouterr().err) == [
        f"speechiter: warning: 6 paths (first data_cfg.train.conf.data_len: "
        f"'datasets//librispeech/data/wav/train-clean-100/idx2wav_len') are not in the YAML file's folder "
        f"({speechain / RECIPE.rsplit('/', 1)[0]}); read from the current folder ({speechain}); "
        f"export SPEECHAIN_ROOT={speechain} to read them from there by SpeeChain's rule"]


def test_from_elsewhere_without_the_variable_the_error_says_where_and_what_to_set(speechain, tmp_path, monkeypatch):
    monkeypatch.delenv("SPEECHAIN_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        build(speechain / RECIPE)
    assert str(error.value) == (
        "data_cfg.train.conf.dataset_conf.main_data.feat: file not found: "
        "datasets//librispeech/data/wav/train-clean-100/idx2wav (looked in the YAML file's folder "
        f"{speechain / RECIPE.rsplit('/', 1)[0]} and the current folder {tmp_path}); a SpeeChain recipe names its "
        "files from the SpeeChain folder: export SPEECHAIN_ROOT=/path/to/SpeeChain")
    with pytest.raises(ConfigError, match=rf"^{tmp_path / RECIPE}: no such file \(looked in the current folder "
                                          rf"{tmp_path}\); a SpeeChain recipe names its files from the SpeeChain "
                                          r"folder: export SPEECHAIN_ROOT=/path/to/SpeeChain$"):
        speechiter.load_config(RECIPE)


def test_from_elsewhere_with_the_variable_no_warning(speechain, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPEECHAIN_ROOT", str(speechain))
    monkeypatch.chdir(tmp_path)
    iterators = build(RECIPE)  # the recipe too is looked for under the root
    assert iterators["train"].dataset.main_data_files["feat"] == [f"{speechain}/datasets//librispeech/data/wav/"
                                                          "train-clean-100/idx2wav"]
    assert warnings_in(capsys.readouterr().err) == []


def relative_idx2wav(speechain: Path) -> Path:
    """A copy of the corpus whose idx2wav holds paths relative to SpeeChain's root (SpeeChain opens them from
    the current folder; speechiter from the idx2 file's folder)."""
    folder = speechain / "datasets" / "rel"
    if not folder.exists():
        shutil.copytree(speechain / TRAIN, folder)
        lines = [line.split() for line in (folder / "idx2wav").read_text().splitlines()]
        (folder / "idx2wav").write_text("".join(f"{uid} {os.path.relpath(path.replace(TRAIN, 'datasets/rel'), speechain)}\n"
                                                for uid, path in lines))
    return folder


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])  # 1: a process worker
@pytest.mark.timeout(60)
def test_a_relative_idx2_value_that_misses_names_the_rule_and_the_idx2_file(speechain, monkeypatch, workers,
                                                                            make_recipe):
    folder = relative_idx2wav(speechain)
    monkeypatch.chdir(speechain)
    cfg = make_recipe(str(folder), batch_len=1000)
    train = speechiter.build_iterators(speechiter.load_config(cfg), num_workers=workers, groups=("train",),
                                       out_type="null")["train"]
    try:
        with pytest.raises(DataError if workers == 0 else WorkerError) as error:  # a worker's names its DataError
            next(iter(train.build_loader(epoch=1)))
    finally:
        train.close()
    uid = str(error.value).split("utterance ", 1)[1].split(" ", 1)[0]
    value = f"datasets/rel/audio/{uid}.wav"
    assert (f"{folder / value}: no such file (a relative value of {folder / 'idx2wav'} is read from that file's "
            f"folder; {value} exists from the current folder, where SpeeChain reads it: write absolute paths in "
            f"{folder / 'idx2wav'})") in str(error.value)


def test_a_missing_relative_value_elsewhere_names_the_rule_only(tmp_path, monkeypatch):
    from speechiter.paths import check_data_file, resolve_data_path
    monkeypatch.chdir(tmp_path)
    file = resolve_data_path("audio/a.wav", tmp_path / "corpus" / "idx2wav")
    with pytest.raises(DataError, match=rf"^{file}: no such file \(a relative value of {tmp_path}/corpus/idx2wav "
                                        r"is read from that file's folder\)$"):
        check_data_file(file)
    with pytest.raises(DataError, match=r"^/elsewhere/a.wav: no such file$"):
        check_data_file("/elsewhere/a.wav")


@pytest.mark.timeout(60)
def test_the_handbooks_commands_from_the_root(speechain, tmp_path):
    """"Coming from SpeeChain"'s commands: the run works from the root with the variable, with no warning."""
    env = {"SPEECHAIN_ROOT": str(speechain)}
    done = run_cli("--data_cfg", RECIPE, "--epochs", 1, "--num_workers", 0, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert warnings_in(done.stderr) == []
    env["SPEECHAIN_ROOT"] = None
    done = run_cli("--data_cfg", RECIPE, "--epochs", 1, "--num_workers", 0, cwd=speechain, env=env)
    assert done.returncode == 0, done.stderr
    assert len(warnings_in(done.stderr)) == 1 and "export SPEECHAIN_ROOT=" in done.stderr
    done = run_cli("--data_cfg", RECIPE, cwd=tmp_path, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "export SPEECHAIN_ROOT=" in done.stderr
