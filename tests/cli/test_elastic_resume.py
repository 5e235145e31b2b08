"""Kill and resize: a torchrun job is SIGKILLed mid-epoch and resumed with --resume on another number of
ranks and workers, several times; over all ranks every step is the uninterrupted run's global batch and
every utterance of an epoch comes once (NOTE [ State files ] in speechiter/state_files.py, NOTE [ Elastic
resume ] in speechiter/plan/layout.py).

The random matrix starts its ranks with tests/forked_ranks.py (torchrun's environment, one import of torch
per job instead of one per rank and torchrun's own: 3 s a segment on 2 cores, not 5 to 8); the two-rank test
starts torchrun, so a SIGKILLed torchrun job is resumed too.

Each segment's ranks write --dump_batches and --save_state files; one rank's dataset stops at a chosen
utterance (it marks a file and waits), then the test SIGKILLs the whole job: torchrun, the ranks and their
workers. The next segment resumes from the earliest rank file; a killed segment's steps count up to that
resume point (the steps past it are loaded again).
"""
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from tests.inprocess import run_cli
from tests.recipes import entry, write_recipe

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 2

PAUSE_MODULE = '''
import os
import threading

from speechiter.dataset.speech_text import SpeechTextDataset

LOADED = [0]


class PauseAt(SpeechTextDataset):
    """On rank $PAUSE_RANK (all: *), from the $PAUSE_AT-th utterance a process loads, once the rank has
    written its state file ($PAUSE_STATE.rank<r>.json) in this job (since $PAUSE_SINCE ns): marks
    $PAUSE_MARKER.rank<r> and waits to be killed."""

    def extract_main_data_fn(self, main_data):
        rank = os.environ.get("RANK")
        if os.environ.get("PAUSE_RANK") in (rank, "*"):
            LOADED[0] += 1
            state = f"{os.environ['PAUSE_STATE']}.rank{rank}.json"
            if LOADED[0] >= int(os.environ["PAUSE_AT"]) and os.path.exists(state) and \\
                    os.stat(state).st_mtime_ns >= int(os.environ["PAUSE_SINCE"]):
                open(f"{os.environ['PAUSE_MARKER']}.rank{rank}", "w").close()
                threading.Event().wait()
        return super().extract_main_data_fn(main_data)
'''


def write_corpus(root: Path, num: int = 40) -> Path:
    rng = np.random.default_rng(11)
    ids = [f"utt{i:03d}" for i in range(num)]
    root.mkdir()
    (root / "idx2text").write_text("".join(f"{u} words {i}\n" for i, u in enumerate(ids)))
    (root / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, rng.integers(100, 1000, num))))
    return root


def iterator_entry(corpus: Path, kind: str, **conf) -> dict:
    options = {"block": ("block.BlockIterator", {"batch_len": 2500}),
               "bucket": ("bucket.BucketIterator", {"batch_len": 3000}),
               "abs": ("abs.Iterator", {"batch_size": 3})}[kind]
    return entry(corpus, options[0], data={"text": str(corpus / "idx2text")}, dataset_type="pause.PauseAt",
                 data_len=str(corpus / "idx2len"), **{**options[1], **conf})


def write_cfg(tmp_path: Path, corpus: Path, kind: str) -> Path:
    (tmp_path / "pause.py").write_text(PAUSE_MODULE)
    if kind == "semi":  # a semi-supervised group: 10 labelled utterances and all 40
        train = {"sup": iterator_entry(corpus, "abs", batch_size=1, dataset_conf={"data_selection": ["order", 0.25]}),
                 "unsup": iterator_entry(corpus, "block")}
    else:
        train = iterator_entry(corpus, kind)
    valid = entry(corpus, "abs.Iterator", data={"text": str(corpus / "idx2text")}, data_len=False, batch_size=8)
    return write_recipe(tmp_path / f"{kind}.yaml", corpus, train=train, valid=valid)


def env(tmp_path: Path, **extra) -> dict:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "OMP_NUM_THREADS": "1",
            "PAUSE_RANK": "-1", **extra}


def read_dump(path: Path) -> list:
    records = []
    for line in path.read_text().splitlines() if path.exists() else ():
        try:
            records.append(json.loads(line))
        except ValueError:  # the line the kill cut short (its step is past the state's)
            pass
    return records


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher, its ranks and their workers (each rank is in a session of its own)."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(30)
    psutil.wait_procs(tree, timeout=30)


def run_segment(tmp_path: Path, cfg: Path, index: int, world_size: int, workers: int, resume: bool,
                pause=None, timeout: float = 180, torchrun: bool = True):
    """One job of ``world_size`` ranks, started by torchrun or by tests/forked_ranks.py; ``pause`` = (rank or
    "*", utterance) stops that rank (every rank) there once it has saved a state (the others run on), and the
    test kills the job. Returns whether it was killed."""
    marker = tmp_path / f"paused{index}"
    extra = {} if pause is None else {"PAUSE_RANK": str(pause[0]), "PAUSE_AT": str(pause[1]),
                                      "PAUSE_MARKER": str(marker), "PAUSE_SINCE": str(time.time_ns()),
                                      "PAUSE_STATE": str(tmp_path / "state")}
    paused = world_size if pause is not None and pause[0] == "*" else 1
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}", "-m",
                "speechiter.run"] if torchrun else ["-m", "tests.forked_ranks", str(world_size), "-m",
                                                     "speechiter.run"]
    command = [sys.executable, *launcher, "--data_cfg", str(cfg), "--epochs", str(EPOCHS), "--quiet", "--distributed",
               "--num_workers", str(workers), "--save_state", str(tmp_path / "state.json"),
               "--dump_batches", str(tmp_path / f"dump{index}.jsonl")] + (
        ["--resume", str(tmp_path / "state.json")] if resume else [])
    log = open(tmp_path / f"log{index}.txt", "w")
    proc = subprocess.Popen(command, cwd=REPO, env=env(tmp_path, **extra), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and len(list(tmp_path.glob(f"{marker.name}.rank*"))) < paused:
            if time.monotonic() > deadline:
                raise AssertionError(f"segment {index} ran past {timeout} s")
            time.sleep(0.05)  # waiting for the pause (or the end), not for a race
        killed = len(list(tmp_path.glob(f"{marker.name}.rank*"))) == paused
    finally:
        kill_tree(proc)
        log.close()
    if not killed:
        assert proc.returncode == 0, (tmp_path / f"log{index}.txt").read_text()[-3000:]
    return killed


def resume_point(tmp_path: Path):
    """(epoch, step) the next segment resumes from: the earliest of the rank files of the run rank 0's
    file names."""
    first = json.loads((tmp_path / "state.rank0.json").read_text())
    states = [json.loads((tmp_path / f"state.rank{r}.json").read_text()) for r in range(first["world_size"])]
    return min((s["train"]["epoch"], s["train"]["step"]) for s in states)


REFERENCES = {}  # recipe name ("<kind>.yaml") -> its reference_steps: every test's corpus of a kind is the same


def reference_steps(tmp_path: Path, cfg: Path) -> dict:
    """``{(epoch, step, iterator): ids}`` of an uninterrupted run with no workers, in this process: the global
    batches; once per kind of recipe (write_corpus and write_cfg give every test the same ids)."""
    if cfg.name not in REFERENCES:
        dump = tmp_path / "reference.jsonl"
        result = run_cli("--data_cfg", cfg, "--epochs", EPOCHS, "--quiet", "--num_workers", 0, "--dump_batches", dump,
                         env={"PAUSE_RANK": "-1"})
        assert result.returncode == 0, result.stderr[-3000:]
        REFERENCES[cfg.name] = {(r["epoch"], r["step"], r["iterator"]): r["ids"] for r in read_dump(dump)
                                if r["group"] == "train"}
    return REFERENCES[cfg.name]


def check_segments(tmp_path: Path, cfg: Path, segments: list) -> None:
    """``segments``: [(index, world_size, start, end)]: the steps start < (epoch, step) <= end of each."""
    reference = reference_steps(tmp_path, cfg)
    steps = {}
    for index, world_size, start, end in segments:
        for rank in range(world_size):
            for record in read_dump(tmp_path / f"dump{index}.rank{rank}.jsonl"):
                if record["group"] != "train":
                    continue
                assert (record["epoch"], record["step"]) > start, (index, record)  # resumed where the files say
                if (record["epoch"], record["step"]) <= end:
                    steps.setdefault((record["epoch"], record["step"], record["iterator"]), set()).update(record["ids"])
    assert sorted(steps) == sorted(reference)
    for key, ids in reference.items():
        assert steps[key] == set(ids), key
    for epoch in range(1, EPOCHS + 1):
        for name in {key[2] for key in reference}:
            seen = [uid for key, ids in sorted(steps.items(), key=lambda kv: kv[0][1])
                    if key[0] == epoch and key[2] == name for uid in ids]
            assert len(seen) == len(set(seen)), (epoch, name)  # each utterance of the epoch once


def kill_and_resize(tmp_path: Path, kind: str, plan: list, seed: int, torchrun: bool = True) -> list:
    """``plan``: [(world_size, workers)] per segment; all but the last are killed at a random utterance of a
    random rank (of every rank, the ``pause_at``-th, when the entry has a third item). Returns the segments."""
    rng = random.Random(seed)
    cfg = write_cfg(tmp_path, write_corpus(tmp_path / "corpus"), kind)
    segments, start = [], (1, 0)
    for index, (world_size, workers, *pause_at) in enumerate(plan):
        last = index == len(plan) - 1
        pause = None if last else ("*", pause_at[0]) if pause_at else (rng.randrange(world_size), rng.randrange(1, 8))
        killed = run_segment(tmp_path, cfg, index, world_size, workers, resume=index > 0, pause=pause,
                             torchrun=torchrun)
        end = resume_point(tmp_path) if killed else (EPOCHS + 1, 0)
        segments.append((index, world_size, start, end))
        if not killed:
            break
        start = end
    check_segments(tmp_path, cfg, segments)
    return segments


@pytest.mark.slow  # torchrun, killed and resumed
@pytest.mark.timeout(300)
def test_a_killed_two_rank_job_resumes_on_three(tmp_path):
    segments = kill_and_resize(tmp_path, "block", [(2, 1, 8), (3, 0)], seed=1)
    assert len(segments) == 2 and segments[0][3][1] > 0  # killed in the middle of an epoch


@pytest.mark.slow  # distributed jobs, killed and resumed (ranks forked as torchrun would start them)
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["block", "bucket", "abs", "semi"])
def test_random_kills_and_resizes(tmp_path, kind):
    """Three segments, each on another number of ranks (1 to 4) than the one before, with 0 or 1 workers (2 on
    at most two ranks, mostly none on three or four: a process's start costs more than its loading); both kills
    must land."""
    rng = random.Random(f"elastic-{kind}")
    plan = []
    for _ in range(3):
        world_size = rng.choice([w for w in (1, 2, 3, 4) if not plan or w != plan[-1][0]])
        plan.append((world_size, rng.choice([0, 1, 2] if world_size <= 2 else [0, 0, 1])))
    segments = kill_and_resize(tmp_path, kind, plan, seed=rng.randrange(2 ** 16), torchrun=False)
    assert len(segments) == 3, segments  # two kills
