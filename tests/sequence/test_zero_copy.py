"""Zero-copy batches: views of shared memory, and the lifetime of their slots.

See NOTE [ Zero-copy batches ] in speechiter/sequence/shm/slots.py.
"""
import gc
import os
import threading

import numpy as np
import pytest
import torch

from speechiter.sequence import MSequence, Task, shm
from tests.sequence import indexers
from tests.conftest import shm_leftovers
from tests.sequence.test_msequence import as_bytes

pytestmark = pytest.mark.slow  # worker matrices over every dtype and out_type


def in_shm(array) -> bool:
    """Whether ``array`` (numpy or a CPU tensor) lies in a mapped speechiter segment, not in a copy."""
    address = array.data_ptr() if isinstance(array, torch.Tensor) else array.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "speechiter_" in fields[5]:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= address < end:
                    return True
    return False


def stamped(n, mib=1):
    return [Task(i, [mib, i], None) for i in range(n)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("out_type", ["null", "cpu"])
def test_large_batches_are_views_and_small_ones_copies(out_type):
    manager = MSequence(indexers.Stamped, num_workers=2, out_type=out_type, buffer=3, dset_size=0)
    with manager.start() as mng:
        batch = next(iter(mng.iterate(stamped(1))))
        assert in_shm(batch["x"]) and float(batch["x"][-1]) == 0
        if out_type == "cpu":
            assert isinstance(batch["x"], torch.Tensor)
    manager = MSequence(indexers.Pid, num_workers=1, out_type=out_type, dset_size=0)
    with manager.start() as mng:
        batch = next(iter(mng.iterate([Task(0, [1, 2, 3], None)])))
        assert not in_shm(batch["x"]) and batch["x"].tolist() == [1, 2, 3]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("out_type", ["null", "cpu"])
def test_a_held_batch_is_never_overwritten(out_type):
    # Batch 0 is held while 60 more go through the workers; its slot must not be reused meanwhile.
    manager = MSequence(indexers.Stamped, num_workers=2, out_type=out_type, buffer=3, dset_size=0)
    with manager.start() as mng:
        batches = mng.iterate(stamped(61))
        kept = next(batches)
        assert in_shm(kept["x"])
        for i, batch in enumerate(batches, 1):
            assert batch["stamp"] == i and float(batch["x"][0]) == float(batch["x"][-1]) == i
            assert in_shm(batch["x"])
            assert np.all(np.asarray(kept["x"]) == 0)
        # Every batch but the kept one was dropped: the table did not grow beyond what the loop needed.
        assert len(mng._scheduler._slots) <= 3 + 3
        kept_slots = len(mng._scheduler._slots)
        del kept, batch
        gc.collect()
        assert [float(b["x"][-1]) for b in mng.iterate(stamped(20))] == list(range(20))
        assert len(mng._scheduler._slots) == kept_slots


@pytest.mark.timeout(60)
@pytest.mark.parametrize("out_type", ["null", "cpu"])
def test_a_whole_epoch_kept_in_a_list(out_type):
    # The consumer keeps every batch: the table grows (never waits) up to max_viewed views, then
    # batches are copies, so that shared memory stays bounded.
    manager = MSequence(indexers.Stamped, num_workers=2, out_type=out_type, buffer=3, dset_size=0)
    with manager.start() as mng:
        table = mng._scheduler._slots
        epoch = list(mng.iterate(stamped(25)))
        assert [in_shm(batch["x"]) for batch in epoch] == [True] * table.max_viewed + [False] * 21
        assert len(table) <= 3 + table.max_viewed
        assert len(shm_leftovers()) <= 3 + table.max_viewed
        for i, batch in enumerate(epoch):
            assert batch["stamp"] == i and np.all(np.asarray(batch["x"]) == i)
        del epoch, batch
        gc.collect()
        again = [(float(b["x"][-1]), in_shm(b["x"])) for b in mng.iterate(stamped(25))]
        assert again == [(i, True) for i in range(25)]
        assert len(table) <= 3 + table.max_viewed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("out_type", ["null", "cpu"])
def test_batches_kept_after_finish_stay_readable(out_type):
    manager = MSequence(indexers.Stamped, num_workers=2, out_type=out_type, buffer=2, dset_size=0)
    with manager.start() as mng:
        batches = mng.iterate(stamped(6, mib=4))
        first, second = next(batches), next(batches)
    assert not manager.running and shm_leftovers() == []  # unlinked, though still mapped
    del manager, mng, batches
    gc.collect()
    for i, batch in enumerate((first, second)):
        assert in_shm(batch["x"]) and np.all(np.asarray(batch["x"]) == i)
    view = first["x"][10:20]
    del first
    gc.collect()
    assert np.all(np.asarray(view) == 0)
    second["x"][:] = 5  # still writable memory of our own
    assert float(second["x"].sum()) == 5 * (4 << 18)


@pytest.mark.timeout(60)
def test_a_batch_dropped_in_another_thread_frees_its_slot():
    manager = MSequence(indexers.Stamped, num_workers=1, out_type="cpu", buffer=2, dset_size=0)
    with manager.start() as mng:
        epoch = list(mng.iterate(stamped(8)))
        grown = len(mng._scheduler._slots)
        holder = [epoch]
        del epoch
        thread = threading.Thread(target=lambda: (holder.clear(), gc.collect()))
        thread.start()
        thread.join()
        for _ in range(3):
            assert [b["stamp"] for b in mng.iterate(stamped(8))] == list(range(8))
        assert len(mng._scheduler._slots) == grown


@pytest.mark.timeout(60)
@pytest.mark.parametrize("out_type", ["null", "cpu"])
def test_every_dtype_as_views_is_exact(out_type, monkeypatch):
    # Views of every kind of array the transport carries (alignment, bfloat16, byte order, 0-d).
    monkeypatch.setattr(shm, "SHARE_MIN_BYTES", 1)
    tasks = [Task(i, [i, i + 1], None) for i in range(10)]
    manager = MSequence(indexers.Mixed, num_workers=2, out_type=out_type, dset_size=0)
    with manager.start() as mng:
        for task, batch in zip(tasks, mng.iterate(tasks)):
            raw = indexers.Mixed()[task.ids]
            assert in_shm(batch["feat"]) and in_shm(batch["tensor"])
            if out_type == "null":
                assert as_bytes(batch) == as_bytes(raw)
            else:
                for key in ("feat", "wave", "f64", "mask", "u8", "big_endian", "scalar0d"):
                    np.testing.assert_array_equal(batch[key].numpy(), raw[key])
                assert batch["text"].tolist() == ["a", "bcd"] and torch.equal(batch["bf16"], raw["bf16"])
                assert torch.equal(batch["nested"]["deep"][0]["k"],
                                   torch.from_numpy(raw["nested"]["deep"][0]["k"]))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_slot_table_reuses_only_freed_slots():
    table = shm.SlotTable(shm.session_prefix(), 2)
    try:
        a, b = table.acquire(), table.acquire()
        c = table.acquire()  # none free: a new slot, no waiting
        assert len({a, b, c}) == 3 and len(table) == 3
        table.release(b)
        assert table.acquire() == b
    finally:
        table.close()
