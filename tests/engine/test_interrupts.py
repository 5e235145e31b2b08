"""NOTE [ Swallowed Ctrl-C ] and NOTE [ One shutdown path ] in speechiter/interrupts.py: a Ctrl-C that lands
in a finalizer is not lost, SIGTERM unwinds a run as Ctrl-C does, and every wait of the engine honours both."""
import gc
import os
import signal
import sys
import time
import weakref

import pytest

from speechiter import interrupts
from speechiter.sequence import MSequence, Task
from tests.sequence import indexers


class _Owner:
    pass


def _interrupted_finalizer():
    os.kill(os.getpid(), signal.SIGINT)
    total = 0
    for i in range(100_000):  # the handler runs here, between bytecodes: KeyboardInterrupt inside a finalizer
        total += i


def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_at_the_next_check():
    unraisable = []
    with interrupts.installed():
        owner = _Owner()
        weakref.finalize(owner, _interrupted_finalizer)
        previous, sys.unraisablehook = sys.unraisablehook, unraisable.append
        try:
            del owner
            gc.collect()
        finally:
            sys.unraisablehook = previous
        assert [type(u.exc_value) for u in unraisable] == [KeyboardInterrupt]  # Python dropped it ...
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()  # ... the step loop raises it
    assert signal.getsignal(signal.SIGINT) is not interrupts._on_signal  # the previous handler is back


def test_no_ctrl_c_no_raise():
    with interrupts.installed():
        interrupts.check()


def test_sigterm_raises_terminated_a_keyboard_interrupt_with_its_own_exit_status():
    with interrupts.installed():
        with pytest.raises(interrupts.Terminated) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100_000):  # the handler runs between bytecodes
                pass
        assert isinstance(info.value, KeyboardInterrupt)
        assert (interrupts.exit_status(info.value), interrupts.describe(info.value)) == (143, "terminated (SIGTERM)")
    assert signal.getsignal(signal.SIGTERM) is not interrupts._on_signal
    interrupts.check()  # nothing pending once the run is over
    assert interrupts.exit_status(KeyboardInterrupt()) == 130


@pytest.mark.slow  # a process worker
@pytest.mark.timeout(60)
def test_a_swallowed_ctrl_c_ends_the_wait_for_a_batch():
    """The engine's wait polls: a Ctrl-C dropped by a finalizer ends it, not the batch timeout."""
    with interrupts.installed():
        manager = MSequence(indexers.Hang, num_workers=1, out_type="null", dset_size=0, timeout=30)
        with manager.start() as mng:
            batches = mng.iterate([Task(i, [i], None) for i in range(8)])
            assert next(batches).tolist() == [0]
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(100_000):
                    pass
            except KeyboardInterrupt:
                pass  # swallowed, as in a finalizer
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                list(batches)  # batch 5 hangs in the worker
            assert time.monotonic() - started < 10
