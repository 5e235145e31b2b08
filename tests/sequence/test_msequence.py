"""MSequence: the MDNC API, strict order, persistent workers, lookahead, seeding."""
import collections.abc
import functools
import gc
import warnings
import weakref

import numpy as np
import pytest
import torch

from speechiter.seeding import batch_seed
from speechiter.sequence import MSequence, Task, fetch
from tests.sequence import indexers
from tests.conftest import shm_leftovers

MODES = [("proc", "start"), ("thread", "start"), ("proc", "start_test"), ("thread", "start_test")]


def started(manager, how):
    return manager.start() if how == "start" else manager.start_test()


def as_bytes(batch):
    """Everything in a batch, as comparable bytes (dtype, shape, data; strings)."""
    if isinstance(batch, dict):
        return tuple((key, as_bytes(value)) for key, value in sorted(batch.items()))
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__,) + tuple(as_bytes(value) for value in batch)
    if isinstance(batch, torch.Tensor):
        return ("tensor", str(batch.dtype), tuple(batch.shape), batch.view(-1).view(torch.uint8).numpy().tobytes()
                if batch.numel() else b"")
    if isinstance(batch, np.ndarray):
        if batch.dtype.hasobject:
            return ("object", tuple(batch.shape), repr(batch.tolist()))
        return ("ndarray", batch.dtype.str, batch.shape, np.ascontiguousarray(batch).tobytes())
    return (type(batch).__name__, repr(batch))


# ------------------------------------------------------------------- MDNC page


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_mdnc_example_default_mode():
    with pytest.warns(RuntimeWarning, match="CUDA is not available"):
        manager = MSequence(indexers.Echo, dset_size=512, batch_size=1, thread_type='proc',
                            out_type='cuda', shuffle=False, num_workers=1)
    out = []
    with manager.start() as mng:
        for i in mng:
            out.append(i)
    assert out == [[i] for i in range(512)]
    assert len(manager) == manager.length == 512
    assert manager.dset_size == 512 and manager.batch_size == 1 and manager.use_cuda is False


@pytest.mark.timeout(60)
def test_mdnc_example_test_mode():
    with pytest.warns(RuntimeWarning, match="CUDA is not available"):
        manager = MSequence(indexers.Echo, dset_size=512, batch_size=1, thread_type='proc',
                            out_type='cuda', shuffle=False, num_workers=1)
    with manager.start_test('numpy') as mng:
        out = [i for i in mng]
    assert out == [[i] for i in range(512)]


@pytest.mark.slow  # process workers
def test_default_plan_shuffle_is_seeded_per_epoch():
    manager = MSequence(indexers.Echo, dset_size=np.arange(100, 110), batch_size=4, num_workers=0,
                        out_type='null', seed=3)
    with manager.start() as mng:
        epoch1, epoch2 = [sum(mng, []) for _ in range(2)]
    assert sorted(epoch1) == sorted(epoch2) == list(range(100, 110))
    assert epoch1 != epoch2
    again = MSequence(indexers.Echo, dset_size=np.arange(100, 110), batch_size=4, num_workers=2,
                      out_type='null', seed=3)
    with again.start() as mng:
        assert [sum(mng, []) for _ in range(2)] == [epoch1, epoch2]


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_batches_option_is_the_plan():
    plan = [[5, 1], [2], [9, 8, 7]]
    manager = MSequence(indexers.Echo, batches=plan, shuffle=False, num_workers=2, out_type='null')
    with manager.start() as mng:
        assert list(mng) == plan
        assert list(mng) == plan
    assert len(manager) == 3 and manager.dset_size == 6


@pytest.mark.parametrize("bad, message", [
    (dict(batch_size=0), "batch_size should be a positive integer, but got batch_size=0"),
    (dict(num_workers=-1), "num_workers should be an integer >= 0"),
    (dict(thread_type="fiber"), "thread_type should be 'proc' or 'thread'"),
    (dict(out_type="gpu"), "out_type should be one of"),
    (dict(buffer=0), "buffer should be a positive integer"),
    (dict(timeout=0), "timeout should be a positive number"),
    (dict(dset_size=None), "dset_size should be"),
    (dict(hedge="no"), "hedge should be True or False, but got hedge='no'"),
])
def test_option_errors_name_the_option(bad, message):
    options = dict(dset_size=10, out_type="cpu")
    options.update(bad)
    with pytest.raises(ValueError, match=message):
        MSequence(indexers.Echo, **options)


def test_not_started():
    manager = MSequence(indexers.Echo, dset_size=4, out_type='null')
    with pytest.raises(RuntimeError, match="not started"):
        iter(manager)


# ---------------------------------------------------------------- strict order


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type, how", MODES)
@pytest.mark.parametrize("num_workers", [0, 1, 2, 4])
def test_strict_order_and_identical_batches(num_workers, thread_type, how):
    tasks = [Task(i, list(range(i * 3 % 40, i * 3 % 40 + 1 + i % 4)), None) for i in range(40)]
    expected = [as_bytes(indexers.Slow()[task.ids]) for task in tasks]
    manager = MSequence(indexers.Slow, num_workers=num_workers, thread_type=thread_type, out_type='null',
                        buffer=6, dset_size=0)
    with started(manager, how) as mng:
        got = [as_bytes(batch) for batch in mng.iterate(tasks)]
    assert got == expected


# ------------------------------------------------------------------ transport


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_round_trip_null_is_exact(thread_type):
    tasks = [Task(i, [i, i + 1], None) for i in range(12)]
    expected = [as_bytes(indexers.Mixed()[task.ids]) for task in tasks]
    manager = MSequence(indexers.Mixed, num_workers=2, thread_type=thread_type, out_type='null', dset_size=0)
    with manager.start() as mng:
        got = list(mng.iterate(tasks))
    assert [as_bytes(batch) for batch in got] == expected
    batch = got[0]
    assert isinstance(batch["tensor"], torch.Tensor) and batch["bf16"].dtype == torch.bfloat16
    assert isinstance(batch["nested"]["pair"], tuple) and isinstance(batch["nested"]["pair"][0], np.int32)
    assert batch["feat"].flags.writeable


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_round_trip_cpu_gives_tensors(thread_type):
    tasks = [Task(i, [i, i + 1, i + 2], None) for i in range(8)]
    manager = MSequence(indexers.Mixed, num_workers=2, thread_type=thread_type, out_type='cpu', dset_size=0)
    with manager.start() as mng:
        got = list(mng.iterate(tasks))
    for task, batch in zip(tasks, got):
        raw = indexers.Mixed()[task.ids]
        for key in ("feat", "wave", "f64", "mask", "u8", "big_endian", "scalar0d"):
            assert isinstance(batch[key], torch.Tensor), key
            np.testing.assert_array_equal(batch[key].numpy(), raw[key])
        assert batch["feat"].dtype == torch.float32 and batch["mask"].dtype == torch.bool
        assert isinstance(batch["text"], np.ndarray) and batch["text"].tolist() == ["a", "bcd"]
        assert batch["objects"].tolist() == ["x", None]
        assert batch["nested"]["ids"] == raw["nested"]["ids"]
        assert torch.equal(batch["nested"]["deep"][0]["k"], torch.from_numpy(raw["nested"]["deep"][0]["k"]))
        assert batch["nested"]["deep"][1:] == [None, 1.5, "s"] and batch["lengths"] == raw["lengths"]
        assert torch.equal(batch["tensor"], raw["tensor"]) and torch.equal(batch["bf16"], raw["bf16"])


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_slots_are_reused_and_grown():
    # 1 MiB batches many times, then a 6 MiB one: it must grow its slot.
    sizes = [1] * 60 + [6] + [1] * 10
    tasks = [Task(i, [mib], None) for i, mib in enumerate(sizes)]
    manager = MSequence(indexers.Sized, num_workers=2, out_type='null', buffer=3, dset_size=0)
    seen = set()
    # Zero-copy batches hold their slot: 3 in flight, the batch the loop holds and the one
    # being handed over. See NOTE [ Zero-copy batches ] in shm/slots.py.
    slots = 3 + 2
    with manager.start() as mng:
        for task, batch in zip(tasks, mng.iterate(tasks)):
            assert batch["mib"] == task.ids[0] and batch["x"].shape == (task.ids[0] << 18,)
            assert batch["x"][0] == batch["x"][-1] == task.ids[0]
            assert mng._scheduler._slots.segment_count() <= slots
            # A worker may have made a new segment for a slot whose result is on its way.
            assert len(shm_leftovers()) <= slots + 3
            seen.update(shm_leftovers())
        sizes = sorted(slot.size for slot in mng._scheduler._slots._slots)
        assert sizes[-1] >= 6 << 20
    assert len(seen) <= slots + 2  # one segment per slot, plus the growth for the 6 MiB batch


# ------------------------------------------------------- persistent workers


class _Ids(list):
    """A batch's ids that a weak reference can follow."""


class _LazyPlan(collections.abc.Sequence):
    """Tasks made on demand, as Iterator plans are; ``made`` holds weak references to their ids."""

    def __init__(self, n):
        self.n, self.made = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ids = _Ids([i])
        self.made.append(weakref.ref(ids))
        return Task(i, ids, None)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
def test_consumed_batches_tasks_are_released(thread_type):
    """Over an epoch of a 1M-utterance plan, keeping every consumed task's ids grew the main process by ~60 MB."""
    plan = _LazyPlan(200)
    manager = MSequence(indexers.Pid, num_workers=2, thread_type=thread_type, out_type="null", buffer=4,
                        dset_size=0)
    with manager.start() as mng:
        batches = mng.iterate(plan)
        for _ in range(150):
            next(batches)
        gc.collect()
        alive = [ref() for ref in plan.made[:140] if ref() is not None]
        assert alive == []
        assert len(list(batches)) == 50


@pytest.mark.timeout(60)
def test_first_batch_is_built_alone_then_the_buffer_opens():
    """NOTE [ Slow start ]: nothing else starts before the first batch is built; then several at once."""
    indexers.LOG.clear()
    indexers.PAIR.reset()
    manager = MSequence(indexers.Logged, num_workers=4, thread_type="thread", out_type="null", buffer=8,
                        dset_size=0)
    with manager.start() as mng:
        out = list(mng.iterate([Task(i, [i], None) for i in range(12)]))
    assert out == [[i] for i in range(12)]
    assert indexers.LOG[:2] == [("start", 0), ("end", 0)] and not indexers.PAIR.broken


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", [pytest.param("proc", marks=pytest.mark.slow), "thread"])  # proc: slow
def test_workers_persist_and_lookahead_is_used(thread_type):
    epoch1 = [Task(i, [i], None) for i in range(10)]
    epoch2 = [Task(i, [100 + i], None) for i in range(10)]
    manager = MSequence(indexers.Pid, num_workers=2, thread_type=thread_type, out_type='null', buffer=4,
                        dset_size=0)
    with manager.start() as mng:
        first = list(mng.iterate(epoch1, lookahead=epoch2[:4]))
        assert mng.stats["batches"] == 10 and mng.stats["first_batch_s"] > 0
        second = list(mng.iterate(epoch2))
        assert mng.stats["prefetched"] == 4
        if thread_type == "proc":
            assert {b["pid"] for b in first} | {b["pid"] for b in second} <= set(mng.pids)
            assert len(set(mng.pids)) == 2
    assert [b["ids"] for b in first] == [t.ids for t in epoch1]
    assert [b["ids"] for b in second] == [t.ids for t in epoch2]
    assert mng.stats["total_batches"] == 20 and mng.stats["total_wait_s"] >= mng.stats["wait_s"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", [pytest.param("proc", marks=pytest.mark.slow), "thread"])  # proc: slow
def test_lookahead_past_the_next_epoch_is_kept_for_the_one_after(thread_type):
    # Epochs of 2 batches and a buffer of 5: each call looks 5 tasks ahead, into
    # the next three epochs, and every prefetched task is used, none sent twice.
    epochs = [[Task(i, [10 * e + i], e) for i in range(2)] for e in range(6)]
    following = [sum(epochs[e + 1:], [])[:5] for e in range(6)]
    manager = MSequence(indexers.Pid, num_workers=2, thread_type=thread_type, out_type='null', buffer=5,
                        dset_size=0)
    with manager.start() as mng:
        got = [list(mng.iterate(epochs[0], lookahead=following[0]))]
        for e in range(1, 6):
            got.append(list(mng.iterate(epochs[e], lookahead=following[e])))
            assert mng.stats["prefetched"] == 2
        sent = mng._scheduler._next_seq
    assert [[b["ids"] for b in epoch] for epoch in got] == [[t.ids for t in epoch] for epoch in epochs]
    assert sent == 12  # 6 epochs of 2 tasks, each sent once


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_mismatched_lookahead_is_discarded():
    epoch1 = [Task(i, [i], None) for i in range(6)]
    guess = [Task(0, [50], None), Task(1, [51], None), Task(2, [52], None)]
    epoch2 = [Task(0, [50], None), Task(1, [61], None), Task(2, [52], None)]
    manager = MSequence(indexers.Sized, num_workers=2, out_type='null', buffer=4, dset_size=0)
    sizes = [Task(t.position, [1 + t.ids[0] % 3], None) for t in epoch1]
    with manager.start() as mng:
        list(mng.iterate(sizes, lookahead=[Task(0, [2], 7), Task(1, [3], None)]))
        got = list(mng.iterate([Task(0, [2], 7), Task(1, [1], None)]))
        assert mng.stats["prefetched"] == 1
        assert [b["mib"] for b in got] == [2, 1]
        list(mng.iterate(sizes, lookahead=[Task(0, [2], 7)]))
        assert [b["mib"] for b in mng.iterate([Task(0, [2], 8)])] == [2]  # another seed: not reused
        assert mng.stats["prefetched"] == 0
    manager = MSequence(indexers.Pid, num_workers=2, out_type='null', buffer=4, dset_size=0)
    with manager.start() as mng:
        list(mng.iterate(epoch1, lookahead=guess))
        got = list(mng.iterate(epoch2))
        assert mng.stats["prefetched"] == 1
        assert [b["ids"] for b in got] == [t.ids for t in epoch2]
        # The slots of discarded results came back: the buffer still fills completely.
        got = list(mng.iterate(epoch1))
        assert [b["ids"] for b in got] == [t.ids for t in epoch1]
        assert len(mng._scheduler._slots.free) == 4


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_new_iterate_supersedes_unfinished_one():
    tasks = [Task(i, [i], None) for i in range(8)]
    manager = MSequence(indexers.Slow, num_workers=2, out_type='null', buffer=4, dset_size=0)
    with manager.start() as mng:
        old = mng.iterate(tasks)
        assert next(old)["n"].tolist() == [0]
        new = mng.iterate(tasks[2:])
        assert [b["n"].tolist() for b in new] == [[i] for i in range(2, 8)]
        with pytest.raises(RuntimeError, match="superseded"):
            next(old)
        assert mng._scheduler is not None and not mng._scheduler.closed


# ------------------------------------------------------------------- seeding


def test_fetch_seeds_only_when_asked():
    assert fetch(indexers.Echo(), Task(0, [1, 2])) == [1, 2]
    a = fetch(indexers.Random(), Task(0, [1], 123))
    b = fetch(indexers.Random(), Task(0, [1], 123))
    assert as_bytes(a) == as_bytes(b)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type, how", MODES)
@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_seeded_tasks_give_identical_batches(num_workers, thread_type, how):
    tasks = [Task(i, [i], batch_seed(7, 2, i)) for i in range(12)]
    expected = [as_bytes(fetch(indexers.RngOnly(), task)) for task in tasks]
    manager = MSequence(indexers.RngOnly, num_workers=num_workers, thread_type=thread_type, out_type='null',
                        dset_size=0)
    with started(manager, how) as mng:
        assert [as_bytes(b) for b in mng.iterate(tasks)] == expected
    if thread_type == "proc":  # separate processes: numpy's global generator is reproducible too
        expected = [as_bytes(fetch(indexers.Random(), task)) for task in tasks]
        manager = MSequence(indexers.Random, num_workers=num_workers, out_type='null', dset_size=0)
        with started(manager, how) as mng:
            assert [as_bytes(b) for b in mng.iterate(tasks)] == expected


# --------------------------------------------------------------------- spawn


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_spawn_start_method():
    tasks = [Task(i, [i, i + 1], None) for i in range(6)]
    manager = MSequence(functools.partial(indexers.Failing, data_error=False), num_workers=2, out_type='cpu',
                        start_method='spawn', dset_size=0)
    with manager.start() as mng:
        got = list(mng.iterate(tasks))
    assert [b.tolist() for b in got] == [t.ids for t in tasks]


def test_no_cuda_warning_only_for_cuda():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MSequence(indexers.Echo, dset_size=3, out_type='cpu')
        MSequence(indexers.Echo, dset_size=3, out_type='null')


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", ["proc", "thread"])
@pytest.mark.parametrize("num_converters", [0, 1, 2])
def test_cuda_output(thread_type, num_converters):
    tasks = [Task(i, [i, i + 1], None) for i in range(10)]
    manager = MSequence(indexers.Mixed, num_workers=2, thread_type=thread_type, out_type='cuda',
                        num_converters=num_converters, dset_size=0)
    with manager.start() as mng:
        got = list(mng.iterate(tasks))
    for task, batch in zip(tasks, got):
        raw = indexers.Mixed()[task.ids]
        assert batch["feat"].is_cuda and batch["tensor"].is_cuda
        np.testing.assert_array_equal(batch["feat"].cpu().numpy(), raw["feat"])
        np.testing.assert_array_equal(batch["wave"].cpu().numpy(), raw["wave"])
        assert torch.equal(batch["bf16"].cpu(), raw["bf16"])
        assert batch["nested"]["ids"] == raw["nested"]["ids"]
    with manager.start_test("cpu") as mng:
        assert not next(iter(mng.iterate(tasks)))["feat"].is_cuda
