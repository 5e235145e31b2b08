"""What a run tells beside its batches: more process workers than CPUs (one line, naming the option that set
them), and the padding marker of --dump_batches records."""
import json

import numpy as np
import pytest

import speechiter
from speechiter import build
from speechiter.batch import Batch
from speechiter.build import available_cpus, build_iterators, close_all
from speechiter.dump import DumpWriter, checksum


@pytest.fixture
def exp_cfg(tmp_path, make_corpus, make_recipe):
    corpus = make_corpus(tmp_path / "corpus", num=4)
    return make_recipe(corpus, batch_len=32000, exp_cfg={"train_num_workers": 2, "num_workers": 0},
                       name="exp.yaml")


def warnings_in(stderr: str):
    return [line for line in stderr.splitlines() if "warning" in line]


def run_build(exp_cfg, **kwargs):
    iterators = build_iterators(speechiter.load_config(str(exp_cfg)), out_type="null", **kwargs)
    close_all(iterators)
    return iterators


@pytest.mark.timeout(60)
def test_more_process_workers_than_cpus_is_one_line_naming_the_option(exp_cfg, monkeypatch, capsys):
    monkeypatch.setattr(build, "available_cpus", lambda: 1)
    iterators = run_build(exp_cfg)
    assert iterators["train"].engine_settings.num_workers == 2  # the count stays
    assert warnings_in(capsys.readouterr().err) == [
        f"speechiter: warning: 2 loading workers (train_num_workers: 2 from exp_cfg {exp_cfg}) on 1 CPUs; "
        "--num_workers 1 or fewer may load as fast"]
    run_build(exp_cfg, num_workers=3, groups=("train",))
    assert warnings_in(capsys.readouterr().err) == [
        "speechiter: warning: 3 loading workers (num_workers=3) on 1 CPUs; --num_workers 1 or fewer may load as fast"]


@pytest.mark.timeout(60)
def test_workers_within_the_cpus_or_threads_say_nothing(exp_cfg, monkeypatch, capsys):
    monkeypatch.setattr(build, "available_cpus", lambda: 1)
    run_build(exp_cfg, thread_type="thread")  # threads wait on storage more than they compute
    run_build(exp_cfg, engine="inline")
    monkeypatch.setattr(build, "available_cpus", lambda: 2)
    run_build(exp_cfg)
    assert warnings_in(capsys.readouterr().err) == []
    assert available_cpus() >= 1


def test_exp_cfg_settings_name_their_file(tmp_path, exp_cfg):
    data = speechiter.load_config(str(exp_cfg))
    assert data.setting_files == {"train_num_workers": exp_cfg, "num_workers": exp_cfg}
    assert build.group_workers(data, "valid", None) == (0, f"num_workers: 0 from exp_cfg {exp_cfg}")
    assert build.group_workers({}, "valid", None) == (1, "num_workers=1")


def test_dump_records_mark_padding_rows_only_when_there_are_some(tmp_path):
    path = tmp_path / "dump.jsonl"
    writer = DumpWriter(str(path), rank=1, distributed=True)
    feat = {"feat": np.zeros((2, 3), np.float32)}
    writer.write("valid", None, None, 1, 1, ["a", "b"], Batch(feat, ["a", "b"], is_padding=[False, True]))
    writer.write("valid", None, None, 1, 2, ["c", "d"], Batch(feat, ["c", "d"], is_padding=[False, False]))
    writer.write("valid", None, None, 1, 3, ["e", "f"], Batch(feat, ["e", "f"]))
    writer.write("train", None, None, 1, 1, ["g"], feat)  # a collate's plain dict
    writer.close()
    records = [json.loads(line) for line in (tmp_path / "dump.rank1.jsonl").read_text().splitlines()]
    assert records[0] == {"group": "valid", "set": None, "iterator": None, "epoch": 1, "step": 1, "rank": 1,
                          "ids": ["a", "b"], "checksum": checksum(feat), "padding": [False, True]}
    assert [list(r) for r in records[1:]] == [list(records[0])[:-1]] * 3  # the format without the marker
