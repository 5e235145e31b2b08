"""SpeechDataModule under a real Lightning Trainer on the CPU: the batches of a fit are speechiter's, and a fit
resumed from a checkpoint (mid-epoch, at an epoch's end, after a SIGKILL, under DDP) trains on exactly the
batches the uninterrupted fit had after it (NOTE [ Lightning's loops ] in speechiter/lightning.py).

Slow: importing Lightning takes several seconds, and its DDP launcher and the killed fit are processes.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")
import torch  # noqa: E402

import speechiter  # noqa: E402
from speechiter.build import close_all  # noqa: E402
from speechiter.dump import checksum  # noqa: E402
from tests.lightning.fit import fit, read_records  # noqa: E402
from tests.recipes import entry  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]
FIT = Path(__file__).with_name("fit.py")
REPO = Path(__file__).resolve().parents[2]


def train_group(corpus, kind):
    """A train group of each shape: one iterator, two stepped together, two corpora mixed."""
    if kind == "block":
        return entry(corpus, batch_len=32000)
    if kind == "group":
        return {"sup": entry(corpus, batch_len=32000), "unsup": entry(corpus, batch_len=48000)}
    return {"type": "mix.MixIterator", "conf": {"batches_per_epoch": 8, "weights": {"a": 0.75, "b": 0.25},
            "iterators": {"a": entry(corpus, batch_len=32000), "b": entry(corpus, batch_len=64000)}}}


@pytest.fixture
def recipe(corpus, make_recipe):
    def make(kind="block", **options):
        return make_recipe(corpus, train=train_group(corpus, kind), **options)
    return make


def expected(recipe, epochs=2, rank=0, world_size=1):
    """What speechiter alone gives: {"ids", "checksum"} of every train step, epoch after epoch."""
    iterators = speechiter.build_iterators(speechiter.load_config(recipe), num_workers=0, groups=("train",),
                                           rank=rank, world_size=world_size, ngpu=world_size)
    try:
        steps = []
        for epoch in range(1, epochs + 1):
            for step in speechiter.GroupLoader(iterators["train"], epoch):
                batches = list(step.values())
                steps.append({"ids": [b.ids for b in batches], "checksum": [checksum(b) for b in batches]})
        return steps
    finally:
        close_all(iterators)


def seen(records):
    return [{"ids": r["ids"], "checksum": r["checksum"]} for r in records]


def steps_of(checkpoint: Path) -> int:
    return int(checkpoint.stem.split("=")[1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["block", "group", "mix"])
def test_a_fit_resumed_from_any_checkpoint_trains_on_the_uninterrupted_batches(tmp_path, recipe, kind):
    cfg = recipe(kind)
    out = tmp_path / "out"
    model, datamodule = fit(cfg, out, "full", epochs=2, every=4)
    full = read_records(out / "full.rank0.jsonl")
    assert seen(full) == expected(cfg)
    assert datamodule.iterators == {}  # the fit's teardown stopped the workers
    if kind == "mix":
        assert {source for r in full for source in r["source"]} == {"a", "b"}
    steps = len(full) // 2
    checkpoints = sorted((out / "ckpt").iterdir(), key=steps_of)
    assert [steps_of(c) for c in checkpoints] == list(range(4, 2 * steps + 1, 4))
    for checkpoint in checkpoints[:-1]:  # mid-epoch, and at the end of epoch 1 when 4 divides its steps
        done = steps_of(checkpoint)
        fit(cfg, out, f"from{done}", epochs=2, every=100, resume=str(checkpoint))
        assert seen(read_records(out / f"from{done}.rank0.jsonl")) == seen(full[done:]), checkpoint.name


@pytest.mark.timeout(300)
def test_validation_and_test_sets_keep_their_batches_and_attributes(tmp_path, recipe, corpus):
    cfg = recipe(test={"a": entry(corpus, "abs.Iterator", shuffle=False),
                       "b": entry(corpus, batch_len=64000, shuffle=False)})
    model, datamodule = fit(cfg, tmp_path / "out", epochs=1)
    import lightning.pytorch as pl
    pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False).test(model, datamodule=datamodule)
    iterators = speechiter.build_iterators(speechiter.load_config(cfg), num_workers=0, groups=("valid", "test"))
    try:
        valid = [b.ids for b in iterators["valid"].build_loader(1)]
        test = [[b.ids for b in iterators["test"][name].build_loader(1)] for name in ("a", "b")]
    finally:
        close_all(iterators)
    assert [ids for stage, _, ids, _ in model.evaluated if stage == "valid"] == valid
    assert [[ids for stage, index, ids, _ in model.evaluated if stage == "test" and index == i] for i in (0, 1)] == test
    assert datamodule.test_sets == ["a", "b"]


def run_fit(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(FIT), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.timeout(400)
def test_a_fit_killed_mid_epoch_resumes_with_the_batches_it_would_have_had(tmp_path, recipe):
    """SIGKILL in step 8 of 2 x 8 (loading workers alive), resumed from the checkpoint of step 6."""
    cfg = recipe()
    out = tmp_path / "out"
    killed = run_fit(cfg, out, "--name", "killed", "--every", "3", "--kill_at", "7", "--num_workers", "1")
    assert killed.returncode == -9, killed.stderr[-2000:]
    first = read_records(out / "killed.rank0.jsonl")
    assert [r["step"] for r in first] == list(range(7))
    checkpoint = max((out / "ckpt").iterdir(), key=steps_of)
    assert checkpoint.name == "step=6.ckpt"

    fit(cfg, out, "resumed", epochs=2, every=100, resume=str(checkpoint), num_workers=1)
    resumed = read_records(out / "resumed.rank0.jsonl")
    assert [r["step"] for r in resumed] == list(range(6, 16))
    assert seen(first[:6] + resumed) == expected(cfg)


def continued(recipe, state, rank, world_size, epochs=2):
    """What speechiter alone gives on ``rank`` of ``world_size`` after ``state`` (saved on another layout)."""
    iterators = speechiter.build_iterators(speechiter.load_config(recipe), num_workers=0, groups=("train",),
                                           rank=rank, world_size=world_size, ngpu=world_size)
    try:
        loader = speechiter.GroupLoader(iterators["train"])
        loader.load_state_dict(state)
        loaders = [loader] + [speechiter.GroupLoader(iterators["train"], epoch)
                              for epoch in range(loader.epoch + 1, epochs + 1)]
        return [{"ids": [step[None].ids], "checksum": [checksum(step[None])]} for one in loaders for step in one]
    finally:
        close_all(iterators)


@pytest.mark.timeout(400)
def test_under_ddp_the_ranks_are_the_trainers_and_a_checkpoint_resumes_on_them(tmp_path, recipe):
    """Lightning's DDP strategy on the CPU (gloo, 2 processes) resumes a one-process fit's checkpoint of
    step 3: each rank takes its share of the rest of that epoch's batches, then plans epoch 2 for 2 ranks."""
    cfg = recipe()
    out = tmp_path / "out"
    fit(cfg, out, "one", epochs=1, every=3)
    checkpoint = out / "ckpt" / "step=3.ckpt"
    state = torch.load(checkpoint, weights_only=False)["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert (state["epoch"], state["step"]) == (1, 3)

    done = run_fit(cfg, out, "--name", "ddp", "--devices", "2", "--every", "100", "--resume", checkpoint,
                   timeout=360)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [read_records(out / f"ddp.rank{rank}.jsonl") for rank in (0, 1)]
    for rank in (0, 1):
        assert {r["rank"] for r in ranks[rank]} == {rank}
        assert seen(ranks[rank]) == continued(cfg, state, rank, 2)
    shares = [set(zero["ids"][0]) | set(one["ids"][0]) for zero, one in zip(*ranks)]
    assert shares[:5] == [set(step["ids"][0]) for step in expected(cfg)[3:8]]  # epoch 1's batches, shared
