"""Ranged reads, checked: the bytes a store answers must be the bytes asked for.

# NOTE [ Ranged answers are checked ]
A ranged GET (``Range: bytes=a-b``) must be answered 206 with exactly those
bytes. A proxy or server that ignores the header answers 200 with the whole
object; one that misbehaves answers fewer bytes with a success status. Taken
as asked, either is the wrong audio, silently (a pack's byte range holding
another utterance's bytes decodes fine). So:

- every S3 GetObject with a Range (fsspec's ``cat_file``, its file objects'
  read-ahead, the pack reader's conditional GET) is checked where s3fs makes
  the call (:func:`checked_s3`): the answer must be 206, with a Content-Range
  from the first byte asked to the last (or to the object's end) and a
  Content-Length of that many bytes. A body cut short of its Content-Length
  is botocore's own error (a dropped connection, tried again);
- every :func:`speechiter.io.storage.read_range`, whatever the protocol
  (an https URL), is checked by length (:func:`check_length`): more bytes
  than asked is an error; fewer, from a first byte past 0, must end exactly
  at the object's end (one size request, only then). From byte 0 a whole
  object is the right answer anyway.

Each is a DataError naming the URL and the range, never retried (the same
proxy would answer the same).
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from speechiter.errors import DataError
from speechiter.io.secrets import redact

__all__ = ["checked_s3", "check_length"]

_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)$")
_CONTENT_RANGE_RE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)$")


def _wrong(url: str, first: int, last: Optional[int], what: str) -> DataError:
    asked = f"bytes {first}-{'' if last is None else last}"
    return DataError(f"{url}: the store answered a ranged read ({asked}) {what}; those would be the wrong bytes, "
                     f"so they are refused (a proxy or server that ignores or cuts short ranged reads?)")


def check_s3_answer(kwargs: dict, response: dict) -> None:
    """Raise DataError when ``response`` to a ranged GetObject is not the range asked (See NOTE [ Ranged
    answers are checked ])."""
    match = _RANGE_RE.match(str(kwargs.get("Range", "")))
    if match is None:
        return
    first, last = int(match.group(1)), int(match.group(2)) if match.group(2) else None
    url = redact(f"s3://{kwargs.get('Bucket')}/{kwargs.get('Key')}")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    length = response.get("ContentLength")
    answered = _CONTENT_RANGE_RE.match(str(response.get("ContentRange") or ""))
    problem = None
    if status != 206 or answered is None:
        problem = f"with status {status} and {length} bytes, not the range (206)"
    else:
        a, b, total = int(answered.group(1)), int(answered.group(2)), answered.group(3)
        end = last if last is not None else b
        if total != "*":
            end = min(end, int(total) - 1)
        if a != first or b != end:
            problem = f"with bytes {a}-{b}, not bytes {first}-{end}"
        elif length != b - a + 1:
            problem = f"with {length} bytes for bytes {a}-{b} ({b - a + 1} bytes)"
    if problem is not None:
        body = response.get("Body")
        if body is not None:
            body.close()
        raise _wrong(url, first, last, problem)


def checked_s3(base: type) -> type:
    """A subclass of s3fs's ``S3FileSystem`` whose ranged GetObject answers are checked."""

    class CheckedS3FileSystem(base):
        async def _call_s3(self, method, *args, **kwargs):
            response = await super()._call_s3(method, *args, **kwargs)
            if method == "get_object" and "Range" in kwargs:
                check_s3_answer(kwargs, response)
            return response

    return CheckedS3FileSystem


def check_length(url: str, start: int, end: int, got: int, size: Callable[[], int]) -> None:
    """Raise DataError unless ``got`` bytes is the right answer to a read of bytes ``[start, end)`` of
    ``url`` (``size()``: the object's size, asked only for a short answer past byte 0)."""
    if got > end - start:
        raise _wrong(url, start, end - 1, f"with {got} bytes, more than the {end - start} asked")
    if got < end - start and start > 0:
        total = size()
        if start + got != max(start, min(end, total)):
            raise _wrong(url, start, end - 1, f"with {got} bytes, where the object ({total} bytes) holds "
                                              f"{max(0, min(end, total) - start)} there")
