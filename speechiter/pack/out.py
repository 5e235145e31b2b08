"""Where a pack is written: a local folder or a URL prefix, each write one DataError line when it fails.

Also ``shard_records``: what a pack's ``shards.json`` holds for its shards as they are now (``--reseal``).
"""
from __future__ import annotations

import json
import os
from typing import Dict

from speechiter.errors import DataError
from speechiter.io.shards import SHARDS_FILE
from speechiter.io.storage import call, failure, filesystem, is_url, redact

__all__ = ["Out", "shard_records"]


class Out:
    """A folder or a URL prefix to write files into; a failure to make or write one is one DataError line."""

    def __init__(self, root: str):
        self.root = root.rstrip("/") if is_url(root) else os.path.abspath(root)
        if not is_url(root):
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as e:
                why = "a file is there" if os.path.isfile(self.root) else (e.strerror or str(e))
                raise DataError(f"{self.root}: cannot write the pack there: {why}") from None

    def path(self, name: str) -> str:
        return f"{self.root}/{name}" if is_url(self.root) else os.path.join(self.root, name)

    def open(self, name: str) -> "_Writing":
        path = self.path(name)
        return _Writing(path, lambda: filesystem(path).open(path, "wb") if is_url(path) else open(path, "wb"))

    def record(self, name: str) -> dict:
        """size, and mtime_ns or ETag, of a written file."""
        path = self.path(name)
        if not is_url(path):
            try:
                st = os.stat(path)
            except OSError as e:
                raise DataError(f"{path}: cannot read the shard ({e.strerror or e})") from None
            return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        fs = filesystem(path)
        fs.invalidate_cache(path)
        info = call(path, lambda: fs.info(path), "read the size of what was written")
        etag = info.get("ETag") or info.get("etag")
        return {"size": int(info["size"]), "etag": etag.strip('"') if etag else None}


class _Writing:
    """A file being written (local or at a URL, where s3fs uploads on flush and close): any error, a refused
    credential or a store that stops answering (the storage timeout bounds each request), is a DataError
    naming the file, never a traceback."""

    def __init__(self, path: str, opener):
        self.path = path
        self.f = self._do(opener)

    def _do(self, fn, *args):
        try:
            return fn(*args)
        except DataError:
            raise
        except Exception as e:  # fsspec backends raise many kinds; failure() sorts them
            if not is_url(self.path) and isinstance(e, OSError):
                raise DataError(f"{self.path}: cannot write it ({e.strerror or e})") from None
            raise failure(self.path, e, "write") from None

    def write(self, data: bytes) -> None:
        self._do(self.f.write, data)

    def close(self) -> None:
        self._do(self.f.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def shard_records(folder: str) -> Dict[str, dict]:
    """The records a shards.json in ``folder`` would hold now (``--reseal``)."""
    out = Out(folder)
    path = out.path(SHARDS_FILE)
    try:
        if is_url(path):
            fs = filesystem(path)
            text = call(path, lambda: fs.cat_file(path))
        else:
            with open(path, "rb") as f:
                text = f.read()
        names = json.loads(text)["shards"]
        if not isinstance(names, dict):
            raise TypeError
    except (OSError, DataError) as e:
        raise DataError(f"{redact(folder)}: no pack to reseal there ({SHARDS_FILE}: "
                        f"{getattr(e, 'strerror', None) or str(e).rsplit(': ', 1)[-1]}); give the folder or URL "
                        f"that python -m speechiter.pack wrote") from None
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{redact(path)}: not a pack's shard table (expected JSON with a 'shards' mapping)") from None
    for name in names:
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise DataError(f"{redact(path)}: lists {name!r}, not a shard name of this folder")
    return {name: out.record(name) for name in names}
