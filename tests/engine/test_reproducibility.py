"""Exact reproducibility: random augmentation across worker counts, resume, and sharding over ranks."""
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from speechiter.dump import checksum
from tests import recipes
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]

# A dataset that draws random numbers per utterance from every generator a user might use.
AUGMENT_MODULE = '''
import random

import numpy as np

import speechiter
from speechiter.dataset.speech_text import SpeechTextDataset


class NoisyDataset(SpeechTextDataset):
    def extract_main_data_fn(self, main_data):
        item = super().extract_main_data_fn(main_data)
        gain = random.uniform(0.5, 1.5) * np.random.uniform(0.5, 1.5)
        noise = speechiter.rng().normal(0, 0.01, size=item["feat"].shape).astype("float32")
        item["feat"] = item["feat"] * gain + noise
        return item
'''


def write_recipe(tmp_path, corpus, unsup=False, named=None):
    (tmp_path / "augment.py").write_text(AUGMENT_MODULE)
    noisy = dict(dataset_type="augment.NoisyDataset")
    train = recipes.entry(corpus, data=("feat", "text"), **noisy, batch_len=30000)
    if unsup if named is None else named:
        train = {"sup": train}
    if unsup:
        train["unsup"] = recipes.entry(corpus, "piece.PieceIterator", **noisy, batch_size=2)
    valid = recipes.entry(corpus, "abs.Iterator", **noisy, data_len=False, batch_size=4)
    return recipes.write_recipe(tmp_path / "recipe.yaml", corpus, train=train, valid=valid)


def run_fresh(*args, timeout=180):
    """The CLI in a fresh interpreter: nothing run before it in the process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "speechiter.run", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def read_dump(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def fresh_corpus(shared_corpus):
    return shared_corpus(num=24, seed=11, speakers=4)  # read only: made once per session


@pytest.mark.slow  # process workers; the reference run in a fresh interpreter
@pytest.mark.timeout(400)
def test_augmentation_is_identical_for_any_workers_and_thread_type(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=12, seed=11, speakers=4, max_sec=1.0)
    recipe = write_recipe(tmp_path, corpus, unsup=True)
    runs = [["--engine", "inline"], ["--num_workers", 0], ["--num_workers", 1], ["--num_workers", 2],
            ["--num_workers", 4], ["--num_workers", 2, "--thread_type", "thread"],
            ["--num_workers", 4, "--thread_type", "thread"], ["--engine", "inline"]]
    seeds = [7] * (len(runs) - 1) + [8]
    dumps = [tmp_path / f"dump{i}.jsonl" for i in range(len(runs))]
    argvs = [["--data_cfg", recipe, "--epochs", 2, "--seed", seed, "--quiet", "--dump_batches", dump, *args]
             for args, seed, dump in zip(runs, seeds, dumps)]
    # the reference alone in a fresh interpreter, the others one after another in this one
    first = run_fresh(*argvs[0])
    assert first.returncode == 0, first.stderr
    for argv in argvs[1:]:
        result = run_cli(*argv)
        assert result.returncode == 0, result.stderr
    dumps = [read_dump(dump) for dump in dumps]
    assert len({r["step"] for r in dumps[0] if r["group"] == "train"}) >= 3
    for args, dump in zip(runs[1:-1], dumps[1:-1]):
        assert dump == dumps[0], args
    # The augmentation is real: another seed changes the checksums, not the ids.
    assert [r["checksum"] for r in dumps[-1]] != [r["checksum"] for r in dumps[0]]


@pytest.mark.timeout(120)
def test_adding_an_iterator_does_not_change_the_other(tmp_path, fresh_corpus):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    single = write_recipe(tmp_path / "a", fresh_corpus, named=True)
    double = write_recipe(tmp_path / "b", fresh_corpus, unsup=True)
    alone, both = tmp_path / "alone.jsonl", tmp_path / "both.jsonl"
    assert run_cli("--data_cfg", single, "--quiet", "--engine", "inline", "--dump_batches", alone).returncode == 0
    assert run_cli("--data_cfg", double, "--quiet", "--engine", "inline", "--dump_batches", both).returncode == 0
    sup = [r for r in read_dump(both) if r["iterator"] == "sup"]
    train = [r for r in read_dump(alone) if r["group"] == "train"]
    assert sup and train[:len(sup)] == sup  # same ids and the same augmented data


@pytest.mark.slow  # process workers
@pytest.mark.timeout(400)
@pytest.mark.parametrize("unsup", [False, True])
def test_cli_resume_at_any_step_reproduces_the_tail(tmp_path, fresh_corpus, unsup):
    recipe = write_recipe(tmp_path, fresh_corpus, unsup=unsup)
    full, state = tmp_path / "full.jsonl", tmp_path / "state.json"
    result = run_cli("--data_cfg", recipe, "--epochs", 3, "--quiet", "--dump_batches", full, "--save_state", state,
                     "--num_workers", 2)
    assert result.returncode == 0, result.stderr
    saved = json.loads(state.read_text())
    assert (saved["train"]["epoch"], saved["train"]["step"]) == (4, 0)  # finished
    records = read_dump(full)
    train_steps = Counter(r["epoch"] for r in records if r["group"] == "train" and r["iterator"] in (None, "sup"))
    for epoch, step in ((2, 3), (1, 0), (3, train_steps[3] - 1), (2, train_steps[2])):
        saved["train"].update(epoch=epoch, step=step)
        for it in saved["train"]["iterators"].values():  # steps: shortest: each at the group's position
            it.update(epoch=epoch, step=step)
        state.write_text(json.dumps(saved))
        tail = tmp_path / f"tail{epoch}_{step}.jsonl"
        result = run_cli("--data_cfg", recipe, "--epochs", 3, "--quiet", "--dump_batches", tail, "--resume", state,
                         "--num_workers", 2, "--thread_type", "thread")
        assert result.returncode == 0, result.stderr
        first = next(i for i, r in enumerate(records)
                     if (r["epoch"], r["group"]) == (epoch, "train") and r["step"] > step or
                     (r["epoch"], r["group"]) == (epoch, "valid") or r["epoch"] > epoch)
        assert read_dump(tail) == records[first:], (epoch, step)


@pytest.mark.timeout(120)
def test_resume_into_another_configuration_says_what_differs(tmp_path, fresh_corpus):
    recipe = write_recipe(tmp_path, fresh_corpus)
    state = tmp_path / "state.json"
    assert run_cli("--data_cfg", recipe, "--quiet", "--save_state", state, "--engine", "inline").returncode == 0
    result = run_cli("--data_cfg", recipe, "--quiet", "--resume", state, "--set", "train.conf.batch_len=20000")
    assert result.returncode == 2
    assert "different run" in result.stderr and "config" in result.stderr
    result = run_cli("--data_cfg", recipe, "--quiet", "--resume", state, "--seed", "5")
    assert result.returncode == 2 and "seed: saved 0, now 5" in result.stderr
    result = run_cli("--data_cfg", recipe, "--quiet", "--resume", tmp_path / "missing.json")
    assert result.returncode == 2 and "no such state file" in result.stderr


# --- the Python API: checkpoint equivalence in a fresh process -----------------------------------
CHILD = '''
import json, sys
import speechiter
from speechiter.dump import checksum
from tests import recipes
recipe, state_path, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
iterators = speechiter.build_iterators(speechiter.load_config(recipe), seed=3, num_workers=workers)
train = iterators["train"]
loader = train.build_loader(epoch=1)
loader.load_state_dict(json.load(open(state_path)))
print(json.dumps([checksum(batch) for batch in loader]))
train.close(); iterators["valid"].close()
'''


@pytest.mark.slow  # a fresh process is the point: nothing of this one's state helps the resume
@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_checkpoint_equivalence_in_a_fresh_process(tmp_path, fresh_corpus, workers):
    import speechiter
    recipe = write_recipe(tmp_path, fresh_corpus)
    iterators = speechiter.build_iterators(speechiter.load_config(recipe), seed=3, num_workers=workers)
    train = iterators["train"]
    try:
        uninterrupted = [checksum(b) for b in train.build_loader(epoch=2)]
        loader = train.build_loader(epoch=2)
        stream = iter(loader)
        head = [checksum(next(stream)) for _ in range(3)]
        state = loader.state_dict()
        stream.close()
    finally:
        train.close()
        iterators["valid"].close()
    assert head == uninterrupted[:3] and state["step"] == 3 and state["epoch"] == 2
    (tmp_path / "state.json").write_text(json.dumps(state))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.run([sys.executable, "-c", CHILD, str(recipe), str(tmp_path / "state.json"), str(workers)],
                           capture_output=True, text=True, env=env, timeout=240)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout.strip().splitlines()[-1]) == uninterrupted[3:]


def test_loader_state_is_checked_with_raise(tmp_path, fresh_corpus):
    import speechiter
    from speechiter.errors import ConfigError
    recipe = write_recipe(tmp_path, fresh_corpus)
    iterators = speechiter.build_iterators(speechiter.load_config(recipe), num_workers=0)
    loader = iterators["train"].build_loader(epoch=1)
    state = loader.state_dict()
    with pytest.raises(ConfigError, match="unknown keys bogus"):
        loader.load_state_dict(dict(state, bogus=1))
    with pytest.raises(ConfigError, match="missing keys view"):
        loader.load_state_dict({k: v for k, v in state.items() if k != "view"})
    with pytest.raises(ConfigError, match="batching view: saved 'x'"):
        loader.load_state_dict(dict(state, view="x"))
    with pytest.raises(ConfigError, match="step"):
        loader.load_state_dict(dict(state, step=-1))
    with pytest.raises(ConfigError, match="version"):
        loader.load_state_dict(dict(state, version=99))


# --- ranks ---------------------------------------------------------------------------------------
@pytest.mark.slow  # rank processes, as torchrun starts them (tests/forked_ranks.py: one import of torch per job)
@pytest.mark.timeout(400)
@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_have_equal_steps_and_share_the_plan(tmp_path, fresh_corpus, ranks):
    recipe = write_recipe(tmp_path, fresh_corpus)
    single = tmp_path / "single.jsonl"
    assert run_cli("--data_cfg", recipe, "--epochs", 2, "--quiet", "--dump_batches", single,
                   "--engine", "inline").returncode == 0
    dump = tmp_path / "dist.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "tests.forked_ranks", str(ranks), "-m", "speechiter.run",
                             "--data_cfg", str(recipe),
                             "--epochs", "2", "--quiet", "--distributed", "--num_workers", "1",
                             "--dump_batches", str(dump)], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=360)
    assert result.returncode == 0, result.stderr[-3000:]
    per_rank = [read_dump(tmp_path / f"dist.rank{r}.jsonl") for r in range(ranks)]
    assert all(r["rank"] == rank for rank, records in enumerate(per_rank) for r in records)
    reference = read_dump(single)
    for epoch in (1, 2):
        for group in ("train", "valid"):
            steps = [[r for r in records if (r["epoch"], r["group"]) == (epoch, group)] for records in per_rank]
            assert len({len(s) for s in steps}) == 1  # equal steps on every rank
            if group == "valid":  # evaluation: each utterance on one rank only (padding rows aside)
                plan = [u for r in reference if (r["epoch"], r["group"]) == (epoch, group) for u in r["ids"]]
                shares = [u for s in steps for record in s for u in record["ids"]]
                assert set(shares) == set(plan) and len(shares) < len(plan) + ranks
                continue
            plan = [r for r in reference if (r["epoch"], r["group"]) == (epoch, group)]
            assert len(steps[0]) == len(plan)
            for i, batch in enumerate(plan):
                shares = [u for s in steps for u in s[i]["ids"]]
                assert set(shares) == set(batch["ids"])  # the union is the plan's batch
                assert len(shares) == max(len(batch["ids"]), ranks)  # repeats only pad small batches
