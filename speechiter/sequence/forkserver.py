"""Worker processes from Python's fork server, without re-running the main script where they need not.

NOTE [ Main script in workers ]
A process started by 'spawn' or 'forkserver' first re-runs the parent's main
script (as ``__mp_main__``) so that objects pickled as ``__main__.X`` can be
found; that is why such scripts need ``if __name__ == "__main__":``. A
speechiter worker only needs it when its reader refers to ``__main__`` (a
Dataset class defined in the script): the pool looks at the pickled reader
(start.py), and :class:`MainlessWorkerContext`'s processes leave the main
script's entry out of the start-up data, so an unguarded training
script keeps working as it did with fork, and workers start sooner.

The launch below is the standard library's forkserver launch (identical from
Python 3.10 to 3.13) with that one entry left out, and with the changes of
NOTE [ Waiting for the fork server ]; elsewhere the standard context is used.

NOTE [ Waiting for the fork server ]
The standard launch waits for the server without a limit: to take a worker's
start-up data, and to report the worker's pid. A server that is stopped
(SIGSTOP, a debugger) or stuck would hang the start of every pool, and so the
building of an iterator, until someone kills the run. Here each of those waits
polls every ``POLL_S``, checks the server (/proc/<pid>/stat), and ends in a
ResourceError naming the server's pid: at once when the server is gone, after
``STOPPED_S`` when it is stopped, after ``START_TIMEOUT_S`` in any case (its
first start imports the preloads, torch among them). Ctrl-C is honoured on
every poll (NOTE [ One shutdown path ] in speechiter/interrupts.py). The
standard launch also connects to the server before it makes its two pipes: a
process out of file descriptors then drops a connection half-made, and the
server dies of it with a traceback; here the pipes come first.
Once the workers run, the server reports each one's end (its exit status, on
the worker's sentinel). A stopped server does not, so a worker that dies then
would be waited for until the batch timeout: the pool also takes the close of
a worker's result pipe, with the worker ended (/proc), as its death
(:func:`ended`), and both kinds of death name the server when it is stopped
or gone (:func:`server_note`; a killed server takes its workers with it).
"""
import io
import os
import select
import socket
import sys
import time
from multiprocessing import context, forkserver, popen_forkserver, reduction, resource_tracker, spawn, util

from speechiter import interrupts
from speechiter.errors import ResourceError
from speechiter.sequence.shm.stale import proc_stat

_MAIN_ENTRIES = ("init_main_from_path", "init_main_from_name")
SUPPORTED = (3, 10) <= sys.version_info[:2] <= (3, 13)
# See NOTE [ Waiting for the fork server ].
POLL_S = 0.25
STOPPED_S = 2.0
SETTLE_S = 0.5  # how long a dying server may take to leave /proc
START_TIMEOUT_S = 120.0


class _Popen(popen_forkserver.Popen):
    def _launch(self, process_obj):
        prep_data = spawn.get_preparation_data(process_obj._name)
        if not getattr(process_obj, "needs_main", True):
            for key in _MAIN_ENTRIES:
                prep_data.pop(key, None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = _connect(self._fds)
        parent_w = os.dup(w)  # kept open: the child's sentinel of this process
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        try:
            _send(w, buf.getbuffer())
            _await(self.sentinel, select.POLLIN, "starting a worker")
            try:
                self.pid = forkserver.read_signed(self.sentinel)
            except EOFError:
                raise _server_error("exited while starting a worker") from None
        except BaseException:
            self.finalizer()
            raise
        finally:
            os.close(w)


def _connect(fds):
    """``forkserver.connect_to_new_process``, with the pipes made before connecting."""
    server = forkserver._forkserver
    server.ensure_running()
    if len(fds) + 4 >= forkserver.MAXFDS_TO_SEND:
        raise ValueError("too many fds")
    tracker_fd = resource_tracker.getfd()
    parent_r, child_w = os.pipe()
    try:
        child_r, parent_w = os.pipe()
    except BaseException:
        util.close_fds(parent_r, child_w)
        raise
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(server._forkserver_address)
            reduction.sendfds(client, [child_r, child_w, server._forkserver_alive_fd, tracker_fd, *fds])
    except BaseException:
        util.close_fds(parent_r, parent_w)
        raise
    finally:
        util.close_fds(child_r, child_w)
    return parent_r, parent_w


def _send(fd: int, data: memoryview) -> None:
    """Write ``data`` to the new worker's pipe, waiting for room a bounded time."""
    os.set_blocking(fd, False)
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            _await(fd, select.POLLOUT, "sending a worker its start-up data")
        except BrokenPipeError:
            raise _server_error("closed a new worker's pipe before reading its start-up data") from None


def _await(fd: int, events: int, what: str) -> None:
    """Wait for ``events`` on ``fd``. See NOTE [ Waiting for the fork server ]."""
    poller = select.poll()
    poller.register(fd, events)
    started = time.monotonic()
    stopped_since = None
    while not poller.poll(POLL_S * 1000):
        interrupts.check()
        now = time.monotonic()
        state = _server_state()
        if state is None:
            raise _server_error(f"exited while {what}")
        stopped_since = (stopped_since or now) if state in ("T", "t") else None
        if stopped_since is not None and now - stopped_since >= STOPPED_S:
            raise _server_error(f"is stopped (SIGSTOP, or a debugger) while {what}, so no worker can start; "
                                f"continue it (kill -CONT {_server_pid()}) or end it, then run again")
        if now - started >= START_TIMEOUT_S:
            raise _server_error(f"did not answer within {START_TIMEOUT_S:g} s while {what}")


def _server_pid():
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _server_state():
    """The server's state letter (R, S, T ...), "?" where unknown, None when it is gone."""
    pid = _server_pid()
    if pid is None or not os.path.isdir("/proc/self"):
        return "?"
    stat = proc_stat(pid)
    if stat is None:
        return None if not os.path.exists(f"/proc/{pid}") else "?"
    return None if stat[0] in ("Z", "X") else stat[0]


def server_note(settle: bool = False) -> str:
    """``"; its fork server (pid N) is stopped"`` (or gone) when this process's fork server cannot report
    its workers' ends, else ``""`` (NOTE [ Waiting for the fork server ]). ``settle``: the server may be
    dying (a worker's end read as exit code 255: its pipe closed with no status), so look again for up to
    ``SETTLE_S``."""
    state = _server_state() if _server_pid() is not None else "?"
    deadline = time.monotonic() + (SETTLE_S if settle else 0)
    while state not in (None, "T", "t", "?") and time.monotonic() < deadline:
        time.sleep(0.01)
        state = _server_state()
    if state is None:
        return f"; the fork server that started it (pid {_server_pid()}) is gone (killed?), and its workers with it"
    if state in ("T", "t"):
        return f"; the fork server that started it (pid {_server_pid()}) is stopped (SIGSTOP, or a debugger)"
    return ""


def ended(pid: int) -> bool:
    """Whether the process ``pid`` has ended (gone, or a zombie nobody reaps), where /proc tells."""
    stat = proc_stat(pid)
    return (stat is None and os.path.isdir("/proc/self")) or stat is not None and stat[0] in ("Z", "X")


def _server_error(what: str) -> ResourceError:
    return ResourceError(f"the fork server of the loading workers (pid {_server_pid()}) {what}")


class WorkerProcess(context.ForkServerProcess):
    """A fork-server process that re-runs the main script, as the standard one does."""

    needs_main = True

    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


class MainlessWorkerProcess(WorkerProcess):
    """A fork-server process that does not re-run the main script."""

    needs_main = False


class WorkerContext(context.ForkServerContext):
    Process = WorkerProcess


class MainlessWorkerContext(context.ForkServerContext):
    Process = MainlessWorkerProcess


def worker_context(needs_main: bool) -> context.ForkServerContext:
    """The fork-server context for workers that need the main script, or not."""
    return WorkerContext() if needs_main else MainlessWorkerContext()
