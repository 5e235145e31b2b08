"""The CLI under failure: a raising dataset, a killed worker, Ctrl-C. Nothing hangs or leaks."""
import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from speechiter.run import main
from tests.conftest import _make_corpus

REPO = Path(__file__).resolve().parents[1]

FAULTY_MODULE = '''
import multiprocessing
import copy
import json
import os
import signal
import time

from speechiter.dataset.speech_text import SpeechTextDataset


class Faulty(SpeechTextDataset):
    """Fails on the utterance named by `bad` the way `how` says."""

    def dataset_init_fn(self, bad: str = "", how: str = "raise", delay: float = 0.0, **conf):
        super().dataset_init_fn(**conf)
        self.bad, self.how, self.delay = bad, how, delay

    def extract_main_data_fn(self, main_data):
        time.sleep(self.delay)  # the workload of a slow dataset
        if main_data["id"] == self.bad:
            if self.how == "raise":
                raise RuntimeError(f"decoder exploded on {self.bad}")
            if self.how == "kill" and multiprocessing.parent_process() is not None:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().extract_main_data_fn(main_data)
'''


def write_recipe(tmp_path, corpus, bad="", how="raise", delay=0.0):
    (tmp_path / "faulty.py").write_text(FAULTY_MODULE)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent(f"""\
        train:
          type: piece.PieceIterator
          conf:
            dataset_type: faulty.Faulty
            dataset_conf:
              main_data:
                feat: {corpus}/idx2wav
              bad: "{bad}"
              how: {how}
              delay: {delay}
            data_len: {corpus}/idx2wav_len
            batch_size: 2
            shuffle: false
        valid:
          type: abs.Iterator
          conf:
            dataset_type: speech_text.SpeechTextDataset
            dataset_conf:
              main_data:
                feat: {corpus}/idx2wav
        """))
    return recipe


def start_cli(recipe, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "speechiter.run", "--data_cfg", str(recipe), "--quiet",
                             *map(str, args)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def assert_nothing_left(pid: int, recipe: Path):
    leftovers = [name for name in os.listdir("/dev/shm") if name.startswith(f"speechiter_{pid}_")]
    assert leftovers == []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        assert str(recipe) not in cmdline, f"process {proc.pid} outlived the run: {cmdline}"


def last_id(corpus):
    return sorted(line.split()[0] for line in (corpus / "idx2wav").read_text().splitlines())[10]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_dataset_that_raises_ends_the_run_with_exit_1(tmp_path, corpus, thread_type):
    bad = last_id(corpus)
    recipe = write_recipe(tmp_path, corpus, bad=bad)
    proc = start_cli(recipe, "--num_workers", 2, "--thread_type", thread_type)
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == 1, stderr
    assert "RuntimeError: decoder exploded on " + bad in stderr and "batch" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert_nothing_left(proc.pid, recipe)


@pytest.mark.timeout(60)
def test_killed_worker_is_reported_with_pid_and_signal(tmp_path, corpus):
    recipe = write_recipe(tmp_path, corpus, bad=last_id(corpus), how="kill")
    proc = start_cli(recipe, "--num_workers", 2)
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == 1, stderr
    assert "exited unexpectedly" in stderr and "SIGKILL" in stderr and "pid" in stderr
    assert_nothing_left(proc.pid, recipe)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_ctrl_c_ends_every_worker(tmp_path, corpus, thread_type):
    recipe = write_recipe(tmp_path, corpus, delay=0.05)
    dump = tmp_path / "dump.jsonl"
    proc = start_cli(recipe, "--num_workers", 2, "--thread_type", thread_type, "--epochs", 50,
                     "--dump_batches", dump)
    deadline = time.monotonic() + 30
    while not (dump.exists() and dump.stat().st_size > 0):  # wait until batches flow
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert_nothing_left(proc.pid, recipe)


def run_cli(recipe, *args):
    proc = start_cli(recipe, "--num_workers", 0, *args)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("code", ["3", "0", "'bye'"])
def test_user_module_that_exits_while_imported_is_a_config_error(tmp_path, corpus, code):
    recipe = write_recipe(tmp_path, corpus)
    (tmp_path / "faulty.py").write_text(f"import sys\n\nsys.exit({code})\n")
    returncode, stderr = run_cli(recipe)
    assert returncode == 2, stderr
    assert stderr.startswith("speechiter: error: data_cfg.train.conf.dataset_type: importing faulty "
                             f"({tmp_path / 'faulty.py'}) failed: the module called sys.exit({code}) while being "
                             f"imported (at {tmp_path / 'faulty.py'}:3)")
    assert len(stderr.strip().splitlines()) == 1


@pytest.mark.timeout(90)
def test_ctrl_c_while_a_user_module_is_imported_still_stops(tmp_path, corpus):
    recipe = write_recipe(tmp_path, corpus)
    (tmp_path / "faulty.py").write_text("raise KeyboardInterrupt\n")
    returncode, stderr = run_cli(recipe)
    assert returncode == 130 and "interrupted" in stderr


@pytest.mark.timeout(90)
def test_sys_exit_in_a_dataset_hook_is_reported_not_silent(tmp_path, corpus):
    recipe = write_recipe(tmp_path, corpus)
    (tmp_path / "faulty.py").write_text(FAULTY_MODULE.replace(
        "        self.bad, self.how, self.delay = bad, how, delay\n",
        "        self.bad, self.how, self.delay = bad, how, delay\n        import sys\n        sys.exit(0)\n"))
    returncode, stderr = run_cli(recipe)
    assert returncode == 1, stderr
    assert stderr.startswith(f"speechiter: error: sys.exit(0) was called at {tmp_path / 'faulty.py'}:")
    assert "before the run ended" in stderr and len(stderr.strip().splitlines()) == 1


def run_main(capsys, recipe, *args):
    """``python -m speechiter.run`` in this process (its main()): (exit code, stderr)."""
    capsys.readouterr()
    returncode = main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", *map(str, args)])
    return returncode, capsys.readouterr().err


@pytest.fixture(scope="module")
def saved_state(tmp_path_factory):
    """A recipe and the state its run saved after epoch 1 (``{"epoch": 2, "step": 0, ...}``)."""
    tmp_path = tmp_path_factory.mktemp("saved")
    recipe = write_recipe(tmp_path, _make_corpus(tmp_path / "corpus"))
    state = tmp_path / "state.json"
    assert main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", "--save_state", str(state)]) == 0
    return recipe, json.loads(state.read_text())


def edited(saved, **changes):
    state = copy.deepcopy(saved)
    for key, value in changes.items():
        state[key] = value
        if key in ("epoch", "step"):
            state["iterators"]["None"][key] = value
    return state


@pytest.mark.parametrize("state, message", [
    (lambda s: edited(s, epoch=0), "--resume.epoch: expected a positive integer, got 0"),
    (lambda s: edited(s, step=11), "iterator train.step: epoch 2 has 10 steps, got step 11"),
    (lambda s: edited(s, step="7"), "--resume.step: expected a non-negative integer, got '7'"),
    (lambda s: [s], "--resume: expected a state dict, got list"),
    (lambda s: dict(s, iterators={"None": dict(s["iterators"]["None"], step=4)}),
     "--resume.iterators.None.step: is 4 but the run's step is 0"),
    (lambda s: dict(s, iterators={}), "iterator train: missing from the state, which has none"),
    (lambda s: dict(s, settings={"train": 1}), "--resume.settings: expected a mapping of iterator settings"),
], ids=["epoch-0", "step-past-the-end", "step-string", "list", "iterator-step", "no-iterators", "settings"])
def test_malformed_or_impossible_state_is_exit_2_naming_the_field(tmp_path, capsys, saved_state, state, message):
    recipe, saved = saved_state
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state(saved)))
    returncode, stderr = run_main(capsys, recipe, "--resume", path, "--epochs", 2)
    assert returncode == 2, stderr
    assert message in stderr and len(stderr.strip().splitlines()) == 1


@pytest.mark.timeout(60)
def test_hand_edited_state_through_the_cli_is_one_line_exit_2(tmp_path, saved_state):
    recipe, saved = saved_state
    path = tmp_path / "state.json"
    path.write_text(json.dumps(edited(saved, step=11)))
    returncode, stderr = run_cli(recipe, "--resume", path, "--epochs", 2)
    assert returncode == 2, stderr
    assert stderr == f"speechiter: error: --resume {path}: iterator train.step: epoch 2 has 10 steps, got step 11\n"


def test_resume_says_which_settings_changed(tmp_path, capsys, saved_state):
    recipe, saved = saved_state
    path = tmp_path / "state.json"
    path.write_text(json.dumps(saved))
    returncode, stderr = run_main(capsys, recipe, "--resume", path, "--epochs", 2, "--set", "train.conf.batch_size=3",
                                  "--set", "valid.conf.shuffle=false")
    assert returncode == 2, stderr
    assert stderr.strip().endswith(f"{path} was saved by a different run (configuration of train: batch_size: "
                                   "saved 2, now 3; configuration of valid: shuffle: saved true, now false)")


def test_resume_of_a_version_1_state_still_works(tmp_path, capsys, saved_state):
    recipe, saved = saved_state
    saved = copy.deepcopy(saved)
    del saved["settings"], saved["iterators"]["None"]["settings"]
    saved["version"] = saved["iterators"]["None"]["version"] = 1
    path, dump = tmp_path / "state.json", tmp_path / "dump.jsonl"
    path.write_text(json.dumps(saved))
    returncode, stderr = run_main(capsys, recipe, "--resume", path, "--epochs", 2, "--dump_batches", dump)
    assert returncode == 0, stderr
    assert {json.loads(line)["epoch"] for line in dump.read_text().splitlines()} == {2}


def test_resume_of_a_finished_run_says_there_is_nothing_to_run(tmp_path, capsys, saved_state):
    recipe, saved = saved_state
    path = tmp_path / "state.json"
    path.write_text(json.dumps(saved))
    returncode, stderr = run_main(capsys, recipe, "--resume", path, "--epochs", 1)
    assert returncode == 0, stderr
    assert f"{path} is at epoch 2, past --epochs 1: nothing to run" in stderr


def test_start_step_past_the_end_of_the_epoch_is_refused(capsys, saved_state):
    recipe, _ = saved_state
    returncode, stderr = run_main(capsys, recipe, "--start_epoch", 2, "--epochs", 2, "--start_step", 11)
    assert returncode == 2, stderr
    assert stderr == "speechiter: error: --start_step: epoch 2 has 10 steps, got step 11\n"
