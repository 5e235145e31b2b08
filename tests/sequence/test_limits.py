"""Limits of the machine as one clear error (NOTE [ Machine limits ] in speechiter/sequence/limits.py, NOTE
[ Waiting for the fork server ] in forkserver.py): a /dev/shm too small, a low open-files limit, a stopped fork
server, an unusable storage cache folder."""
import functools
import http.server
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from speechiter.errors import ResourceError
from speechiter.sequence import MSequence, Task
from tests.sequence import indexers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT)


def script(body: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        from speechiter.sequence import MSequence, Task
        from tests.sequence import indexers
        if __name__ == "__main__":
        """) + textwrap.indent(textwrap.dedent(body), "    ")


def run_python(code: str, prefix=(), timeout=60):
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=ENV)


# ------------------------------------------------------------- shared memory


def _small_shm_allowed() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow  # a process in a mount namespace with a 1 MB /dev/shm
@pytest.mark.timeout(120)
@pytest.mark.skipif(not _small_shm_allowed(), reason="needs unshare -m and tmpfs mounts (root)")
def test_a_dev_shm_too_small_for_a_batch_is_named_not_a_sigbus():
    code = script("""
        with MSequence(indexers.Sized, num_workers=1, out_type="null", dset_size=0).start() as mng:
            for batch in mng.iterate([Task(0, [1], None), Task(1, [8], None)]):
                print(batch["mib"], flush=True)
        """)
    # A private mount namespace whose /dev/shm holds 4 MiB; the batch of 8 MiB does not fit.
    result = run_python(code, ["unshare", "-m", "sh", "-c",
                               'mount -t tmpfs -o size=4m tmpfs /dev/shm && exec "$@"', "sh"])
    assert result.stdout.split() == ["1"]
    last = result.stderr.strip().splitlines()
    error = next(line for line in last if line.startswith("speechiter.errors.WorkerError"))
    assert "raised speechiter.errors.ResourceError: shared memory (/dev/shm) is full or too small: " \
           f"{8 << 20} bytes needed, " in error
    assert "SIGBUS" not in result.stderr


@pytest.mark.slow  # a process worker, dead of SIGBUS
@pytest.mark.timeout(60)
def test_a_worker_dead_of_sigbus_is_reported_as_shared_memory():
    manager = MSequence(indexers.Sigbus, num_workers=1, out_type="null", dset_size=0)
    with pytest.raises(ResourceError, match=r"exited unexpectedly \(signal 7: SIGBUS\) while building batch 3: "
                                            r"shared memory \(/dev/shm\) is full or too small \(\d+ bytes free\)"):
        with manager.start() as mng:
            list(mng.iterate([Task(i, [i], None) for i in range(6)]))


# ---------------------------------------------------------------- open files

LOW_LIMIT = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
"""


def cli_recipe(tmp_path, corpus, values=None):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent(f"""\
        train:
          type: piece.PieceIterator
          conf:
            dataset_type: speech_text.SpeechTextDataset
            dataset_conf:
              main_data:
                feat: {values or corpus / 'idx2wav'}
            data_len: {corpus}/idx2wav_len
            batch_size: 2
            shuffle: false
        valid:
          type: abs.Iterator
          conf:
            dataset_type: speech_text.SpeechTextDataset
            dataset_conf:
              main_data:
                feat: {corpus}/idx2wav
        """))
    return recipe


def run_lines(stderr: str) -> list:
    """The run's lines on stderr, less a "reclaimed" line: the segments of another test's killed run, which
    pytest-xdist runs beside this one (see tests/sequence/test_shutdown.py)."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("speechiter: reclaimed ")]


@pytest.mark.slow  # a process of its own: its open-files limit is lowered
@pytest.mark.timeout(120)
def test_a_low_open_files_limit_is_one_line_naming_it(tmp_path, corpus):
    recipe = cli_recipe(tmp_path, corpus)
    code = LOW_LIMIT + (f"sys.argv = ['speechiter.run', '--data_cfg', {str(recipe)!r}, '--quiet', "
                        "'--num_workers', '16']\nrunpy.run_module('speechiter.run', run_name='__main__')")
    result = run_python(code)
    assert result.returncode == 1, result.stderr
    # besides the line that 16 workers outnumber the CPUs (speechiter/build.py)
    lines = [line for line in run_lines(result.stderr) if not line.startswith("speechiter: warning:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("speechiter: error: too many open files: 16 loading worker processes need about ")
    assert "under the open-files limit of 64 (ulimit -n); raise it in the shell that starts the run: " \
           "`ulimit -n " in lines[0]


@pytest.mark.slow  # a process of its own: its open-files limit is lowered
@pytest.mark.timeout(120)
def test_a_worker_out_of_file_descriptors_says_so():
    code = LOW_LIMIT + script("""
        try:
            with MSequence(indexers.FileHog, num_workers=1, out_type="null", dset_size=0).start() as mng:
                list(mng.iterate([Task(0, [0], None)]))
        except Exception as error:
            print(str(error).split("\\n")[0])
        """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("loading worker 0 (pid ")
    assert "raised speechiter.errors.ResourceError: too many open files: a file could not be opened under the " \
           "open-files limit of 64 (ulimit -n)" in result.stdout


# --------------------------------------------------------------- fork server

STOPPED_SERVER = script("""
    import multiprocessing.forkserver, time
    with MSequence(indexers.Echo, num_workers=2, out_type="null", dset_size=4, batch_size=2).start() as mng:
        list(mng)
    print(multiprocessing.forkserver._forkserver._forkserver_pid, flush=True)
    sys.stdin.readline()  # the test stops the server now
    started = time.monotonic()
    try:
        with MSequence(indexers.Echo, num_workers=2, out_type="null", dset_size=4, batch_size=2).start() as mng:
            list(mng)
    except Exception as error:
        print(f"{type(error).__name__} after {time.monotonic() - started:.1f} s: {error}", flush=True)
    """)


@pytest.mark.slow  # a process whose fork server is stopped
@pytest.mark.timeout(90)
def test_a_stopped_fork_server_is_an_error_naming_it_not_a_hang():
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env=ENV)
    server = None
    try:
        server = int(proc.stdout.readline())
        os.kill(server, signal.SIGSTOP)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = proc.stdout.readline()  # not communicate(): the stopped server holds our pipe open
        kind, seconds, message = line.split(" ", 3)[0], float(line.split()[2]), line.split(": ", 1)[1]
        assert kind == "ResourceError" and seconds < 10, line
        assert message.startswith(f"the fork server of the loading workers (pid {server}) is stopped "
                                  "(SIGSTOP, or a debugger) while starting a worker, so no worker can start; "
                                  f"continue it (kill -CONT {server})")
        assert proc.wait(30) == 0
    finally:
        if server is not None:
            os.kill(server, signal.SIGKILL)
        proc.kill()
        proc.wait(30)


# ------------------------------------------------------------- storage cache


@pytest.mark.slow  # a CLI process with a process worker and its own storage cache setting
@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["file", "below a file"])
def test_an_unusable_storage_cache_folder_is_one_line_exit_2(tmp_path, corpus, what):
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(corpus))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        urls = tmp_path / "idx2wav"
        urls.write_text("".join(f"{uid} http://127.0.0.1:{server.server_port}/{path}\n" for uid, path in
                                (line.split() for line in (corpus / "idx2wav").read_text().splitlines())))
        (tmp_path / "cache").write_text("a file, not a folder")
        cache = tmp_path / "cache" if what == "file" else tmp_path / "cache" / "blocks"
        result = subprocess.run([sys.executable, "-m", "speechiter.run", "--data_cfg",
                                 str(cli_recipe(tmp_path, corpus, urls)), "--quiet", "--num_workers", "1"],
                                capture_output=True, text=True, timeout=90, cwd=ROOT,
                                env=dict(ENV, SPEECHITER_STORAGE_CACHE=str(cache)))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert result.returncode == 2, result.stderr
    lines = run_lines(result.stderr)
    assert len(lines) == 1 and "FileExistsError" not in lines[0], result.stderr
    reason = "it is not a folder" if what == "file" else "Not a directory"
    assert f"SPEECHITER_STORAGE_CACHE='{cache}' cannot be the storage cache folder ({reason}); " in lines[0]
