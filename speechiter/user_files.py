"""Files a user names on the command line (``--resume``, ``--save_state``, ``--dump_batches``, ``--report``).

# NOTE [ User-given files ]
Every such file is opened here, one way, so that a bad path is one ConfigError
line (exit 2) naming the option, never a hang or a raw OSError:

- reading: only a regular file (a FIFO would block until a writer comes,
  ``/dev/zero`` never ends), at most ``limit`` bytes;
- writing: into an existing folder, checked before the run starts (a missing
  folder is found at once, not after the first epoch); the target is a regular
  file or new, or, for streams such as ``--dump_batches /dev/stdout``, a
  character device or a pipe that has a reader (a FIFO without one would
  block). A state file is written whole or not at all (write_json_atomic).
"""
import errno
import fcntl
import json
import os
import stat
from typing import Any, Dict, TextIO

from speechiter.errors import ConfigError, DataError
from speechiter.paths import check_regular_file

#: the largest state file read (states are a few kilobytes)
MAX_STATE_BYTES = 16 * 2 ** 20


def read_user_file(path: str, where: str, what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), else a ConfigError at ``where``;
    ``what`` names the file (``"state file"``)."""
    if not os.path.exists(path):
        raise ConfigError(where, f"no such {what}: {path}")
    try:
        check_regular_file(path, f"a {what}")
    except DataError as e:
        raise ConfigError(where, str(e)) from None
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(where, f"{path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise ConfigError(where, f"{path}: larger than {limit} bytes, expected a {what}")
    return data


def read_json(path: str, where: str, what: str = "state file", limit: int = MAX_STATE_BYTES) -> Any:
    """The JSON value in the user-given file ``path``, else a ConfigError at ``where``."""
    data = read_user_file(path, where, what, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError too
        text = e.doc.rstrip() if isinstance(e, json.JSONDecodeError) else ""
        ends_early = text.startswith(("{", "[")) and not text.endswith(("}", "]"))  # a JSON document's end is lost
        reason = "it ends early (truncated?)" if ends_early else " ".join(str(e).split())
        raise ConfigError(where, f"cannot read {what} {path}: {reason}") from None
    except RecursionError:
        raise ConfigError(where, f"cannot read {what} {path}: nested too deeply") from None


def check_output(path: str, where: str, streams: bool = True) -> None:
    """Raise a ConfigError at ``where`` unless ``path`` can be written: its folder exists, and it is
    new or a regular file (or, with ``streams``, a character device or a FIFO)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        kind = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ConfigError(where, f"cannot write {path}: the folder {folder} {kind}")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise ConfigError(where, f"cannot write {path}: {e.strerror or e}") from None
    allowed = stat.S_ISREG(mode) or streams and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode))
    if not allowed:
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise ConfigError(where, f"cannot write {path}: it is {kind}")


def open_output(path: str, where: str, append: bool = False) -> TextIO:
    """``path`` opened to write text (see NOTE [ User-given files ])."""
    check_output(path, where)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)  # a FIFO without a reader: ENXIO, not a hang
    except OSError as e:
        reason = "a FIFO with no reader" if e.errno == errno.ENXIO else e.strerror or str(e)
        raise ConfigError(where, f"cannot write {path}: {reason}") from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "w", encoding="utf-8")


def write_json_atomic(path: str, value: Dict[str, Any]):
    """Write JSON so that a reader never sees a half-written file (``path`` passed check_output with
    ``streams=False``: a stream cannot be replaced)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
