"""NOTE [ Swallowed Ctrl-C ] in speechiter/interrupts.py: a Ctrl-C that lands in a finalizer is not lost."""
import gc
import os
import signal
import sys
import weakref

import pytest

from speechiter import interrupts


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
    assert signal.getsignal(signal.SIGINT) is not interrupts._on_sigint  # the previous handler is back


def test_no_ctrl_c_no_raise():
    with interrupts.installed():
        interrupts.check()
