"""A pool of daemon threads: what a process's blocked reads may not keep alive at exit.

NOTE [ Abandoned reads ]
``concurrent.futures.ThreadPoolExecutor`` joins its threads when the
interpreter exits, without a time limit. A thread blocked in a read of a
stalled store (each try waits the storage timeout, then is tried again) then
keeps a run that was interrupted alive for minutes after it cleaned up, until
someone kills it. A read in a thread cannot be interrupted, so it is not
waited for: :class:`DaemonThreadPool` runs the same submit/Future protocol on
daemon threads, which the interpreter abandons at exit. Use it for work that
may block on the outside world; see NOTE [ One shutdown path ] in
speechiter/interrupts.py.

Each task runs in a copy of the context of the thread that submitted it (its
context variables, as ``asyncio.to_thread`` does), so a setting such as the
engine's ``hedge`` (NOTE [ Hedged requests ] in speechiter/io/hedged_requests.py)
follows the reads a build starts.
"""
import contextvars
import os
import queue
import threading
from concurrent.futures import Future

__all__ = ["DaemonThreadPool", "ProcessPool"]


class DaemonThreadPool:
    """``submit(fn, *args, **kwargs) -> Future`` on up to ``max_workers`` daemon threads
    named ``<name>_<n>``, started as work arrives. See NOTE [ Abandoned reads ]."""

    def __init__(self, max_workers: int, name: str):
        self._max = max_workers
        self._name = name
        self._work = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, fn, *args, **kwargs) -> Future:
        future = Future()
        self._work.put((future, contextvars.copy_context().run, (fn, *args), kwargs))
        if not self._idle.acquire(timeout=0):
            with self._lock:
                if self._threads < self._max:
                    threading.Thread(target=self._run, name=f"{self._name}_{self._threads}", daemon=True).start()
                    self._threads += 1
        return future

    def _run(self):
        while True:
            future, fn, args, kwargs = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as error:  # handed to whoever waits for the future
                    future.set_exception(error)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()


class ProcessPool:
    """``pool()``: this process's :class:`DaemonThreadPool`, made on first use (a forked child makes its own:
    its parent's threads are not in it)."""

    def __init__(self, max_workers: int, name: str):
        self._max, self._name = max_workers, name
        self._pool, self._pid = None, None
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):  # a lock held by a thread at the fork would stay held in the child
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._pool, self._pid, self._lock = None, None, threading.Lock()

    def __call__(self) -> DaemonThreadPool:
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool, self._pid = DaemonThreadPool(self._max, self._name), os.getpid()
            return self._pool
