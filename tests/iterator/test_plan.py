"""speechiter.plan.BatchPlan: the plan options as one value; its fingerprint comes from its declared fields."""
import dataclasses

import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError
from speechiter.iterator.block import BlockIterator
from speechiter.plan.options import MAX_SEED, BatchPlan
from speechiter.fingerprints import fingerprint, settings_summary

OPTIONS = dict(type="speechiter.iterator.block.BlockIterator", dataset="speechiter.dataset.speech_text.SpeechTextDataset",
               dataset_conf={"main_data": {"feat": "/d/idx2wav"}, "seed": 0}, batches_per_epoch=None,
               data_len="/d/idx2wav_len", group_info=None, is_descending=True, shuffle=True, ngpu=1, rank=0,
               world_size=1, iter_conf={"batch_len": 480000})


LAYOUT = ("ngpu", "rank", "world_size")
WITHOUT_LAYOUT = {key: value for key, value in OPTIONS.items() if key not in LAYOUT}


def test_the_legacy_fingerprint_is_the_one_version_1_to_3_states_hold():
    """The settings dict the Iterator wrote by hand before the plan existed: same fingerprint, same summary."""
    plan = BatchPlan(**OPTIONS, seed=3, name="train")
    assert plan.fingerprint(legacy=True) == fingerprint(OPTIONS) == "a32b5895f8e4973a"
    assert plan.summary(legacy=True) == settings_summary(OPTIONS)
    assert list(plan.summary(legacy=True))[:3] == ["type", "dataset", "dataset_conf.main_data.feat"]


def test_the_fingerprint_leaves_the_layout_out():
    """Version 4 states: ngpu, rank and world_size are the layout, saved apart (it may change on resume)."""
    plan = BatchPlan(**OPTIONS, seed=3, name="train")
    assert plan.fingerprint() == fingerprint(WITHOUT_LAYOUT) == "d4703ed6423febd6"
    assert plan.summary() == settings_summary(WITHOUT_LAYOUT)
    moved = dataclasses.replace(plan, ngpu=4, rank=2, world_size=3)
    assert moved.fingerprint() == plan.fingerprint() and moved.fingerprint(legacy=True) != plan.fingerprint(True)


def test_seed_and_name_have_keys_of_their_own_and_evaluation_counts_when_true():
    plan = BatchPlan(**OPTIONS)
    assert "seed" not in plan.settings() and "name" not in plan.settings()
    assert BatchPlan(**OPTIONS, seed=5, name="x").fingerprint() == plan.fingerprint()
    evaluated = dataclasses.replace(plan, evaluation=True)
    assert evaluated.settings()["evaluation"] is True
    assert evaluated.fingerprint() == fingerprint({**WITHOUT_LAYOUT, "evaluation": True}) == "b05ef9fec949a5b8"
    # the legacy fingerprint counted evaluation only among several ranks
    assert evaluated.fingerprint(legacy=True) == plan.fingerprint(legacy=True)  # one rank: no share
    ranked = dataclasses.replace(plan, world_size=2)
    ranked_evaluated = dataclasses.replace(ranked, evaluation=True)
    assert "evaluation" not in ranked.settings(legacy=True)
    assert ranked_evaluated.settings(legacy=True)["evaluation"] is True
    assert ranked_evaluated.fingerprint(legacy=True) == fingerprint({**OPTIONS, "world_size": 2, "evaluation": True})


def test_a_new_plan_option_is_fingerprinted_without_more_code():
    @dataclasses.dataclass(frozen=True)
    class WithSpeed(BatchPlan):
        speed: float = 1.0

    plan = WithSpeed(**OPTIONS)
    assert plan.settings()["speed"] == 1.0
    assert plan.fingerprint() != dataclasses.replace(plan, speed=0.9).fingerprint()
    assert plan.summary()["speed"] == 1.0


@pytest.mark.parametrize("option, value, message", [
    ("batches_per_epoch", 0, "batches_per_epoch: expected a positive integer, got 0"),
    ("ngpu", 1.5, "ngpu: expected a positive integer, got 1.5"),
    ("seed", -1, "seed: expected a non-negative integer, got -1"),
    ("seed", MAX_SEED + 1, f"seed: expected at most {MAX_SEED}, got {MAX_SEED + 1}"),
    ("is_descending", "yes", "is_descending: expected true, false or null, got 'yes'"),
    ("shuffle", "no", "shuffle: expected true or false, got 'no'"),
    ("evaluation", 1, "evaluation: expected true or false, got 1"),
])
def test_option_errors_name_the_option(option, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        BatchPlan(**{**OPTIONS, option: value})


def test_the_plan_is_frozen_and_checked_values_replace_given_ones():
    plan = BatchPlan(**{**OPTIONS, "ngpu": 2.0, "batches_per_epoch": 7.0})
    assert plan.ngpu == 2 and isinstance(plan.ngpu, int) and plan.batches_per_epoch == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.shuffle = False


def test_the_iterator_holds_a_plan_and_reads_its_options(tmp_path):
    (tmp_path / "idx2text").write_text("a one\nb two two\nc three three three\n")
    (tmp_path / "idx2len").write_text("a 3\nb 7\nc 17\n")
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(tmp_path / "idx2text")}},
                             data_len=str(tmp_path / "idx2len"), batch_len=10, shuffle=False, seed=4, engine="inline",
                             num_workers=0, name="train")
    plan = iterator.plan
    assert (plan.type, plan.dataset) == ("speechiter.iterator.block.BlockIterator",
                                         "speechiter.dataset.speech_text.SpeechTextDataset")
    assert iterator.shuffle is plan.shuffle is False and iterator.seed == 4 and iterator.name == "train"
    assert iterator.iter_conf == {"batch_len": 10} and iterator.data_len_files == str(tmp_path / "idx2len")
    assert iterator.config_fingerprint == plan.fingerprint() and iterator.config_summary["batch_len"] == 10
    assert iterator.engine_settings.kind == "inline"
    with pytest.raises(AttributeError):
        iterator.shuffle = True  # the plan is one value: pass the option to the constructor
