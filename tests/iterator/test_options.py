"""speechiter.plan.options.BatchOptions: the batching options as one value; its fingerprint comes from its declared
fields (the fingerprints of older states from speechiter/state_versions.py's fixed list)."""
import dataclasses

import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError
from speechiter.iterator.block import BlockIterator
from speechiter.fingerprints import fingerprint, settings_summary
from speechiter.plan.options import MAX_SEED, BatchOptions
from speechiter.state_keys import CURRENT
from speechiter.state_versions import LAYOUT, LAYOUT_FREE_3, configuration

OPTIONS = dict(type="speechiter.iterator.block.BlockIterator", dataset="speechiter.dataset.speech_text.SpeechTextDataset",
               dataset_conf={"main_data": {"feat": "/d/idx2wav"}, "seed": 0}, batches_per_epoch=None,
               data_len="/d/idx2wav_len", group_info=None, is_descending=True, shuffle=True, ngpu=1, rank=0,
               world_size=1, iter_conf={"batch_len": 480000})


LAYOUT_KEYS = ("ngpu", "rank", "world_size")
WITHOUT_LAYOUT = {key: value for key, value in OPTIONS.items() if key not in LAYOUT_KEYS}


def test_the_layout_fingerprint_is_the_one_version_1_to_3_states_hold():
    """The settings dict the Iterator wrote by hand before the options were one value: same fingerprint, same
    summary; version 3 of 9a54832 held today's."""
    options = BatchOptions(**OPTIONS, seed=3, name="train")
    assert configuration(options, LAYOUT) == (fingerprint(OPTIONS), settings_summary(OPTIONS))
    assert fingerprint(OPTIONS) == "a32b5895f8e4973a"
    assert list(configuration(options, LAYOUT)[1])[:3] == ["type", "dataset", "dataset_conf.main_data.feat"]
    assert configuration(options, LAYOUT_FREE_3) == configuration(options, CURRENT) == (options.fingerprint(),
                                                                                        options.summary())


def test_the_fingerprint_leaves_the_layout_out():
    """Version 4 states: ngpu, rank and world_size are the layout, saved apart (it may change on resume)."""
    plan = BatchOptions(**OPTIONS, seed=3, name="train")
    assert plan.fingerprint() == fingerprint(WITHOUT_LAYOUT) == "d4703ed6423febd6"
    assert plan.summary() == settings_summary(WITHOUT_LAYOUT)
    moved = dataclasses.replace(plan, ngpu=4, rank=2, world_size=3)
    assert moved.fingerprint() == plan.fingerprint() and configuration(moved, LAYOUT) != configuration(plan, LAYOUT)


def test_seed_and_name_have_keys_of_their_own_and_evaluation_counts_when_true():
    plan = BatchOptions(**OPTIONS)
    assert "seed" not in plan.settings() and "name" not in plan.settings()
    assert BatchOptions(**OPTIONS, seed=5, name="x").fingerprint() == plan.fingerprint()
    evaluated = dataclasses.replace(plan, evaluation=True)
    assert evaluated.settings()["evaluation"] is True
    assert evaluated.fingerprint() == fingerprint({**WITHOUT_LAYOUT, "evaluation": True}) == "b05ef9fec949a5b8"
    # versions 1 to 3 counted evaluation only among several ranks
    assert configuration(evaluated, LAYOUT) == configuration(plan, LAYOUT)  # one rank: no share
    ranked = dataclasses.replace(plan, world_size=2)
    ranked_evaluated = dataclasses.replace(ranked, evaluation=True)
    assert "evaluation" not in configuration(ranked, LAYOUT)[1]
    assert configuration(ranked_evaluated, LAYOUT)[1]["evaluation"] is True
    assert configuration(ranked_evaluated, LAYOUT)[0] == fingerprint({**OPTIONS, "world_size": 2, "evaluation": True})


def test_a_new_option_is_fingerprinted_without_more_code_and_leaves_older_states_alone():
    @dataclasses.dataclass(frozen=True)
    class WithSpeed(BatchOptions):
        speed: float = 1.0

    plan = WithSpeed(**OPTIONS)
    assert plan.settings()["speed"] == 1.0
    assert plan.fingerprint() != dataclasses.replace(plan, speed=0.9).fingerprint()
    assert plan.summary()["speed"] == 1.0
    assert configuration(plan, LAYOUT) == configuration(BatchOptions(**OPTIONS), LAYOUT)


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
        BatchOptions(**{**OPTIONS, option: value})


def test_the_options_are_frozen_and_checked_values_replace_given_ones():
    plan = BatchOptions(**{**OPTIONS, "ngpu": 2.0, "batches_per_epoch": 7.0})
    assert plan.ngpu == 2 and isinstance(plan.ngpu, int) and plan.batches_per_epoch == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.shuffle = False


def test_the_iterator_holds_its_options_and_reads_them(tmp_path):
    (tmp_path / "idx2text").write_text("a one\nb two two\nc three three three\n")
    (tmp_path / "idx2len").write_text("a 3\nb 7\nc 17\n")
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(tmp_path / "idx2text")}},
                             data_len=str(tmp_path / "idx2len"), batch_len=10, shuffle=False, seed=4, engine="inline",
                             num_workers=0, name="train")
    plan = iterator.batch_options
    assert (plan.type, plan.dataset) == ("speechiter.iterator.block.BlockIterator",
                                         "speechiter.dataset.speech_text.SpeechTextDataset")
    assert iterator.shuffle is plan.shuffle is False and iterator.seed == 4 and iterator.name == "train"
    assert iterator.iter_conf == {"batch_len": 10} and iterator.data_len_files == str(tmp_path / "idx2len")
    assert iterator.config_fingerprint == plan.fingerprint() and iterator.config_summary["batch_len"] == 10
    assert iterator.engine_settings.kind == "inline"
    with pytest.raises(AttributeError):
        iterator.shuffle = True  # the options are one value: pass the option to the constructor
