"""Issue 13, item 4: each iterator's rates come from its own time; audio s/s with feat_conf; 'pad eff'."""
import json

import pytest

from tests.cli.test_run import run_cli


def report_of(tmp_path, *args):
    report = tmp_path / "report.json"
    result = run_cli(*args, "--num_workers", 0, "--report", report)
    assert result.returncode == 0, result.stderr
    return json.loads(report.read_text()), result.stdout


@pytest.mark.timeout(180)
def test_each_iterator_is_timed_on_its_own_epochs(tmp_path, demo_root):
    summary, table = report_of(tmp_path, "--data_cfg", "recipes/demo/asr.yaml", "--epochs", 2)
    train, valid = summary["iterators"]["train"], summary["iterators"]["valid"]
    for stats in (train, valid):
        assert 0 < stats["active_s"] < summary["wall_time_s"]
        assert stats["batches_per_s"] == pytest.approx(stats["steps"] / stats["active_s"])
        assert stats["audio_seconds_per_s"] == pytest.approx(stats["audio_seconds"] / stats["active_s"])
    # the two groups ran one after the other: their own times add up to at most the run's
    assert train["active_s"] + valid["active_s"] <= summary["wall_time_s"]
    header = table.splitlines()[0].split()
    assert "pad" in header and "eff" in header and "padding" not in header


@pytest.mark.timeout(180)
def test_audio_seconds_with_feat_conf_come_from_frames(tmp_path, demo_root):
    args = ("--data_cfg", "recipes/demo/asr.yaml", "--epochs", 1, "--set",
            "train.conf.dataset_conf.feat_conf=config/feat/log_mel/80bin_25ms_10ms.yaml")
    waves, _ = report_of(tmp_path, "--data_cfg", "recipes/demo/asr.yaml", "--epochs", 1)
    feats, table = report_of(tmp_path, *args)
    train = feats["iterators"]["train"]
    assert train["audio_seconds"] is not None and train["audio_seconds_per_s"] > 0
    # frames x 10 ms: within a frame length (25 ms) per utterance of the waveforms' own figure
    expected = waves["iterators"]["train"]["audio_seconds"]
    assert abs(train["audio_seconds"] - expected) <= 0.025 * train["utterances"]
    row = next(line for line in table.splitlines() if line.startswith("train "))
    assert row.split()[5] != "-"  # audio s/s
