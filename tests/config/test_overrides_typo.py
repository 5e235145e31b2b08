"""Issue 13, item 7: a typo of a top-level variable in --set is an error with a did-you-mean, like a nested one."""
from pathlib import Path

import pytest

from speechiter.config import load_config
from speechiter.errors import ConfigError
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
ASR = REPO / "recipes" / "demo" / "asr.yaml"


def test_a_top_level_typo_is_refused_with_a_suggestion(demo_root):
    with pytest.raises(ConfigError, match=r"^batch_lenn: no such top-level key, and a new one would change nothing "
                                          r"\(override 'batch_lenn=3'\); did you mean 'batch_len'\?$"):
        load_config(ASR, ["batch_lenn=3"])


def test_existing_variables_and_groups_can_be_set(demo_root):
    cfg = load_config(ASR, ["batch_len=3e5", "train.conf.shuffle=false"])
    assert cfg["train"]["conf"]["batch_len"] == 3e5 and cfg["train"]["conf"]["shuffle"] is False


def test_an_exp_cfg_may_set_a_run_setting_it_does_not_have(tmp_path, demo_root):
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"data_cfg: {ASR}\n")
    assert load_config(exp, ["ngpu=2"]).settings["ngpu"] == 2
    with pytest.raises(ConfigError, match=r"did you mean 'ngpu'\?"):
        load_config(exp, ["ngpus=2"])


@pytest.mark.timeout(120)
def test_the_cli_exits_2_with_one_line(demo_root):
    done = run_cli("--data_cfg", ASR, "--set", "batch_lenn=3")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "speechiter: error: batch_lenn: no such top-level key, and a new one would change nothing "
        "(override 'batch_lenn=3'); did you mean 'batch_len'?"]


def test_an_exp_cfg_sends_the_variables_it_lacks_to_its_data_cfg_file(tmp_path, demo_root):
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"seed: 3\ndata_cfg: {ASR}\n")
    cfg = load_config(exp, ["batch_len=3e5"])  # a variable of asr.yaml, not of the exp_cfg
    assert cfg["train"]["conf"]["batch_len"] == 3e5 and cfg.settings["seed"] == 3
    with pytest.raises(ConfigError, match=r"^batch_lenn: no such top-level key.*did you mean 'batch_len'\?$"):
        load_config(exp, ["batch_lenn=3"])
