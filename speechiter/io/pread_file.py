"""Bytes read by position, as the seekable file object that libraries read (tarfile, pyarrow)."""
from __future__ import annotations

import io

__all__ = ["PreadFile"]


class PreadFile(io.RawIOBase):
    """A read-only, seekable file of ``size`` bytes over :meth:`pread`, which subclasses define."""

    def __init__(self, size: int):
        super().__init__()
        self.size, self._pos = size, 0

    def pread(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``pos`` (fewer at the end)."""
        raise NotImplementedError

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, pos, whence=io.SEEK_SET):
        self._pos = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence] + pos
        return self._pos

    def read(self, n=-1):
        n = self.size - self._pos if n is None or n < 0 else min(n, self.size - self._pos)
        data = self.pread(self._pos, n) if n > 0 else b""
        self._pos += len(data)
        return data

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
