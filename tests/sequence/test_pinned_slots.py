"""Issue 29, item 3: the bookkeeping of page-locked slots (NOTE [ Pinned slots ] in
speechiter/sequence/shm/pinning.py), checked without CUDA: every mapping is registered once before it is read,
unregistered before it is unmapped, and nothing stays registered or in /dev/shm after epochs, an early exit or
Ctrl-C."""
import os
import signal
import warnings

import numpy as np
import pytest

from speechiter import interrupts
from speechiter.sequence import Task, shm
from speechiter.sequence.choice import start_scheduler
from speechiter.sequence.workers import Fetch, _build
from tests.sequence import indexers

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")


def mapped(address: int) -> bool:
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return True
    return False


class FakeCuda:
    """cudaHostRegister / cudaHostUnregister as a ledger that checks the rules."""

    def __init__(self, fail=False):
        self.live, self.registered, self.fail = {}, 0, fail

    def register(self, address, size):
        if self.fail:
            raise RuntimeError("cudaHostRegister returned CUDA error 1")
        assert address not in self.live and mapped(address) and size > 0
        self.live[address] = size
        self.registered += 1

    def unregister(self, address):
        assert address in self.live and mapped(address)  # still mapped: unregistered first
        del self.live[address]

    def pins(self):
        return shm.HostPins(self.register, self.unregister)


def pack(table, writer, index, mib):
    msg = Fetch(0, Task(0, [mib], None), table.ref(index))
    reply = _build(msg, indexers.Sized(), 0, writer)
    table.accept(reply.payload.slot)
    return reply.payload


def test_a_slot_is_registered_once_and_unregistered_before_its_segment_grows_or_closes():
    cuda = FakeCuda()
    prefix = shm.session_prefix()
    table, writer = shm.SlotTable(prefix, 2, pins=cuda.pins()), shm.SlotWriter(prefix, 0)
    try:
        index = table.acquire()
        for _ in range(3):
            reader = table.reader(pack(table, writer, index, 1), share=True)
            assert reader.pinned and not reader.shared  # pinned slots are never handed out as views
        assert cuda.registered == 1 and len(cuda.live) == 1
        payload = pack(table, writer, index, 3)  # a larger segment
        reader = table.reader(payload, share=False)
        assert reader.pinned and cuda.registered == 2 and len(cuda.live) == 1
        assert reader(payload.skeleton["x"])[0] == 3
    finally:
        writer.close()
        table.close()
    assert cuda.live == {}


def test_a_refused_registration_warns_once_and_copies_through_staging_buffers():
    cuda = FakeCuda(fail=True)
    prefix = shm.session_prefix()
    table, writer = shm.SlotTable(prefix, 2, pins=cuda.pins()), shm.SlotWriter(prefix, 0)
    try:
        with pytest.warns(RuntimeWarning, match="could not page-lock .* CUDA error 1"):
            assert not table.reader(pack(table, writer, table.acquire(), 1), share=False).pinned
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not table.reader(pack(table, writer, table.acquire(), 1), share=False).pinned
    finally:
        writer.close()
        table.close()


def run(cuda, epochs, stop_after=None, interrupt_at=None):
    """Epochs of batches of 1-3 MiB (slots grow) with 2 process workers over pinned slots; returns batch sums."""
    scheduler = start_scheduler(indexers.Sized, num_workers=2, thread_type="proc", start_method=None,
                                out_type="cpu", buffer=3, num_converters=0, timeout=60, pins=cuda.pins())
    sums, seen = [], 0
    try:
        for epoch in range(epochs):
            tasks = [Task(i, [1 + (i * 7 + epoch) % 3], None) for i in range(6)]
            for batch in scheduler.iterate(tasks):
                sums.append(float(batch["x"][0]))
                assert len(cuda.live) <= len(scheduler._slots)
                seen += 1
                if seen == stop_after:
                    return sums  # leaving the loop early
                if seen == interrupt_at:
                    os.kill(os.getpid(), signal.SIGINT)
    finally:
        scheduler.close()
    return sums


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_nothing_stays_registered_after_epochs_an_early_exit_or_ctrl_c():
    cuda = FakeCuda()
    sums = run(cuda, epochs=2)
    assert sums == [float(1 + (i * 7 + e) % 3) for e in range(2) for i in range(6)]
    assert cuda.registered >= 2 and cuda.live == {}
    run(cuda, epochs=2, stop_after=4)
    assert cuda.live == {}
    with interrupts.installed(), pytest.raises(KeyboardInterrupt):
        run(cuda, epochs=2, interrupt_at=3)
    assert cuda.live == {}


def test_cuda_registration_errors_become_the_staging_fallback(monkeypatch):
    import torch

    class Runtime:  # torch.cuda.cudart() of a driver that refuses to register memory
        def cudaHostRegister(self, address, size, flags):
            return 712

        def cudaHostUnregister(self, address):
            return 0

    monkeypatch.setattr(torch.cuda, "cudart", lambda: Runtime())
    pins = shm.cuda_host_pins()
    with open(__file__, "rb") as f:
        import mmap
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        with pytest.warns(RuntimeWarning, match="cudaHostRegister returned CUDA error 712"):
            assert not pins.pin(mm)
    finally:
        mm.close()


def test_a_copy_that_never_finishes_is_a_timeout_not_a_hang(monkeypatch):
    from speechiter.sequence import convert

    class Stuck:
        def query(self):
            return False

    monkeypatch.setattr(convert, "COPY_TIMEOUT_S", 0.05)
    with pytest.raises(TimeoutError, match="did not finish within 0.05 s"):
        convert._wait_copied(Stuck())


def test_a_refused_unregistration_warns_and_the_clean_up_goes_on():
    cuda = FakeCuda()

    def unregister(address):
        raise RuntimeError("cudaHostUnregister returned CUDA error 4")

    prefix = shm.session_prefix()
    table, writer = shm.SlotTable(prefix, 2, pins=shm.HostPins(cuda.register, unregister)), shm.SlotWriter(prefix, 0)
    try:
        assert table.reader(pack(table, writer, table.acquire(), 1), share=False).pinned
    finally:
        writer.close()
        with pytest.warns(RuntimeWarning, match="could not unregister .* CUDA error 4"):
            table.close()
    assert shm.leftover_segments(prefix) == []  # unlinked all the same
