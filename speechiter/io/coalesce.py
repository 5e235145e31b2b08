"""A batch's byte ranges, merged per object: one read per merged range.

# NOTE [ Coalesced reads ]
Before a batch is built, the byte ranges of its values (NOTE [ Byte-range
values ] in speechiter/io/source.py) are grouped by object, sorted, and
merged where the gap between two ranges is at most

- :data:`LOCAL_GAP` (64 KiB) for local files: below that a second ``pread``
  costs more than reading the gap (a page-cache readahead is 128 KiB);
- :data:`REMOTE_GAP` (1 MiB) for URLs: at ~100 MB/s one request's round trip
  (10-50 ms) is worth 1-5 MB of transfer, and 1 MiB keeps the waste small
  for a bucket iterator's scattered batches.

Each merged range is one read (one ranged GET), started on the process's read
pool (speechiter/dataset/prefetch.py). The batch is then built in order as
before: each value takes its slice of its merged range, so its random draws
and errors come in the same order. A failed merged read (a missing object, a
changed shard) raises its error at the first utterance that needs it, which
names that utterance. A value whose slice is not all there (its range runs
past the object's end) is read on its own, which raises the error naming it.

A pack in plan order makes a block batch one contiguous range: one request.

A cell of a Parquet file (``t.parquet:audio#row=7``) joins the batch's reads
with the column chunk that holds it, unless the process keeps that chunk
decoded; the first cell of a chunk decodes it for the others
(:attr:`BatchReads.decoded`; NOTE [ Parquet cells ] in speechiter/io/parquet.py).
"""
from __future__ import annotations

import bisect
from concurrent.futures import Future
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from speechiter.io.parquet import chunk_range
from speechiter.io.shards import read_bytes
from speechiter.io.source import ROW_MARK, parse_source
from speechiter.io.storage import is_url

__all__ = ["LOCAL_GAP", "REMOTE_GAP", "Span", "merge_ranges", "BatchReads", "is_ranged", "start_batch_reads"]

LOCAL_GAP = 64 << 10
REMOTE_GAP = 1 << 20
BYTES_MARK = "#bytes="


class Span(NamedTuple):
    file: str
    first: int
    last: int  # inclusive


def merge_ranges(ranges: Iterable[Tuple[str, int, int]], gap: Optional[int] = None) -> List[Span]:
    """The merged spans of ``(file, first, last)`` ranges: by file (first seen
    first), then by offset; ranges at most ``gap`` bytes apart (default by
    the file's kind, see NOTE [ Coalesced reads ]) become one span."""
    by_file: Dict[str, List[Tuple[int, int]]] = {}
    for file, first, last in ranges:
        by_file.setdefault(file, []).append((first, last))
    spans: List[Span] = []
    for file, parts in by_file.items():
        limit = (REMOTE_GAP if is_url(file) else LOCAL_GAP) if gap is None else gap
        parts.sort()
        first, last = parts[0]
        for a, b in parts[1:]:
            if a <= last + 1 + limit:
                last = max(last, b)
            else:
                spans.append(Span(file, first, last))
                first, last = a, b
        spans.append(Span(file, first, last))
    return spans


class BatchReads:
    """The merged reads of one batch, started on ``submit``; :meth:`get` slices them."""

    def __init__(self, spans: List[Span], submit: Callable[..., Future]):
        self.decoded: Dict[tuple, object] = {}  # what a reader made of a read, kept for the batch's other values
        self.spans: Dict[str, Tuple[List[int], List[Span], List[Future]]] = {}
        for span in spans:
            firsts, kept, futures = self.spans.setdefault(span.file, ([], [], []))
            firsts.append(span.first)
            kept.append(span)
            futures.append(submit(read_bytes, span.file, span.first, span.last, True))

    def get(self, file: str, first: int, last: int) -> Optional[bytes]:
        """Bytes ``first..last`` of ``file`` from a merged read (its error raised
        here), or None when no merged read holds all of them."""
        entry = self.spans.get(file)
        if entry is None:
            return None
        firsts, spans, futures = entry
        i = bisect.bisect_right(firsts, first) - 1
        if i < 0 or spans[i].last < last:
            return None
        data = futures[i].result()  # bounded: each read has the storage timeouts and attempts
        offset = first - spans[i].first
        if offset + last - first + 1 > len(data):
            return None  # the object ends sooner: read alone, which names the utterance
        return bytes(memoryview(data)[offset:offset + last - first + 1])

    def cancel(self) -> None:
        for _, _, futures in self.spans.values():
            for future in futures:
                future.cancel()


def is_ranged(value: str) -> bool:
    """Whether a value is read through a batch's coalesced reads: a byte range or a Parquet cell."""
    return BYTES_MARK in value or ROW_MARK in value


def start_batch_reads(values: Iterable[str], submit: Callable[..., Future]) -> Optional[BatchReads]:
    """Start the merged reads of the byte-range and Parquet-cell ``values``
    (others are left out); None when there are none. A value that does not parse is left to its
    own read, which raises the error naming its utterance."""
    ranges = []
    for value in values:
        if not is_ranged(value):
            continue
        try:
            source = parse_source(value)
            chunk = chunk_range(value) if source.row is not None else None
            if chunk is not None:
                ranges.append(chunk)
        except Exception:  # noqa: BLE001 - raised again, in order, when the value is read
            continue
        if source.byte_range is not None:
            ranges.append((source.file, *source.byte_range))
    return BatchReads(merge_ranges(ranges), submit) if ranges else None


class StartedReads:
    """The reads started for one batch, kept in its context while it is built (NOTE [ Batch context ] in
    speechiter/batch_context.py): its URL reads (``urls``: ``{value: [Future, ...]}``, see NOTE [ Reading a
    batch's URLs together ] in speechiter/dataset/prefetch.py) or its merged byte-range reads (``ranges``)."""

    __slots__ = ("column", "ids", "read", "urls", "ranges")

    def __init__(self, column, ids, read, urls: Optional[dict] = None, ranges: Optional[BatchReads] = None):
        self.column, self.ids, self.read = column, ids, read
        self.urls, self.ranges = urls, ranges

    def cancel(self) -> None:
        if self.ranges is not None:
            self.ranges.cancel()
        for futures in (self.urls or {}).values():
            for future in futures:
                future.cancel()

