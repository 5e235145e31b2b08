"""How worker processes start: forked from a clean fork server, never from the threaded main process.

NOTE [ Start method ]
Forking a process that runs threads can deadlock the child: a lock another
thread held at the fork stays held in the child forever. A speechiter process
always runs threads (converter threads, thread-mode iterators, the user's own),
and this is not hypothetical: a thread worker of one iterator inside
soundfile's error lock while another iterator forked its workers left a worker
waiting for that lock forever. Python 3.12+ warns about such forks, and 3.14
stops defaulting to fork on Linux.

So workers start with 'forkserver' where the OS has it ('spawn' elsewhere):
Python starts one single-threaded server process the first time, and each
worker is forked from that server, which runs no user code and holds no lock.
Batches are the same as with fork (a batch's randomness comes only from its
task's seed, see fetch.py). To keep starting cheap, the server preloads the
modules workers need (:data:`PRELOAD`, torch when the reader refers to it,
and the storage filesystem its URL values need), once per process; a worker then costs a fork and unpickling its reader
(pickled once per pool, see :class:`PickledFactory`), and re-runs the main
script only when the reader needs it (NOTE [ Main script in workers ] in
forkserver.py).

- ``start_method`` given ('fork', 'forkserver', 'spawn') is used as given.
- A reader that refers to classes defined in an interactive ``__main__`` (a
  notebook, ``python -c``) cannot be unpickled by a worker: there the default
  is 'fork', as before.
- A reader that refers to a class defined in the main script makes each worker
  re-run that script (as ``__mp_main__``): such a script must guard the code
  that starts loading with ``if __name__ == "__main__":``, as for any
  multiprocessing code (:func:`refuse_unguarded_main` says so).
"""
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import sys
import threading
from typing import Any, Callable, Optional, Tuple

# Imported once by the fork server; a failed import is skipped by Python.
PRELOAD = ("numpy", "soundfile", "speechiter.sequence.workers", "speechiter.dataset.reader",
           "speechiter.dataset.speech_text", "speechiter.dataset.random_spk")
# Preloaded too when the pickled reader holds values with the scheme: a fresh worker would import the
# filesystem first (s3fs: ~0.4 s) before its first batch. Imports only: they start no thread.
PRELOAD_FOR_SCHEME = {b"s3://": ("fsspec", "s3fs", "speechiter.io.shards"),
                      b"s3a://": ("fsspec", "s3fs", "speechiter.io.shards"),
                      b"gs://": ("fsspec", "gcsfs", "speechiter.io.shards"),
                      b"gcs://": ("fsspec", "gcsfs", "speechiter.io.shards"),
                      b"http://": ("fsspec", "aiohttp", "speechiter.io.shards"),
                      b"https://": ("fsspec", "aiohttp", "speechiter.io.shards")}
# A worker's exit code when it found the main script starting workers while it re-imported it.
UNGUARDED_MAIN_EXIT = 87
UNGUARDED_MAIN = ("a worker process re-imports the main script (as it does when the dataset refers to a class "
                  "defined there, or with start_method spawn), and that script starts loading at its top level: "
                  "put that code under `if __name__ == \"__main__\":`")


def start_method_default(factory=None) -> str:
    """'forkserver' where the OS has it, else 'spawn'; 'fork' for an interactive ``__main__`` reader."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and factory is not None and _needs_interactive_main(factory):
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def start_method_for(factory, start_method: Optional[str]) -> str:
    """The start method for workers that call ``factory``. See NOTE [ Start method ]."""
    return start_method if start_method is not None else start_method_default(factory)


def worker_start(factory, start_method: Optional[str]) -> Tuple[Any, Callable]:
    """The multiprocessing context to start ``factory``'s workers with, and what to send them:
    ``factory`` itself to forked workers, else a :class:`PickledFactory`."""
    method = start_method_for(factory, start_method)
    ctx = multiprocessing.get_context(method)
    if method == "fork":
        return ctx, factory
    pickled = PickledFactory(factory, method)
    if method == "forkserver":
        _set_preload(pickled)
        from speechiter.sequence import forkserver  # not on Windows, which has no fork server
        if forkserver.SUPPORTED:
            return forkserver.worker_context(pickled.needs_main), pickled
    return ctx, pickled


def refuse_unguarded_main() -> None:
    """Called before starting workers: inside a worker that is re-importing the main script, leave.

    Without this, each worker would try to start workers of its own (multiprocessing
    refuses with a long RuntimeError); the pool raises :data:`UNGUARDED_MAIN` instead.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        os._exit(UNGUARDED_MAIN_EXIT)


def warm_up(factory, start_method: Optional[str]) -> None:
    """Start the fork server in the background now, where workers will start from it.

    Called when an iterator with process workers is built, so that the
    server's start (and its preloads) overlaps with the user's own set-up.
    """
    if _server_running():
        return  # nothing to warm up (and no reason to pickle the reader here)
    if start_method_for(factory, start_method) == "forkserver":
        threading.Thread(target=_start_server, args=(factory,), name="speechiter-forkserver-start",
                         daemon=True).start()


def _start_server(factory) -> None:
    try:
        _set_preload(PickledFactory(factory, "forkserver"))
        multiprocessing.forkserver.ensure_running()
    except Exception:  # the pool's own start raises it again, where the user sees it
        pass


class PickledFactory:
    """A worker factory pickled once, so that N workers do not pickle the reader N times."""

    def __init__(self, factory: Callable, method: str):
        try:
            self.data = pickle.dumps(factory, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise ValueError(f"worker={factory!r} cannot be sent to a {method!r} worker process ({error}); "
                             "define it at module level so that it pickles") from error
        # Whether workers must re-run the main script: see NOTE [ Main script in workers ] in forkserver.py.
        self.needs_main = b"__main__" in self.data
        # Whether unpickling it imports torch: then the fork server imports it once, for all workers.
        self.uses_torch = b"torch" in self.data
        # The storage modules its URL values will need (told by their schemes in the pickle's bytes).
        self.storage_modules = tuple(dict.fromkeys(
            name for scheme, names in PRELOAD_FOR_SCHEME.items() if scheme in self.data for name in names))

    def __call__(self):
        return pickle.loads(self.data)()


def _needs_interactive_main(factory) -> bool:
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__file__", None) is not None:
        return False  # a script or a module: workers can import it
    try:
        return b"__main__" in pickle.dumps(factory, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # not picklable at all: fork, which needs no pickling
        return True


def _server_running() -> bool:
    return getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None) is not None


def _set_preload(pickled: PickledFactory) -> None:
    server = multiprocessing.forkserver._forkserver
    if _server_running():
        return  # already running with its preloads
    modules = list(getattr(server, "_preload_modules", None) or ["__main__"])
    wanted = list(PRELOAD) + (["torch"] if pickled.uses_torch else []) + list(pickled.storage_modules)
    modules += [name for name in wanted if name not in modules]
    multiprocessing.forkserver.set_forkserver_preload(modules)
