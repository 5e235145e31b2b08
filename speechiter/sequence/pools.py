"""Worker pools: ``num_workers`` loading workers as processes or threads.

Both pools follow :class:`WorkerPool`, the protocol the pool scheduler drives
(pool_scheduler.py): the scheduler sends each worker its own tasks, polls for
replies with a timeout and learns of dead workers from :meth:`recv`. The
worker loops and messages are in workers.py.
"""
import multiprocessing.connection
import multiprocessing.process
import os
import queue
import threading
import time
import warnings
from multiprocessing import resource_tracker
from typing import Any, List, Optional, Protocol, Tuple

from speechiter.sequence.forkserver import ended, server_note
from speechiter.sequence.limits import check_open_files, is_emfile, open_files_error
from speechiter.sequence.start import UNGUARDED_MAIN, UNGUARDED_MAIN_EXIT, refuse_unguarded_main, worker_start
from speechiter.sequence.taskpipe import TaskPipe
from speechiter.sequence.workers import POLL_S, Stop, describe_exit, proc_worker_loop, thread_worker_loop

# How long workers get to finish their batch and leave after Stop, before
# processes are terminated (threads cannot be) on close.
STOP_GRACE_S = 1.0
# How long to wait for a process to end after terminate(), then after kill().
_SIGNAL_WAIT_S = 1.0
# A worker whose sentinel fired has exited: joining it only reaps it.
_REAP_S = 0.5
# How soon the main process retries writing to a task pipe that was full.
_FLUSH_S = 0.005


class WorkerPool(Protocol):
    """Workers ``0 .. len(pool) - 1``, each with its own task channel."""

    def __len__(self) -> int: ...

    def pid(self, wid: int) -> Optional[int]:
        """The worker's process id (the main process's for threads)."""

    def send(self, wid: int, msg: Any) -> None:
        """Queue a message for one worker; never blocks."""

    def recv(self, timeout: float) -> Tuple[List[Any], List[Tuple[int, str]]]:
        """Replies that arrived within ``timeout``, and ``(wid, how)`` for each worker found dead."""

    def close(self) -> None:
        """Stop every worker. Idempotent."""


class ProcPool:
    """``num_workers`` worker processes, a task pipe each, a result pipe each."""

    def __init__(self, factory, num_workers: int, prefix: str, start_method: Optional[str] = None,
                 threads: int = 1):
        refuse_unguarded_main()
        check_open_files(num_workers)  # NOTE [ Machine limits ] in limits.py
        ctx, factory = worker_start(factory, start_method)
        forked = ctx.get_start_method() == "fork"
        self._server_note = server_note if ctx.get_start_method() == "forkserver" else lambda settle=False: ""
        # A worker checks on the process that started it: this one, or the fork server (lifeline.py).
        parent_pid = os.getpid() if ctx.get_start_method() != "forkserver" else None
        self._task_pipes, self._readers, self._procs = [], [], []
        self._done = self._done_writer = None
        try:
            # Started before any worker, so that every worker (forked ones too) shares this process's
            # tracker: NOTE [ Segments of a killed main process ] in shm/segments.py.
            resource_tracker.ensure_running()
            # Readable for every worker once close() writes to it. A pipe, not an Event: a
            # semaphore would start Python's resource tracker process with 'spawn'.
            self._done, self._done_writer = ctx.Pipe(duplex=False)
            # The fork server's environment is from its own start: workers get this one's, as with fork.
            environ = None if forked else dict(os.environ)
            for wid in range(num_workers):
                tasks = TaskPipe(ctx)
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=proc_worker_loop,
                    args=(wid, factory, tasks.reader, writer, self._done, prefix, parent_pid, environ, threads),
                    name=f"speechiter-worker-{wid}", daemon=True)
                self._task_pipes.append(tasks)
                self._readers.append(reader)
                self._procs.append(proc)
                try:
                    proc.start()
                finally:
                    writer.close()  # the worker's ends: only the worker holds them
                    tasks.close_reader()
        except BaseException as error:
            self.close()
            if is_emfile(error):
                raise open_files_error(num_workers) from error
            raise
        self._owner = {reader: wid for wid, reader in enumerate(self._readers)}
        self._owner.update({proc.sentinel: wid for wid, proc in enumerate(self._procs)})
        self._open = list(self._owner)

    def __len__(self):
        return len(self._procs)

    def pid(self, wid: int) -> Optional[int]:
        return self._procs[wid].pid

    def send(self, wid: int, msg) -> None:
        self._task_pipes[wid].send(msg)

    def recv(self, timeout: float) -> Tuple[List[Any], List[Tuple[int, str]]]:
        """Messages that arrived within ``timeout``, and workers that died."""
        for tasks in self._task_pipes:
            tasks.flush()
        if any(tasks.pending for tasks in self._task_pipes):
            timeout = min(timeout, _FLUSH_S)  # a full task pipe: come back soon to write the rest
        ready = multiprocessing.connection.wait(self._open, timeout)
        messages, dead, closed = [], [], []
        for obj in ready:
            wid = self._owner[obj]
            if obj is self._readers[wid] and not self._drain(obj, messages):
                closed.append(wid)
        for obj in ready:
            wid = self._owner[obj]
            if obj is not self._readers[wid]:
                self._drain(self._readers[wid], messages)  # what it sent before dying
                self._procs[wid].join(_REAP_S)
                self._open.remove(obj)
                if self._procs[wid].exitcode == UNGUARDED_MAIN_EXIT:
                    raise RuntimeError(UNGUARDED_MAIN)
                exitcode = self._procs[wid].exitcode  # 255: its server closed the pipe with no status
                dead.append((wid, describe_exit(exitcode) + self._server_note(exitcode == 255)))
        for wid in closed:  # See NOTE [ Waiting for the fork server ] in forkserver.py
            proc = self._procs[wid]
            if proc.sentinel in self._open and not proc.join(_REAP_S) and proc.exitcode is None and ended(proc.pid):
                self._open.remove(proc.sentinel)
                dead.append((wid, "its end was not reported" + self._server_note()))
        return messages, dead

    def _drain(self, reader, messages) -> bool:
        """Take what ``reader`` holds; False once the worker has closed it (it has ended)."""
        try:
            while reader.poll():
                messages.append(reader.recv())
        except (EOFError, OSError):
            if reader in self._open:
                self._open.remove(reader)
            return False
        return True

    def close(self) -> None:
        """End all workers: ask, wait ``STOP_GRACE_S``, terminate, kill. Idempotent.

        Every process has ended, or was killed and abandoned, when it returns (at most
        ``STOP_GRACE_S + 2 * _SIGNAL_WAIT_S``). See NOTE [ Shutdown order ] in scheduler.py.
        """
        if self._done_writer is not None and not self._done_writer.closed:
            try:
                self._done_writer.send_bytes(b"")  # never read: it stays readable for every worker
            except OSError:
                pass  # every worker is gone already
        for tasks in self._task_pipes:
            tasks.send(Stop())
        procs = [proc for proc in self._procs if proc.pid is not None]
        _join_all(procs, STOP_GRACE_S)
        for stop in ("terminate", "kill"):
            alive = [proc for proc in procs if proc.is_alive()]
            for proc in alive:
                getattr(proc, stop)()
            _join_all(alive, _SIGNAL_WAIT_S)
        for tasks in self._task_pipes:
            tasks.close()
        for reader in self._readers:
            reader.close()
        for end in (self._done, self._done_writer):
            if end is not None:
                end.close()
        for proc in procs:
            if proc.exitcode is not None:
                proc.close()
            else:
                _abandon(proc)
        self._task_pipes, self._readers, self._procs, self._open = [], [], [], []


def _join_all(procs, seconds: float) -> None:
    """Wait up to ``seconds`` in all for ``procs`` to end."""
    deadline = time.monotonic() + seconds
    alive = [proc for proc in procs if proc.is_alive()]
    while alive:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        multiprocessing.connection.wait([proc.sentinel for proc in alive], min(remaining, POLL_S))
        alive = [proc for proc in alive if proc.is_alive()]


def _abandon(proc) -> None:
    """Forget a killed worker whose end its fork server never reported (a stopped server).

    multiprocessing joins its live children at exit, without a time limit: that
    join would wait for the server forever.
    """
    multiprocessing.process._children.discard(proc)


class ThreadPool:
    """``num_workers`` worker threads sharing one result queue."""

    def __init__(self, factory, num_workers: int, threads: int = 1):
        self._done = threading.Event()
        self._results = queue.SimpleQueue()
        self._queues = [queue.SimpleQueue() for _ in range(num_workers)]
        self._threads = [
            threading.Thread(target=thread_worker_loop, name=f"speechiter-worker-{wid}", daemon=True,
                             args=(wid, factory, self._queues[wid], self._results, self._done, threads))
            for wid in range(num_workers)]
        for thread in self._threads:
            thread.start()
        self._reported = set()

    def __len__(self):
        return len(self._threads)

    def pid(self, wid: int) -> int:
        return os.getpid()

    def send(self, wid: int, msg) -> None:
        self._queues[wid].put(msg)

    def recv(self, timeout: float) -> Tuple[List[Any], List[Tuple[int, str]]]:
        messages, dead = [], []
        try:
            messages.append(self._results.get(timeout=timeout))
            while True:
                messages.append(self._results.get_nowait())
        except queue.Empty:
            pass
        if not messages:
            for wid, thread in enumerate(self._threads):
                if not thread.is_alive() and wid not in self._reported:
                    self._reported.add(wid)
                    dead.append((wid, "thread ended"))
        return messages, dead

    def close(self) -> None:
        """Stop the threads, waiting up to ``STOP_GRACE_S``. Idempotent.

        Python cannot stop a thread: one still busy in the indexer then is
        left to end with its batch, with a RuntimeWarning naming it; it is a
        daemon thread, so a batch that never ends (a read of a stalled store)
        does not keep the process alive at exit (NOTE [ One shutdown path ] in
        speechiter/interrupts.py).
        """
        self._done.set()
        for tasks in self._queues:
            tasks.put(Stop())
        deadline = time.monotonic() + STOP_GRACE_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        self._threads, self._queues = [], []
        if stuck:
            warnings.warn(f"loading worker threads {stuck} are still busy in the indexer and cannot be "
                          "stopped; they end when their current batch does (or with the process)",
                          RuntimeWarning, stacklevel=3)
