"""How worker processes start: 'spawn' unless asked otherwise.

NOTE [ Start method ]
Forking a process that runs threads can deadlock the child (a lock another
thread held at the fork stays held in the child forever); Python 3.12+ warns
("This process is multi-threaded, use of fork() may lead to deadlocks") and
3.14 stops defaulting to fork on Linux. A speechiter process always runs
threads: importing numpy starts OpenBLAS's, importing torch one of its own,
tqdm a monitor, and the engine converter threads. So by default workers start
with 'spawn': a fresh interpreter that imports the reader's modules and
unpickles the reader (a copy of the Dataset). Batches are the same as with
fork (a batch's randomness comes only from its task's seed, see fetch.py);
workers persist for the life of an Iterator, so the imports cost once per start.

Not 'forkserver': to start workers faster its server would have to preload
numpy and the dataset's modules, which start threads in the server and bring
back the very fork it is meant to avoid; without preloads it costs what spawn
costs and leaves a server and a resource-tracker process running.

- ``start_method`` given ('fork', 'forkserver', 'spawn') is used as given.
- A worker factory (or the Dataset of a reader) defined in an interactive
  session's ``__main__`` (a notebook, ``python -c``) cannot be imported by a
  spawned worker: then 'fork', with a RuntimeWarning.
- A spawned worker imports the main script again (as ``__mp_main__``): a
  script that starts loading at its top level must guard it with
  ``if __name__ == "__main__":``, as for any multiprocessing code.
"""
import multiprocessing
import sys
import warnings
from typing import Optional


def _defined_in_interactive_main(factory) -> bool:
    if getattr(sys.modules.get("__main__"), "__file__", None) is not None:
        return False  # a script: spawned workers import it too
    for obj in (factory, getattr(factory, "dataset", None)):
        if obj is not None and "__main__" in (getattr(obj, "__module__", None), type(obj).__module__):
            return True
    return False


def start_method_for(factory, start_method: Optional[str]) -> str:
    """The start method for workers that call ``factory``. See NOTE [ Start method ]."""
    if start_method is not None:
        return start_method
    if _defined_in_interactive_main(factory) and "fork" in multiprocessing.get_all_start_methods():
        warnings.warn(f"worker={factory!r} is defined in an interactive session's __main__, which spawned workers "
                      "cannot import: starting them with 'fork', which may deadlock in a process that runs "
                      "threads. Define it in a module (or set start_method) to silence this.",
                      RuntimeWarning, stacklevel=4)
        return "fork"
    return "spawn"
