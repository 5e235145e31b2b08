"""A worker reserves the shared memory it writes (NOTE [ Machine limits ] in speechiter/sequence/limits.py) in
whole MiB, once per segment rather than once per batch (NOTE [ Reserving slots ] in shm/slots.py)."""
import numpy as np
import pytest

from speechiter.batch_memory import batch_empty
from speechiter.errors import ResourceError
from speechiter.sequence.shm import SlotRef, SlotWriter, create_segment, leftover_segments, slots, unlink_segment

MIB = 1 << 20


@pytest.fixture
def segment():
    name = "speechiter_test_reserve_seg"
    mm = create_segment(name, 4 * MIB)
    yield SlotRef(0, name, 4 * MIB)
    mm.close()
    unlink_segment(name)
    assert leftover_segments(name) == []


@pytest.fixture
def reserved(monkeypatch):
    """The reservations made, and the most /dev/shm may back (None: no limit)."""
    calls, limit = [], [None]
    real = slots.reserve_bytes

    def reserve_bytes(name, nbytes):
        calls.append(nbytes)
        if limit[0] is not None and nbytes > limit[0]:
            raise ResourceError(f"shared memory (/dev/shm) is full or too small: {nbytes} bytes needed")
        real(name, nbytes)

    monkeypatch.setattr(slots, "reserve_bytes", reserve_bytes)
    return calls, limit


def build(writer, slot, *sizes):
    with writer.building(slot):
        arrays = [batch_empty(size, np.uint8) for size in sizes]
        for array in arrays:
            array[:] = 1
        del arrays


def test_batches_reserve_whole_mib_once_per_segment(segment, reserved):
    calls, _ = reserved
    writer = SlotWriter("speechiter_test_reserve_", 0)
    try:
        build(writer, segment, 1_500_000, 80)  # the small array after the big one needs nothing more
        build(writer, segment, 1_600_000, 80)  # a slightly larger batch: within the reserved MiB
        assert calls == [2 * MIB]
        build(writer, SlotRef(1, segment.name, segment.size), 100)  # the segment through another slot
        build(writer, segment, 2_500_000)
        assert calls == [2 * MIB, 3 * MIB]
    finally:
        writer.close()


def test_a_segment_backed_by_one_worker_is_not_reserved_again_by_the_next(segment, reserved):
    calls, _ = reserved
    first, second = SlotWriter("speechiter_test_reserve_", 0), SlotWriter("speechiter_test_reserve_", 1)
    try:
        with first.building(segment) as arena:
            batch_empty(1_500_000, np.uint8)[:] = 1
            told = first.pack({"x": np.ones(3)}, segment, arena).slot  # what the main process passes on
        assert calls == [2 * MIB] and told.backed == 2 * MIB
        build(second, told, 1_600_000)
        assert calls == [2 * MIB]
        build(second, segment, 3_000_000)  # more than the other worker backed
        assert calls == [2 * MIB, 3 * MIB]
    finally:
        first.close()
        second.close()


def test_where_the_rounded_reservation_does_not_fit_the_exact_one_is_made_or_named(segment, reserved):
    calls, limit = reserved
    limit[0] = 1_600_000
    writer = SlotWriter("speechiter_test_reserve_", 0)
    try:
        build(writer, segment, 1_500_000)
        assert calls == [2 * MIB, 1_500_000]
        with pytest.raises(ResourceError, match="1700000 bytes needed"):
            build(writer, segment, 1_700_000)
    finally:
        writer.close()
