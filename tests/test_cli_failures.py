"""The CLI under failure: a raising dataset, a killed worker, Ctrl-C. Nothing hangs or leaks."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

FAULTY_MODULE = '''
import multiprocessing
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
