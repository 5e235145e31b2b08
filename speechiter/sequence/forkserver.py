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
Python 3.10 to 3.13) with that one entry left out; elsewhere the standard
context is used.
"""
import io
import os
import sys
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util

_MAIN_ENTRIES = ("init_main_from_path", "init_main_from_name")
SUPPORTED = (3, 10) <= sys.version_info[:2] <= (3, 13)


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
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)  # kept open: the child's sentinel of this process
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


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
