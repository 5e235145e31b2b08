"""speechiter.engine: settings, the factory, and the msequence engine's restarts."""
import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from speechiter.dataset.reader import DatasetReader
from speechiter.engine import EngineSettings, SequenceEngine, make_engine
from speechiter.errors import ConfigError
from speechiter.sequence import Task
from speechiter.torch_engine import TorchEngine


class Numbers:
    """A stand-in Dataset: the batch of ids is their array."""

    def get_batch(self, ids):
        return {"ids": np.asarray(ids, dtype=np.int64)}


def tasks(n, first=0):
    return [Task(i, [first + i], None) for i in range(n)]


@pytest.mark.parametrize("options, message", [
    (dict(kind="fast"), "engine: expected one of msequence, inline, torch, got 'fast'"),
    (dict(num_workers=-1), "num_workers: expected a non-negative integer, got -1"),
    (dict(thread_type="fiber"), "thread_type: expected one of proc, thread, got 'fiber'"),
    (dict(start_method="teleport"), "start_method: expected one of"),
    (dict(out_type="gpu"), "out_type: expected cpu, cuda, cuda:N or null, got 'gpu'"),
    (dict(buffer=0), "buffer: expected a positive integer, got 0"),
])
def test_settings_errors_name_the_option(options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        EngineSettings(**options)


def test_settings_are_frozen_and_lookahead_follows_the_buffer_rule():
    settings = EngineSettings(num_workers=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.num_workers = 1
    assert settings.lookahead == 6
    assert EngineSettings(num_workers=0).lookahead == 2
    assert EngineSettings(num_workers=3, buffer=5).lookahead == 5


@pytest.mark.timeout(60)
@pytest.mark.parametrize("settings", [EngineSettings(kind="inline", out_type="null"),
                                      EngineSettings(num_workers=0, out_type="null"),
                                      EngineSettings(num_workers=2, thread_type="thread", out_type="null"),
                                      pytest.param(EngineSettings(num_workers=2, out_type="null"),
                                                   marks=pytest.mark.slow)])  # process workers
def test_msequence_engine_restarts_after_an_abandoned_epoch(settings):
    engine = make_engine(settings, DatasetReader(Numbers()))
    assert isinstance(engine, SequenceEngine)
    try:
        for batch in engine.iterate(tasks(8)):
            break
        assert engine.scheduler.closed  # leaving early ended the workers
        got = [int(b["ids"][0]) for b in engine.iterate(tasks(6, first=10), lookahead=tasks(2, first=20))]
        assert got == list(range(10, 16))
        assert [int(b["ids"][0]) for b in engine.iterate(tasks(2, first=20))] == [20, 21]
    finally:
        engine.close()
    assert engine.scheduler is None
    engine.close()  # idempotent


@pytest.mark.timeout(60)
def test_torch_engine_gives_the_same_batches():
    engine = make_engine(EngineSettings(kind="torch", num_workers=0, out_type="null"), DatasetReader(Numbers()))
    assert isinstance(engine, TorchEngine)
    try:
        assert [b["ids"].tolist() for b in engine.iterate(tasks(4))] == [[0], [1], [2], [3]]
    finally:
        engine.close()


@pytest.mark.slow  # a fresh interpreter: what an import imports
def test_the_engine_imports_nothing_of_datasets_or_iterators():
    """make_engine takes a reader factory: what a batch is made of is not the engine's business."""
    code = ("import sys, speechiter.engine; print(sorted(m for m in sys.modules "
            "if m.startswith(('speechiter.dataset', 'speechiter.iterator'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
