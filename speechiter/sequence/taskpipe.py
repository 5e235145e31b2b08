"""Sending tasks to one worker process through a pipe, without ever blocking.

multiprocessing.Queue hands each put() to a feeder thread, and that thread
switch (and its fight for the GIL with the consumer) cost msequence about 12%
of its wav throughput on 2 cores. A :class:`TaskPipe` writes the message itself,
in the Connection wire format (4-byte big-endian length, then the pickle), to
a non-blocking pipe: what the pipe cannot take now stays in ``_unsent`` and goes
out on a later :meth:`flush`. So the main process never waits for a worker to
read, also when the worker is stuck or dead. The worker reads with the plain
``Connection.poll`` / ``recv`` of :attr:`reader`.

The pipe holds 64 KiB, far more than the tasks in flight to one worker
(a task is its utterance ids), so ``_unsent`` stays empty in practice.
"""
import os
import pickle
import struct

__all__ = ["TaskPipe"]


class TaskPipe:
    def __init__(self, ctx):
        self.reader, self._writer = ctx.Pipe(duplex=False)
        self._fd = self._writer.fileno()
        os.set_blocking(self._fd, False)
        self._unsent = bytearray()
        self.broken = False  # the worker's end is closed: it is gone

    def send(self, msg) -> None:
        """Queue ``msg`` for the worker and write what the pipe takes now."""
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self._unsent += struct.pack("!i", len(data))
        self._unsent += data
        self.flush()

    def flush(self) -> None:
        while self._unsent and not self.broken:
            try:
                written = os.write(self._fd, self._unsent)
            except BlockingIOError:
                return
            except (BrokenPipeError, OSError):
                self.broken = True  # the pool learns of the death from the process sentinel
                return
            del self._unsent[:written]

    @property
    def pending(self) -> bool:
        """Whether some of what was sent is still waiting for room in the pipe."""
        return bool(self._unsent) and not self.broken

    def close_reader(self) -> None:
        """Close this process's copy of the worker's end, once the worker has it."""
        self.reader.close()

    def close(self) -> None:
        self._writer.close()
        if not self.reader.closed:
            self.reader.close()
