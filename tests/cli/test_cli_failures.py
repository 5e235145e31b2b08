"""The CLI under failure: a raising dataset, a killed worker, Ctrl-C. Nothing hangs or leaks."""
import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from speechiter.errors import ConfigError
from speechiter.run import main
from speechiter.user_files import read_json
from tests import inprocess, recipes
from tests.conftest import _make_corpus

REPO = Path(__file__).resolve().parents[2]

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
    return recipes.write_recipe(tmp_path / "recipe.yaml", corpus, "piece.PieceIterator", dataset_type="faulty.Faulty",
                                dataset_conf={"bad": str(bad), "how": how, "delay": delay}, batch_size=2,
                                shuffle=False)


def start_cli(recipe, *args):
    """A real process: these tests signal it, kill its workers, or look for what outlives it."""
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


@pytest.mark.slow  # process workers; nothing of the process outlives it
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


@pytest.mark.slow  # a worker process killed
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


@pytest.mark.slow  # Ctrl-C sent to a real process
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
    """The command line in this process, with no workers: (exit code, stderr)."""
    result = inprocess.run_cli("--data_cfg", recipe, "--quiet", "--num_workers", 0, *args)
    return result.code, result.err


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
    """A recipe and the state its run saved after epoch 1 (``{"train": {"epoch": 2, "step": 0, ...}, ...}``)."""
    tmp_path = tmp_path_factory.mktemp("saved")
    recipe = write_recipe(tmp_path, _make_corpus(tmp_path / "corpus"))
    state = tmp_path / "state.json"
    assert main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", "--save_state", str(state)]) == 0
    saved = json.loads(state.read_text())
    LEGACY[saved["config"]] = legacy_state(recipe, saved)
    return recipe, saved


LEGACY = {}  # a saved state's config -> the same state as version 3 wrote it (its fingerprints hold the layout)


def legacy_state(recipe, saved):
    """``saved`` as version 3 wrote it, made in this process from the same recipe."""
    from speechiter import build_iterators, load_config
    from tests.state.old_forms import run_state
    iterators = build_iterators(load_config(str(recipe)), num_workers=0, groups=("train", "valid"))
    try:
        return run_state(saved, iterators)
    finally:
        for iterator in (iterators["train"], iterators["valid"]):
            iterator.close()


def edited(saved, **changes):
    """The state with the train group's (and its iterator's) ``epoch`` / ``step`` or other keys changed."""
    state = copy.deepcopy(saved)
    for key, value in changes.items():
        state["train"][key] = value
        if key in ("epoch", "step"):
            state["train"]["iterators"]["None"][key] = value
    return state


def flat(saved, version=2):
    """The state in the layout versions 1 and 2 wrote: the train group's fields beside the run's."""
    state = copy.deepcopy(LEGACY[saved["config"]])
    group = state.pop("train")
    state.update(version=version, epoch=group["epoch"], step=group["step"], iterators=group["iterators"])
    for iterator in state["iterators"].values():
        iterator["version"] = version
        if version == 1:
            del iterator["settings"]
    if version == 1:
        del state["settings"]
    return state


@pytest.mark.parametrize("state, message", [
    (lambda s: edited(s, epoch=0), "--resume.train.epoch: expected a positive integer, got 0"),
    (lambda s: edited(s, step=11), ": train.step: epoch 2 has 10 steps, got step 11"),
    (lambda s: edited(s, step="7"), "--resume.train.step: expected a non-negative integer, got '7'"),
    (lambda s: [s], "--resume: expected a state dict, got list"),
    (lambda s: edited(s, iterators={"None": dict(s["train"]["iterators"]["None"], step=4)}),
     ": train.iterators.None: at epoch 2 step 4, but the group's epoch 2 step 0 puts it at epoch 2 step 0"),
    (lambda s: edited(s, iterators={}), ": train.iterators: saved for iterators [], this group has ['None']"),
    (lambda s: dict(s, settings={"train": 1}), "--resume.settings: expected a mapping of iterator settings"),
    (lambda s: dict(flat(s), iterators={"None": dict(flat(s)["iterators"]["None"], step=4)}),
     ": train.iterators.None: at epoch 2 step 4, but the group's epoch 2 step 0 puts it at epoch 2 step 0"),
    (lambda s: dict(s, version=2), "--resume: unknown keys train, world_size; a run state has version, mode, epoch"),
], ids=["epoch-0", "step-past-the-end", "step-string", "list", "iterator-step", "no-iterators", "settings",
        "version-2-iterator-step", "version-2-nested"])
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
    assert stderr == f"speechiter: error: --resume {path}: train.step: epoch 2 has 10 steps, got step 11\n"


def test_resume_says_which_settings_changed(tmp_path, capsys, saved_state):
    recipe, saved = saved_state
    path = tmp_path / "state.json"
    path.write_text(json.dumps(saved))
    returncode, stderr = run_main(capsys, recipe, "--resume", path, "--epochs", 2, "--set", "train.conf.batch_size=3",
                                  "--set", "valid.conf.shuffle=false")
    assert returncode == 2, stderr
    assert stderr.strip().endswith(f"{path} was saved by a different run (configuration of train: batch_size: "
                                   "saved 2, now 3; configuration of valid: shuffle: saved true, now false)")


@pytest.mark.parametrize("version", [1, 2])
def test_resume_of_a_version_1_or_2_state_still_works(tmp_path, capsys, saved_state, version):
    recipe, saved = saved_state
    path, dump = tmp_path / "state.json", tmp_path / "dump.jsonl"
    path.write_text(json.dumps(flat(saved, version)))
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


def run_bounded(recipe, *args):
    """The command line in this process, with no workers: (exit code, stderr); the tests that use it have a
    timeout, which a run that waits on a FIFO or a device would run into."""
    return run_cli(recipe, *args)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "missing", "not-utf8"])
def test_resume_path_that_is_not_a_state_file_is_one_line_exit_2(tmp_path, saved_state, kind):
    recipe, _ = saved_state
    path = {"fifo": tmp_path / "fifo", "dev-zero": Path("/dev/zero"), "folder": tmp_path,
            "missing": tmp_path / "none.json", "not-utf8": tmp_path / "state.json"}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # reading it would wait for a writer forever
    if kind == "not-utf8":
        path.write_bytes(b"\xff\xfe{}")
    returncode, stderr = run_bounded(recipe, "--resume", path, "--epochs", 2)
    expected = {"fifo": f"{path}: is a FIFO (named pipe), expected a state file",
                "dev-zero": f"{path}: is a character device, expected a state file",
                "folder": f"{path}: is a folder, expected a state file", "missing": f"no such state file: {path}",
                "not-utf8": f"cannot read state file {path}: 'utf-8' codec can't decode byte 0xff in position 0: "
                            "invalid start byte"}[kind]
    assert (returncode, stderr) == (2, f"speechiter: error: --resume: {expected}\n")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("option", ["--save_state", "--dump_batches", "--report"])
def test_output_into_a_missing_folder_or_onto_a_folder_is_one_line_exit_2(tmp_path, saved_state, option):
    recipe, _ = saved_state
    path = tmp_path / "missing" / "out.json"
    returncode, stderr = run_bounded(recipe, option, path)
    assert (returncode, stderr) == (2, f"speechiter: error: {option}: cannot write {path}: the folder "
                                       f"{path.parent} does not exist\n")
    returncode, stderr = run_bounded(recipe, option, tmp_path)
    assert (returncode, stderr) == (2, f"speechiter: error: {option}: cannot write {tmp_path}: it is a folder\n")


@pytest.mark.timeout(60)
def test_streams_as_outputs(tmp_path, saved_state):
    """--dump_batches and --report may be streams (a FIFO with no reader is refused, not waited on);
    a state file may not: it is replaced whole at every step."""
    recipe, _ = saved_state
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    returncode, stderr = run_bounded(recipe, "--dump_batches", fifo)
    assert (returncode, stderr) == (2, f"speechiter: error: --dump_batches: cannot write {fifo}: "
                                       f"a FIFO with no reader\n")
    returncode, stderr = run_bounded(recipe, "--save_state", "/dev/null")
    assert (returncode, stderr) == (2, "speechiter: error: --save_state: cannot write /dev/null: "
                                       "it is not a regular file\n")
    returncode, stderr = run_bounded(recipe, "--dump_batches", "/dev/null", "--report", "/dev/null")
    assert returncode == 0, stderr


def test_a_state_file_larger_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"pad": "x" * 100}))
    with pytest.raises(ConfigError, match=rf"^--resume: {path}: larger than 64 bytes, expected a state file$"):
        read_json(str(path), "--resume", limit=64)
    assert read_json(str(path), "--resume") == {"pad": "x" * 100}
