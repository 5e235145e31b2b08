"""Keys of a data_cfg that SpeeChain's runner ignores (NOTE [ Stray keys ] in speechiter/config/groups.py): a
test set beside the groups under an empty ``test:``, as a recipe of SpeeChain's maintained continuation has."""
import textwrap

import pytest

from speechiter.config import load_config
from speechiter.errors import ConfigError
from speechiter.run import main

GROUPS = """\
  train:
    type: abs.Iterator
    conf:
      dataset_type: speech_text.SpeechTextDataset
      dataset_conf: {{main_data: {{feat: {corpus}/idx2wav}}}}
  valid:
    type: abs.Iterator
    conf:
      dataset_type: speech_text.SpeechTextDataset
      dataset_conf: {{main_data: {{feat: {corpus}/idx2wav}}}}
"""
STRAY_TEST_SET = """\
  # test:
  test:
  test-clean:
    type: abs.Iterator
    conf:
      dataset_type: speech_text.RandomSpkFeatDataset
      vocoder: hifigan
"""


def exp_cfg(tmp_path, corpus, extra=STRAY_TEST_SET, groups=GROUPS):
    path = tmp_path / "exp.yaml"
    path.write_text("seed: 0\ndata_cfg:\n" + groups.format(corpus=corpus) + extra + "train_cfg: {model: x}\n")
    return path


def test_a_test_set_beside_the_groups_is_ignored_with_one_warning_line(tmp_path, corpus, capsys):
    path = exp_cfg(tmp_path, corpus)
    with pytest.warns(UserWarning) as caught:
        data_cfg = load_config(path)
    assert list(data_cfg) == ["train", "valid"] and len(caught) == 1
    assert str(caught[0].message) == ("data_cfg: ignoring test (empty) and test-clean: SpeeChain's runner reads only "
                                      "the groups train, valid and test")
    capsys.readouterr()
    assert main(["--data_cfg", str(path), "--quiet", "--num_workers", "0"]) == 0
    assert capsys.readouterr().err == f"speechiter: warning: {caught[0].message}\n"
    assert main(["--data_cfg", str(path), "--quiet", "--mode", "test"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("speechiter: error: data_cfg: --mode test needs a test group; "
                                                       "the file has train, valid")


def test_an_empty_group_of_a_bare_data_cfg_and_a_near_typo_are_named(tmp_path, corpus):
    path = tmp_path / "bare.yaml"
    path.write_text(textwrap.dedent(GROUPS.format(corpus=corpus)) + "test:\n")
    with pytest.warns(UserWarning, match=r"^data_cfg: ignoring test \(empty\): "):
        assert list(load_config(path)) == ["train", "valid"]
    with pytest.warns(UserWarning, match=r"^data_cfg: ignoring tset \(did you mean test\?\): "):
        load_config(exp_cfg(tmp_path, corpus, extra="  tset: {type: abs.Iterator}\n"))


def test_groups_that_do_not_make_a_combination_are_still_an_error(tmp_path, corpus):
    with pytest.raises(ConfigError, match=r"found trian\+valid; 'trian' is not a group, did you mean 'train'\?"):
        load_config(exp_cfg(tmp_path, corpus, extra="", groups=GROUPS.replace("  train:", "  trian:")))
