"""A fork server that stops answering after the workers started (NOTE [ Waiting for the fork server ] in
speechiter/sequence/forkserver.py): a worker that dies meanwhile is an error within seconds naming the
server, never a wait for the batch timeout; a killed server's workers are named as ended with it."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import multiprocessing.forkserver, os, signal, sys, time
    sys.path.insert(0, {root!r})
    from speechiter.sequence import MSequence, Task
    from tests.sequence import indexers
    if __name__ == "__main__":
        with MSequence(indexers.Killed, num_workers=2, out_type="null", dset_size=0, start_method="forkserver",
                       timeout=60).start() as mng:
            try:
                for i, _ in enumerate(mng.iterate([Task(i, [i], None) for i in range(40)])):
                    if i == 2:  # the workers run: now the server stops answering
                        server = multiprocessing.forkserver._forkserver._forkserver_pid
                        os.kill(server, signal.{signal})
                        started = time.monotonic()
            except Exception as error:
                print(f"{{type(error).__name__}} after {{time.monotonic() - started:.1f}} s: {{error}}", flush=True)
            finally:
                os.kill(server, signal.SIGCONT) if {stopped} else None
    """)


def run(signal_name):
    code = SCRIPT.format(root=ROOT, signal=signal_name, stopped=signal_name == "SIGSTOP")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_that_dies_while_its_fork_server_is_stopped_is_named_within_seconds():
    result = run("SIGSTOP")
    kind, seconds = result.stdout.split(" ")[0], float(result.stdout.split(" ")[2])
    assert kind == "RuntimeError" and seconds < 10, result.stdout + result.stderr
    assert "exited unexpectedly (its end was not reported; the fork server that started it (pid " in result.stdout
    assert ") is stopped (SIGSTOP, or a debugger)) while building batch 17" in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_workers_of_a_killed_fork_server_are_named_as_ended_with_it():
    result = run("SIGKILL")
    assert result.stdout.startswith("RuntimeError after "), result.stdout + result.stderr
    assert "; the fork server that started it (pid " in result.stdout
    assert ") is gone (killed?), and its workers with it)" in result.stdout
