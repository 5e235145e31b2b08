"""Tests for speechiter.config: tags, layouts, overrides, structure errors."""
import copy
import os
import pickle
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from speechiter.config import (DataConfig, IteratorSpec, SpeechLoader, check_groups, config_dir,
                               iter_specs, load_config, parse_override)
from speechiter.build import build_iterators
from speechiter.errors import ConfigError
from tests.recipes import write_recipe

FIXTURES = Path(__file__).parents[1] / "fixtures" / "config"

ITER = "{type: block.BlockIterator, conf: {batch_len: 10}}"
TRAIN_VALID = f"train: {ITER}\nvalid: {ITER}\n"


def write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path, text, overrides=()):
    return load_config(write(tmp_path, text), overrides)


def config_error(tmp_path, text, overrides=()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, overrides)
    assert "\n" not in str(info.value)
    return info.value


# ---------------------------------------------------------------- real recipes

def test_exp_cfg_recipe_loads():
    cfg = load_config(FIXTURES / "exp_cfg_asr.yaml")
    assert list(cfg) == ["train", "valid", "test"]
    train = cfg["train"]["conf"]
    assert train["batch_len"] == 2.4e7 and isinstance(train["batch_len"], float)
    assert train["dataset_conf"]["main_data"]["feat"] == \
        "datasets//librispeech/data/wav/train-clean-100/idx2wav"
    assert train["dataset_conf"]["main_data"]["text"].endswith("train-clean-100/idx2no-punc_text")
    assert train["shuffle"] is True and train["dataset_conf"]["use_speed_perturb"] is True
    assert cfg["valid"]["type"] == "abs.Iterator"
    assert cfg["test"]["test-clean"]["conf"]["group_info"]["speaker"] == \
        "datasets//librispeech/data/wav/test-clean/idx2spk"
    assert list(cfg["test"]) == ["test-clean", "test-other"]
    # variables: tuple tag, exponent float, the top-level flags next to data_cfg
    assert cfg.variables["best_model_selection"] == ("valid", "accuracy", "max", 10)
    assert cfg.variables["batch_len"] == 24000000.0
    assert cfg.variables["train"] is False and cfg.variables["test"] is True
    assert cfg.variables["train_cfg"]["optim_sches"]["conf"]["warmup_steps"] == 16000
    assert "data_cfg" not in cfg.variables
    assert cfg.source == (FIXTURES / "exp_cfg_asr.yaml").absolute()
    assert config_dir(cfg) == FIXTURES.absolute()


def test_data_cfg_recipe_test_alone_loads():
    cfg = load_config(FIXTURES / "data_cfg_test_clean_other.yaml")
    assert list(cfg) == ["test"]
    conf = cfg["test"]["test-other"]["conf"]
    assert conf["dataset_conf"]["main_data"]["text"] == \
        "datasets/librispeech/data/wav/test-other/idx2librispeech_text"
    assert cfg.variables["data_root"] == "datasets/librispeech/data/wav"
    specs = iter_specs(cfg)
    assert [(s.group, s.set_name, s.name, s.path) for s in specs] == [
        ("test", "test-clean", None, "data_cfg.test.test-clean"),
        ("test", "test-other", None, "data_cfg.test.test-other"),
    ]
    assert specs[0].label == "test/test-clean"


def test_data_config_pickles_and_copies():
    cfg = load_config(FIXTURES / "exp_cfg_asr.yaml")
    for clone in (pickle.loads(pickle.dumps(cfg)), copy.deepcopy(cfg)):
        assert isinstance(clone, DataConfig) and clone == cfg
        assert clone.source == cfg.source and clone.variables == cfg.variables
    assert isinstance(cfg, dict)
    assert config_dir({"train": {}}) is None


# ---------------------------------------------------------------------- tags

def test_whole_value_ref_keeps_type_and_indexes(tmp_path):
    cfg = load(tmp_path, f"""
        n: 3
        rate: 1e5
        sets: [a, [b, c]]
        opts: {{x: 1}}
        chain: !ref <n>
        twice: !ref <chain>
        train:
          type: block.BlockIterator
          conf:
            n: !ref <twice>
            rate: !ref <rate>
            sets: !ref <sets>
            first: !ref <sets[0]>
            nested: !ref <sets[1][0]>
            last: !ref < sets[-1] >
            opts: !ref <opts>
            path: !ref /data/<sets[1][1]>/<n>
        valid: {ITER}
    """)
    conf = cfg["train"]["conf"]
    assert conf["n"] == 3 and conf["rate"] == 100000.0
    assert conf["sets"] == ["a", ["b", "c"]] and conf["opts"] == {"x": 1}
    assert conf["first"] == "a" and conf["nested"] == "b" and conf["last"] == ["b", "c"]
    assert conf["path"] == "/data/c/3"
    conf["opts"]["x"] = 2  # whole-value refs are copies, not aliases
    assert cfg.variables["opts"] == {"x": 1}


def test_tuple_list_str_tags_and_floats(tmp_path):
    cfg = load(tmp_path, f"""
        t: !tuple (valid, accuracy, max, 10)
        t_empty: !tuple ()
        t_seq: !tuple [1, 2]
        l: !list [a, 2]
        l_bare: !list a, b
        s: !str 0.5
        floats: [2.4e7, 1e5, -3E-2, 1.0e-9, 0.5, 10, 1_000, .5e3]
        train: {ITER}
        valid: {ITER}
    """)
    v = cfg.variables
    assert v["t"] == ("valid", "accuracy", "max", 10) and v["t_empty"] == () and v["t_seq"] == (1, 2)
    assert v["l"] == ["a", 2] and v["l_bare"] == ["a", "b"] and v["s"] == "0.5"
    assert v["floats"] == [2.4e7, 1e5, -0.03, 1e-9, 0.5, 10, 1000, 500.0]
    assert [type(x) for x in v["floats"]] == [float] * 5 + [int, int, float]
    assert yaml.load("x: 2024-01-01e5", Loader=SpeechLoader)["x"] == "2024-01-01e5"


def test_ref_unknown_key_names_path_and_suggests(tmp_path):
    error = config_error(tmp_path, """
        data_root: /data
        train:
          sup:
            type: block.BlockIterator
            conf: {data_len: !ref <data_rot>/len}
        valid: {type: abs.Iterator}
    """)
    assert error.path == "data_cfg.train.sup.conf.data_len"
    assert "no top-level key 'data_rot'" in error.message
    assert "did you mean 'data_root'?" in error.message
    assert "cfg.yaml line 6" in error.message


def test_ref_unknown_key_inside_a_variable_names_the_variable(tmp_path):
    error = config_error(tmp_path, f"""
        root: !ref <nowhere>/x
        train: {{type: block.BlockIterator, conf: {{p: !ref <root>}}}}
        valid: {ITER}
    """)
    assert error.path == "root" and "no top-level key 'nowhere'" in error.message
    assert "did you mean" not in error.message


def test_ref_cycle(tmp_path):
    error = config_error(tmp_path, f"""
        a: !ref <b>
        b: !ref x<a>
        train: {{type: block.BlockIterator, conf: {{p: !ref <a>}}}}
        valid: {ITER}
    """)
    assert "reference cycle a -> b -> a" in error.message


def test_ref_self_cycle(tmp_path):
    error = config_error(tmp_path, f"a: !ref <a>\ntrain: {{type: x.Y, conf: {{p: !ref <a>}}}}\nvalid: {ITER}")
    assert error.path == "a" and "reference cycle a -> a" in error.message


@pytest.mark.parametrize("ref, expected", [
    ("<sets[2]>", "index [2] out of range for a list of 2 items"),
    ("<n[0]>", "cannot index [0] into a int value"),
    ("<sets[0][0]>", "cannot index [0] into a str value"),
])
def test_ref_bad_index(tmp_path, ref, expected):
    error = config_error(tmp_path, f"""
        n: 3
        sets: [a, b]
        train:
          type: block.BlockIterator
          conf:
            p: !ref {ref}
        valid: {ITER}
    """)
    assert error.path == "data_cfg.train.conf.p" and expected in error.message


def test_unresolvable_refs_outside_data_cfg_are_tolerated(tmp_path):
    cfg = load(tmp_path, f"""
        x: 1
        train_cfg: {{lm: !ref <lm_root>/model, ok: !ref <x>}}
        broken: !ref <missing>
        data_cfg:
          train: {ITER}
          valid: {ITER}
    """)
    assert cfg.variables["train_cfg"] == {"lm": "!ref <lm_root>/model", "ok": 1}
    assert cfg.variables["broken"] == "!ref <missing>"


# ------------------------------------------------------- YAML and file errors

def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.path == str(tmp_path / "nope.yaml") and "no such file" in info.value.message


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)


def test_unreadable_bytes(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)


def test_yaml_syntax_error_has_file_line_col(tmp_path):
    error = config_error(tmp_path, "train:\n  type: [a, b\nvalid: x\n")
    assert error.path.startswith(str(tmp_path / "cfg.yaml") + ":")
    line, col = error.path.rsplit(":", 2)[1:]
    assert int(line) >= 2 and int(col) >= 1


@pytest.mark.parametrize("tag", ["!!python/object:os.system", "!!python/name:os.system",
                                 "!!python/object/apply:os.system"])
def test_object_tags_refused(tmp_path, tag):
    error = config_error(tmp_path, f"x: 1\nevil: {tag} {{}}\n{TRAIN_VALID}")
    assert error.path == f"{tmp_path / 'cfg.yaml'}:2:7"
    assert "YAML object tags are not allowed" in error.message


def test_unknown_local_tag(tmp_path):
    error = config_error(tmp_path, f"x: !reff <y>\n{TRAIN_VALID}")
    assert "'!reff'" in error.message and "!ref, !tuple, !list, !str" in error.message


def test_ref_on_a_mapping_is_a_yaml_error(tmp_path):
    error = config_error(tmp_path, f"x: !ref {{a: 1}}\n{TRAIN_VALID}")
    assert error.path.endswith("cfg.yaml:1:4") and "expected a scalar node" in error.message


def test_bad_tuple_items(tmp_path):
    error = config_error(tmp_path, f"x: !tuple (a, [b)\n{TRAIN_VALID}")
    assert "cannot read the items of !tuple" in error.message


@pytest.mark.parametrize("text, expected", [("", "got an empty file"), ("- a\n- b\n", "got a list")])
def test_top_level_not_a_mapping(tmp_path, text, expected):
    error = config_error(tmp_path, text)
    assert expected in error.message


# ---------------------------------------------------------------- groups

def test_no_groups_at_all(tmp_path):
    error = config_error(tmp_path, "seed: 0\nbatch_len: 3\n")
    assert error.path == "data_cfg" and "no data groups" in error.message


@pytest.mark.parametrize("groups", [["train"], ["valid"], ["train", "test"], ["valid", "test"]])
def test_bad_group_combinations(tmp_path, groups):
    text = "".join(f"{g}: {ITER}\n" for g in groups)
    error = config_error(tmp_path, text)
    assert error.path == "data_cfg"
    assert "allowed group combinations are train+valid, train+valid+test, test" in error.message
    assert f"found {'+'.join(groups)}" in error.message


def test_misspelled_group_in_exp_cfg(tmp_path):
    error = config_error(tmp_path, f"data_cfg:\n  tain: {ITER}\n  valid: {ITER}\n")
    assert error.path == "data_cfg" and "found tain+valid" in error.message
    assert "'tain' is not a group, did you mean 'train'?" in error.message


def test_misspelled_group_in_data_cfg_file(tmp_path):
    error = config_error(tmp_path, f"test_set: x\ntain: {ITER}\nvalid: {ITER}\n")
    assert "found valid" in error.message and "did you mean 'train'?" in error.message
    assert "test_set" not in error.message


def test_data_cfg_not_a_mapping(tmp_path):
    error = config_error(tmp_path, "data_cfg: [train, valid]\n")
    assert error.path == "data_cfg" and "expected a mapping of groups, got list" in error.message


def test_data_cfg_through_a_ref(tmp_path):
    cfg = load(tmp_path, f"groups: {{test: {{clean: {ITER}}}}}\ndata_cfg: !ref <groups>\n")
    assert list(cfg) == ["test"]
    error = config_error(tmp_path, "groups: 3\ndata_cfg: !ref <groups>\n")
    assert error.path == "data_cfg" and "got int" in error.message


def test_check_groups_accepts_allowed_orders():
    for keys in (["valid", "train"], ["test", "valid", "train"], ["test"]):
        check_groups(keys)


# ------------------------------------------------------------- structure

def test_iter_specs_single_and_named(tmp_path):
    cfg = load(tmp_path, f"""
        data_cfg:
          train:
            sup: {ITER}
            unsup: {{type: piece.PieceIterator}}
          valid: {ITER}
          test:
            clean: {ITER}
            multi:
              asr: {{type: abs.Iterator, conf: {{a: 1}}}}
              tts: {{type: abs.Iterator, conf: }}
    """)
    specs = iter_specs(cfg)
    assert specs == [
        IteratorSpec("train", None, "sup", "data_cfg.train.sup", "block.BlockIterator", {"batch_len": 10}),
        IteratorSpec("train", None, "unsup", "data_cfg.train.unsup", "piece.PieceIterator", {}),
        IteratorSpec("valid", None, None, "data_cfg.valid", "block.BlockIterator", {"batch_len": 10}),
        IteratorSpec("test", "clean", None, "data_cfg.test.clean", "block.BlockIterator", {"batch_len": 10}),
        IteratorSpec("test", "multi", "asr", "data_cfg.test.multi.asr", "abs.Iterator", {"a": 1}),
        IteratorSpec("test", "multi", "tts", "data_cfg.test.multi.tts", "abs.Iterator", {}),
    ]
    assert [s.label for s in specs] == ["train/sup", "train/unsup", "valid", "test/clean",
                                        "test/multi/asr", "test/multi/tts"]


def test_iter_specs_on_plain_dict():
    specs = iter_specs({"test": {"a": {"type": "abs.Iterator", "conf": {}}}})
    assert specs[0].path == "data_cfg.test.a"
    with pytest.raises(ConfigError, match="expected a mapping of groups"):
        iter_specs([])


@pytest.mark.parametrize("train, path, expected", [
    ("{sup: {conf: {a: 1}}}", "data_cfg.train.sup.type",
     "missing; every iterator needs type: file.Class (e.g. block.BlockIterator)"),
    ("{conf: {a: 1}}", "data_cfg.train.type", "missing; every iterator needs type"),
    ("{type: 3}", "data_cfg.train.type", "expected file.Class (e.g. block.BlockIterator), got int 3"),
    ("{type: block}", "data_cfg.train.type", "got str 'block'"),
    ("{type: block.X, conf: [1]}", "data_cfg.train.conf", "expected a mapping of options, got list"),
    ("{type: block.X, cnf: {}}", "data_cfg.train.cnf", "unknown key; an iterator holds only type "
                                                       "and conf; did you mean 'conf'?"),
    ("{sup: block.X}", "data_cfg.train.sup", "expected an iterator {type: file.Class, conf: {...}}"),
    ("", "data_cfg.train", "expected one iterator {type, conf} or named iterators"),
    ("{}", "data_cfg.train", "expected one iterator"),
])
def test_iterator_structure_errors(tmp_path, train, path, expected):
    error = config_error(tmp_path, f"train: {train}\nvalid: {ITER}\n")
    assert error.path == path and expected in error.message


@pytest.mark.parametrize("test, path, expected", [
    (ITER, "data_cfg.test", "test holds named test sets"),
    ("[a]", "data_cfg.test", "expected named test sets"),
    ("{clean: 3}", "data_cfg.test.clean", "expected one iterator"),
    ("{clean: {asr: {conf: {}}}}", "data_cfg.test.clean.asr.type", "missing"),
])
def test_test_set_structure_errors(tmp_path, test, path, expected):
    error = config_error(tmp_path, f"data_cfg:\n  test: {test}\n")
    assert error.path == path and expected in error.message


# --------------------------------------------------------------- overrides

def test_parse_override():
    assert parse_override("a.b=3") == ("a.b", 3)
    assert parse_override("a = 2.4e7") == ("a", 2.4e7)
    assert parse_override("a=x=y") == ("a", "x=y")
    assert parse_override("a=") == ("a", None)
    assert parse_override("a=!tuple (1, b)") == ("a", (1, "b"))
    for bad, expected in [("a", "expected dotted.key=value"), ("=3", "non-empty key"),
                          ("a..b=1", "non-empty key"), ("a=[1", "cannot read the value")]:
        with pytest.raises(ConfigError) as info:
            parse_override(bad)
        assert info.value.path == f"override {bad!r}" and expected in info.value.message
        assert "\n" not in str(info.value)


def test_override_variable_propagates_through_refs():
    cfg = load_config(FIXTURES / "exp_cfg_asr.yaml",
                      ["batch_len=1000", "dataset_path=/corpora", "train.conf.shuffle=false",
                       "data_cfg.valid.conf.shuffle=true", "train=true"])
    assert cfg["train"]["conf"]["batch_len"] == 1000
    assert cfg["train"]["conf"]["data_len"] == "/corpora/librispeech/data/wav/train-clean-100/idx2wav_len"
    assert cfg["train"]["conf"]["shuffle"] is False and cfg["valid"]["conf"]["shuffle"] is True
    assert cfg.variables["train"] is True  # the top-level flag, not the group
    assert cfg.variables["data_root"] == "/corpora/librispeech/data"


def test_override_with_ref_and_new_leaf(tmp_path):
    cfg = load(tmp_path, f"x: 5\n{TRAIN_VALID}",
               ["train.conf.batch_len=!ref <x>", "data_cfg.valid.conf.new_key=[1, 2]",
                "seed=7", "valid.conf.batch_len=!ref <seed>"])
    assert cfg["train"]["conf"]["batch_len"] == 5
    assert cfg["valid"]["conf"]["new_key"] == [1, 2] and cfg["valid"]["conf"]["batch_len"] == 7
    assert cfg.variables["seed"] == 7


def test_override_list_index(tmp_path):
    cfg = load(tmp_path, f"sets: [a, b]\nnested: [[1]]\n{TRAIN_VALID}", ["sets.1=c", "nested.0.0=2"])
    assert cfg.variables["sets"] == ["a", "c"] and cfg.variables["nested"] == [[2]]


def test_override_accepts_a_single_string(tmp_path):
    cfg = load(tmp_path, TRAIN_VALID, "train.conf.batch_len=4")
    assert cfg["train"]["conf"]["batch_len"] == 4


@pytest.mark.parametrize("override, path, expected", [
    ("train.conf.batch_len.x=1", "data_cfg.train.conf.batch_len", "cannot set 'x' inside a int value"),
    ("tain.conf.x=1", "tain", "no such key; did you mean 'train'?"),
    ("train.cnf.x=1", "data_cfg.train.cnf", "no such key; did you mean 'conf'?"),
    ("sets.5=1", "sets.5", "index out of range for a list of 2 items"),
    ("sets.a=1", "sets", "cannot set 'a' inside a list value"),
    ("data_cfg=1", "override 'data_cfg=1'", "cannot replace the whole data_cfg"),
    ("nokey", "override 'nokey'", "expected dotted.key=value"),
])
def test_override_errors_in_data_cfg_file(tmp_path, override, path, expected):
    error = config_error(tmp_path, f"sets: [a, b]\n{TRAIN_VALID}", [override])
    assert error.path == path and expected in error.message


def test_override_errors_in_exp_cfg_file(tmp_path):
    error = config_error(tmp_path, f"data_cfg:\n  train: {ITER}\n  valid: {ITER}\n",
                         ["test.clean.type=abs.Iterator"])
    assert error.path == "data_cfg.test" and "no such key" in error.message


def test_override_can_break_structure_and_is_reported(tmp_path):
    error = config_error(tmp_path, TRAIN_VALID, ["train.conf=3"])
    assert error.path == "data_cfg.train.conf" and "got int 3" in error.message


# ------------------------------------------------- duplicate keys, alias bombs

def test_duplicate_key_names_both_lines_and_the_file(tmp_path):
    error = config_error(tmp_path, """\
        train:
          type: block.BlockIterator
          conf: {batch_len: 10}
          type: piece.PieceIterator
        valid: {type: block.BlockIterator}
        """)
    assert str(error).startswith(f"{tmp_path / 'cfg.yaml'}:4:3: duplicate key 'type', first on line 2")


@pytest.mark.parametrize("text, where", [
    ("a: {x: 1, x: 2}\n" + TRAIN_VALID, ":1:11: duplicate key 'x', first on line 1"),  # flow mapping, one line
    ("a: 1\na: 2\n" + TRAIN_VALID, ":2:1: duplicate key 'a', first on line 1"),  # a variable
    ("a: !tuple (1, 2)\n" + TRAIN_VALID + "valid: {type: x.Y}\n", ":4:1: duplicate key 'valid', first on line 3"),
], ids=["flow-mapping", "variable", "group"])
def test_duplicate_keys_anywhere(tmp_path, text, where):
    assert where in str(config_error(tmp_path, text))


def test_merge_keys_may_still_be_overridden(tmp_path):
    cfg = load(tmp_path, """\
        base: &base {batch_len: 10, shuffle: true}
        mid: &mid
          <<: *base
          batch_len: 20
        train: {type: block.BlockIterator, conf: {<<: *mid, shuffle: false}}
        valid: {type: block.BlockIterator, conf: {q: {<<: *mid, batch_len: 5}}}
        """)
    assert cfg["train"]["conf"] == {"batch_len": 20, "shuffle": False}
    assert cfg["valid"]["conf"]["q"] == {"batch_len": 5, "shuffle": True}
    assert cfg.variables["mid"] == {"batch_len": 20, "shuffle": True}


def billion_laughs(levels=9, width=9):
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n" + TRAIN_VALID


@pytest.mark.timeout(30)
def test_alias_bomb_is_refused_quickly(tmp_path):
    started = time.monotonic()
    error = config_error(tmp_path, billion_laughs())
    assert time.monotonic() - started < 3
    assert "expands to more than 1,000,000 values" in str(error) and str(error).startswith(str(tmp_path))


def flow_laughs(levels=9, width=9):
    """A billion laughs as flow items: ``&l0 [lol, ...], &l1 [*l0, ...], ...``."""
    items = [f"&l0 [{', '.join(['lol'] * width)}]"]
    items += [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return ", ".join(items)


@pytest.mark.timeout(30)
def test_alias_bomb_in_an_override_or_a_tuple_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="expands to more than 1,000,000 values"):
        load(tmp_path, TRAIN_VALID, [f"x=[{flow_laughs()}]"])
    started = time.monotonic()
    error = config_error(tmp_path, f'a: !tuple "({flow_laughs()})"\n' + TRAIN_VALID)
    assert time.monotonic() - started < 3
    assert "cannot read the items of !tuple" in str(error)


def test_moderate_aliases_still_load(tmp_path):
    cfg = load(tmp_path, billion_laughs(levels=4))  # 9^4 values
    assert len(cfg.variables["l3"]) == 9 and cfg.variables["l3"][8][8][8][8] == "lol"


def test_recursive_alias_is_refused(tmp_path):
    error = config_error(tmp_path, "a: &a [1, *a]\n" + TRAIN_VALID)
    assert str(error).endswith("cfg.yaml:1:4: an alias refers to a value that contains it (a recursive alias)")


@pytest.mark.slow
def test_deep_nesting_is_a_config_error(tmp_path):
    error = config_error(tmp_path, "a: " + "[" * 3000 + "]" * 3000 + "\n" + TRAIN_VALID)
    assert "nested too deeply" in str(error)


@pytest.mark.timeout(30)
def test_ref_copies_are_bounded(tmp_path):
    big = ", ".join(["1"] * 2000)
    refs = ", ".join(["!ref <a>"] * 600)  # 1.2 million values once copied
    started = time.monotonic()
    error = config_error(tmp_path, f"a: [{big}]\nb: [{refs}]\n" + TRAIN_VALID)
    assert time.monotonic() - started < 10
    assert str(error).startswith("b.") and "would build more than 1,000,000 values" in str(error)


@pytest.mark.timeout(30)
def test_ref_string_growth_is_bounded(tmp_path):
    lines = ["k0: " + "x" * 150] + [f"k{i}: !ref {f'<k{i - 1}>' * 10}" for i in range(1, 8)]
    error = config_error(tmp_path, "\n".join(lines) + "\n" + TRAIN_VALID)
    assert str(error).startswith("k4: !ref <k3><k3>") and "longer than 1,000,000 characters" in str(error)


def test_ref_bounds_hold_inside_data_cfg_too(tmp_path):
    lines = ["k0: " + "x" * 100] + [f"k{i}: !ref {f'<k{i - 1}>' * 10}" for i in range(1, 6)]
    error = config_error(tmp_path, "\n".join(lines) + "\ntrain: {type: block.BlockIterator, conf: {p: !ref <k5><k5>}}\n"
                         f"valid: {ITER}\n")
    assert "longer than 1,000,000 characters" in str(error)


# ------------------------------------------------- option checks at build time

def build_train(tmp_path, corpus, overrides):
    recipe = write_recipe(tmp_path / "cfg.yaml", corpus, batch_len=40000)
    return build_iterators(load_config(recipe, overrides), num_workers=0, groups=("train",))["train"]


@pytest.mark.parametrize("option, expected", [
    ("shuffle", "true or false"), ("pin_memory", "true or false"), ("distributed", "true or false"),
    ("is_descending", "true, false or null"), ("dataset_conf.use_speed_perturb", "true or false"),
    ("dataset_conf.feat_conf.remove_dc_offset", "true or false"),
])
@pytest.mark.parametrize("value", ['"yes"', "1", "0", '"false"'])
def test_every_boolean_option_refuses_strings_and_numbers(tmp_path, corpus, option, expected, value):
    overrides = [f"train.conf.{option}={value}"]
    if "feat_conf" in option:
        overrides.insert(0, "train.conf.dataset_conf.feat_conf={sample_rate: 16000}")
    with pytest.raises(ConfigError) as error:
        build_train(tmp_path, corpus, overrides)
    shown = value.strip('"')
    shown = repr(shown) if value.startswith('"') else shown
    assert str(error.value) == f"data_cfg.train.conf.{option}: expected {expected}, got {shown}"


def test_boolean_options_accept_booleans(tmp_path, corpus):
    iterator = build_train(tmp_path, corpus, ["train.conf.shuffle=no", "train.conf.pin_memory=true",
                                              "train.conf.is_descending=null",
                                              "train.conf.dataset_conf.use_speed_perturb=true"])
    assert iterator.shuffle is False and iterator.pin_memory is True and iterator.is_descending is None
    assert iterator.dataset.use_speed_perturb is True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["1e12", "1000000000000", "3000001"])
def test_huge_batches_per_epoch_is_refused_with_the_reason(tmp_path, corpus, value):
    started = time.monotonic()
    with pytest.raises(ConfigError) as error:
        build_train(tmp_path, corpus, [f"train.conf.batches_per_epoch={value}"])
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert message.startswith("data_cfg.train.conf.batches_per_epoch: expected at most 3000000 here, got ")
    assert "an epoch's plan is built in memory and may hold 10,000,000 utterances" in message


def test_large_batches_per_epoch_under_the_bound_still_plans(tmp_path, corpus):
    iterator = build_train(tmp_path, corpus, ["train.conf.batches_per_epoch=100000"])  # 10,000 passes
    assert len(iterator.build_loader(2)) == 100000


@pytest.mark.parametrize("value, expected", [
    ("!!int abc", ":1:4: cannot read 'abc' as !!int: invalid literal"),
    ("2001-13-01", ":1:4: cannot read '2001-13-01' as !!timestamp: month must be in 1..12"),
    ("[1, !!float x]", ":1:8: cannot read 'x' as !!float"),
])
def test_values_their_tag_cannot_hold_are_yaml_errors(tmp_path, value, expected):
    assert expected in str(config_error(tmp_path, f"a: {value}\n" + TRAIN_VALID))


@pytest.mark.parametrize("option, value, expected", [
    ("batch_len", "1" + "0" * 400, "batch_len: expected a positive number, got 1000"),  # no OverflowError
    ("batches_per_epoch", "1" + "0" * 400, "batches_per_epoch: expected a positive integer, got 1000"),
    ("batches_per_epoch", str(2 ** 63), "batches_per_epoch: expected a positive integer, got 9223372036854775808"),
    ("batches_per_epoch", str(2 ** 63 - 1), "batches_per_epoch: expected at most 3000000 here"),
    ("seed", "null", "seed: expected a non-negative integer, got None"),
    ("seed", "-1", "seed: expected a non-negative integer, got -1"),
    ("seed", "4294967296", "seed: expected at most 2147483647, got 4294967296"),
], ids=["huge-int-number", "huge-int-integer", "int64-plus-1", "int64", "seed-null", "seed-negative",
        "seed-huge"])
def test_numeric_options_refuse_what_they_cannot_use(tmp_path, corpus, option, value, expected):
    with pytest.raises(ConfigError) as error:
        build_train(tmp_path, corpus, [f"train.conf.{option}={value}"])
    assert str(error.value).startswith(f"data_cfg.train.conf.{expected}")
    assert len(str(error.value)) < 400


# ------------------------------------------------- overrides on aliases, BOMs, world_size

def test_an_override_on_an_alias_changes_only_its_path(tmp_path):
    """``valid`` is an alias of ``train``'s conf: a --set on train's leaves valid's value alone, and back."""
    text = """\
        train:
          type: block.BlockIterator
          conf: &conf {batch_len: 10, dataset_conf: {main_data: &md {feat: a}}}
        valid: {type: block.BlockIterator, conf: *conf}
        test: {s: {type: block.BlockIterator, conf: {batch_len: 1, dataset_conf: {main_data: *md}}}}
        """
    cfg = load(tmp_path, text, ["train.conf.batch_len=20", "valid.conf.dataset_conf.main_data.feat=b"])
    assert cfg["train"]["conf"]["batch_len"] == 20 and cfg["valid"]["conf"]["batch_len"] == 10
    assert cfg["train"]["conf"]["dataset_conf"]["main_data"]["feat"] == "a"
    assert cfg["valid"]["conf"]["dataset_conf"]["main_data"]["feat"] == "b"
    assert cfg["test"]["s"]["conf"]["dataset_conf"]["main_data"] == {"feat": "a"}


def test_an_override_on_a_merged_node_changes_only_its_path(tmp_path):
    cfg = load(tmp_path, """\
        base: &base {conf: {batch_len: 10}}
        train: {<<: *base, type: block.BlockIterator}
        valid: {<<: *base, type: block.BlockIterator}
        """, ["train.conf.batch_len=20"])
    assert cfg["train"]["conf"]["batch_len"] == 20 and cfg["valid"]["conf"]["batch_len"] == 10
    assert cfg.variables["base"] == {"conf": {"batch_len": 10}}


def test_a_bom_at_the_start_of_a_recipe_is_dropped(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + TRAIN_VALID.encode("utf-8"))
    assert load_config(path)["train"]["type"] == "block.BlockIterator"


@pytest.mark.parametrize("value", ["0", "-2", "1.5", '"2"'])
def test_world_size_must_be_a_positive_integer(tmp_path, corpus, value):
    with pytest.raises(ConfigError) as error:
        build_train(tmp_path, corpus, [f"train.conf.world_size={value}"])
    assert str(error.value).startswith("data_cfg.train.conf.world_size: expected a positive integer, got ")


def test_world_size_zero_given_to_build_iterators_is_an_error(tmp_path, corpus):
    cfg = load_config(write_recipe(tmp_path / "cfg.yaml", corpus, "abs.Iterator", data_len=False))
    with pytest.raises(ConfigError, match=r"world_size: expected a positive integer, got 0"):
        build_iterators(cfg, num_workers=0, groups=("train",), rank=0, world_size=0)


@pytest.mark.timeout(30)
def test_a_recipe_that_is_a_fifo_or_a_device_is_refused_not_read(tmp_path):
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)  # reading it would block until a writer comes
    with pytest.raises(ConfigError, match=r"recipe\.yaml: is a FIFO \(named pipe\), expected a YAML file$"):
        load_config(fifo)
    with pytest.raises(ConfigError, match=r"^/dev/zero: is a character device, expected a YAML file$"):
        load_config("/dev/zero")  # would never end
