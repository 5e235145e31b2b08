"""A URL as an open file object, for the libraries that read file objects (libsndfile, HDF5, numpy).

Errors a read meets are kept, not lost inside the library: the caller
re-raises them with ``check()`` inside :func:`speechiter.io.storage.call`,
which turns them into one redacted line.

# NOTE [ Errors in C callbacks ]
libsndfile reads a URL's file object through cffi callbacks (soundfile's
virtual IO). An exception raised inside one is not passed on: cffi prints
"Exception ignored from cffi callback" and a traceback to stderr, whose last
line, for an http(s) URL, is the error's message with the whole presigned
URL in it (X-Amz-Signature, X-Amz-Credential). So for such callers
(``quiet=True``) a failed read is kept and answered with a short read (no
bytes, the end of the file to the decoder); the caller re-raises the kept
error with :meth:`_Guarded.check` once the decoder has returned, and
:func:`call` turns it into one redacted line. HDF5's file-object driver
(Cython) does take exceptions, and would fill a short read with zeros, so
it gets the error raised.
"""
from __future__ import annotations

import os

from speechiter.io.storage import call, filesystem

__all__ = ["open_url"]


class _Guarded:
    """A file object whose read errors are kept, not lost inside a C
    callback (libsndfile, HDF5): :meth:`check` re-raises the first one.
    ``quiet``: a failed read returns no bytes instead of raising (See NOTE
    [ Errors in C callbacks ])."""

    def __init__(self, f, quiet: bool = False):
        self._f, self.error, self._quiet = f, None, quiet

    def read(self, n=-1):
        if self.error is not None and self._quiet:
            return b""
        try:
            return self._f.read(n)
        except Exception as e:  # re-raised by check(), classified by call()
            self.error = self.error or e
            if self._quiet:
                return b""
            raise

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, *args):
        try:
            return self._f.seek(*args)
        except Exception as e:  # as read(): kept for check()
            self.error = self.error or e
            if self._quiet:
                return self._f.tell()
            raise

    def check(self):
        if self.error is not None:
            raise self.error

    def __getattr__(self, name):
        return getattr(self._f, name)


def open_url(url: str, block_size: int = 1 << 16, quiet: bool = False) -> _Guarded:
    """An open binary file object for ``url`` (read-ahead of ``block_size``
    bytes); wrap its use in :func:`call` and call ``.check()`` after a C
    library read from it. ``quiet``: for a decoder that reads through C
    callbacks that cannot take an exception (See NOTE [ Errors in C callbacks ])."""
    fs = filesystem(url)
    options = {} if os.environ.get("SPEECHITER_STORAGE_CACHE") else {"block_size": block_size,
                                                                      "cache_type": "readahead"}
    return _Guarded(call(url, lambda: fs.open(url, "rb", **options), "open"), quiet)
