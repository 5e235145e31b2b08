"""Data files before they are read: regular files only, and what a missing one says.

:func:`check_data_file` is called before a data file is opened (URLs are checked when read);
:func:`check_regular_file` before any file a user names is read (a FIFO or a device never is). A missing
file that a relative idx2 value named says the rule it was resolved by (see
:func:`speechiter.data_paths.resolve_data_path`, which records the folders with :func:`relative_values_in`).
"""
from __future__ import annotations

import os
import stat
from typing import Dict

from speechiter.errors import DataError
from speechiter.io.storage import is_url

__all__ = ["check_data_file", "check_regular_file", "relative_values_in"]

#: {folder: idx2 file}: the folders that relative idx2 values were resolved against, in this process
#: (to explain a missing file; see check_data_file)
_RELATIVE_IN: Dict[str, str] = {}


def relative_values_in(folder: str, idx2_path: str) -> None:
    """Remember that relative values of ``idx2_path`` were resolved against ``folder``."""
    if folder not in _RELATIVE_IN:
        _RELATIVE_IN[folder] = idx2_path


def check_data_file(file: str) -> None:
    """Raise DataError naming ``file`` unless it is an existing regular file
    (URLs are checked when read). A missing file that a relative idx2 value
    named says the rule (against the idx2 file's folder) and the idx2 file."""
    if is_url(file):
        return
    try:
        check_regular_file(file, "a data file")
    except DataError as e:
        if os.path.lexists(file):
            raise
        raise DataError(f"{e}{_relative_value_rule(file)}") from None


def _relative_value_rule(file: str) -> str:
    idx2_of = {os.path.normpath(folder): idx2 for folder, idx2 in list(_RELATIVE_IN.items())}
    folder = os.path.dirname(os.path.normpath(file)) or "."
    while folder not in idx2_of:
        parent = os.path.dirname(folder)
        if parent == folder:
            return ""
        folder = parent
    idx2, value = idx2_of[folder], os.path.relpath(file, folder)
    here = (f"; {value} exists from the current folder, where SpeeChain reads it: write absolute paths in {idx2}"
            if os.path.exists(value) else "")
    return f" (a relative value of {idx2} is read from that file's folder{here})"


# Reading a FIFO blocks until a writer comes (forever, inline); /dev/zero never
# ends; a socket cannot be opened. So only regular files are read.
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def check_regular_file(file: str, expected: str = "a regular file") -> None:
    """Raise DataError naming ``file`` unless it exists and is a regular file
    (symbolic links are followed); call it before opening a file to read.
    ``expected`` names what the file should be (``"an idx2 file"``)."""
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        raise DataError(f"{file}: no such file") from None
    except OSError as e:
        raise DataError(f"{file}: cannot read it ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise DataError(f"{file}: is {kind}, expected {expected}")
