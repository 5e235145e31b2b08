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
"""
import os
import sys
import warnings
from contextlib import contextmanager

#: the longest error or warning line printed (characters), before the note of what was left out
MAX_LINE = 2000
#: set to "line" for the loading workers of a command line run (see NOTE [ One line per problem ])
WARNINGS_ENV = "SPEECHITER_WARNINGS"


def one_line(text: str) -> str:
    """``text`` up to its first blank line (worker tracebacks follow), as one line of at most MAX_LINE
    characters (then a note of the rest)."""
    text = " ".join(line.strip() for line in str(text).strip().split("\n\n", 1)[0].splitlines())
    if len(text) > MAX_LINE:
        text = f"{text[:MAX_LINE]} ... ({len(text) - MAX_LINE} more characters; --debug shows them)"
    return text


def _show(message, category, filename, lineno, file=None, line=None):
    print(f"speechiter: warning: {one_line(message) or category.__name__}", file=sys.stderr)


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
