"""The plan cache (speechiter/index): same batches with and without it, never a stale, truncated or foreign
entry, atomic writes under concurrent first runs, a read-only folder, and the command line."""
import json
import os
import pickle
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.index import store
from speechiter.index.__main__ import main as index_main
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import BlockIterator
from speechiter.iterator.bucket import BucketIterator
from speechiter.iterator.piece import PieceIterator
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
OLD = time.time() - 3600  # sources last changed an hour ago: settled (see store.settled)


def write_corpus(root: Path, num: int = 400, seed: int = 0, reverse: bool = False) -> Path:
    """idx2wav, idx2wav_len and idx2spk (group_info) of ``num`` utterances; ``reverse`` writes the lines
    out of id order. Whole and fractional lengths both appear (seed 1: fractional)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = [f"utt{i:05d}" for i in range(num)]
    lengths = rng.integers(1000, 30000, num) if seed != 1 else rng.uniform(0.5, 20.0, num).round(3)
    order = range(num - 1, -1, -1) if reverse else range(num)
    for name, values in (("idx2wav", [f"wav/{uid}.wav" for uid in ids]), ("idx2wav_len", lengths.tolist()),
                         ("idx2spk", [f"spk{i % 7}" for i in range(num)])):
        (root / name).write_text("".join(f"{ids[i]} {values[i]}\n" for i in order))
        os.utime(root / name, (OLD, OLD))
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("SPEECHITER_INDEX_DIR", str(folder))
    monkeypatch.setenv("SPEECHITER_INDEX_MIN_ROWS", "0")
    monkeypatch.delenv("SPEECHITER_INDEX", raising=False)
    return folder


def entries(folder: Path, kind: str = ""):
    return sorted(p.name for p in folder.glob(f"*.{kind}*")) if folder.exists() else []


def build(root: Path, kind=BlockIterator, group_info=False, **conf):
    options = {"batch_len": 60000} if kind is BlockIterator else {"batch_size": 7}
    if kind is BucketIterator:
        options = {"batch_len": 60000}
    options.update(conf)
    return kind(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                data_len=str(root / "idx2wav_len"), group_info={"spk": str(root / "idx2spk")} if group_info else None,
                engine="inline", num_workers=0, **options)


def plans(iterator):
    return [iterator.view_digest()[0]] + [list(map(list, iterator.epoch_batches(e))) for e in (1, 2)]


CASES = [(BlockIterator, {}), (BlockIterator, {"batch_len_rule": "never_exceed"}), (BucketIterator, {}),
         (Iterator, {}), (PieceIterator, {}), (BlockIterator, {"group_info": True}),
         (BlockIterator, {"rank": 1, "world_size": 2, "ngpu": 2}), (Iterator, {"is_descending": False}),
         (BlockIterator, {"rank": 0, "world_size": 3, "ngpu": 3, "evaluation": True})]


@pytest.mark.parametrize("kind,conf", CASES, ids=[f"{k.__name__}-{'-'.join(c) or 'plain'}" for k, c in CASES])
@pytest.mark.parametrize("seed,reverse", [(0, False), (1, True)], ids=["whole", "fractional-unsorted"])
def test_same_batches_with_and_without_cache(tmp_path, cache, monkeypatch, kind, conf, seed, reverse):
    root = write_corpus(tmp_path / "corpus", seed=seed, reverse=reverse)
    monkeypatch.setenv("SPEECHITER_INDEX", "0")
    parsed = plans(build(root, kind, **conf))
    assert not cache.exists()
    monkeypatch.delenv("SPEECHITER_INDEX")
    first = build(root, kind, **conf)  # writes the entries
    assert entries(cache, "idx2") and entries(cache, "sort")
    second = build(root, kind, **conf)  # maps them
    assert isinstance(second.dataset.main_data["feat"].index.ids, store.Mapped)
    if kind is not BucketIterator:
        assert entries(cache, "view")
        assert not second.planner.view.bounds.flags.writeable  # mapped read-only
    assert plans(first) == parsed and plans(second) == parsed
    if conf.get("group_info"):
        assert dict(second.group_info["spk"]) == dict(build(root, kind, **conf).group_info["spk"])


def test_small_corpora_and_off_write_nothing(tmp_path, cache, monkeypatch):
    root = write_corpus(tmp_path / "corpus")
    monkeypatch.setenv("SPEECHITER_INDEX_MIN_ROWS", "1000")
    build(root)
    assert not cache.exists()
    monkeypatch.setenv("SPEECHITER_INDEX_MIN_ROWS", "0")
    monkeypatch.setenv("SPEECHITER_INDEX", "off")
    build(root)
    assert not cache.exists()


def test_a_just_written_source_is_not_cached(tmp_path, cache):
    root = write_corpus(tmp_path / "corpus")
    os.utime(root / "idx2wav")  # changed now: a same-size rewrite within the same tick would go unseen
    build(root)
    assert [name.split(".")[-1] for name in entries(cache, "idx2")] == ["idx2"]  # idx2wav_len's only
    assert not any(name.endswith(".tmp") for name in entries(cache))


def test_changed_source_is_rebuilt(tmp_path, cache):
    root = write_corpus(tmp_path / "corpus")
    before = plans(build(root))
    text = (root / "idx2wav_len").read_text().replace("utt00000 ", "utt00000 9", 1)  # same ids, new length
    lines = text.split("\n")
    lines[1] = lines[1][:-1] if lines[1][-1] != "0" else lines[1][:-2] + "1"  # keep the size: one digit less
    (root / "idx2wav_len").write_text("\n".join(lines))
    os.utime(root / "idx2wav_len", (OLD + 60, OLD + 60))
    after = build(root)
    assert plans(after) != before
    assert after.data_len["utt00000"] == float(text.split("\n")[0].split()[1])
    os.environ["SPEECHITER_INDEX"] = "0"
    try:
        assert plans(build(root)) == plans(after)
    finally:
        del os.environ["SPEECHITER_INDEX"]


@pytest.mark.parametrize("damage", ["truncate", "foreign", "version", "empty"])
def test_damaged_entries_are_rebuilt(tmp_path, cache, damage):
    root = write_corpus(tmp_path / "corpus")
    expected = plans(build(root))
    for name in entries(cache):
        path = cache / name
        data = path.read_bytes()
        if damage == "truncate":
            path.write_bytes(data[:len(data) - 7])
        elif damage == "foreign":
            path.write_bytes(b"not an index at all" + data[19:])
        elif damage == "version":
            path.write_bytes(data.replace(b'"version": %d' % store.VERSION, b'"version": 99', 1))
        else:
            path.write_bytes(b"")
        assert store.open_entry(str(path), json.loads(data[16:16 + int.from_bytes(data[8:16], "little")])["key"]) \
            is None
    assert plans(build(root)) == expected
    for name in entries(cache):  # rewritten whole
        data = (cache / name).read_bytes()
        header = json.loads(data[16:16 + int.from_bytes(data[8:16], "little")])
        assert store.open_entry(str(cache / name), header["key"]) is not None


def test_unwritable_cache_folder_warns_once_and_parses(tmp_path, monkeypatch):
    root = write_corpus(tmp_path / "corpus")
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")  # root ignores permissions: a folder under a file cannot be made
    monkeypatch.setenv("SPEECHITER_INDEX_DIR", str(blocker / "cache"))
    monkeypatch.setenv("SPEECHITER_INDEX_MIN_ROWS", "0")
    store._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = plans(build(root))
    lines = [str(w.message) for w in caught if "plan cache" in str(w.message)]
    assert len(lines) == 1 and f"cannot write the plan cache in {blocker / 'cache'}" in lines[0]
    assert "\n" not in lines[0]
    monkeypatch.setenv("SPEECHITER_INDEX", "0")
    assert got == plans(build(root))


def test_mapped_arrays_pickle_as_their_file(tmp_path, cache):
    root = write_corpus(tmp_path / "corpus")
    build(root)
    ids = build(root).dataset.main_data["feat"].index.ids
    assert isinstance(ids, store.Mapped)
    whole = pickle.dumps(ids)
    assert len(whole) < 1000  # the file's name, not its bytes
    again = pickle.loads(whole)
    assert isinstance(again, store.Mapped) and np.array_equal(again, ids)
    part = pickle.loads(pickle.dumps(ids[3:10]))
    assert not isinstance(part, store.Mapped) and np.array_equal(part, ids[3:10])


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from index.test_plan_cache import build, plans
print(plans(build(Path({root!r})))[0])
"""


@pytest.mark.slow  # processes: four first runs at once, each a process of its own
@pytest.mark.timeout(120)
def test_concurrent_first_runs(tmp_path, cache):
    root = write_corpus(tmp_path / "corpus", num=20000)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = CHILD.format(tests=str(REPO / "tests"), root=str(root))
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = []
    for child in children:
        out, err = child.communicate(timeout=100)
        assert child.returncode == 0, err
        outs.append(out.strip())
    os.environ["SPEECHITER_INDEX"] = "0"
    try:
        expected = plans(build(root))[0]
    finally:
        del os.environ["SPEECHITER_INDEX"]
    assert outs == [expected] * 4
    assert not list(cache.glob("*.tmp"))
    assert plans(build(root))[0] == expected  # from the entries they left


def test_command_writes_the_entries(tmp_path, make_recipe, capsys):
    root = write_corpus(tmp_path / "corpus")
    recipe = make_recipe(root, batch_len=60000)
    folder = tmp_path / "cmd_cache"
    assert index_main([str(recipe), "--cache_dir", str(folder), "--world_size", "2"]) == 0
    out = capsys.readouterr().out
    assert f" plan cache entries in {folder} (" in out and out.endswith(" already there\n")
    assert entries(folder, "idx2") and entries(folder, "sort") and len(entries(folder, "view")) >= 2
    assert "SPEECHITER_INDEX_DIR" not in os.environ or os.environ["SPEECHITER_INDEX_DIR"] != str(folder)


@pytest.mark.parametrize("args,message", [
    (["missing.yaml"], "missing.yaml"),
    (["RECIPE", "--set", "data_cfg.train.conf.batch_len=-3"], "batch_len"),
    (["RECIPE", "--world_size", "0"], "--world_size should be a positive integer"),
])
def test_command_errors_are_one_line_exit_2(tmp_path, make_recipe, args, message):
    root = write_corpus(tmp_path / "corpus")
    recipe = make_recipe(root, batch_len=60000)
    args = [str(recipe) if a == "RECIPE" else (str(tmp_path / a) if a.endswith(".yaml") else a) for a in args]
    done = run_cli(*args, module="speechiter.index", env={"SPEECHITER_INDEX_DIR": str(tmp_path / "c")})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m speechiter.index: error:") and message in lines[0]
