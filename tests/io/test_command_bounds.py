"""Allowed commands are bounded: nothing they start outlives them (exit, timeout, an interrupt), a process that
leaves their group holding the output pipe cannot stretch the wait, and their output and error text are
capped. Each failure is one line naming the command."""
import os
import signal
import threading
import time

import psutil
import pytest

from speechiter.errors import DataError
from speechiter.io import commands
from speechiter.io.commands import run_command


def sleepers(seconds: str):
    """Processes ``sleep <seconds>`` (the tests use odd durations no one else does)."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", seconds]]


@pytest.fixture
def wav(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=1)
    return corpus / (corpus / "idx2wav").read_text().split()[1]


def _reap(seconds: str):
    for process in sleepers(seconds):  # only ours: started by this test, found by their odd duration
        process.kill()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_what_a_command_leaves_running_ends_with_it(wav):
    try:
        x, rate = run_command(f"sleep 417 >/dev/null 2>&1 & cat {wav}", timeout=10)
        assert x.shape[0] > 0 and rate == 16000
        time.sleep(0.2)
        assert not sleepers("417")
        with pytest.raises(DataError, match=r"^command 'sleep 418 & sleep 419' did not finish in 0.5 s \(killed\)$"):
            run_command("sleep 418 & sleep 419", timeout=0.5)
        time.sleep(0.2)
        assert not sleepers("418") and not sleepers("419")
    finally:
        for seconds in ("417", "418", "419"):
            _reap(seconds)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_an_interrupt_ends_the_command(wav):
    class Interrupted(Exception):
        pass

    def interrupt(*args):
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)  # (SIGALRM is pytest-timeout's)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(Interrupted):
            run_command("sleep 421", timeout=30)
        assert time.monotonic() - started < 10  # not waiting for the command
        time.sleep(0.2)
        assert not sleepers("421")
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        _reap("421")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_process_that_left_the_group_holding_the_output_cannot_stretch_the_wait():
    started = time.monotonic()
    try:
        with pytest.raises(DataError, match=r"did not finish in 1 s \(killed\)$"):
            run_command("setsid sleep 422 & sleep 423", timeout=1)
        assert time.monotonic() - started < 10
    finally:
        _reap("422")
        _reap("423")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_output_and_error_text_are_capped(monkeypatch):
    with pytest.raises(DataError) as error:
        run_command("head -c 300000 /dev/zero | tr '\\0' x >&2; exit 4", timeout=10)
    message = str(error.value)
    assert message.startswith("command \"head -c 300000 ") and " failed (exit status 4): ...xxxxx" in message
    assert len(message) < 600 and "\n" not in message
    monkeypatch.setattr(commands, "COMMAND_MAX_BYTES", 100000)
    with pytest.raises(DataError, match=r"^command 'yes' wrote more than 0.095\d* MiB to its standard output "
                                        r"\(killed\); convert that audio to files$"):
        run_command("yes", timeout=30)
