"""Tests for speechiter.state: the state records round-trip, name the bad key, say what changed."""
import dataclasses
import json

import pytest

from speechiter import build_iterators, load_config
from speechiter.config import iterator_label
from speechiter.errors import ConfigError
from speechiter.loader import Loader
from speechiter.fingerprints import settings_summary, summary_differences
from speechiter.plan.layout import Layout
from speechiter.state import GroupState, LoaderState, RunState, Stateful, check_step
from speechiter.state_keys import CURRENT
from speechiter.state_versions import LAYOUT, read_group_state, read_loader_state, read_run_state
from speechiter.user_files import read_json
from tests import recipes


class FakeIterator:
    """What a state reads of an iterator, with the same fingerprints in every scheme."""

    mixed = False

    def __init__(self, name="train/sup", seed=0, batches=(("a", "b"), ("c",)), summary=None, config="cfg"):
        self.name, self.seed, self.config, self.summary = name, seed, config, summary
        self.batches = [list(b) for b in batches]

    def state_at(self, epoch, step, scheme=CURRENT):
        return LoaderState(self.name, epoch, step, self.seed, self.config, "view", len(self.batches), self.summary,
                           Layout() if scheme == CURRENT else None, scheme)

    def configuration(self, scheme=CURRENT):
        return self.config, self.summary

    def view_digest(self, scheme=CURRENT):
        return "view", len(self.batches)

    def layout_of(self, epoch):
        return Layout()

    def __len__(self):
        return len(self.batches)


def fake_iterator(**kwargs):
    return FakeIterator(**kwargs)


def check_fits(state, iterator):
    """The checks a Loader makes before it continues from ``state``."""
    state.check_setup(iterator)
    check_step(state.step, len(iterator), state.epoch, "state.step")


def group_state(epoch=2, step=1, scheme=CURRENT, own_positions=True):
    loader = fake_iterator().state_at(epoch, step, scheme)
    return GroupState(epoch=epoch, step=step, steps="shortest", iterators={"sup": loader},
                      own_positions=own_positions)


def run_state(epoch=2, step=1):
    return RunState(seed=0, config="run", train=group_state(epoch, step), world_size=1)


def flat_run_state(version=2):
    """A run state as versions 1 and 2 saved it: the train group's fields beside the run's."""
    loader = dict(fake_iterator().state_at(2, 1).to_dict(), version=version)
    del loader["layout"]
    state = {"version": version, "mode": "train", "epoch": 2, "step": 1, "seed": 0, "config": "run",
             "iterators": {"sup": loader}, "settings": None}
    if version == 1:
        del state["settings"], state["iterators"]["sup"]["settings"]
    return state


def test_loader_state_keeps_the_saved_format():
    state = fake_iterator().state_at(2, 1)
    saved = state.to_dict()
    assert saved == {"version": 5, "iterator": "train/sup", "epoch": 2, "step": 1, "seed": 0, "config": "cfg",
                     "view": "view", "batches": 2, "settings": None, "layout": {"ngpu": 1, "world_size": 1}}
    assert read_loader_state(json.loads(json.dumps(saved))) == state
    legacy = dict(saved, version=3)
    del legacy["layout"]  # versions 1 to 3 have no layout: their fingerprints hold it
    older = read_loader_state(dict(legacy, version=2))  # versions 1 to 3 have the same keys
    assert older.scheme == LAYOUT and (older.epoch, older.step) == (2, 1) and older.layout is None
    with pytest.raises(ValueError, match="only read, never saved"):
        older.to_dict()
    with pytest.raises(ConfigError, match=r"^state: unknown keys layout; a loader state has version, iterator"):
        read_loader_state(dict(saved, version=3))
    with pytest.raises(ConfigError, match=r"^state: missing keys layout$"):
        read_loader_state(legacy | {"version": 4})
    for layout, message in [({"ngpu": 1}, r"^state.layout: expected \{ngpu: N, world_size: W\}, got \{'ngpu': 1\}$"),
                            ({"ngpu": 1, "world_size": 0}, r"^state.layout.world_size: expected a positive integer")]:
        with pytest.raises(ConfigError, match=message):
            read_loader_state(dict(saved, layout=layout))


def test_run_state_nests_the_group_and_loader_states_and_round_trips_through_json():
    state = run_state()
    saved = json.loads(json.dumps(state.to_dict()))
    assert set(saved) == {"version", "mode", "seed", "config", "train", "settings", "world_size"}
    assert set(saved["train"]) == {"version", "epoch", "step", "steps", "iterators"}
    assert set(saved["train"]["iterators"]["sup"]) == {"version", "iterator", "epoch", "step", "seed", "config",
                                                       "view", "batches", "settings", "layout"}
    assert read_run_state(saved) == state and (state.epoch, state.step, state.steps) == (2, 1, "shortest")
    assert read_group_state(saved["train"]) == state.train


@pytest.mark.parametrize("change, message", [
    (lambda d: d["train"].update(epoch=0), "--resume.train.epoch: expected a positive integer, got 0"),
    (lambda d: d["train"].update(step=True), "--resume.train.step: expected a non-negative integer, got True"),
    (lambda d: d["train"].update(iterators=[]),
     "--resume.train.iterators: expected a mapping of iterator states, got list"),
    (lambda d: d["train"]["iterators"]["sup"].pop("view"), "--resume.train.iterators.sup: missing keys view"),
    (lambda d: d.update(extra=1), "--resume: unknown keys extra; a run state has version, mode, seed, config, train"),
    (lambda d: d["train"].update(extra=1), "--resume.train: unknown keys extra; a group state has version, epoch"),
    (lambda d: d["train"].update(settings={}), "--resume.train: unknown keys settings; a group state has"),
    (lambda d: d.pop("train"), "--resume: missing keys train"),
    (lambda d: d.update(train=None), "--resume.train: expected a state dict, got NoneType"),
    (lambda d: d.update(version=6), "--resume.version: state version 6 is not supported (expected 1, 2, 3, 4 or 5)"),
    (lambda d: d.update(world_size=0), "--resume.world_size: expected a positive integer, got 0"),
    (lambda d: d.pop("world_size"), "--resume: missing keys world_size"),
    (lambda d: d.update(version=True), "--resume.version: state version True is not supported"),
    (lambda d: d["train"].update(step="7"), "--resume.train.step: expected a non-negative integer, got '7'"),
    (lambda d: d["train"].update(epoch=2 ** 40),
     "--resume.train.epoch: expected at most 2147483647, got 1099511627776"),
    (lambda d: d["train"].update(steps=None), "--resume.train.steps: expected a string, got None"),
    (lambda d: d.update(seed="0"), "--resume.seed: expected an integer, got '0'"),
    (lambda d: d.update(config=None), "--resume.config: expected a string, got None"),
    (lambda d: d.update(settings=[1]), "--resume.settings: expected a mapping of iterator settings"),
    (lambda d: d["train"]["iterators"]["sup"].update(settings="x"),
     "--resume.train.iterators.sup.settings: expected a mapping"),
    (lambda d: d["train"]["iterators"].update(sup=[1]), "--resume.train.iterators.sup: expected a state dict, got list"),
])
def test_run_state_names_the_bad_key(change, message):
    saved = run_state().to_dict()
    change(saved)
    with pytest.raises(ConfigError) as error:
        read_run_state(saved, "--resume")
    assert str(error.value).startswith(message)


def test_check_fits_says_what_differs():
    saved = run_state()
    with pytest.raises(ConfigError, match=r"state.json was saved by a different run \(seed: saved 0, now 5\)"):
        saved.check_fits(RunState(seed=5, config="run", train=saved.train), "--resume", "state.json")
    longest = dataclasses.replace(saved.train, steps="longest")
    with pytest.raises(ConfigError, match=r"different run \(steps: saved 'shortest', now 'longest'\)$"):
        saved.check_fits(RunState(seed=0, config="other", train=longest), "--resume", "state.json")
    with pytest.raises(ConfigError, match="number of batches: saved 2, now 1"):
        check_fits(saved.train.iterators["sup"], fake_iterator(batches=[["a"]]))
    check_fits(saved.train.iterators["sup"], fake_iterator())


def check_group(saved, steps=2, iterators=None):
    """A GroupState's checks against a one-iterator shortest group of ``steps`` steps per epoch."""
    saved.check_setup("shortest", iterators or {"sup": fake_iterator()}, "state")
    saved.check_positions({"sup": (saved.epoch, saved.step)}, steps, "state")


def test_group_state_refuses_iterator_positions_that_disagree_with_the_group():
    check_group(group_state())
    bad = dataclasses.replace(group_state(), iterators={"sup": fake_iterator().state_at(2, 0)})
    with pytest.raises(ConfigError, match=r"^state.iterators.sup: at epoch 2 step 0, but the group's epoch 2 "
                                          r"step 1 puts it at epoch 2 step 1$"):
        check_group(bad)
    with pytest.raises(ConfigError, match=r"^state.step: epoch 2 has 2 steps, got step 3$"):
        check_group(group_state(2, 3))
    with pytest.raises(ConfigError, match=r"^state.iterators: saved for iterators \['sup'\], this group has"):
        check_group(group_state(), iterators={"unsup": fake_iterator()})
    with pytest.raises(ConfigError, match=r"^state.steps: saved with steps: longest, this group has shortest$"):
        check_group(dataclasses.replace(group_state(), steps="longest"))
    with pytest.raises(ConfigError, match=r"^state.iterators.sup: the state was saved with a different setup"):
        check_group(group_state(), iterators={"sup": fake_iterator(seed=1)})


def test_version_2_group_states_hold_the_groups_position_in_every_iterator():
    old = group_state(scheme=LAYOUT, own_positions=False)
    old.check_setup("shortest", {"sup": fake_iterator()}, "state")
    old.check_positions({"sup": (9, 0)}, 2, "state")  # the current positions do not matter
    bad = dataclasses.replace(old, step=0)
    with pytest.raises(ConfigError, match=r"^state.iterators.sup: at epoch 2 step 1, but the group's epoch 2 "
                                          r"step 0 puts it at epoch 2 step 0$"):
        check_group(bad)


def test_run_state_from_a_list_is_a_config_error():
    with pytest.raises(ConfigError, match="^--resume: expected a state dict, got list$"):
        read_run_state([1, 2], "--resume")


def test_step_past_the_end_of_the_epoch_is_refused():
    state = fake_iterator().state_at(1, 3)  # the epoch has 2 batches
    with pytest.raises(ConfigError, match=r"^state.step: epoch 1 has 2 steps, got step 3"):
        check_fits(state, fake_iterator())
    check_fits(fake_iterator().state_at(1, 2), fake_iterator())  # 2: the epoch is done


@pytest.mark.parametrize("version", [1, 2])
def test_flat_run_states_of_versions_1_and_2_still_load(version):
    state = read_run_state(flat_run_state(version))
    assert state.scheme == LAYOUT and not state.train.own_positions and state.steps is None
    assert (state.epoch, state.step) == (2, 1) and state.mode == "train"
    assert (state.settings is None) and state.train.iterators["sup"].settings is None
    check_group(state.train)
    state.check_fits(RunState(seed=0, config="run", train=group_state()), "--resume", "s.json")  # steps: not saved
    check_fits(state.train.iterators["sup"], fake_iterator())
    with pytest.raises(ConfigError, match=r"configuration: saved 'cfg', now 'other'"):  # no summary: the hashes
        check_fits(state.train.iterators["sup"], fake_iterator(summary={"batch_len": 1}, config="other"))
    with pytest.raises(ConfigError, match=r"^--resume: unknown keys train; a run state has version, mode, epoch"):
        read_run_state(dict(flat_run_state(version), train={}), "--resume")


def test_settings_summary_is_flat_small_and_readable():
    summary = settings_summary({"type": "block.BlockIterator", "dataset_conf": {"main_data": {"feat": "a"}},
                                "iter_conf": {"batch_len": 480000}, "data_len": ["x" * 200], "group_info": None})
    assert summary == {"type": "block.BlockIterator", "dataset_conf.main_data.feat": "a", "batch_len": 480000,
                       "data_len": summary["data_len"], "group_info": None}
    assert summary["data_len"].startswith("digest ")
    many = settings_summary({"dataset_conf": {f"k{i}": i for i in range(100)}})
    assert list(many) == ["dataset_conf"] and many["dataset_conf"].startswith("digest ")
    assert summary_differences({"batch_len": 480000, "a": 1}, {"batch_len": 160000, "b": "x"}) == [
        "a: saved 1, now unset", "b: saved unset, now \"x\"", "batch_len: saved 480000, now 160000"]


def write_recipe(tmp_path, corpus, batch_len):
    return recipes.write_recipe(tmp_path / "recipe.yaml", corpus, batch_len=batch_len)


def train_iterator(tmp_path, corpus, batch_len):
    return build_iterators(load_config(write_recipe(tmp_path, corpus, batch_len)), num_workers=0,
                           groups=("train",))["train"]


def test_loader_state_says_which_setting_changed(tmp_path, corpus):
    saved = train_iterator(tmp_path, corpus, 48000).build_loader(1).state_dict()
    assert saved["settings"]["batch_len"] == 48000
    loader = train_iterator(tmp_path, corpus, 16000).build_loader(1)
    with pytest.raises(ConfigError) as error:
        loader.load_state_dict(json.loads(json.dumps(saved)))
    message = str(error.value)
    assert message.endswith("(configuration: batch_len: saved 48000, now 16000; number of batches: saved 6, now 14)")


def test_loader_state_with_a_step_past_the_epoch_is_refused(tmp_path, corpus):
    loader = train_iterator(tmp_path, corpus, 48000).build_loader(1)
    saved = dict(loader.state_dict(), step=len(loader) + 1)
    with pytest.raises(ConfigError, match=rf"^state.step: epoch 1 has {len(loader)} steps, got step {len(loader) + 1}"):
        loader.load_state_dict(saved)


def test_loader_is_stateful():
    assert issubclass(Loader, Stateful)


def test_iterator_label():
    assert iterator_label("train") == "train"
    assert iterator_label("train", None, "sup") == "train/sup"
    assert iterator_label("test", "clean", "asr") == "test/clean/asr"


def test_unknown_keys_are_named_on_one_line():
    saved = dict(run_state().to_dict(), **{"a\nb": 1})
    with pytest.raises(ConfigError, match=r"^state: unknown keys 'a\\nb'; a run state has"):
        read_run_state(saved)


def test_deeply_nested_state_file_is_a_config_error(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("[" * 100000)
    with pytest.raises(ConfigError, match=f"^--resume: cannot read state file {path}: nested too deeply$"):
        read_json(str(path), "--resume")
