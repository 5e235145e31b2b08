"""Batch arrays built in place in the shared-memory slot (NOTE [ Batch arrays in place ])."""
import numpy as np
import pytest

from speechiter.batch_memory import batch_empty
from speechiter.sequence import MSequence
from speechiter.sequence.shm import SlotRef, SlotWriter, create_segment, leftover_segments, unlink_segment


@pytest.fixture
def segment():
    name = "speechiter_test_in_place_seg"
    mm = create_segment(name, 1 << 20)
    yield SlotRef(0, name, 1 << 20), mm
    mm.close()
    unlink_segment(name)
    assert leftover_segments(name) == []


def test_arrays_from_batch_empty_are_not_copied_again(segment):
    slot, mm = segment
    writer = SlotWriter("speechiter_test_in_place_", 0)
    try:
        with writer.building(slot) as arena:
            feat = batch_empty((4, 1000, 1), np.float32)
            feat[...] = np.arange(4000, dtype=np.float32).reshape(4, 1000, 1)
            other = np.full(10, 7, dtype=np.int64)  # made with numpy: copied
            packed = writer.pack({"feat": feat, "len": other, "text": ["a"]}, slot, arena)
            del feat
        assert packed.slot == slot._replace(backed=1 << 20)  # the same segment, backed now
        refs = packed.skeleton
        shared = np.frombuffer(mm, dtype=np.uint8)
        got = shared[refs["feat"].offset:refs["feat"].offset + 16000].view(np.float32).reshape(4, 1000, 1)
        np.testing.assert_array_equal(got, np.arange(4000, dtype=np.float32).reshape(4, 1000, 1))
        start = refs["len"].offset
        assert start >= 16000  # placed after the in-place array
        np.testing.assert_array_equal(shared[start:start + 80].view(np.int64), other)
        assert refs["text"] == ["a"]
        del got, shared
    finally:
        writer.close()


def test_a_batch_that_outgrows_its_slot_moves_whole(segment):
    slot, _ = segment
    small = SlotRef(0, slot.name, 4096)  # the worker believes the slot is small
    writer = SlotWriter("speechiter_test_in_place_", 1)
    try:
        with writer.building(small) as arena:
            head = batch_empty(512, np.float64)  # fits in the 4 KiB arena
            head[:] = 1.5
            assert arena.offset_of(head) == 0
            tail = batch_empty(10_000, np.float64)  # does not fit: plain numpy
            assert arena.offset_of(tail) is None
            tail[:] = 2.5
            packed = writer.pack([head, tail], small, arena)
            del head, tail
        assert packed.slot.name != slot.name and packed.slot.size >= 8 * 10_512
        from speechiter.sequence.shm import open_segment
        mm = open_segment(packed.slot.name, packed.slot.size)
        data = np.frombuffer(mm, dtype=np.uint8)
        first, second = packed.skeleton
        assert (data[first.offset:first.offset + 4096].view(np.float64) == 1.5).all()
        assert (data[second.offset:second.offset + 80_000].view(np.float64) == 2.5).all()
        del data
        mm.close()
        unlink_segment(packed.slot.name)
    finally:
        writer.close()


def test_batch_empty_outside_a_worker_is_numpy():
    array = batch_empty((3, 2), np.int16)
    assert array.shape == (3, 2) and array.dtype == np.int16 and array.flags.owndata


class PaddedBatches:
    """Indexer whose padded arrays come from batch_empty, of varying sizes."""

    def __getitem__(self, ids):
        lengths = [1000 + 37 * int(i) for i in ids]
        out = batch_empty((len(ids), max(lengths)), np.float32)
        for row, (uid, n) in enumerate(zip(ids, lengths)):
            out[row, :n] = uid
            out[row, n:] = 0
        return {"x": out, "ids": list(ids)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("thread_type", [pytest.param("proc", marks=pytest.mark.slow), "thread"])  # proc: slow
def test_in_place_batches_equal_inline(thread_type):
    plan = [[i, i + 1, i + 2] for i in range(0, 600, 3)][::-1]
    options = dict(dset_size=600, batch_size=3, shuffle=False, out_type="null", batches=plan)
    with MSequence(PaddedBatches, num_workers=0, **options).start_test("numpy") as inline:
        expected = [b["x"].copy() for b in inline]
    with MSequence(PaddedBatches, num_workers=2, thread_type=thread_type, buffer=3, **options).start() as seq:
        got = [np.array(b["x"]) for b in seq]
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
