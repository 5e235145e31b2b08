"""speechiter.lightning's loaders as Lightning iterates them, without importing Lightning (fast).

NOTE [ Lightning's loops ] in speechiter/lightning.py: each iter() of an EpochLoader is one epoch, the
first after a loaded state continues it; the datamodule builds each stage's groups. The real Trainer runs
are in test_trainer.py (slow: importing Lightning alone takes several seconds).
"""
import itertools
import sys

import pytest

import speechiter
from speechiter.batch import Batch
from speechiter.errors import ConfigError
from speechiter.lightning import EpochLoader, EvalLoader, _SpeechData
from tests.recipes import entry


def data_cfg(corpus, **groups):
    train = entry(corpus, batch_len=32000)
    return {"train": train, "valid": entry(corpus, "abs.Iterator", data_len=False, shuffle=False), **groups}


def ids(steps):
    return [step.ids if isinstance(step, Batch) else {name: b.ids for name, b in step.items()} for step in steps]


def reference(group, epoch):
    return ids(step[None] if None in step else step for step in speechiter.GroupLoader(group, epoch))


@pytest.fixture
def train(corpus):
    iterators = speechiter.build_iterators(data_cfg(corpus), num_workers=0, groups=("train",))
    yield iterators["train"]
    speechiter.build.close_all(iterators)


def test_each_pass_is_the_next_epoch(train):
    loader = EpochLoader(train)
    assert len(loader) == len(train) > 3
    iter(loader)  # Lightning's check that it is iterable: no batch taken, no epoch begun
    assert ids(loader) == reference(train, 1) and loader.epoch == 1
    assert ids(loader) == reference(train, 2) and loader.epoch == 2


def test_a_loaded_state_continues_its_epoch(train):
    loader = EpochLoader(train)
    list(loader)
    second = iter(loader)
    done = ids(itertools.islice(second, 3))
    state = loader.state_dict()
    assert (state["epoch"], state["step"]) == (2, 3)

    resumed = EpochLoader(train)
    resumed.load_state_dict(state)
    assert len(resumed) == len(train)  # Lightning counts the steps done itself and stops at len()
    assert done + ids(resumed) == reference(train, 2)
    assert ids(resumed) == reference(train, 3)


def test_a_state_at_an_epochs_end_goes_on_with_the_next(train):
    loader = EpochLoader(train)
    list(loader)
    resumed = EpochLoader(train)
    resumed.load_state_dict(loader.state_dict())
    assert ids(resumed) == reference(train, 2)


def test_an_unfinished_pass_is_closed_and_the_next_iter_is_the_next_epoch(corpus):
    iterators = speechiter.build_iterators(data_cfg(corpus), num_workers=2, thread_type="thread",
                                           groups=("train",))
    try:
        loader = EpochLoader(iterators["train"])
        first = iter(loader)
        next(first)  # as limit_train_batches leaves it
        assert ids(loader) == reference(iterators["train"], 2)
        with pytest.raises(StopIteration):
            next(first)
    finally:
        speechiter.build.close_all(iterators)


def test_a_state_of_another_setup_is_refused(train, corpus):
    other = speechiter.build_iterators(data_cfg(corpus), seed=1, num_workers=0, groups=("train",))
    try:
        state = EpochLoader(other["train"]).state_dict()
    finally:
        speechiter.build.close_all(other)
    with pytest.raises(ConfigError, match="seed"):
        EpochLoader(train).load_state_dict(state)


def test_a_groups_step_is_a_dict_and_evaluation_follows_the_epoch(corpus):
    cfg = data_cfg(corpus)
    cfg["train"] = {"steps": "longest", "sup": entry(corpus, batch_len=32000), "unsup": entry(corpus, batch_len=64000)}
    iterators = speechiter.build_iterators(cfg, num_workers=0)
    try:
        steps = list(EpochLoader(iterators["train"]))
        assert all(set(step) == {"sup", "unsup"} for step in steps) and len(steps) == len(iterators["train"]["sup"])
        epoch = [1]
        valid = EvalLoader(iterators["valid"], lambda: epoch[0])
        assert ids(valid) == reference(iterators["valid"], 1) and len(valid) == len(iterators["valid"])
        epoch[0] = 2
        assert ids(valid) == reference(iterators["valid"], 2)
    finally:
        speechiter.build.close_all(iterators)


def test_a_checkpoint_of_a_mix_resumes_under_changed_weights_where_the_datamodule_allows_it(corpus):
    def mix(weights):
        cfg = data_cfg(corpus)
        cfg["train"] = {"type": "mix.MixIterator", "conf": {"batches_per_epoch": 6, "weights": weights, "iterators": {
            "x": entry(corpus, batch_len=32000), "y": entry(corpus, "abs.Iterator", batch_size=2)}}}
        return cfg
    saving = _SpeechData(mix({"x": 0.5, "y": 0.5}), num_workers=0)
    loader = saving.train_dataloader()
    list(itertools.islice(iter(loader), 2))
    state = loader.state_dict()
    saving.teardown()
    with pytest.raises(ConfigError, match=r"^resume_changes: expected some of mix"):
        _SpeechData(mix({"x": 0.2, "y": 0.8}), resume_changes=["weights"])
    for changes in ((), ["mix"]):
        data = _SpeechData(mix({"x": 0.2, "y": 0.8}), num_workers=0, resume_changes=changes)
        try:
            if not changes:
                with pytest.raises(ConfigError, match="a changed mix resumes when allowed"):
                    data.train_dataloader().load_state_dict(state)
                continue
            resumed = data.train_dataloader()
            resumed.load_state_dict(state)
            sources = [batch.source for batch in resumed]
            assert len(sources) == 4 and sources.count("y") == 3  # 0.8 of the 4 steps left, rounded
        finally:
            data.teardown()


def test_the_datamodule_builds_each_stages_groups(corpus, tmp_path):
    data = _SpeechData(data_cfg(corpus, test={"a": entry(corpus, "abs.Iterator"), "b": entry(corpus, batch_len=64000)}),
                       num_workers=0)
    try:
        data.setup("fit")
        assert set(data.iterators) == {"train", "valid"}
        assert data.train_dataloader() is data.train_dataloader()  # reload_dataloaders_every_n_epochs: one state
        assert data.test_sets == ["a", "b"] and len(data.test_dataloader()) == 2  # built on first use
        data.teardown("fit")
        assert set(data.iterators) == {"test"}
    finally:
        data.teardown()
    assert data.iterators == {}


def test_the_datamodule_refuses_what_the_trainer_decides_and_missing_groups(corpus, make_recipe):
    with pytest.raises(TypeError, match="rank, world_size: set by the trainer"):
        _SpeechData(data_cfg(corpus), world_size=2, rank=0)
    with pytest.raises(TypeError, match="overrides apply to a recipe file"):
        _SpeechData(data_cfg(corpus), overrides=["seed=1"])
    data = _SpeechData(str(make_recipe(corpus)), overrides=["data_cfg.train.conf.batch_len=32000"], num_workers=0)
    with pytest.raises(ConfigError, match="data_cfg: has no test group"):
        data.test_dataloader()
    assert len(data.train_dataloader()) > 3
    data.teardown()


def test_without_lightning_one_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    monkeypatch.delitem(sys.modules, "speechiter.lightning")
    with pytest.raises(ImportError) as error:
        from speechiter.lightning import SpeechDataModule  # noqa: F401
    assert "\n" not in str(error.value)
    assert str(error.value).startswith("speechiter.lightning needs Lightning, which cannot be imported")
    assert str(error.value).endswith("pip install 'speechiter[lightning]'")
