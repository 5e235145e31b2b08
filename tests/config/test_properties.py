"""Property-based tests: generated bad input ends in success or one clean error, never a crash.

Over the YAML loader, the data_cfg checks (structure and options), the idx2
parsers and state files (Python API and the CLI's --resume), every generated
input must end either in success or in a SpeechiterError with exit code 2 and
a one-line message (through the CLI: exit 2 and one stderr line). Any other
exception -- a traceback, a RecursionError, a MemoryError -- fails the test;
a hang fails its timeout. Most cases call the Python functions directly; a
few go through the command line (``speechiter.run.main`` in this process, tests/inprocess.py).

Derandomized, so CI sees the same cases every run; CASES counts them (printed
at the end of the module with ``-s``).
"""
import collections
import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechiter import build_iterators, load_config
from speechiter.config import iter_specs
from speechiter.config.tags import parse_yaml
from speechiter.errors import SpeechiterError
from speechiter.group import GroupLoader
from speechiter.idx2 import read_idx2, read_idx2_numbers, read_idx2_table
from speechiter.iterator.abs import Iterator
from speechiter.run import main
from tests.conftest import _make_corpus
from tests.inprocess import run_cli
from tests.recipes import entry, write_recipe

pytestmark = pytest.mark.slow  # property-based searches

REPO = Path(__file__).resolve().parents[2]
CASES = collections.Counter()


def props(examples: int):
    return settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def clean(call):
    """``call()``'s result, or the SpeechiterError it raised, which must be exit 2 and one line."""
    try:
        return call()
    except SpeechiterError as error:
        assert error.exit_code == 2, f"exit code {error.exit_code}: {error}"
        assert "\n" not in str(error), str(error)
        return error


@pytest.fixture(scope="module", autouse=True)
def report_cases():
    yield
    print(f"\nproperty cases: {sum(CASES.values())} ({', '.join(f'{k} {v}' for k, v in sorted(CASES.items()))})")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return _make_corpus(tmp_path_factory.mktemp("prop") / "corpus", num=12)


# ------------------------------------------------------------------- the YAML loader

YAML_ALPHABET = st.sampled_from(list("ab01 \n\t:-[]{},&*!<>'\"#|%@`?.eE+_=\\") + ["\u00e9", "\x00", "\ufeff"])
SCALARS = st.sampled_from(["1", "-3", "2.4e7", "1e5", ".nan", "-.inf", "yes", "no", "null", "~", "2001-13-01",
                           "2001-02-30", "12:30:61", "0x1F", "0o17", "1_000", "!!int abc", "!!float x",
                           "!!binary ###", "!!timestamp 2001-99-99", "!!set {a, b}", "!!omap [a]", "!!str 1",
                           "!!python/name:os.system", "!foo x", "!ref <a>", "!ref <a[0]>", "!ref <a[9]>",
                           "!ref <b><a>", "!ref <zz>", "!ref <a", "!tuple (1, 2)", "!tuple (", "!list [a, *x]",
                           "!str 0.5", "'q'", '"\\x"', "*a", "*zz", "&a 1", "[1, *a]", "{k: 1, k: 2}",
                           "{<<: *a, k: 1}", "[[[[[[1]]]]]]", "? [1]\n  : 2", "|\n  text", "x" * 300])
KEYS = st.sampled_from(["a", "b", "c", "train", "valid", "test", "type", "conf", "data_cfg", "<<", "1", "? q"])


@st.composite
def yaml_documents(draw):
    """A YAML-ish document: top-level keys (repeats allowed), nested blocks, anchors and aliases."""
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        key, value = draw(KEYS), draw(SCALARS)
        anchor = f"&{draw(st.sampled_from('ab'))} " if draw(st.booleans()) else ""
        if draw(st.integers(0, 3)) == 0:
            children = [f"  {draw(KEYS)}: {draw(SCALARS)}" for _ in range(draw(st.integers(1, 3)))]
            lines += [f"{key}: {anchor}".rstrip()] + children
        else:
            lines.append(f"{key}: {anchor}{value}")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(120)
@props(2000)
@given(st.text(YAML_ALPHABET, max_size=120))
def test_yaml_loader_on_arbitrary_text(text):
    CASES["yaml text"] += 1
    clean(lambda: parse_yaml(text, "cfg.yaml"))


@pytest.mark.timeout(120)
@props(1000)
@given(yaml_documents(), st.lists(st.sampled_from(["a=1", "train.conf.x=!ref <a>", "b=[*q]", "=1", "a", "x.y.z=2",
                                                    "data_cfg.train=3", "a={k: 1, k: 2}", "c=!tuple (1,"]),
                                   max_size=2))
def test_load_config_on_generated_documents(tmp_path_factory, document, overrides):
    CASES["load_config"] += 1
    path = tmp_path_factory.getbasetemp() / "generated.yaml"
    path.write_text(document, encoding="utf-8")
    clean(lambda: load_config(path, overrides))


# ------------------------------------------------------------------- data_cfg structure

LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=5),
                   st.sampled_from(["block.BlockIterator", "abs.Iterator", "x", "a.b.c", ".", "a b.C"]))
TREES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(KEYS, st.integers(0, 2), st.none()), inner, max_size=4)),
    max_leaves=12)


@pytest.mark.timeout(120)
@props(1500)
@given(st.dictionaries(st.sampled_from(["train", "valid", "test", "tset", 0]), TREES, max_size=3))
def test_data_cfg_structure_checks(data_cfg):
    CASES["data_cfg structure"] += 1
    specs = clean(lambda: iter_specs(data_cfg))
    if isinstance(specs, list):
        assert all(isinstance(spec.conf, dict) and isinstance(spec.type, str) for spec in specs)


# ------------------------------------------------------------------- data_cfg options, built

BAD_VALUES = [None, True, "yes", "", -1, 0, 0.5, 1e12, 10 ** 30, math.nan, math.inf, [1], {"a": 1}, "1e5"]


def option_values(*good):
    """Mostly a good value (3 in 4), else one of BAD_VALUES."""
    return st.sampled_from([True, True, True, False]).flatmap(lambda ok: st.sampled_from(list(good) if ok else BAD_VALUES))


def mostly(good, *bad):
    """``good`` 5 times in 6, else one of ``bad``."""
    return st.sampled_from([True] * 5 + [False]).flatmap(lambda ok: st.just(good) if ok else st.sampled_from(list(bad)))


@st.composite
def iterator_confs(draw, corpus):
    """One iterator ``{type, conf}``: mostly valid, with a few options drawn bad."""
    kind = draw(mostly("block.BlockIterator", "bucket.BucketIterator", "piece.PieceIterator", "abs.Iterator",
                       "block.Nope"))
    conf = {"dataset_type": draw(mostly("speech_text.SpeechTextDataset", "abs.Dataset", "speech_text.Nope", 3))}
    main_data = draw(mostly({"feat": f"{corpus}/idx2wav"}, {"text": f"{corpus}/idx2text"},
                            {"feat": f"{corpus}/idx2wav", "spk_ids": f"{corpus}/idx2spk"},
                            {"feat": [f"{corpus}/idx2wav", f"{corpus}/idx2wav"]}, {"feat": []},
                            {"feat": f"{corpus}/missing"}, {"feat": str(corpus)}, {"nope": "x"}, {}))
    dataset_conf = {"main_data": main_data}
    optional = {
        "data_selection": option_values(["order", 0.5], ["random", -3], ["rev_order", -100],
                                        ["min", -2, f"{corpus}/idx2wav_len"], ["group", "x", f"{corpus}/idx2spk"],
                                        ["bogus", 1], [["order", 0.5], ["order", 0.5]], ["order"]),
        "sample_rate": option_values(16000, 8000), "use_speed_perturb": option_values(True, False),
        "perturb_range": option_values([0.9, 1.0, 1.1], [0.0001], []),
        "feat_conf": option_values({"n_mels": 8}, {"n_mels": 8, "sample_rate": 16000, "remove_dc_offset": "no"}),
        "typo_option": option_values(1),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), max_size=2, unique=True)):
        dataset_conf[key] = draw(optional[key])
    conf["dataset_conf"] = draw(mostly(dataset_conf, None, [1]))
    options = {
        "batch_len": option_values(40000, 1, 1e9), "batch_size": option_values(2, 100),
        "bucket_width": option_values(0.02, 10), "quadratic_scale": option_values(1000.0),
        "shuffle": option_values(True, False), "is_descending": option_values(True, False, None),
        "batches_per_epoch": option_values(3, 1000, 5 * 10 ** 6), "ngpu": option_values(1, 3),
        "data_len": option_values(f"{corpus}/idx2wav_len", f"{corpus}/idx2text", f"{corpus}/missing",
                                  [f"{corpus}/idx2wav_len"] * 2),
        "group_info": option_values({"spk": f"{corpus}/idx2spk"}, {"spk": f"{corpus}/missing"}),
        "pin_memory": option_values(False), "distributed": option_values(False), "buffer": option_values(2),
        "seed": option_values(1), "bogus": option_values(1),
    }
    needed = {"block.BlockIterator": ["batch_len", "data_len"], "bucket.BucketIterator": ["batch_len", "data_len"],
              "piece.PieceIterator": ["batch_size"]}.get(kind, [])
    accepted = {"block.BlockIterator": ["batch_len"], "bucket.BucketIterator": ["batch_len", "bucket_width",
                "quadratic_scale"]}.get(kind, ["batch_size"])
    common = [key for key in sorted(options) if key not in ("batch_len", "batch_size", "bucket_width",
                                                              "quadratic_scale")]
    extra = draw(st.lists(st.sampled_from(common + accepted + ["batch_len", "batch_size"]), max_size=3, unique=True))
    for key in dict.fromkeys(needed + extra):
        conf[key] = draw(options[key])
    return {"type": kind, "conf": conf}


@pytest.mark.timeout(180)
@props(500)
@given(st.data())
def test_data_cfg_options_build_or_fail_cleanly(corpus, data):
    CASES["data_cfg options"] += 1
    spec = data.draw(iterator_confs(corpus))
    built = clean(lambda: build_iterators({"train": spec, "valid": spec}, num_workers=0, groups=("train",)))
    if isinstance(built, dict):
        with built["train"] as iterator:
            assert isinstance(iterator, Iterator)
            plan = iterator.epoch_batches(2)
            assert len(plan) == len(iterator) and all(len(batch) for batch in plan)
            if data.draw(st.booleans()):  # load the first batch too (inline)
                batch = clean(lambda: next(iter(iterator.build_loader(1, prefetch_next=False))))
                assert isinstance(batch, (dict, SpeechiterError))


# ------------------------------------------------------------------- idx2 files

TOKENS = st.sampled_from(["u1", "u2", "u3", "é", "12", "-3", "0", "1e400", "nan", "inf", "1_0", "0x10", " 7 ", "1.5",
                          "", " ", "\t", "\r", "\x0b", "\x00", "\u2028", "a b", "\ufeff", "\\", "#"])


@st.composite
def idx2_bytes(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=80))
    lines = [" ".join(draw(st.lists(TOKENS, max_size=4))) for _ in range(draw(st.integers(0, 8)))]
    text = draw(st.sampled_from(["\n", "\r\n", "\n\n"])).join(lines) + draw(st.sampled_from(["", "\n"]))
    return text.encode("utf-8")


@pytest.mark.timeout(120)
@props(1500)
@given(idx2_bytes())
def test_idx2_parsers_agree_or_fail_cleanly(tmp_path_factory, content):
    CASES["idx2"] += 1
    path = tmp_path_factory.getbasetemp() / "idx2file"
    path.write_bytes(content)
    lines = clean(lambda: read_idx2(path))
    table = clean(lambda: read_idx2_table(path))
    failed = isinstance(lines, SpeechiterError)
    assert failed == isinstance(table, SpeechiterError), (lines, table)  # both read it, or both refuse it
    if not failed:
        assert [uid.encode("utf-8") for uid in lines[0]] == table.ids.tolist()
    clean(lambda: read_idx2(path, int))
    numbers = clean(lambda: read_idx2_numbers(path))
    if isinstance(numbers, tuple):
        assert np.isfinite(numbers[1]).all() and (numbers[1] > 0).all()


# ------------------------------------------------------------------- state files

JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 12), st.sampled_from([2 ** 31, 2 ** 64, 10 ** 400]),
                        st.floats(), st.text(max_size=4), st.sampled_from(["7", "train", "None", []]),
                        st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                 st.integers(0, 3), max_size=2))


def mutate(state: dict, draw) -> object:
    """A hand edit of a saved state: change, drop or add keys (also in the nested group and iterator states)."""
    state = copy.deepcopy(state)
    for _ in range(draw(st.integers(1, 3))):
        target = state
        while draw(st.booleans()):
            nested = sorted(key for key, value in target.items() if isinstance(value, dict) and value)
            if not nested:
                break
            target = target[draw(st.sampled_from(nested))]
        action = draw(st.sampled_from(["set", "set", "set", "drop", "add"]))
        key = draw(st.sampled_from(sorted(target) or ["epoch"]))
        if action == "set":
            target[key] = draw(JSON_VALUES)
        elif action == "drop":
            target.pop(key, None)
        else:
            target[draw(st.text(min_size=1, max_size=3))] = draw(JSON_VALUES)
    return draw(st.sampled_from([state] * 8 + [[state], None, "state"]))


def as_file_json(value) -> object:
    """What json.load gives back for ``value`` written as a file (NaN and huge ints included)."""
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def resumable(tmp_path_factory, corpus):
    """A recipe, its train iterator, its loader's state after step 3 of epoch 1 and the run state its CLI
    run saved at the end (``{"train": {"epoch": 2, "step": 0, ...}, ...}``)."""
    folder = tmp_path_factory.mktemp("state")
    recipe = folder / "recipe.yaml"
    block = entry(corpus, batch_len=30000)
    write_recipe(recipe, corpus, train=block, valid=block)
    iterator = build_iterators(load_config(recipe), num_workers=0, groups=("train",))["train"]
    loader = iterator.build_loader(1)
    for _ in zip(range(3), loader):
        pass
    state = folder / "state.json"
    main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", "--save_state", str(state), "--epochs", "1"])
    yield recipe, iterator, loader.state_dict(), json.loads(state.read_text())
    iterator.close()


@pytest.mark.timeout(120)
@props(1200)
@given(st.data())
def test_loader_state_dicts_load_or_fail_cleanly(resumable, data):
    CASES["loader state (API)"] += 1
    _, iterator, saved, _ = resumable
    state = as_file_json(mutate(saved, data.draw))
    loader = iterator.build_loader(1, prefetch_next=False)
    if not isinstance(clean(lambda: loader.load_state_dict(state)), SpeechiterError):
        # a state of another layout continues its epoch with that epoch's number of batches (elastic resume)
        steps = iterator.epoch_len(loader.epoch)
        assert 1 <= loader.epoch and 0 <= loader.step <= steps
        assert len(loader) == steps - loader.step


@pytest.fixture(scope="module")
def group(resumable):
    """A ``steps: longest`` group of the resumable iterator and a shorter one (other batch_len),
    with its state after step 3 of epoch 2."""
    recipe, long, _, _ = resumable
    short = build_iterators(load_config(recipe, ["train.conf.batch_len=90000"]), num_workers=0,
                            groups=("train",))["train"]
    members = {"long": long, "short": short}
    assert len(short) < len(long)
    yield members, GroupLoader(members, epoch=2, start_step=3, steps="longest").state_dict()
    short.close()


@pytest.mark.timeout(120)
@props(600)
@given(st.data())
def test_group_state_dicts_load_or_fail_cleanly(group, data):
    CASES["group state (API)"] += 1
    members, saved = group
    state = as_file_json(mutate(saved, data.draw))
    loader = GroupLoader(members, steps="longest", prefetch_next=False)
    if not isinstance(clean(lambda: loader.load_state_dict(state)), SpeechiterError):
        assert 1 <= loader.epoch and 0 <= loader.step <= loader.steps and len(loader) == loader.steps - loader.step
        assert (loader.epoch, loader.step) == (state["epoch"], state["step"])


@pytest.mark.timeout(180)
@props(80)
@given(st.data())
def test_run_state_files_through_the_cli_main(resumable, tmp_path_factory, capsys, data):
    CASES["run state (CLI main)"] += 1
    recipe, _, _, saved = resumable
    path = tmp_path_factory.getbasetemp() / "edited-state.json"
    if data.draw(st.integers(0, 5)) == 0:
        path.write_bytes(data.draw(st.sampled_from([b"", b"{", b"[" * 100000, b"\xff\xfe", b"NaN", b"{}"])))
    else:
        path.write_text(json.dumps(mutate(saved, data.draw)))
    capsys.readouterr()
    returncode = main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", "--resume", str(path),
                       "--epochs", "2", "--set", "valid.conf.batches_per_epoch=1"])
    stderr = capsys.readouterr().err
    assert returncode in (0, 2), stderr
    if returncode == 2:
        assert stderr.startswith("speechiter: error: --resume") and len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("edit", [
    lambda s: dict(s, step="7"), lambda s: [s], lambda s: dict(s, epoch=2 ** 64),
    lambda s: dict(s, iterators={"None": None}),
], ids=["step-string", "list", "huge-epoch", "null-iterator"])
def test_run_state_files_through_the_cli_process(resumable, tmp_path, edit):
    CASES["run state (CLI process)"] += 1
    recipe, _, _, saved = resumable
    path = tmp_path / "state.json"
    path.write_text(json.dumps(edit(saved)))
    proc = run_cli("--data_cfg", recipe, "--quiet", "--num_workers", 0, "--resume", path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("speechiter: error: --resume") and len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------- what the properties found, pinned

@pytest.mark.parametrize("content, message", [
    (b"\x00 x\nu2 y\n", ":1: id '\\x00' contains a NUL character"),  # numpy S arrays drop trailing NULs
    (b"u1\x00 b\nu2 c\n", ":1: id 'u1\\x00' contains a NUL character"),
])
def test_idx2_ids_with_nul_are_refused_by_both_parsers(tmp_path, content, message):
    path = tmp_path / "idx2"
    path.write_bytes(content)
    for parse in (read_idx2, read_idx2_table):
        with pytest.raises(SpeechiterError, match=message.replace("\\", "\\\\")):
            parse(path)


def test_idx2_lone_carriage_returns_split_lines_in_both_parsers(tmp_path):
    path = tmp_path / "idx2"
    path.write_bytes(b"u1 a\ru2 b\r\nu3 c\n")  # old Mac line ends, as read_idx2 (universal newlines) reads them
    ids, values = read_idx2(path)
    table = read_idx2_table(path)
    assert ids == ["u1", "u2", "u3"] and values == ["a", "b", "c"]
    assert table.ids.tolist() == [b"u1", b"u2", b"u3"]
