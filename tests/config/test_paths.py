"""speechiter.paths: the recipe's PathPolicy, declared file options, resolving data values against their
idx2 file, chunk keys."""
import os
from pathlib import Path

import pytest

from speechiter.errors import ConfigError
from speechiter.dataset.abs import Dataset
from speechiter.iterator.abs import Iterator
from speechiter.paths import (FILES, NAMED_FILES, PRESETS_DIR, SELECTION, YAML_FILE,
                              PathPolicy, check_files, file_options, find_preset, resolve_data_path,
                              split_chunk_key)


# --------------------------------------------------------------------- paths


@pytest.mark.parametrize("value, expected", [
    ("wav/a.wav", "/data/train/wav/a.wav"),
    ("../a.flac", "/data/a.flac"),
    ("/abs/a.wav", "/abs/a.wav"),
    ("chunk_000.hdf5:spk1-0001-0001", "/data/train/chunk_000.hdf5:spk1-0001-0001"),
    ("feats/x.H5:grp/key", "/data/train/feats/x.H5:grp/key"),
    ("f.npz:emb", "/data/train/f.npz:emb"),
    ("/abs/c.hdf5:k", "/abs/c.hdf5:k"),
])
def test_resolve_data_path(value, expected):
    assert resolve_data_path(value, "/data/train/idx2wav") == expected


def test_resolve_data_path_relative_idx2():
    assert resolve_data_path("a.wav", "idx2wav") == "a.wav"
    assert resolve_data_path("a.wav", os.path.join("d", "idx2wav")) == os.path.join("d", "a.wav")


def test_split_chunk_key():
    assert split_chunk_key("x/c.hdf5:a:b") == ("x/c.hdf5", "a:b")
    assert split_chunk_key("x/a.wav") == ("x/a.wav", None)
    assert split_chunk_key("x/c.hdf5") == ("x/c.hdf5", None)


# --------------------------------------------------------------------- the path policy


def test_rooted_is_speechains_rule():
    policy = PathPolicy(root="/opt/sc")
    assert policy.rooted("datasets/x") == "/opt/sc/datasets/x"
    for value in ("./x", "../x", ".hidden/x", "/abs/x", "", None, 3):
        assert policy.rooted(value) is None
    assert PathPolicy().rooted("datasets/x") is None


def test_from_environment_reads_the_root_once(monkeypatch, tmp_path):
    monkeypatch.setenv("SPEECHAIN_ROOT", "/opt/sc")
    policy = PathPolicy.from_environment(tmp_path)
    monkeypatch.delenv("SPEECHAIN_ROOT")
    assert policy == PathPolicy(tmp_path, "/opt/sc") and policy.in_folder("/x") == PathPolicy(Path("/x"), "/opt/sc")
    monkeypatch.setenv("SPEECHAIN_ROOT", "")
    assert PathPolicy.from_environment().root is None


def test_recipe_file_under_the_root_first(tmp_path, monkeypatch):
    (tmp_path / "root" / "recipes").mkdir(parents=True)
    (tmp_path / "root" / "recipes" / "a.yaml").write_text("")
    monkeypatch.chdir(tmp_path)
    policy = PathPolicy(root=str(tmp_path / "root"))
    assert policy.recipe_file("recipes/a.yaml") == tmp_path / "root" / "recipes" / "a.yaml"
    assert policy.recipe_file("recipes/b.yaml") == tmp_path / "recipes" / "b.yaml"  # not there: the current folder
    assert policy.recipe_file("./recipes/a.yaml") == tmp_path / "recipes" / "a.yaml"


def test_included_file_names_its_rule(tmp_path):
    (tmp_path / "d.yaml").write_text("")
    assert PathPolicy(tmp_path).included_file("d.yaml") == tmp_path / "d.yaml"
    with pytest.raises(ConfigError, match=r"^data_cfg: 'x.yaml' \(relative to the exp_cfg's folder\): .* no such"):
        PathPolicy(tmp_path).included_file("x.yaml")
    with pytest.raises(ConfigError, match=r"'x.yaml' \(relative to \$SPEECHAIN_ROOT\): /r/x.yaml no such file"):
        PathPolicy(tmp_path, "/r").included_file("x.yaml")


def test_values_in_the_yaml_folder_first_then_the_current_folder_with_a_warning(tmp_path, monkeypatch, capsys):
    recipe, cwd = tmp_path / "recipe", tmp_path / "cwd"
    (recipe / "data").mkdir(parents=True)
    (cwd / "data").mkdir(parents=True)
    (recipe / "data" / "here").write_text("")
    (cwd / "data" / "there").write_text("")
    monkeypatch.chdir(cwd)
    policy = PathPolicy(recipe)
    assert policy.value({"a": ["data/here"]}, "x") == {"a": [str(recipe / "data/here")]}
    assert policy.value("data/here.hdf5:key") == "data/here.hdf5:key"  # the file part must exist
    assert policy.value({"b": "data/there"}, "x") == {"b": "data/there"}
    assert capsys.readouterr().err == (f"speechiter: warning: x.b: 'data/there' is not in the YAML file's folder "
                                       f"({recipe}); read from the current folder ({cwd})\n")
    assert policy.value("nowhere/x") == "nowhere/x" and policy.value("plain") == "plain"
    assert PathPolicy(recipe, "/r").value("./data/here") == "./data/here"  # with a root: the current folder
    assert PathPolicy().value("data/there") == "data/there"  # no YAML folder: as given
    assert capsys.readouterr().err == ""


def test_paths_found_only_from_the_current_folder_are_reported_in_one_line(tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "SpeeChain" / "recipes" / "asr"
    recipe.mkdir(parents=True)
    for name in ("idx2wav", "idx2wav_len"):
        (tmp_path / "SpeeChain" / "datasets" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "SpeeChain" / "datasets" / name).write_text("")
    monkeypatch.chdir(tmp_path / "SpeeChain")
    found = []
    conf = {"main_data": {"feat": "datasets/idx2wav"}, "data_len": "datasets/idx2wav_len"}
    assert PathPolicy(recipe).options(conf, {}, "w", found) == conf
    assert capsys.readouterr().err == ""  # collected, not printed
    PathPolicy(recipe).warn_found_here(found)
    PathPolicy(recipe).warn_found_here([])
    assert capsys.readouterr().err == (
        f"speechiter: warning: 2 paths (first w.main_data.feat: 'datasets/idx2wav') are not in the YAML file's "
        f"folder ({recipe}); read from the current folder ({tmp_path / 'SpeeChain'}); "
        f"export SPEECHAIN_ROOT={tmp_path / 'SpeeChain'} to read them from there by SpeeChain's rule\n")


def test_a_missing_relative_path_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe"
    declared = {"data_len": FILES}
    with pytest.raises(ConfigError, match=rf"^w.data_len: file not found: datasets//x/idx2wav_len \(looked in the "
                                          rf"YAML file's folder {recipe} and the current folder {tmp_path}\); a "
                                          r"SpeeChain recipe names its files from the SpeeChain folder: export "
                                          r"SPEECHAIN_ROOT=/path/to/SpeeChain$"):
        PathPolicy(recipe).check_files({"data_len": "datasets//x/idx2wav_len"}, declared, "w")
    with pytest.raises(ConfigError, match=rf"^w.data_len: file not found: corpus/len \(looked in the YAML file's "
                                          rf"folder {recipe} and the current folder {tmp_path}\)$"):
        PathPolicy(recipe).check_files({"data_len": "corpus/len"}, declared, "w")
    with pytest.raises(ConfigError, match=rf"^w.data_len: file not found: len \(looked in the current folder "
                                          rf"{tmp_path}\)$"):
        PathPolicy(recipe).check_files({"data_len": "len"}, declared, "w")
    with pytest.raises(ConfigError, match=r"^w.data_len: file not found: /abs/len$"):
        PathPolicy(recipe).check_files({"data_len": "/abs/len"}, declared, "w")
    # with the root set, a SpeeChain path is looked for there (and the hint is left out)
    assert PathPolicy(recipe, "/sc").tried("datasets/x") == " (looked in $SPEECHAIN_ROOT=/sc)"
    assert PathPolicy(recipe, "/sc").tried("recipes/x.yaml", recipe=True) == (
        f" (looked in $SPEECHAIN_ROOT=/sc and the current folder {tmp_path})")
    assert PathPolicy(recipe).tried("s3://bucket/x") == ""
    assert PathPolicy(recipe, "/sc").tried("./x") == f" (looked in the current folder {tmp_path})"


def test_presets_are_found_from_any_folder_without_a_warning(tmp_path, monkeypatch, capsys):
    preset = "config/feat/log_mel/80bin_25ms_10ms.yaml"
    assert find_preset(preset) == PRESETS_DIR / "feat/log_mel/80bin_25ms_10ms.yaml"
    assert find_preset("feat/log_mel/80bin_25ms_10ms.yaml") == find_preset(preset)
    assert find_preset("feat/none.yaml") is None and find_preset(str(PRESETS_DIR / "feat")) is None
    (tmp_path / preset).parent.mkdir(parents=True)
    (tmp_path / preset).write_text("n_mels: 80\n")
    monkeypatch.chdir(tmp_path)
    assert PathPolicy(tmp_path / "elsewhere").value(preset) == preset
    assert capsys.readouterr().err == ""


def test_declared_file_options_are_rooted_and_checked(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    for name in ("a", "b", "meta", "conf.yaml"):
        (root / "d" / name).write_text("")
    declared = {"main_data": NAMED_FILES, "data_len": FILES, "data_selection": SELECTION, "feat_conf": YAML_FILE}
    conf = {"main_data": {"feat": "d/a", "text": ["d/a", "./d/b"]}, "data_len": "d/b",
            "data_selection": [["min", 0.5, "d/meta"], ["order", 0.5]], "feat_conf": "d/conf.yaml", "other": "d/a"}
    done = PathPolicy(root=str(root)).options(conf, declared, "w")
    r = f"{root}/d"
    assert done == {"main_data": {"feat": f"{r}/a", "text": [f"{r}/a", "./d/b"]}, "data_len": f"{r}/b",
                    "data_selection": [["min", 0.5, f"{r}/meta"], ["order", 0.5]], "feat_conf": f"{r}/conf.yaml",
                    "other": "d/a"}  # not declared: not rooted
    assert conf["data_len"] == "d/b"  # the given mapping is left alone
    with pytest.raises(ConfigError, match=r"^w.main_data.text\[1\]: file not found: .*root/d/c \('d/c' is relative "
                                          r"to \$SPEECHAIN_ROOT=.*; write ./d/c for the current folder\)$"):
        PathPolicy(root=str(root)).options({"main_data": {"text": ["d/a", "d/c"]}}, declared, "w")
    monkeypatch.chdir(root)  # ./d/b names the current folder
    check_files(done, declared, "w")
    with pytest.raises(ConfigError, match=r"^w.main_data.feat\[1\]: file not found: nope$"):
        check_files({"main_data": {"feat": [f"{r}/a", "nope"]}}, declared, "w")
    with pytest.raises(ConfigError, match=r"^w.data_len: expected a file path or a list of them, got 3$"):
        check_files({"data_len": 3}, declared, "w")
    check_files({"feat_conf": "nope", "data_selection": [["min", 1, "nope"]]}, declared, "w")  # read later


def test_file_options_merge_along_the_classes():
    class Speech(Dataset):
        file_options = {"feat_conf": YAML_FILE}

    class Noisy(Speech):
        file_options = {"noise": FILES}

    class Plain(Noisy):
        pass
    assert file_options(Plain) == {"main_data": NAMED_FILES, "data_selection": SELECTION, "feat_conf": YAML_FILE,
                                   "noise": FILES}
    assert file_options(Iterator) == {"data_len": FILES, "group_info": NAMED_FILES}
    assert file_options(object) == {}
