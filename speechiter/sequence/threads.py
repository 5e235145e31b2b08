"""How many threads a loading worker's numeric libraries use: ``worker_threads`` (1 by default).

NOTE [ One thread per worker ]
A worker is one core's worth of loading: the engine runs as many workers as
there are cores to give. torch, OpenMP, MKL and OpenBLAS each start one
thread per core by default, so N workers computing log-mel could run N times
the node's cores in threads, which made 2 workers slower than the inline
engine on 2 cores (issue 29). So every worker runs its numeric libraries on
``worker_threads`` threads, before its first batch and whatever it imports
later; the main process's settings are left as they are.

- Process workers (a :class:`ThreadCap`, first thing in the worker): the
  variables of :data:`THREAD_VARIABLES` are set in the worker's environment,
  so a library loaded later (torch imported lazily by a dataset's first
  log-mel, and its OpenMP and MKL) starts with that many threads;
  ``torch.set_num_threads`` and OpenBLAS's own setter cap those loaded
  already (the fork server preloads numpy, and torch when the reader refers
  to it). :meth:`ThreadCap.check` calls ``torch.set_num_threads`` again once
  torch appears, before the next batch.
- Thread workers share the main process: torch's thread count and the
  environment are the process's, so they stay the main process's. What a
  thread can set for itself is set (``ThreadCap(per_thread=True)``): OpenMP's
  ``nthreads`` ICV (per thread; torch's own kernels read it through
  ``omp_get_max_threads``), MKL's ``MKL_Set_Num_Threads_Local`` and
  OpenBLAS's ``openblas_set_num_threads_local`` (0.3.27 and later), found in
  the libraries loaded in the process. torch reads OpenMP's value in a thread
  once, at its first parallel call there: the cap first makes that call
  (``torch.get_num_threads()``), then sets the thread's own values, once
  torch is imported (again checked before each batch).
"""
import ctypes
import os
import sys
from typing import Dict, List


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")
# Setters of the calling thread's count, then of the whole process's (OpenBLAS's names vary by build).
THREAD_SETTERS = ("omp_set_num_threads", "MKL_Set_Num_Threads_Local", "openblas_set_num_threads_local")
PROCESS_SETTERS = ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_",
                   "scipy_openblas_set_num_threads")


class ThreadCap:
    """Caps the calling worker now, and again once torch appears (:meth:`check`, before each batch: a dict
    lookup once torch was seen). ``per_thread``: a thread worker. See NOTE [ One thread per worker ]."""

    def __init__(self, threads: int, per_thread: bool):
        self.threads = threads
        self.per_thread = per_thread
        if not per_thread:
            for name in THREAD_VARIABLES:
                os.environ[name] = str(threads)
            _call(PROCESS_SETTERS, threads)
        self._cap()

    def check(self) -> None:
        if not self._torch_seen and "torch" in sys.modules:
            self._cap()

    def _cap(self) -> None:
        torch = imported_torch()
        self._torch_seen = torch is not None
        if torch is not None and self.per_thread:
            torch.get_num_threads()  # torch reads OpenMP's count in this thread now, not after the cap
        elif torch is not None:
            torch.set_num_threads(self.threads)
        _call(THREAD_SETTERS, self.threads)


def thread_counts() -> Dict[str, int]:
    """The calling thread's counts: torch's (if imported) and OpenMP's, MKL's and OpenBLAS's (where loaded)."""
    counts = {}
    torch = imported_torch()
    if torch is not None:
        counts["torch"] = torch.get_num_threads()
    for key, names in (("openmp", ("omp_get_max_threads",)), ("mkl", ("MKL_Get_Max_Threads",)),
                       ("openblas", ("openblas_get_num_threads", "openblas_get_num_threads64_",
                                     "scipy_openblas_get_num_threads64_"))):
        functions = _functions(names)
        if functions:
            counts[key] = max(int(function()) for function in functions)
    return counts


def imported_torch():
    """torch once its import has finished, else None: a thread worker may look while the main thread (or
    another worker) is still importing it, and a partly initialised torch has no ``get_num_threads`` yet."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    return torch


def _call(names, threads: int) -> None:
    for function in _functions(names):
        function(ctypes.c_int(threads))


def _functions(names) -> List:
    """The distinct functions of ``names`` in the shared libraries this process has loaded (Linux)."""
    functions, seen = [], set()
    for library in _loaded_libraries():
        for name in names:
            function = getattr(library, name, None)
            address = ctypes.cast(function, ctypes.c_void_p).value if function is not None else None
            if address is not None and address not in seen:
                seen.add(address)
                functions.append(function)
    return functions


def _loaded_libraries() -> List[ctypes.CDLL]:
    try:
        with open("/proc/self/maps") as maps:
            paths = dict.fromkeys(line.split()[-1] for line in maps if ".so" in line and "/" in line)
    except OSError:  # not Linux: environment variables and torch only
        return []
    libraries = []
    for path in paths:
        if any(key in os.path.basename(path) for key in ("omp", "mkl", "blas", "torch_cpu")):
            try:
                libraries.append(ctypes.CDLL(path))
            except OSError:
                pass
    return libraries
