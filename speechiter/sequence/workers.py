"""Loading workers: the worker loops (module level), control messages, pools.

A pool runs ``num_workers`` workers, each with its own task channel (so the
scheduler decides which worker builds which batch) and its own indexer, built
once by calling the user's ``worker`` factory inside the worker. Workers answer
every :class:`Fetch` with a :class:`Done` or a :class:`Failed`; they never raise
across the boundary. The main process polls with short timeouts and watches
the workers' liveness, see NOTE [ Never wait forever ] in scheduler.py.
"""
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from speechiter.sequence.fetch import Task, fetch
from speechiter.sequence.shm import SlotRef, SlotWriter, leftover_segments, unlink_segment
from speechiter.sequence.taskpipe import TaskPipe

# How often an idle worker checks that its parent is alive and that the pool
# is not shutting down.
_POLL_S = 0.25
# How soon the main process retries writing to a task pipe that was full.
_FLUSH_S = 0.005


@dataclass(frozen=True)
class Fetch:
    """Build ``task``; ``seq`` is the scheduler's global sequence number."""

    seq: int
    task: Task
    slot: Optional[SlotRef] = None  # process mode: where to put the arrays


@dataclass(frozen=True)
class Stop:
    """End the worker loop."""


@dataclass(frozen=True)
class Done:
    seq: int
    wid: int
    payload: Any  # Packed (process mode) or the batch itself (thread mode)


@dataclass(frozen=True)
class Failed:
    """An exception in a worker, as text. ``seq`` None: building the indexer failed."""

    seq: Optional[int]
    wid: int
    kind: str
    message: str
    traceback: str
    exit_code: int


def _failure(seq, wid, error: BaseException) -> Failed:
    kind = type(error).__qualname__
    module = type(error).__module__
    if module not in ("builtins", "__main__"):
        kind = f"{module}.{kind}"
    exit_code = getattr(error, "exit_code", 1)
    if not isinstance(exit_code, int) or isinstance(exit_code, bool):
        exit_code = 1
    return Failed(seq, wid, kind, str(error), traceback.format_exc(), exit_code)


def _build(msg: Fetch, indexer, wid: int, writer: Optional[SlotWriter]):
    try:
        if writer is None:
            return Done(msg.seq, wid, fetch(indexer, msg.task))
        with writer.building(msg.slot) as arena:  # See NOTE [ Batch arrays in place ]
            return Done(msg.seq, wid, writer.pack(fetch(indexer, msg.task), msg.slot, arena))
    except Exception as error:
        return _failure(msg.seq, wid, error)


def describe_exit(exitcode: Optional[int]) -> str:
    """``'signal 9: SIGKILL'`` or ``'exit code 3'``."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"signal {-exitcode}: {name}"
    return f"exit code {exitcode}"


# ----------------------------------------------------------------- processes


def proc_worker_loop(wid, factory, tasks, results, done, prefix, parent_pid):
    """The loop of one worker process. Module level, so 'spawn' can import it."""
    # Ctrl-C goes to the whole process group: the main process handles it and
    # ends the workers (see NOTE [ Shutdown order ]); workers stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    writer = SlotWriter(prefix, wid)
    try:
        try:
            indexer = factory()
        except Exception as error:
            results.send(_failure(None, wid, error))
            return
        while not done.is_set():
            if not tasks.poll(_POLL_S):
                if os.getppid() != parent_pid:
                    # Orphaned: the main process died without cleaning up. Each worker
                    # sweeps the session's segments as it leaves; the last one gets all.
                    for name in leftover_segments(prefix):
                        unlink_segment(name)
                    return
                continue
            msg = tasks.recv()
            if isinstance(msg, Stop) or done.is_set():
                return
            reply = _build(msg, indexer, wid, writer)
            try:
                results.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError) as error:
                # Connection.send pickles before it writes: nothing was sent.
                results.send(_failure(msg.seq, wid, error))
    except (BrokenPipeError, EOFError, OSError, KeyboardInterrupt):
        return  # the main process closed our pipes or is gone
    finally:
        writer.close()


class ProcPool:
    """``num_workers`` worker processes, a task pipe each, a result pipe each."""

    kind = "process"

    def __init__(self, factory, num_workers: int, prefix: str, start_method: Optional[str] = None):
        ctx = multiprocessing.get_context(start_method)
        self._done = ctx.Event()
        self._task_pipes, self._readers, self._procs = [], [], []
        try:
            for wid in range(num_workers):
                tasks = TaskPipe(ctx)
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=proc_worker_loop,
                    args=(wid, factory, tasks.reader, writer, self._done, prefix, os.getpid()),
                    name=f"speechiter-worker-{wid}", daemon=True)
                self._task_pipes.append(tasks)
                self._readers.append(reader)
                self._procs.append(proc)
                try:
                    proc.start()
                except (pickle.PicklingError, AttributeError, TypeError) as error:
                    raise ValueError(f"worker={factory!r} cannot be sent to a {ctx.get_start_method()!r} worker "
                                     f"process ({error}); define it at module level so that it pickles") from error
                finally:
                    writer.close()  # the worker's ends: only the worker holds them
                    tasks.close_reader()
        except BaseException:
            self.close()
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
        messages, dead = [], []
        for obj in ready:
            wid = self._owner[obj]
            if obj is self._readers[wid]:
                self._drain(obj, messages)
        for obj in ready:
            wid = self._owner[obj]
            if obj is not self._readers[wid]:
                self._drain(self._readers[wid], messages)  # what it sent before dying
                self._procs[wid].join(0.5)
                self._open.remove(obj)
                dead.append((wid, describe_exit(self._procs[wid].exitcode)))
        return messages, dead

    def _drain(self, reader, messages):
        try:
            while reader.poll():
                messages.append(reader.recv())
        except (EOFError, OSError):
            if reader in self._open:
                self._open.remove(reader)

    def close(self, grace: float = 1.0) -> List[str]:
        """End all workers: ask, wait ``grace`` seconds, terminate, kill. Idempotent.

        See NOTE [ Shutdown order ] in scheduler.py.
        """
        self._done.set()
        for tasks in self._task_pipes:
            tasks.send(Stop())
        deadline = time.monotonic() + grace
        for proc in self._procs:
            if proc.pid is not None:
                proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.pid is not None and proc.is_alive():
                proc.terminate()
                proc.join(1.0)
            if proc.pid is not None and proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for tasks in self._task_pipes:
            tasks.close()
        for reader in self._readers:
            reader.close()
        for proc in self._procs:
            if proc.pid is not None and proc.exitcode is not None:
                proc.close()
        self._task_pipes, self._readers, self._procs, self._open = [], [], [], []
        return []


# ------------------------------------------------------------------- threads


def thread_worker_loop(wid, factory, tasks, results, done):
    """The loop of one worker thread: like proc_worker_loop, objects passed as they are."""
    try:
        indexer = factory()
    except Exception as error:
        results.put(_failure(None, wid, error))
        return
    while not done.is_set():
        try:
            msg = tasks.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if isinstance(msg, Stop) or done.is_set():
            return
        results.put(_build(msg, indexer, wid, None))


class ThreadPool:
    """``num_workers`` worker threads sharing one result queue."""

    kind = "thread"

    def __init__(self, factory, num_workers: int):
        self._done = threading.Event()
        self._results = queue.SimpleQueue()
        self._queues = [queue.SimpleQueue() for _ in range(num_workers)]
        self._threads = [
            threading.Thread(target=thread_worker_loop, name=f"speechiter-worker-{wid}", daemon=True,
                             args=(wid, factory, self._queues[wid], self._results, self._done))
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

    def recv(self, timeout: float):
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

    def close(self, grace: float = 1.0) -> List[str]:
        """Stop the threads; returns the names of threads still busy in user code."""
        self._done.set()
        for tasks in self._queues:
            tasks.put(Stop())
        deadline = time.monotonic() + grace
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        self._threads, self._queues = [], []
        return stuck
