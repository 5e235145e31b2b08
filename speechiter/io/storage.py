"""Data values that are URLs (``s3://``, ``gs://``, ``http(s)://``), read through fsspec.

fsspec (and s3fs for S3) come with the ``s3`` extra (``pip install
'speechiter[s3]'``); speechiter imports and reads local files without them.
Credentials and the endpoint come the standard way (for S3: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_ENDPOINT_URL, AWS_PROFILE and
the AWS config files), so a recipe holds only URLs.

Environment:

- ``SPEECHITER_STORAGE_TIMEOUT``: seconds a connect or a read may take (30).
- ``SPEECHITER_STORAGE_ATTEMPTS``: tries per read for transient errors (3).
- ``SPEECHITER_STORAGE_CACHE``: a folder: remote reads go through fsspec's
  ``blockcache`` there (only the blocks read are stored);
  ``SPEECHITER_STORAGE_CACHE_TYPE=filecache`` stores whole objects instead.

# NOTE [ Filesystems, threads and fork ]
One fsspec filesystem per protocol per process, made on first use. Threads
share it (fsspec runs every request on its own event-loop thread). A forked
child must not use its parent's: s3fs holds aiohttp sessions bound to the
parent's event loop, which does not exist in the child. So the table belongs
to one pid (like the HDF5 handles, see NOTE [ HDF5 handles and fork ] in
speechiter/io/arrays.py), instances skip fsspec's own instance cache, and a child
makes its own on first use.

# NOTE [ Storage failures ]
Every remote read goes through :func:`call`: a missing object or a refused
credential fails at once; a timeout, a dropped connection or a 5xx answer is
tried again, ``SPEECHITER_STORAGE_ATTEMPTS`` times in all with a short
backoff; s3fs's and botocore's own retries are off so the bound is ours. The
error is one DataError line naming the URL with any secret removed
(:func:`redact`); callers add the utterance id.
"""
from __future__ import annotations

import os
import re
import threading
import time
from typing import Callable, Dict, Optional, Tuple, TypeVar

from speechiter.errors import DataError
from speechiter.io.hedged_requests import hedged
from speechiter.io.ranged import check_length, checked_s3
from speechiter.io.secrets import note_secrets, redact

__all__ = ["is_url", "redact", "note_secrets", "filesystem", "call", "failure", "read_range", "transient",
           "INSTALL_HINT"]

INSTALL_HINT = "pip install 'speechiter[s3]'"
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BACKOFF = 0.2  # seconds before the second try; doubles after
T = TypeVar("T")


def is_url(value: str) -> bool:
    return bool(_URL_RE.match(value))


def _env_number(name: str, default: float, kind=float):
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise DataError(f"{name} should be a positive {kind.__name__}, but got {name}={raw!r}")
    return value


# --------------------------------------------------------------- filesystems
# See NOTE [ Filesystems, threads and fork ].

# Connections one S3 filesystem (so one process) keeps open at once; botocore's
# default of 10 made 32 thread workers wait for each other (tools/bench.py --large).
MAX_CONNECTIONS = 64
_filesystems: Dict[str, object] = {}
_fs_pid = os.getpid()
_fs_lock = threading.Lock()


def _forget_inherited():
    global _fs_pid, _fs_lock
    _fs_lock = threading.Lock()
    _filesystems.clear()  # the parent's instances are dropped unused
    _fs_pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)


def _import_fsspec(url: str):
    try:
        import fsspec
    except ImportError:
        raise DataError(f"{redact(url)}: reading URLs needs fsspec: {INSTALL_HINT}") from None
    return fsspec


def filesystem(url: str):
    """The fsspec filesystem for ``url``, made once
    per protocol per process, with timeouts set and library retries off."""
    protocol = url.split("://", 1)[0].lower()
    if os.getpid() != _fs_pid:
        _forget_inherited()
    fs = _filesystems.get(protocol)
    if fs is None:
        with _fs_lock:
            fs = _filesystems.get(protocol)
            if fs is None:
                fs = _filesystems[protocol] = _make_filesystem(protocol, url)
    return fs


def _make_filesystem(protocol: str, url: str):
    fsspec = _import_fsspec(url)
    timeout = _env_number("SPEECHITER_STORAGE_TIMEOUT", 30.0)
    try:
        if protocol in ("s3", "s3a"):
            import s3fs

            # ranged answers checked: See NOTE [ Ranged answers are checked ] in speechiter/io/ranged.py
            fs = checked_s3(s3fs.S3FileSystem)(skip_instance_cache=True, config_kwargs={
                "connect_timeout": min(timeout, 10.0), "read_timeout": timeout,
                "max_pool_connections": MAX_CONNECTIONS,
                "retries": {"total_max_attempts": 1, "mode": "standard"}})
            fs.retries = 1  # See NOTE [ Storage failures ]
        elif protocol in ("http", "https"):
            import aiohttp

            fs = fsspec.filesystem(protocol, skip_instance_cache=True, client_kwargs={
                "timeout": aiohttp.ClientTimeout(sock_connect=min(timeout, 10.0), sock_read=timeout)})
        else:
            fs = fsspec.filesystem(protocol, skip_instance_cache=True)
    except ImportError as e:
        raise DataError(f"{redact(url)}: reading {protocol}:// URLs needs {e.name or 'a package'}: "
                        f"{INSTALL_HINT}") from None
    except ValueError as e:  # fsspec: unknown protocol
        raise DataError(f"{redact(url)}: cannot read this URL ({redact(e)})") from None
    cache = os.environ.get("SPEECHITER_STORAGE_CACHE")
    if cache:
        kind = os.environ.get("SPEECHITER_STORAGE_CACHE_TYPE", "blockcache")
        if kind not in ("blockcache", "filecache"):
            raise DataError(f"SPEECHITER_STORAGE_CACHE_TYPE should be blockcache or filecache, but got {kind!r}")
        try:  # a file there, or a folder that cannot be made or written: one line, not fsspec's OSError
            os.makedirs(cache, exist_ok=True)
            if not os.access(cache, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable")
        except OSError as e:
            reason = "it is not a folder" if os.path.exists(cache) and not os.path.isdir(cache) else e.strerror
            raise DataError(f"SPEECHITER_STORAGE_CACHE={cache!r} cannot be the storage cache folder ({reason}); "
                            "give a folder this user can create and write") from None
        fs = fsspec.filesystem(kind, fs=fs, cache_storage=cache, skip_instance_cache=True)
    return fs


# ------------------------------------------------------------------ failures
# See NOTE [ Storage failures ].

_TRANSIENT_NAMES = {
    "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError",
    "ClientConnectorError", "ServerDisconnectedError", "ClientPayloadError", "ClientOSError",
    "IncompleteRead", "ResponseStreamingError", "FSTimeoutError", "ServerTimeoutError", "ProtocolError",
}


def _status(error: Optional[BaseException]) -> Optional[int]:
    """The HTTP status behind ``error`` (s3fs keeps botocore's error as the cause)."""
    for _ in range(3):
        if error is None:
            return None
        for name in ("status", "code", "status_code"):
            value = getattr(error, name, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(value, int):
                return value
        error = error.__cause__
    return None


def _classify(error: BaseException) -> Tuple[str, bool]:
    """``(what happened, transient?)``."""
    status = _status(error)
    if isinstance(error, FileNotFoundError) or status == 404:
        return "no such object", False
    if isinstance(error, PermissionError) or status in (401, 403):
        return "access denied (check the credentials in the environment)", False
    if type(error).__name__ == "NoCredentialsError":
        return "no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)", False
    names = {cls.__name__ for cls in type(error).__mro__}
    if status is not None and status >= 500:
        return f"server error {status}", True
    if names & _TRANSIENT_NAMES or isinstance(error, (TimeoutError, ConnectionError)):
        return "connection failed or timed out", True
    if status is None and isinstance(error, OSError) and re.search(r"\b5\d\d\b|Service ?Unavailable|"
                                                                   r"InternalError", str(error)):
        return "server error", True
    return "failed", False


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return redact(text if len(text) <= 200 else text[:197] + "...")


def failure(url: str, error: BaseException, what: str = "read", tries: int = 1) -> DataError:
    """The one-line DataError for ``error`` met doing ``what`` at ``url`` (redacted), after ``tries``."""
    problem = _classify(error)[0]
    after = f" after {tries} tries" if tries > 1 else ""
    return DataError(f"{redact(url)}: cannot {what}: {problem}{after} ({_reason(error)})")


def call(url: str, fn: Callable[[], T], what: str = "read") -> T:
    """``fn()``, tried again for transient errors; any failure becomes one
    DataError line naming the redacted ``url``."""
    note_secrets(url)
    attempts = int(_env_number("SPEECHITER_STORAGE_ATTEMPTS", 3, int))
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except DataError:
            raise
        except Exception as e:  # fsspec backends raise many kinds; _classify sorts them
            if not _classify(e)[1] or attempt == attempts:
                raise failure(url, e, what, attempt) from None
        time.sleep(_BACKOFF * 2 ** (attempt - 1))
    raise AssertionError("unreachable")  # pragma: no cover


def read_range(url: str, start: int, end: Optional[int]) -> bytes:
    """Bytes ``[start, end)`` of the object at ``url`` (fewer at its end; end
    None: to the end): one request, hedged (NOTE [ Hedged requests ] in
    speechiter/io/hedged_requests.py), or blocks of the local cache; checked
    (NOTE [ Ranged answers are checked ] in speechiter/io/ranged.py)."""
    fs = filesystem(url)

    def read():
        if not os.environ.get("SPEECHITER_STORAGE_CACHE"):
            return fs.cat_file(url, start=start, end=end)
        with fs.open(url, "rb") as f:
            f.seek(start)
            return f.read(-1 if end is None else end - start)

    def checked():
        data = read()
        if end is not None:
            check_length(redact(url), start, end, len(data),
                         lambda: call(url, lambda: int(fs.info(url)["size"]), "read the object's size"))
        return data

    if os.environ.get("SPEECHITER_STORAGE_CACHE"):
        return call(url, checked)
    return call(url, lambda: hedged(url, checked, transient))


def transient(error: BaseException) -> bool:
    """Whether ``error`` is worth trying again (a refused answer, a DataError, is not)."""
    return not isinstance(error, DataError) and _classify(error)[1]
