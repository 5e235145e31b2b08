"""Issue 29, item 1: every worker runs its numeric libraries on ``worker_threads`` threads (1 by default),
also after a lazy torch import, and the main process's threads are left alone (NOTE [ One thread per
worker ] in speechiter/sequence/threads.py)."""
import importlib.machinery
import os
import sys
import threading
import types

import pytest
import torch

from speechiter.engine import EngineSettings
from speechiter.errors import ConfigError
from speechiter.sequence import MSequence, Task
from speechiter.sequence.threads import ThreadCap, thread_counts
from tests.sequence import indexers

TASKS = [Task(i, [i], i) for i in range(4)]
MAIN_THREADS = max(2, os.cpu_count() or 1)


@pytest.fixture(autouse=True)
def main_threads():
    """The main process runs several torch threads (as on a multi-core machine), and still does after."""
    before = torch.get_num_threads()
    torch.set_num_threads(MAIN_THREADS)
    yield
    assert torch.get_num_threads() == MAIN_THREADS
    torch.set_num_threads(before)


def counts_in_workers(thread_type, **options):
    with MSequence(indexers.ThreadCounts, num_workers=2, thread_type=thread_type, out_type="null", dset_size=0,
                   **options).start() as mng:
        return list(mng.iterate(TASKS))


def test_a_torch_still_being_imported_is_capped_once_its_import_ends(monkeypatch):
    """A thread worker may look while another thread is importing torch (CI saw ``partially initialized
    module 'torch' has no attribute 'get_num_threads'``): the cap waits for the import to finish."""
    calls = []
    half_imported = types.ModuleType("torch")
    half_imported.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    half_imported.__spec__._initializing = True  # what importlib sets while a module's code runs
    monkeypatch.setitem(sys.modules, "torch", half_imported)
    cap = ThreadCap(2, per_thread=True)
    cap.check()
    assert thread_counts().get("torch") is None and calls == []
    half_imported.__spec__._initializing = False
    half_imported.get_num_threads = lambda: calls.append("read") or 2
    cap.check()
    assert calls == ["read"]
    cap.check()  # capped once
    assert calls == ["read"]


def test_a_thread_cap_is_its_threads_own():
    seen = {}

    def capped():
        ThreadCap(3, per_thread=True)
        seen.update(thread_counts())

    thread = threading.Thread(target=capped)
    thread.start()
    thread.join()
    assert seen["torch"] == 3 and seen["openmp"] == 3
    assert thread_counts()["openmp"] == MAIN_THREADS  # this thread's are untouched


@pytest.mark.timeout(60)
@pytest.mark.parametrize("threads", [1, 3])
def test_thread_workers_run_worker_threads(threads):
    for counts in counts_in_workers("thread", worker_threads=threads):
        assert counts["torch"] == threads and counts["openmp"] == threads
        assert counts["omp_env"] == os.environ.get("OMP_NUM_THREADS")  # the process's environment, untouched


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("start_method,threads", [("spawn", 2), (None, 1)])
def test_process_workers_cap_a_lazily_imported_torch(start_method, threads):
    batches = counts_in_workers("proc", start_method=start_method, worker_threads=threads)
    if start_method == "spawn":  # a fresh interpreter: each worker's first batch imported torch
        assert not any(counts["had_torch"] for counts in batches)
    for counts in batches:
        assert counts["torch"] == threads and counts["openmp"] == threads and counts["omp_env"] == str(threads)
        assert counts.get("mkl", threads) == threads
        assert counts.get("openblas", threads) == threads
    assert os.environ.get("OMP_NUM_THREADS") != "2"  # the main process's environment is its own


@pytest.mark.parametrize("value", [0, -1, 1.5, "2"])
def test_worker_threads_must_be_a_positive_integer(value):
    with pytest.raises(ConfigError, match="worker_threads"):
        EngineSettings(worker_threads=value)
    with pytest.raises(ValueError, match="worker_threads should be a positive integer"):
        MSequence(indexers.Echo, dset_size=4, worker_threads=value)


def test_worker_threads_from_a_recipe_and_from_build_iterators(corpus, make_recipe):
    import speechiter
    data_cfg = speechiter.load_config(make_recipe(corpus, batch_len=16000, worker_threads=3))
    assert speechiter.build_iterators(data_cfg)["train"].engine_settings.worker_threads == 3
    valid = speechiter.build_iterators(data_cfg, worker_threads=2)["valid"]
    assert valid.engine_settings.worker_threads == 2
    with pytest.raises(ConfigError, match="data_cfg.train.conf.worker_threads: expected a positive integer, got 0"):
        speechiter.build_iterators(speechiter.load_config(make_recipe(corpus, name="bad.yaml", worker_threads=0)))
