"""Loading workers: the worker loops (module level) and their control messages.

Each worker has its own task channel (so the scheduler decides which worker
builds which batch) and its own indexer, built once by calling the user's
``worker`` factory inside the worker. Workers answer every :class:`Fetch` with
a :class:`Done` or a :class:`Failed`; they never raise across the boundary.
The pools that run them are in pools.py.
"""
import collections
import os
import pickle
import queue
import select
import signal
import traceback
from dataclasses import dataclass
from typing import Any, List, Optional

from speechiter.messages import worker_warnings
from speechiter.sequence.cpu_policy import run_as_batch_work
from speechiter.sequence.fetch import READ_AHEAD, Task, fetch, prepare, same_task
from speechiter.sequence.lifeline import die_with_parent, leave_fork_server, orphaned
from speechiter.sequence.limits import explain
from speechiter.sequence.shm import SlotRef, SlotWriter, leftover_segments, unlink_segment
from speechiter.sequence.threads import ThreadCap
from speechiter.sequence.torch_rng import check_after_batch

# NOTE [ Queued tasks ]
# A worker's next tasks already wait in its channel: Fetch messages within the
# buffer, and Upcoming ones, promised after it (NOTE [ Promised tasks ] in
# promises.py). Before it builds a batch, a worker takes every message
# waiting in its channel, and tells the indexer the ids of that batch and of the
# next ones (READ_AHEAD + 1 at most), so their reads start while this batch is
# built (NOTE [ Reading ahead ] in speechiter/dataset/prefetch.py); its Done
# says whether the indexer reads ahead at all (fetch.prepare). Fetch and Stop
# are then handled in the order they came: only when they are read off the
# channel changes. The scheduler builds every task it sends (a discarded one's
# result is dropped), so reads started ahead are not wasted.

# The longest any wait of the msequence engine blocks before it checks on the other
# side: an idle worker checks that its parent is alive and that the pool is
# not shutting down; the consumer checks that its workers are alive (see
# NOTE [ Never wait forever ] in pool_scheduler.py).
POLL_S = 0.25


@dataclass(frozen=True)
class Fetch:
    """Build ``task``; ``seq`` is the scheduler's global sequence number."""

    seq: int
    task: Task
    slot: Optional[SlotRef] = None  # process mode: where to put the arrays


@dataclass(frozen=True)
class Upcoming:
    """A task this worker will be sent later: only start its reads. See NOTE [ Promised tasks ]
    in promises.py."""

    task: Task


@dataclass(frozen=True)
class Stop:
    """End the worker loop."""


@dataclass(frozen=True)
class Done:
    seq: int
    wid: int
    payload: Any  # Packed (process mode) or the batch itself (thread mode)
    read_ahead: bool = False  # the indexer started reads of this batch or the next early


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
    error = explain(error)  # NOTE [ Machine limits ] in limits.py
    kind = type(error).__qualname__
    module = type(error).__module__
    if module not in ("builtins", "__main__"):
        kind = f"{module}.{kind}"
    exit_code = getattr(error, "exit_code", 1)
    if not isinstance(exit_code, int) or isinstance(exit_code, bool):
        exit_code = 1
    return Failed(seq, wid, kind, str(error), traceback.format_exc(), exit_code)


def _build(msg: Fetch, indexer, wid: int, writer: Optional[SlotWriter], upcoming=()):
    """Build ``msg``'s batch; ``upcoming``: the tasks this worker builds next (See NOTE [ Queued tasks ])."""
    try:
        ahead = prepare(indexer, (msg.task, *upcoming))  # this batch's reads first, unless already started
        if writer is None:
            return Done(msg.seq, wid, fetch(indexer, msg.task), ahead)
        with writer.building(msg.slot) as arena:  # See NOTE [ Batch arrays in place ]
            return Done(msg.seq, wid, writer.pack(fetch(indexer, msg.task), msg.slot, arena), ahead)
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


def _make_indexer(factory, wid: int, send):
    """The worker's indexer, or None after sending the failure to build it."""
    try:
        return factory()
    except Exception as error:
        send(_failure(None, wid, error))
        return None


class _Queued:
    """The messages a worker received and has not handled yet. See NOTE [ Queued tasks ]."""

    def __init__(self, indexer):
        self._messages = collections.deque()  # Fetch and Stop, in order
        self._promised = collections.deque()  # tasks of Upcoming messages, in order
        self._indexer = indexer

    def __bool__(self):
        return bool(self._messages)

    def add(self, msg) -> None:
        if not isinstance(msg, Upcoming):
            self._messages.append(msg)
        elif not self._messages:  # idle: start its reads now
            self._promised.append(msg.task)
            prepare(self._indexer, self.upcoming())
        else:
            self._promised.append(msg.task)

    def next(self):
        msg = self._messages.popleft()
        if isinstance(msg, Fetch):
            for i, task in enumerate(self._promised):
                if same_task(task, msg.task):  # promised, now sent: See NOTE [ Promised tasks ]
                    for _ in range(i + 1):
                        self._promised.popleft()
                    break
        return msg

    def upcoming(self) -> List[Task]:
        """The tasks to build after the next message, the promised ones last (at most READ_AHEAD + 1)."""
        tasks = [m.task for m in self._messages if isinstance(m, Fetch)]
        tasks += [t for t in self._promised if not any(same_task(t, s) for s in tasks)]
        return tasks[:READ_AHEAD + 1]


class _Readable:
    """``Connection.poll(timeout)`` in one poll(2) call: the connection's own builds a selector on every call,
    and a worker polls its pipes several times per batch. Readable also at end of file (``recv`` raises then).
    """

    def __init__(self, conn):
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN)

    def __call__(self, timeout: float = 0.0) -> bool:
        return bool(self._poller.poll(timeout * 1000))


def proc_worker_loop(wid, factory, tasks, results, done, prefix, parent_pid, environ=None, threads=1):
    """The loop of one worker process. Module level, so 'spawn' can import it.

    ``done`` is the read end of the pool's done pipe: readable once the pool closes.
    ``parent_pid``: the process that starts the workers; None for the fork server, whose child this
    is (it ends when the main process does). See NOTE [ Parent death ] in lifeline.py.
    ``environ``: the main process's environment, for a worker that did not inherit it.
    ``threads``: the worker's numeric libraries' threads (NOTE [ One thread per worker ] in threads.py).
    """
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    cap = ThreadCap(threads, per_thread=False)
    worker_warnings()  # NOTE [ One line per problem ] in speechiter/messages.py
    leave_fork_server()
    if parent_pid is None:
        parent_pid = os.getppid()
    if not die_with_parent(parent_pid):
        return
    # Ctrl-C goes to the whole process group: the main process handles it and
    # ends the workers (see NOTE [ Shutdown order ] in scheduler.py); workers stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # terminate() ends it, whatever a forked parent handled
    run_as_batch_work()  # NOTE [ Workers as batch work ] in cpu_policy.py
    writer = SlotWriter(prefix, wid, tracked=True)  # NOTE [ Segments of a killed main process ]
    try:
        indexer = _make_indexer(factory, wid, results.send)
        if indexer is None:
            return
        cap.check()  # building the indexer may have imported torch (LogMel does)
        queued = _Queued(indexer)
        waiting, stopping = _Readable(tasks), _Readable(done)
        while not stopping():
            if not queued:
                if not waiting(POLL_S):
                    if orphaned(parent_pid):
                        # The main process died without cleaning up (where the kernel did not
                        # end us, see lifeline.py). Each worker sweeps the session's segments
                        # as it leaves; the last one gets all.
                        for name in leftover_segments(prefix):
                            unlink_segment(name, tracked=True)
                        return
                    continue
                while waiting():
                    queued.add(tasks.recv())
                continue
            msg = queued.next()
            if isinstance(msg, Stop) or stopping():
                return
            while waiting():
                queued.add(tasks.recv())
            cap.check()
            reply = _build(msg, indexer, wid, writer, queued.upcoming())
            try:
                results.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError) as error:
                # Connection.send pickles before it writes: nothing was sent.
                results.send(_failure(msg.seq, wid, error))
    except (BrokenPipeError, EOFError, OSError, KeyboardInterrupt):
        return  # the main process closed our pipes or is gone
    finally:
        writer.close()


def thread_worker_loop(wid, factory, tasks, results, done, threads=1):
    """The loop of one worker thread: like proc_worker_loop, objects passed as they are."""
    cap = ThreadCap(threads, per_thread=True)
    indexer = _make_indexer(factory, wid, results.put)
    if indexer is None:
        return
    cap.check()
    queued = _Queued(indexer)
    while not done.is_set():
        if not queued:
            try:
                queued.add(tasks.get(timeout=POLL_S))
            except queue.Empty:
                pass
            continue
        msg = queued.next()
        if isinstance(msg, Stop) or done.is_set():
            return
        while True:
            try:
                queued.add(tasks.get_nowait())
            except queue.Empty:
                break
        cap.check()
        results.put(_build(msg, indexer, wid, None, queued.upcoming()))
        check_after_batch(msg.task.seed)  # NOTE [ torch's generator in thread workers ]
