"""speechiter.batch_memory: the allocator hook the dataset layer builds padded arrays with."""
import subprocess
import sys
import threading

import numpy as np
import pytest

from speechiter.batch_memory import batch_empty, current_allocator, install_allocator
from speechiter.dataset.collate import pad_stack
from speechiter.sequence import MSequence


class Pool:
    """An allocator over one buffer; counts what it handed out."""

    def __init__(self, size):
        self.buffer = np.zeros(size, dtype=np.uint8)
        self.used = 0

    def allocate(self, shape, dtype):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self.used + nbytes > len(self.buffer):
            return None
        array = self.buffer[self.used:self.used + nbytes].view(dtype).reshape(shape)
        self.used += nbytes
        return array


@pytest.mark.slow  # a fresh interpreter: what an import imports
def test_the_dataset_layer_does_not_import_the_engine():
    code = ("import sys, speechiter.dataset.speech_text, speechiter.dataset.reader; "
            "print(sorted(m for m in sys.modules if m.startswith('speechiter.sequence')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_an_allocator_arrays_are_numpy():
    assert current_allocator() is None
    array = batch_empty((3, 2), np.int16)
    assert array.shape == (3, 2) and array.dtype == np.int16 and array.flags.owndata


def test_pad_stack_fills_the_installed_allocator_and_falls_back_when_full():
    pool = Pool(64)
    previous = install_allocator(pool)
    try:
        padded = pad_stack([np.ones(3, np.float32), np.full(2, 2, np.float32)], np.float32)
        assert np.shares_memory(padded, pool.buffer) and pool.used == 24
        np.testing.assert_array_equal(padded, [[1, 1, 1], [2, 2, 0]])
        big = pad_stack([np.ones(20, np.float64)], np.float64)  # 160 bytes: no room, numpy
        assert not np.shares_memory(big, pool.buffer) and big.flags.owndata
    finally:
        assert install_allocator(previous) is pool
    assert current_allocator() is None


def test_the_allocator_belongs_to_one_thread():
    seen = []
    previous = install_allocator(Pool(64))
    try:
        thread = threading.Thread(target=lambda: seen.append(current_allocator()))
        thread.start()
        thread.join(10)
    finally:
        install_allocator(previous)
    assert seen == [None]


class PadStackBatches:
    """Indexer that pads with pad_stack and reports whether the engine gave it slot memory."""

    def __getitem__(self, ids):
        in_slot = current_allocator() is not None
        x = pad_stack([np.full(500 + 50 * int(i), float(i), np.float32) for i in ids], np.float32)
        return {"x": x, "in_slot": [in_slot]}


@pytest.mark.slow  # process workers
@pytest.mark.timeout(60)
def test_process_workers_build_pad_stack_arrays_in_their_slot():
    """See NOTE [ Batch arrays in place ] in speechiter/sequence/shm/pack.py."""
    plan = [[i, i + 1] for i in range(0, 120, 2)]
    options = dict(dset_size=120, batch_size=2, shuffle=False, out_type="null", batches=plan)
    with MSequence(PadStackBatches, num_workers=0, **options).start_test("numpy") as inline:
        expected = [(b["x"].copy(), b["in_slot"][0]) for b in inline]
    with MSequence(PadStackBatches, num_workers=2, thread_type="proc", buffer=3, **options).start() as seq:
        got = [(np.array(b["x"]), b["in_slot"][0]) for b in seq]
    assert not any(in_slot for _, in_slot in expected)
    assert sum(in_slot for _, in_slot in got) > len(got) // 2  # all but a slot's first batch
    for (a, _), (b, _) in zip(got, expected):
        np.testing.assert_array_equal(a, b)
