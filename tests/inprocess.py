"""The command line in this process: ``run_cli(*argv, module="speechiter.run", script=None, cwd=None,
env=None, path=()) -> Result(code, out, err)``.

``speechiter.run.main(argv)`` (or another command's: ``module`` is what ``python -m`` would be given, e.g.
speechiter.pack or speechiter.importers.kaldi; ``script`` a file ``python`` would be given, e.g.
tools/data_len.py, run as ``__main__``), run as ``python`` would run it, for the tests whose
assertion is about the exit code, stdout / stderr or the files written: a fresh interpreter costs seconds
(importing torch), a call here milliseconds. Keep a real subprocess where the process boundary is the point
(signals, killed processes, torchrun, what outlives the process, a fresh install).

- ``argv``: the arguments after ``-m speechiter.run`` (any value, str() is applied);
- ``cwd``: the folder the run sees as current (default: the repository root); it also comes first on
  sys.path, as ``-m`` puts it there (for a script: the script's folder);
- ``env``: variables set for the call (a value of None unsets one);
- ``path``: folders to import user modules from (what PYTHONPATH gave a subprocess).

What a fresh process would show, it shows: warnings go to ``err`` under Python's default filters (each
once per place and call), so do the "speechiter" logger's warnings (Python's last-resort handler); a
SystemExit (argparse's errors, --help) is the exit code; an exception that escapes main() is exit 1 with
its traceback on ``err``. What one run would leave behind for the next, it takes back: the working folder,
the variables, sys.path (the registry appends a recipe's folder for good, NOTE [ extra_dirs and sys.path ]
in speechiter/registry.py), the user modules it imported (another test may write another module of the same
name), the reads it started ahead for batches it never built; and the once-per-process notices are armed
again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import logging
import os
import runpy
import sys
import traceback
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    # the names of subprocess.CompletedProcess, for tests written against it
    returncode = property(lambda self: self.code)
    stdout = property(lambda self: self.out)
    stderr = property(lambda self: self.err)


def _default_filters():
    """Python's default warning filters (``python -W`` not given), for the duration of a call."""
    warnings.resetwarnings()
    warnings.simplefilter("default")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")


def _rearm_notices():
    """Notices speechiter gives once per process: a fresh process would give them again."""
    from speechiter.index import store
    from speechiter.sequence import torch_rng

    torch_rng._warned = False
    store._warned.clear()


def _forget_reads_ahead():
    """The reads this thread started ahead (speechiter/dataset/prefetch.py) for batches a failed run never
    built stay in its thread-local list, where a later run with the same ids would take them: a fresh process
    has none."""
    from speechiter.dataset import prefetch

    for started in getattr(prefetch._local, "started", ()):
        started.cancel()
    prefetch._local.__dict__.clear()


def _under(file, folders) -> bool:
    return file is not None and any(Path(file).resolve().is_relative_to(folder) for folder in folders)


@contextlib.contextmanager
def environment(env):
    """os.environ with ``env`` set (a value of None unsets its variable), as it was afterwards."""
    saved = {key: os.environ.get(key) for key in env}
    try:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = str(value)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _command(module: str):
    command = importlib.import_module(module)
    if not hasattr(command, "main") and hasattr(command, "__path__"):  # a package: python -m runs its __main__
        command = importlib.import_module(f"{module}.__main__")
    return command.main


def _script(path: Path):
    def main(argv):
        saved = sys.argv
        sys.argv = [str(path), *argv]
        try:
            runpy.run_path(str(path), run_name="__main__")
        finally:
            sys.argv = saved
        return 0
    return main


def run_cli(*argv, module="speechiter.run", script=None, cwd=None, env=None, path=()) -> Result:
    """See the module docstring."""
    cwd = Path(cwd or REPO).resolve()
    first = cwd if script is None else Path(script).resolve().parent
    user_dirs = [Path(p).resolve() for p in path]
    saved_path, saved_modules, saved_cwd = list(sys.path), set(sys.modules), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("speechiter")
    _rearm_notices()

    def show(message, category, filename, lineno, file=None, line=None):
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    try:
        os.chdir(cwd)
        sys.path[:0] = [str(first), *map(str, user_dirs)]
        importlib.invalidate_caches()
        logger.addHandler(handler)
        with environment(env or {}), warnings.catch_warnings(), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _default_filters()
            warnings.showwarning = show
            try:
                main = _command(module) if script is None else _script(Path(script).resolve())
                code = main([str(a) for a in argv])
            except SystemExit as e:  # sys.exit(x) ends a process with x, or prints x and ends it with 1
                code = e.code
                if not isinstance(code, (int, type(None))):
                    print(code, file=sys.stderr)
                    code = 1
            except Exception:  # noqa: BLE001 - what the interpreter would do with it
                traceback.print_exc()
                code = 1
    finally:
        _forget_reads_ahead()
        logger.removeHandler(handler)
        os.chdir(saved_cwd)
        added = [Path(p).resolve() for p in sys.path if p and p not in saved_path]
        sys.path[:] = saved_path
        folders = [*user_dirs, *added, *{first, cwd} - {REPO}]
        for name in set(sys.modules) - saved_modules:
            if _under(getattr(sys.modules[name], "__file__", None), folders):
                del sys.modules[name]
    return Result(0 if code is None else code, out.getvalue(), err.getvalue())
