"""--resume_changes mix from the command line (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py): a run
of a mix dies mid-epoch; the recipe's mix changes (other weights, another batches_per_epoch, a corpus removed and
one added); the resume is refused with the hint, then resumes with the flag, one line per corpus saying what
carried over; each kept corpus's interrupted epoch comes exactly once; a second resume is exact; and under
torchrun, on two ranks, the changed mix continues the one-process state with the same global batches."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import speechiter
from tests.inprocess import run_cli
from tests.recipes import entry, write_recipe
from tests.state.test_group import STOPPER_MODULE  # a dataset that dies at its $STOP_AFTER-th utterance

REPO = Path(__file__).resolve().parents[2]


def write_corpus(root: Path, prefix: str, num: int) -> Path:
    root.mkdir()
    ids = [f"{prefix}{i:02d}" for i in range(num)]
    (root / "idx2text").write_text("".join(f"{uid} words of {uid}\n" for uid in ids))
    (root / "idx2len").write_text("".join(f"{uid} {100 + 37 * i % 400}\n" for i, uid in enumerate(ids)))
    return root


def corpus_entry(root: Path, batch_size: int) -> dict:
    return entry(root, "abs.Iterator", data={"text": str(root / "idx2text")}, dataset_type="mix_stopper.StopAfter",
                 data_len=str(root / "idx2len"), batch_size=batch_size)


def write_mix(folder: Path, name: str, weights: dict, batches_per_epoch: int, group: bool = False) -> Path:
    """A recipe whose train group is a mix of corpora a, b, c (``weights`` names them), or, with ``group``, a
    group of that mix (``sup``) and corpus b (``unsup``)."""
    corpora = {"a": (folder / "a", 3), "b": (folder / "b", 2), "c": (folder / "c", 1)}
    train = {"type": "mix.MixIterator", "conf": {
        "batches_per_epoch": batches_per_epoch, "weights": weights,
        "iterators": {key: corpus_entry(*corpora[key]) for key in weights}}}
    if group:
        train = {"sup": train, "unsup": corpus_entry(folder / "b", 1)}
    valid = entry(folder / "c", "abs.Iterator", data={"text": str(folder / "c" / "idx2text")}, data_len=False,
                  batch_size=5, shuffle=False)
    return write_recipe(folder / name, folder / "a", train=train, valid=valid)


def read_dump(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def train_steps(records: list) -> list:
    return [r for r in records if r["group"] == "train"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The recipes, the state of a run that died in epoch 2, and the dumps before it and of the changed resume."""
    folder = tmp_path_factory.mktemp("mixresume")
    (folder / "mix_stopper.py").write_text(STOPPER_MODULE)  # a name of its own: this module imports it
    write_corpus(folder / "a", "a", 14), write_corpus(folder / "b", "b", 7), write_corpus(folder / "c", "c", 5)
    old = write_mix(folder, "old.yaml", {"a": 0.7, "b": 0.3}, 9)
    new = write_mix(folder, "new.yaml", {"a": 0.5, "c": 0.5}, 6)
    common = ("--epochs", 4, "--num_workers", 0, "--quiet")
    died = run_cli("--data_cfg", old, *common, "--save_state", folder / "state.json", "--dump_batches",
                   folder / "part.jsonl", env={"STOP_AFTER": "34"})  # epoch 1 loads 24 utterances
    assert died.code == 1 and "stopped here" in died.err, died.err
    refused = run_cli("--data_cfg", new, *common, "--resume", folder / "state.json")
    resumed = run_cli("--data_cfg", new, *common, "--resume", folder / "state.json", "--resume_changes", "mix",
                      "--dump_batches", folder / "rest.jsonl")
    assert resumed.code == 0, resumed.err
    return folder, refused, resumed


def test_a_changed_mix_is_refused_with_the_hint(runs):
    folder, refused, _ = runs
    assert refused.code == 2 and refused.out == ""
    assert refused.err.splitlines() == [
        f"speechiter: error: --resume {folder / 'state.json'}: train.iterators.None: the state was saved with a "
        f"different setup (batches_per_epoch: saved 9, now 6; weights.a: saved \"7/10\", now \"1/2\"; added c; "
        f"removed b); a changed mix resumes when allowed: --resume_changes mix (Python: load_state_dict(state, "
        f"allow_changes=['mix']))"]


def test_a_changed_mix_resumes_with_the_flag_and_each_kept_corpus_finishes_its_epoch_once(runs):
    folder, _, resumed = runs
    saved = json.loads((folder / "state.json").read_text())["train"]
    assert saved["epoch"] == 2 and 0 < saved["step"] < 9, saved
    a, b = saved["iterators"]["None"]["sources"]["a"], saved["iterators"]["None"]["sources"]["b"]
    assert [line for line in resumed.err.splitlines() if line.startswith("speechiter: resume: ")] == [
        f"speechiter: resume: train: the mix changed (batches_per_epoch: saved 9, now 6; weights.a: saved \"7/10\", "
        f"now \"1/2\"; added c; removed b); its new schedule starts after step {saved['step']} of epoch 2, which "
        f"keeps its 9 steps (the next epochs have 6)",
        f"speechiter: resume: train/a: continues its epoch {a['epoch']} at step {a['step']} of 5",
        "speechiter: resume: train/c: added, starts at its epoch 1",
        f"speechiter: resume: train/b: removed (was at its epoch {b['epoch']} step {b['step']})"]
    before, after = train_steps(read_dump(folder / "part.jsonl")), train_steps(read_dump(folder / "rest.jsonl"))
    assert [(r["epoch"], r["step"]) for r in before][-1] == (2, saved["step"])
    assert [(r["epoch"], r["step"]) for r in after][:2] == [(2, saved["step"] + 1), (2, saved["step"] + 2)]
    assert len(after) == 9 - saved["step"] + 2 * 6  # the rest of epoch 2 (its 9 steps), then epochs 3 and 4 of 6
    mix = speechiter.build_iterators(speechiter.load_config(folder / "new.yaml"), groups=("train",),
                                     num_workers=0)["train"]
    try:
        own = mix.iterators["a"].epoch_batches(a["epoch"]).tolist()
        given = [r["ids"] for r in before if r["source"] == "a"]
        seen = given[len(given) - a["step"]:] + [r["ids"] for r in after if r["source"] == "a"][:5 - a["step"]]
        assert seen == own  # its interrupted epoch: each batch once, in order
        assert [r["ids"] for r in after if r["source"] == "c"][:5] == mix.iterators["c"].epoch_batches(1).tolist()
        assert {r["source"] for r in after} == {"a", "c"}
    finally:
        speechiter.build.close_all({"train": mix})
        sys.modules.pop("mix_stopper", None)  # imported here, not by a run: the next run imports it afresh


def test_a_second_resume_of_the_changed_run_is_exact(runs):
    folder = runs[0]
    common = ("--data_cfg", folder / "new.yaml", "--epochs", 4, "--num_workers", 0, "--quiet")
    died = run_cli(*common, "--resume", folder / "state.json", "--resume_changes", "mix", "--save_state",
                   folder / "state2.json", env={"STOP_AFTER": "25"})
    assert died.code == 1 and "stopped here" in died.err, died.err
    saved = json.loads((folder / "state2.json").read_text())
    start = saved["train"]["iterators"]["None"]["schedule_start"]
    assert saved["version"] == 5 and start["epoch"] == 2 and (saved["train"]["epoch"], saved["train"]["step"]) > (
        2, start["step"])
    again = run_cli(*common, "--resume", folder / "state2.json", "--dump_batches", folder / "rest2.jsonl")
    assert again.code == 0 and "speechiter: resume:" not in again.err, again.err  # nothing changed since
    after = train_steps(read_dump(folder / "rest.jsonl"))
    first = next(i for i, r in enumerate(after) if (r["epoch"], r["step"]) == (saved["train"]["epoch"],
                                                                                saved["train"]["step"] + 1))
    assert train_steps(read_dump(folder / "rest2.jsonl")) == after[first:]


def test_a_changed_mix_of_a_group_resumes_from_the_command_line(runs):
    folder = runs[0]
    old = write_mix(folder, "group-old.yaml", {"a": 0.7, "b": 0.3}, 9, group=True)
    new = write_mix(folder, "group-new.yaml", {"a": 0.2, "b": 0.3, "c": 0.5}, 9, group=True)
    common = ("--num_workers", 0, "--quiet")
    first = run_cli("--data_cfg", old, "--epochs", 1, "--save_state", folder / "group.json", *common)
    assert first.code == 0, first.err
    resumed = run_cli("--data_cfg", new, "--epochs", 2, "--resume", folder / "group.json", "--resume_changes", "mix",
                      "--dump_batches", folder / "group.jsonl", *common)
    assert resumed.code == 0, resumed.err
    lines = [line for line in resumed.err.splitlines() if line.startswith("speechiter: resume: ")]
    assert lines[0].startswith('speechiter: resume: train/sup: the mix changed (weights.a: saved "7/10", now "1/5"; '
                               'added c); its new schedule starts after step 0 of epoch 2') and len(lines) == 4
    assert lines[-1] == "speechiter: resume: train/sup/c: added, starts at its epoch 1"
    records = train_steps(read_dump(folder / "group.jsonl"))
    sources = [r["source"] for r in records if r["iterator"] == "sup"]
    assert len(sources) == 7 and sources.count("c") == 4  # shortest: unsup's 7 steps; 0.5 of them to c, rounded


def test_resume_changes_needs_resume(runs):
    folder = runs[0]
    result = run_cli("--data_cfg", folder / "new.yaml", "--resume_changes", "mix", "--quiet")
    assert result.code == 2 and result.err.strip() == (
        "speechiter: error: --resume_changes: applies with --resume (what the resumed state may find changed)")
    result = run_cli("--data_cfg", folder / "new.yaml", "--resume_changes", "weights", "--quiet")
    assert result.code == 2 and "argument --resume_changes: invalid choice: 'weights'" in result.err


@pytest.mark.slow  # torchrun
@pytest.mark.timeout(300)
def test_a_changed_mix_resumes_on_two_ranks_with_the_global_batches_of_one(runs, tmp_path):
    folder = runs[0]
    dump = tmp_path / "dump.jsonl"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "speechiter.run", "--data_cfg", str(folder / "new.yaml"), "--epochs", "4", "--num_workers", "0",
               "--quiet", "--distributed", "--resume", str(folder / "state.json"), "--resume_changes", "mix",
               "--dump_batches", str(dump), "--save_state", str(tmp_path / "state.json")]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{folder}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("speechiter: resume: train/c: added, starts at its epoch 1") == 1  # rank 0 says it
    steps = {}
    for rank in (0, 1):
        for record in train_steps(read_dump(tmp_path / f"dump.rank{rank}.jsonl")):
            steps.setdefault((record["epoch"], record["step"], record["source"]), []).extend(record["ids"])
    one = train_steps(read_dump(folder / "rest.jsonl"))
    assert sorted(steps) == sorted((r["epoch"], r["step"], r["source"]) for r in one)
    for record in one:  # every step's batch is shared among the ranks (a rank left without one repeats the last)
        assert set(steps[record["epoch"], record["step"], record["source"]]) == set(record["ids"])
    saved = json.loads((tmp_path / "state.rank1.json").read_text())["train"]["iterators"]["None"]
    assert saved["schedule_start"]["epoch"] == 2 and saved["sources"]["a"]["layout"]["world_size"] == 2
