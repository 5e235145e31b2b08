"""Relative data paths resolve against the YAML file's folder, never silently against the current one; the
summary and the report name the data roots; a user's Dataset gets the same rules for the files it declares."""
import json
import uuid
from pathlib import Path

import pytest

import speechiter
from speechiter.build import close_all
from speechiter.errors import ConfigError
from tests.inprocess import run_cli
from tests.recipes import write_recipe

REPO = Path(__file__).resolve().parents[2]

def write(cfg: Path, root: str):
    """A train + valid recipe over the corpus in ``root``, a path relative to the recipe's folder."""
    return write_recipe(cfg, root, batch_len=32000)


def run(cfg: Path, cwd: Path, *args):
    return run_cli("--data_cfg", cfg, "--num_workers", 0, *args, cwd=cwd)


@pytest.mark.timeout(60)
def test_a_copy_beside_the_current_folder_never_replaces_the_recipes_corpus(tmp_path, make_corpus):
    """The issue's case: ../../corpus exists from the current folder too, holding another corpus."""
    recipe_corpus = make_corpus(tmp_path / "project" / "corpus", num=6)
    make_corpus(tmp_path / "elsewhere" / "corpus", num=3, seed=1)
    cfg = tmp_path / "project" / "recipes" / "demo" / "asr.yaml"
    cfg.parent.mkdir(parents=True)
    write(cfg, "../../corpus")
    cwd = tmp_path / "elsewhere" / "a" / "b"
    cwd.mkdir(parents=True)
    report = tmp_path / "report.json"
    done = run(cfg, cwd, "--report", report, "--epochs", 1)
    assert done.returncode == 0, done.stderr
    train = json.loads(report.read_text())["iterators"]["train"]
    assert train["utterances"] == 6
    assert train["data_roots"] == [str(recipe_corpus)]
    assert f"train data: {recipe_corpus}" in done.stdout
    assert "current folder" not in done.stderr


@pytest.mark.timeout(60)
def test_a_path_found_only_from_the_current_folder_is_used_with_a_warning(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "run" / "corpus", num=4)
    cfg = tmp_path / "recipes" / "asr.yaml"
    cfg.parent.mkdir()
    write(cfg, "corpus")
    done = run(cfg, tmp_path / "run", "--epochs", 1)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]  # one line, once per run
    assert warnings == [f"speechiter: warning: 3 paths (first data_cfg.train.conf.data_len: 'corpus/idx2wav_len') "
                        f"are not in the YAML file's folder ({cfg.parent}); read from the current folder "
                        f"({tmp_path / 'run'})"]
    assert f"train data: {corpus}" in done.stdout


@pytest.mark.timeout(60)
def test_the_shipped_demo_recipe_runs_from_any_folder(tmp_path, demo_root):
    done = run(REPO / "recipes" / "demo" / "asr.yaml", tmp_path, "--epochs", 1)
    assert done.returncode == 0, done.stderr
    assert f"train data: {demo_root / 'train'}" in done.stdout and "warn" not in done.stderr.lower()


USER_DATASET = """\
from speechiter.dataset.speech_text import SpeechTextDataset


class NoisySpeech(SpeechTextDataset):
    file_options = {"noise_list": "files"}

    def dataset_init_fn(self, noise_list=None, **conf):
        super().dataset_init_fn(**conf)
        self.noise_list = noise_list
"""


def user_recipe(tmp_path, corpus, noise_list: str) -> Path:
    module = f"lab_{uuid.uuid4().hex[:8]}"
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / f"{module}.py").write_text(USER_DATASET)
    iterator = (f"{{type: abs.Iterator, conf: {{dataset_type: {module}.NoisySpeech, "
                f"dataset_conf: {{main_data: {{feat: {corpus}/idx2wav}}, noise_list: {noise_list}}}}}}}")
    cfg = tmp_path / "recipe" / "asr.yaml"
    cfg.write_text(f"train: {iterator}\nvalid: {iterator}\n")
    return cfg


def build_train(cfg):
    iterators = speechiter.build_iterators(speechiter.load_config(str(cfg)), num_workers=0, groups=("train",),
                                           out_type="null")
    close_all(iterators)
    return iterators["train"]


def test_a_users_dataset_gets_the_root_and_the_checks_for_its_declared_files(tmp_path, make_corpus, monkeypatch):
    corpus = make_corpus(tmp_path / "corpus", num=4)
    root = tmp_path / "sc_root"
    (root / "noise").mkdir(parents=True)
    (root / "noise" / "list").write_text("n1 /x.wav\n")
    cfg = user_recipe(tmp_path, corpus, "noise/list")
    monkeypatch.setenv("SPEECHAIN_ROOT", str(root))
    assert build_train(cfg).dataset.noise_list == str(root / "noise" / "list")
    (root / "noise" / "list").unlink()
    with pytest.raises(ConfigError, match=r"^data_cfg.train.conf.dataset_conf.noise_list: file not found: .*noise/list "
                                          r"\('noise/list' is relative to \$SPEECHAIN_ROOT="):
        build_train(cfg)


def test_a_users_declared_file_resolves_against_the_yaml_folder_and_must_exist(tmp_path, make_corpus, monkeypatch):
    corpus = make_corpus(tmp_path / "corpus", num=4)
    monkeypatch.delenv("SPEECHAIN_ROOT", raising=False)
    cfg = user_recipe(tmp_path, corpus, "[noises.txt]")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^data_cfg.train.conf.dataset_conf.noise_list\[0\]: file not found: "
                                          rf"noises.txt \(looked in the YAML file's folder {cfg.parent} and the "
                                          rf"current folder {tmp_path}\)$"):
        build_train(cfg)
    (cfg.parent / "noises.txt").write_text("")
    assert build_train(cfg).dataset.noise_list == [str(cfg.parent / "noises.txt")]
