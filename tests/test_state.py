"""Tests for speechiter.state: the state records round-trip and name the bad key."""
import json
from types import SimpleNamespace

import pytest

from speechiter.config import iterator_label
from speechiter.errors import ConfigError
from speechiter.loader import Loader
from speechiter.state import LoaderState, RunState, Stateful


def fake_iterator(name="train/sup", seed=0, batches=(("a", "b"), ("c",))):
    return SimpleNamespace(name=name, seed=seed, config_fingerprint="cfg", batches=[list(b) for b in batches],
                           view_fingerprint=lambda: "view")


def run_state(epoch=2, step=1):
    loader = LoaderState.of(fake_iterator(), epoch, step)
    return RunState(epoch=epoch, step=step, seed=0, config="run", iterators={"sup": loader})


def test_loader_state_keeps_the_saved_format():
    state = LoaderState.of(fake_iterator(), 2, 1)
    saved = state.to_dict()
    assert saved == {"version": 1, "iterator": "train/sup", "epoch": 2, "step": 1, "seed": 0, "config": "cfg",
                     "view": "view", "batches": 2}
    assert LoaderState.from_dict(json.loads(json.dumps(saved))) == state


def test_run_state_round_trips_through_json():
    state = run_state()
    saved = json.loads(json.dumps(state.to_dict()))
    assert set(saved) == {"version", "mode", "epoch", "step", "seed", "config", "iterators"}
    assert set(saved["iterators"]["sup"]) == {"version", "iterator", "epoch", "step", "seed", "config", "view",
                                              "batches"}
    assert RunState.from_dict(saved) == state


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(epoch=0), "--resume.epoch: expected a positive integer, got 0"),
    (lambda d: d.update(step=True), "--resume.step: expected a non-negative integer, got True"),
    (lambda d: d.update(iterators=[]), "--resume.iterators: expected a mapping of iterator states, got list"),
    (lambda d: d["iterators"]["sup"].pop("view"), "--resume.iterators.sup: missing keys view"),
    (lambda d: d.update(extra=1), "--resume: unknown keys extra; a run state has version, mode"),
    (lambda d: d.update(version=2), "--resume: state version 2 is not supported (expected 1)"),
])
def test_run_state_names_the_bad_key(change, message):
    saved = run_state().to_dict()
    change(saved)
    with pytest.raises(ConfigError) as error:
        RunState.from_dict(saved, "--resume")
    assert str(error.value).startswith(message)


def test_check_fits_says_what_differs():
    saved = run_state()
    with pytest.raises(ConfigError, match=r"state.json was saved by a different run \(seed: saved 0, now 5\)"):
        saved.check_fits(RunState(2, 1, seed=5, config="run", iterators={}), "--resume", "state.json")
    with pytest.raises(ConfigError, match="number of batches: saved 2, now 1"):
        saved.iterators["sup"].check_fits(fake_iterator(batches=[["a"]]))
    saved.iterators["sup"].check_fits(fake_iterator())


def test_loader_is_stateful():
    assert issubclass(Loader, Stateful)


def test_iterator_label():
    assert iterator_label("train") == "train"
    assert iterator_label("train", None, "sup") == "train/sup"
    assert iterator_label("test", "clean", "asr") == "test/clean/asr"
