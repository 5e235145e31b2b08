"""How worker processes start (NOTE [ Start method ] in speechiter/sequence/start.py): from a fork
server by default, so a lock another thread holds at that moment cannot deadlock a worker."""
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from speechiter.sequence import MSequence
from speechiter.sequence import Task
from speechiter.sequence.start import start_method_default
from tests.processes import FORKS_ON_PURPOSE, own_stderr
from tests.sequence import indexers

TASKS = [Task(i, [i, i + 1], None) for i in range(6)]
REPO = Path(__file__).resolve().parents[2]


class _Holder:
    """A thread that holds ``indexers.HELD`` until told to let go."""

    def __enter__(self):
        self.taken, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()
        assert self.taken.wait(10)
        return self

    def _hold(self):
        with indexers.HELD:
            self.taken.set()
            self.release.wait(60)

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join(10)


def test_the_default_never_forks_this_process():
    assert start_method_default(indexers.Echo()) == (
        "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")


@pytest.mark.slow  # process workers
@pytest.mark.timeout(120)
def test_a_lock_held_by_another_thread_does_not_reach_the_workers():
    with _Holder():
        manager = MSequence(indexers.Locked, num_workers=2, thread_type="proc", out_type="null", dset_size=0,
                            timeout=30)
        with manager.start() as mng:
            got = [batch.tolist() for batch in mng.iterate(TASKS)]
    assert got == [task.ids for task in TASKS]


@pytest.mark.slow
@FORKS_ON_PURPOSE
@pytest.mark.timeout(60)
def test_with_fork_the_same_lock_deadlocks_the_workers():
    """What the default avoids: the forked worker's copy of the lock is held forever."""
    with _Holder():
        manager = MSequence(indexers.Locked, num_workers=1, thread_type="proc", out_type="null", dset_size=0,
                            timeout=2, start_method="fork")
        with pytest.raises(TimeoutError, match="no batch after waiting 2 s"):
            with manager.start() as mng:
                list(mng.iterate(TASKS))


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_workers_see_the_environment_of_the_moment_they_start(monkeypatch):
    manager = MSequence(indexers.Environ, num_workers=1, thread_type="proc", out_type="null", dset_size=0)
    with manager.start() as mng:  # the fork server runs from here on
        assert list(mng.iterate(TASKS[:1])) == [""]
    monkeypatch.setenv("SPEECHITER_TEST_VALUE", "set later")
    with manager.start() as mng:
        assert list(mng.iterate(TASKS[:1])) == ["set later"]


SCRIPT = """\
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.block import BlockIterator
{dataset}
{guard}
root = {root!r}
iterator = BlockIterator(dataset_type={dataset_type},
                         dataset_conf={{"main_data": {{"feat": root + "/idx2wav"}}}},
                         data_len=root + "/idx2wav_len", batch_len=32000, num_workers=2)
print(sum(1 for _ in iterator.build_loader(1)))
"""
OWN_DATASET = """
class OwnDataset(SpeechTextDataset):
    pass
"""


def run_script(tmp_path, demo_root, *, own_dataset: bool, guarded: bool):
    code = SCRIPT.format(dataset=OWN_DATASET if own_dataset else "", root=str(demo_root / "train"),
                         dataset_type="OwnDataset" if own_dataset else "SpeechTextDataset",
                         guard='if __name__ == "__main__":' if guarded else "")
    if guarded:  # indent what follows the guard
        head, tail = code.split('if __name__ == "__main__":\n')
        code = head + 'if __name__ == "__main__":\n' + textwrap.indent(tail, "    ")
    script = tmp_path / "script.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, env=env)


@pytest.mark.slow  # a script run as a process: its unguarded __main__ is the point
@pytest.mark.timeout(120)
def test_an_unguarded_script_with_the_package_datasets_runs(tmp_path, demo_root):
    """Workers do not re-run the main script when the dataset does not need it."""
    done = run_script(tmp_path, demo_root, own_dataset=False, guarded=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0 and own_stderr(done.stderr) == ""


@pytest.mark.slow  # a script run as a process: its unguarded __main__ is the point
@pytest.mark.timeout(120)
def test_an_unguarded_script_that_defines_its_dataset_gets_one_clear_error(tmp_path, demo_root):
    done = run_script(tmp_path, demo_root, own_dataset=True, guarded=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: a worker process re-imports the main script (as it does when the dataset")
    assert 'if __name__ == "__main__":' in last
    assert done.stderr.count("Traceback") == 1  # the workers print nothing


@pytest.mark.slow  # a script run as a process: its guarded __main__ is the point
@pytest.mark.timeout(120)
def test_the_same_script_guarded_runs(tmp_path, demo_root):
    done = run_script(tmp_path, demo_root, own_dataset=True, guarded=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0 and own_stderr(done.stderr) == ""


@pytest.mark.slow  # a python -c process of its own
@pytest.mark.timeout(120)
def test_a_reader_defined_in_an_interactive_session_uses_fork():
    """`python -c` (or a notebook): workers could not import its classes, so fork it is."""
    code = textwrap.dedent("""\
        from speechiter.sequence import MSequence, Task
        from speechiter.sequence.start import start_method_default

        class Here:
            def __getitem__(self, ids):
                return [i * 2 for i in ids]

        print(start_method_default(Here()), start_method_default(lambda: 0))
        with MSequence(Here, num_workers=2, out_type="null", dset_size=0).start() as mng:
            print(list(mng.iterate([Task(0, [1, 2], None), Task(1, [3], None)])))
        """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["fork fork", "[[2, 4], [6]]"]


LAZY_TORCH = """\
import sys
from speechiter.sequence import MSequence, Task
from tests.processes import FORKS_ON_PURPOSE, own_stderr
from tests.sequence import indexers

if __name__ == "__main__":
    tasks = [Task(i, [i, i + 1], 1000 + i) for i in range(4)]
    rows = []
    for workers in (2, 0):  # workers first: the fork server must not have torch
        with MSequence(indexers.LazyTorch, num_workers=workers, out_type="null", dset_size=0).start() as mng:
            rows.append([batch.tolist() for batch in mng.iterate(tasks)])
        print("torch" in sys.modules)
    print(rows[0] == rows[1], len(set(map(tuple, rows[0]))))
"""


@pytest.mark.slow  # a script run as a process: torch imported only later, in the workers
@pytest.mark.timeout(120)
def test_a_dataset_that_imports_torch_lazily_is_seeded_in_workers(tmp_path):
    """NOTE [ A batch that imports torch ] in speechiter/sequence/fetch.py."""
    script = tmp_path / "lazy_torch.py"
    script.write_text(LAZY_TORCH)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "4"]
