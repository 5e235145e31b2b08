"""How worker processes start: 'fork' where the OS has it, unless asked otherwise.

NOTE [ Start method ]
Forking a process that runs threads can deadlock the child (a lock another
thread held at the fork stays held in the child forever); Python 3.12+ warns
("This process is multi-threaded, use of fork() may lead to deadlocks") and
3.14 stops defaulting to fork on Linux. A speechiter process always runs
threads: importing numpy starts OpenBLAS's, importing torch one of its own,
tqdm a monitor, and the engine converter threads. 'spawn' avoids that: a fresh
interpreter that imports the reader's modules and unpickles the reader (a copy
of the Dataset); batches are the same as with fork (a batch's randomness comes
only from its task's seed, see fetch.py). But each spawned worker imports
numpy, torch and the dataset's modules again: measured, the first batch came
after 2.8 s instead of 0.07 s, and a resume after 7 s. So the default stays
'fork' for now (start_method: spawn opts in); making spawn cheap (no torch
import on the worker's path) is the open part of this note.

Not 'forkserver': to start workers faster its server would have to preload
numpy and the dataset's modules, which start threads in the server and bring
back the very fork it is meant to avoid; without preloads it costs what spawn
costs and leaves a server and a resource-tracker process running.

- ``start_method`` given ('fork', 'forkserver', 'spawn') is used as given.
- A worker factory (or the Dataset of a reader) defined in an interactive
  session's ``__main__`` (a notebook, ``python -c``) cannot be imported by a
  spawned worker: keep 'fork' there.
- A spawned worker imports the main script again (as ``__mp_main__``): a
  script that starts loading at its top level must guard it with
  ``if __name__ == "__main__":``, as for any multiprocessing code.
"""
import multiprocessing
from typing import Optional


def start_method_for(factory, start_method: Optional[str]) -> str:
    """The start method for workers that call ``factory``. See NOTE [ Start method ]."""
    if start_method is not None:
        return start_method
    return start_method_default()


def start_method_default() -> str:
    """'fork' where the OS has it, else 'spawn' (NOTE [ Start method ])."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
