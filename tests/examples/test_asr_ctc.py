"""examples/asr_ctc: a CTC model trained on the demo corpus through speechiter, in a shortened form; a run
stopped or SIGKILLed and resumed writes the loss curve of a run never interrupted, byte for byte."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "asr_ctc"


def load_train():
    spec = importlib.util.spec_from_file_location("asr_ctc_train", EXAMPLE / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = load_train()


def curves(out: Path):
    return (out / "loss.csv").read_text(), (out / "valid.csv").read_text()


def run(out: Path, *args, batch_len="250") -> int:
    """train.py in this process; batches of about one utterance (250 frames, 2.5 s) unless ``batch_len``
    says otherwise (frames: the recipe has feat_conf)."""
    return train.main(["--out", str(out), "--quiet", "--set", f"batch_len={batch_len}", *map(str, args)])


def test_a_short_run_learns_and_a_stopped_run_resumes_to_the_same_curve(tmp_path, demo_root):
    settings = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    assert run(tmp_path / "whole", "--max_steps", 2, "--num_workers", 0) == 0
    assert (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()) == settings
    loss, _ = curves(tmp_path / "whole")
    rows = [line.split(",") for line in loss.splitlines()]
    assert rows[0] == ["epoch", "step", "global_step", "source", "loss"]
    assert [row[:3] for row in rows[1:]] == [["1", str(s), str(s)] for s in (1, 2)]
    assert {row[3] for row in rows[1:]} <= {"main", "extra"} and all(float(row[4]) > 0 for row in rows[1:])

    assert run(tmp_path / "parts", "--max_steps", 1, "--save_every", 1, "--num_workers", 0) == 0
    assert run(tmp_path / "parts", "--max_steps", 2, "--num_workers", 0, "--resume") == 0
    assert curves(tmp_path / "parts") == curves(tmp_path / "whole")


def test_a_bad_recipe_is_one_line(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((EXAMPLE / "recipe.yaml").read_text().replace("../../demo/data", str(tmp_path)))
    assert run(tmp_path / "out", "--recipe", recipe, "--num_workers", 0) == 2
    error = capsys.readouterr().err
    assert error.startswith("train.py: error: data_cfg.train.conf.iterators.main.conf.dataset_conf.main_data.feat: "
                            "file not found") and error.count("\n") == 1


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_curve(tmp_path, demo_root):
    """Epochs of 10 steps, 12 steps in all, with two loading processes; SIGKILL after step 8, resumed from step
    6 through the end of the epoch and into the next."""
    options = ["--epochs", 2, "--max_steps", 12, "--save_every", 3, "--num_workers", 2]
    assert run(tmp_path / "whole", *options, batch_len="1000") == 0
    env = dict(os.environ, PYTHONPATH=str(EXAMPLE.parents[1]))
    killed = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--out", str(tmp_path / "killed"),
                             "--quiet", "--kill_at", "8", *map(str, options)], env=env, capture_output=True,
                            text=True, timeout=400)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert len((tmp_path / "killed" / "loss.csv").read_text().splitlines()) == 1 + 6  # as saved at step 6
    assert run(tmp_path / "killed", *options, "--resume", batch_len="1000") == 0
    assert curves(tmp_path / "killed") == curves(tmp_path / "whole")
