"""The importers' command line: argument errors and input errors as one line on stderr, exit code 2."""
from __future__ import annotations

import argparse
import warnings

from speechiter.errors import DataError
from speechiter.io.storage import redact
from speechiter.messages import say

__all__ = ["Parser", "run_main"]


class Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr, exit code 2. ``doc``: the
    command's docstring, whose first paragraph is the description and whose
    third paragraph on is the epilog of ``--help``."""

    def __init__(self, module: str, doc: str):
        super().__init__(prog=f"python -m {module}", description=doc.split("\n\n")[0],
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc.split("\n\n", 2)[2])

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def run_main(parser, convert, args) -> int:
    """Shared tail of main(): one error line and exit code 2 for bad input,
    warnings as one line each, a summary on success: ``convert(args)``'s
    ``{written file: rows}``, or its own line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            written = convert(args)
        except DataError as e:
            error = e
        else:
            error = None
    for w in caught:
        say(f"{parser.prog}: warning: {redact(w.message)}")
    if error is not None:  # redacted: a presigned URL in wav.scp or a manifest keeps its signature to itself
        say(f"{parser.prog}: error: {redact(error)}")
        return 2
    if isinstance(written, str):  # the command's own summary line
        print(written)
    else:
        print(f"wrote {', '.join(f'{name} ({n})' for name, n in written.items())} to {args.out_dir}")
    return 0
