"""State files of every supported version, written by the CLI of their time (tests/fixtures/states/README.md),
resume to the uninterrupted run's batches with today's code.

The fixtures name their corpus by an absolute path (a state's configuration holds the recipe's paths), so
the recipes, the corpus and the dataset module are copied to that folder first (identical files, written
atomically, so runs side by side do not disturb each other).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import speechiter
from speechiter.run import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "states"
ROOT = Path("/tmp/speechiter-state-fixtures")  # where the fixtures were written (their recipes' paths)
REPO = Path(__file__).resolve().parents[2]
#: version folder -> the single-process fixtures it holds
VERSIONS = {"v2": ("block", "semi"), "v3": ("block", "semi", "mix"), "v3-9a54832": ("block", "semi"),
            "v4": ("block", "semi", "mix")}


def _copy(source: Path, target: Path) -> None:
    """``source`` to ``target`` atomically, unless it is there already with the same bytes."""
    data = source.read_bytes()
    if target.exists() and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{target.name}.{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, target)


@pytest.fixture(scope="module")
def root():
    for name in ("block.yaml", "semi.yaml", "mix.yaml", "stopat.py", "corpus/idx2text", "corpus/idx2len"):
        _copy(FIXTURES / name, ROOT / name)
    return ROOT


def run(recipe, tmp_path, name, *args):
    dump = tmp_path / f"{name}.jsonl"
    code = main(["--data_cfg", str(recipe), "--epochs", "3", "--quiet", "--engine", "inline", "--num_workers", "0",
                 "--dump_batches", str(dump), *args])
    return code, [json.loads(line) for line in dump.read_text().splitlines()] if dump.exists() else []


def resumed_tail(root, tmp_path, recipe, state, *args):
    """The uninterrupted run's dump, and the dump of a run resumed from ``state`` (a copy: a resume writes no
    state here, but the file stays untouched anyway)."""
    copy = tmp_path / "state.json"
    shutil.copy(state, copy)
    code, full = run(root / recipe, tmp_path, "full", *args)
    assert code == 0
    code, rest = run(root / recipe, tmp_path, "resumed", "--resume", str(copy), *args)
    return code, full, rest


@pytest.mark.parametrize("version, name", [(v, n) for v, names in VERSIONS.items() for n in names])
def test_a_saved_state_resumes_to_the_uninterrupted_runs_batches(root, tmp_path, capsys, version, name):
    state = FIXTURES / version / f"{name}.state.json"
    saved = json.loads(state.read_text())
    code, full, rest = resumed_tail(root, tmp_path, f"{name}.yaml", state)
    assert code == 0, capsys.readouterr().err
    group = saved.get("train", saved)
    first = next(i for i, r in enumerate(full) if r["group"] == "train" and (r["epoch"], r["step"]) ==
                 (group["epoch"], group["step"] + 1))
    assert rest == full[first:] and len(rest) > 10


@pytest.mark.filterwarnings("ignore:train.*ngpu=1 but the world size is 2")
@pytest.mark.parametrize("version", ["v2", "v3", "v3-9a54832"])
@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_file_of_a_two_rank_run_resumes_on_that_rank(root, tmp_path, capsys, version, rank):
    """States before version 4 resume on the ranks that saved them: here each rank of the saving torchrun
    job in a process of its own (rank and world size set in the recipe)."""
    ranks = [f"--set={group}.conf.{key}={value}" for group in ("train", "valid")
             for key, value in (("rank", rank), ("world_size", 2))]
    code, full, rest = resumed_tail(root, tmp_path, "block.yaml", FIXTURES / version / f"block2.state.rank{rank}.json",
                                    *ranks)
    assert code == 0, capsys.readouterr().err
    first = next(i for i, r in enumerate(full) if r["group"] == "train" and (r["epoch"], r["step"]) == (2, 5))
    assert rest == full[first:]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_version_4_two_rank_run_resumes_on_one_rank(root, tmp_path):
    """A version 4 state of 2 ranks continues on 1 (torchrun): the rest of epoch 2 is the saved run's global
    batches, which on one rank with ngpu 1 are the uninterrupted one-rank run's."""
    for rank in range(2):
        shutil.copy(FIXTURES / "v4" / f"block2.state.rank{rank}.json", tmp_path / f"state.rank{rank}.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(root)]))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", "29561",
               "-m", "speechiter.run", "--distributed", "--data_cfg", str(root / "block.yaml"), "--epochs", "3",
               "--quiet", "--engine", "inline", "--num_workers", "0", "--dump_batches", str(tmp_path / "resumed.jsonl"),
               "--resume", str(tmp_path / "state.json")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    rest = [json.loads(line) for line in (tmp_path / "resumed.rank0.jsonl").read_text().splitlines()]
    code, full = run(root / "block.yaml", tmp_path, "full")
    first = next(i for i, r in enumerate(full) if r["group"] == "train" and (r["epoch"], r["step"]) == (2, 5))
    assert code == 0 and rest == full[first:]


@pytest.mark.parametrize("version", ["v3", "v4"])
def test_a_mix_state_of_an_earlier_version_resumes_under_a_changed_mix(root, tmp_path, capsys, version):
    """The mix of a version 3 or 4 state re-weighted (0.5/0.5) with another batches_per_epoch (6): each corpus
    finishes its own interrupted epoch from where the saved run stood (NOTE [ Changed mix ])."""
    changed = (root / "mix.yaml").read_text().replace("a: 0.7", "a: 0.5").replace("b: 0.3", "b: 0.5")
    source = tmp_path / "mix-changed.yaml"
    source.write_text(changed.replace("batches_per_epoch: 9", "batches_per_epoch: 6"))
    _copy(source, root / "mix-changed.yaml")  # beside stopat.py, which the recipe names
    state = FIXTURES / version / "mix.state.json"
    saved = json.loads(state.read_text())["train"]
    code, full = run(root / "mix.yaml", tmp_path, "full")
    assert code == 0
    shutil.copy(state, tmp_path / "state.json")
    code, rest = run(root / "mix-changed.yaml", tmp_path, "changed", "--resume", str(tmp_path / "state.json"),
                     "--resume_changes", "mix", "--epochs", "5")
    err = capsys.readouterr().err
    assert code == 0, err
    assert "speechiter: resume: train: the mix changed (batches_per_epoch: saved 9, now 6; weights.a: saved " \
           "\"7/10\", now \"1/2\"; weights.b: saved \"3/10\", now \"1/2\"); its new schedule starts after step 4 of " \
           "epoch 2, which keeps its 9 steps (the next epochs have 6)" in err
    before = [r for r in full if r["group"] == "train" and (r["epoch"], r["step"]) <= (2, saved["step"])]
    after = [r for r in rest if r["group"] == "train"]
    assert (after[0]["epoch"], after[0]["step"]) == (2, saved["step"] + 1) and len(after) == 9 - 4 + 3 * 6
    mix = speechiter.build_iterators(speechiter.load_config(root / "mix.yaml"), groups=("train",))["train"]
    try:
        for name, own in saved["iterators"]["None"]["sources"].items():  # a at its epoch 2 step 0, b at 1 step 4
            given = [r["ids"] for r in before if r["source"] == name]
            size = len(mix.iterators[name])
            assert len(given) == (own["epoch"] - 1) * size + own["step"]
            seen = given[len(given) - own["step"]:] + [r["ids"] for r in after if r["source"] == name][
                :size - own["step"]]
            assert seen == mix.iterators[name].epoch_batches(own["epoch"]).tolist(), name
    finally:
        speechiter.build.close_all({"train": mix})
