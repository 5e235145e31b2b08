"""What the command line prints about a problem: one line each, of bounded length.

# NOTE [ One line per problem ]
An error is one line on stderr (``speechiter: error: ...``), and so is a
warning (``speechiter: warning: ...``): Python would print a warning raised
in the run (warnings.warn, ours or a library's) as two lines, the second the
source line that raised it, which means nothing to a user of the command
line; the loading workers of a run show theirs the same way (the run sets
``SPEECHITER_WARNINGS=line`` in the environment they start with, and
:func:`worker_warnings` installs the format). A message may quote what it cannot bound itself, such as the stderr of
a failing command or a worker's traceback: the line keeps its first
``MAX_LINE`` characters and says how many more there were.

Each line goes out in one write (:func:`say`): ``print`` writes the text and
its newline apart when stderr is unbuffered (PYTHONUNBUFFERED=1), and the
ranks of a torchrun job share one log file, where two ranks' lines would
then run into each other.
"""
import os
import sys
import traceback
import warnings
from contextlib import contextmanager

#: the longest error or warning line printed (characters), before the note of what was left out
MAX_LINE = 2000
#: set to "line" for the loading workers of a command line run (see NOTE [ One line per problem ])
WARNINGS_ENV = "SPEECHITER_WARNINGS"


def say(line: str, file=None) -> None:
    """Write ``line`` and its newline to stderr (or ``file``) in one write (NOTE [ One line per problem ])."""
    file = sys.stderr if file is None else file
    file.write(f"{line}\n")
    file.flush()


def one_line(text: str) -> str:
    """``text`` up to its first blank line (worker tracebacks follow), as one line of at most MAX_LINE
    characters (then a note of the rest)."""
    text = " ".join(line.strip() for line in str(text).strip().split("\n\n", 1)[0].splitlines())
    if len(text) > MAX_LINE:
        text = f"{text[:MAX_LINE]} ... ({len(text) - MAX_LINE} more characters; --debug shows them)"
    return text


def _redact(text: str) -> str:
    from speechiter.io.storage import redact  # a library's message may quote a URL's password
    return redact(text)


def _show(message, category, filename, lineno, file=None, line=None):
    say(f"speechiter: warning: {_redact(one_line(message) or category.__name__)}", file)


def report_error(error: BaseException, debug: bool) -> int:
    """Print the command line's one line for ``error`` (after its traceback with ``debug``), without
    secrets; return the exit status: the error's own (2 for bad input), 130 or 143 for Ctrl-C or SIGTERM
    (NOTE [ One shutdown path ] in interrupts.py), else 1."""
    from speechiter import interrupts
    from speechiter.errors import SpeechiterError
    from speechiter.sequence.limits import explain
    if isinstance(error, KeyboardInterrupt):
        say(f"speechiter: {interrupts.describe(error)}")
        return interrupts.exit_status(error)
    if debug:
        print(_redact(traceback.format_exc()), file=sys.stderr, end="")
    hint = "" if debug else " (run with --debug for the traceback)"
    if isinstance(error, SystemExit):  # sys.exit() in user code (a dataset hook ...): not the end of a finished run
        frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<frozen")]
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        say(f"speechiter: error: sys.exit({error.code!r}) was called{where} before the run ended{hint}")
        return 1
    error = explain(error)  # out of file descriptors anywhere: NOTE [ Machine limits ] in sequence/limits.py
    what = one_line(error) or type(error).__name__
    if not isinstance(error, SpeechiterError):
        what = f"{type(error).__name__}: {what}"
    elif error.exit_code == 2:
        hint = ""
    say(f"speechiter: error: {_redact(what)}{hint}")
    return error.exit_code if isinstance(error, SpeechiterError) else 1


@contextmanager
def warnings_as_lines():
    """Within: every warning shown is one ``speechiter: warning:`` line on stderr (NOTE [ One line per
    problem ])."""
    before = os.environ.get(WARNINGS_ENV)
    os.environ[WARNINGS_ENV] = "line"
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show
            yield
    finally:
        if before is None:
            del os.environ[WARNINGS_ENV]
        else:
            os.environ[WARNINGS_ENV] = before


def worker_warnings() -> None:
    """In a loading worker: warnings as one line each, when the run that started it asks for it."""
    if os.environ.get(WARNINGS_ENV) == "line":
        warnings.showwarning = _show
