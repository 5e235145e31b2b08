"""Issue 13, item 8: thread workers warn once when the dataset draws from torch's global generator
(NOTE [ torch's generator in thread workers ] in speechiter/sequence/torch_rng.py)."""
import warnings

import pytest
import torch  # noqa: F401  (imported, as in any training script)

from speechiter.sequence import MSequence, Task, torch_rng
from tests.sequence import indexers

TASKS = [Task(i, [i, i + 1], 500 + i) for i in range(12)]


@pytest.fixture(autouse=True)
def not_warned_yet(monkeypatch):
    monkeypatch.setattr(torch_rng, "_warned", False)


def load(indexer, thread_type):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with MSequence(indexer, num_workers=2, thread_type=thread_type, out_type="null", dset_size=0).start() as mng:
            list(mng.iterate(TASKS))
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.timeout(60)
def test_thread_workers_drawing_from_torch_warn_once():
    found = load(indexers.TorchDraw, "thread")
    assert len(found) == 1
    message = str(found[0].message)
    assert "torch's global generator" in message and "speechiter.rng()" in message and "thread_type: proc" in message


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_no_warning_without_torch_draws_or_with_process_workers():
    assert load(indexers.Slow, "thread") == []
    assert load(indexers.TorchDraw, "proc") == []


def test_the_check_never_concludes_when_another_seed_is_set():
    torch.random.default_generator.manual_seed(7)
    torch.rand(3)
    torch_rng.check_after_batch(8)  # the generator carries another batch's seed: no conclusion
    torch_rng.check_after_batch(None)
    assert torch_rng._warned is False
    with pytest.warns(RuntimeWarning, match="speechiter.rng"):
        torch_rng.check_after_batch(7)
