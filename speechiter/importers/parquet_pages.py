"""Where each value of an uncompressed, PLAIN-encoded Parquet column chunk lies in the file.

# NOTE [ Parquet audio as byte ranges ]
``datasets`` 3 and later write media columns (the ``bytes`` of ``Audio``)
without compression and PLAIN-encoded, in row groups of up to 100 MB, so that
a file's bytes deduplicate. In such a column chunk each value is stored as it
is: a page is a Thrift header, the repetition and definition levels, then
each non-null value as a 4-byte little-endian length and its bytes. So the
importer walks the page headers of the chunk it has read anyway (for the
lengths) and names each row's audio as a byte range of the Parquet file,
``train-00000.parquet#bytes=<first>-<last>`` (NOTE [ Byte-range values ] in
speechiter/io/source.py): read exactly as a pack's, coalesced per batch, with
no row group read and nothing decompressed. Each range is checked against the
value pyarrow decoded before it is written. A chunk that is compressed,
dictionary-encoded or laid out otherwise gives None, and its rows are named
as cells instead (NOTE [ Parquet cells ] in speechiter/io/parquet.py).

Measured (tools/bench_parquet.py, 2 workers): length-sorted batches over
100-row groups of snappy pages read 41-71x the audio they use; the byte
ranges read exactly it, 1.2-1.4x as fast as the cells with row groups kept
across batches (NOTE [ Parquet cells ]), 2.4-3.8x `datasets` streaming.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

__all__ = ["plain_value_ranges"]

_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_PLAIN = 0


class _Compact:
    """Just enough of Thrift's compact protocol to read a PageHeader."""

    def __init__(self, data: bytes, pos: int):
        self.data, self.pos = data, pos

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def struct(self) -> dict:
        fields, last = {}, 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            last = last + (head >> 4) if head >> 4 else self.zigzag()
            fields[last] = self.value(head & 0x0F)

    def value(self, kind: int):
        if kind in (1, 2):  # a bool field: the type is the value
            return kind == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            self.pos += 8
            return None
        if kind == 8:
            self.pos += self.varint()
            return None
        if kind in (9, 10):  # list, set
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            return [self._element(head & 0x0F) for _ in range(size)]
        if kind == 11:  # map
            size = self.varint()
            types = self.byte() if size else 0
            return [(self._element(types >> 4), self._element(types & 0x0F)) for _ in range(size)]
        if kind == 12:
            return self.struct()
        raise ValueError(f"unknown Thrift type {kind}")

    def _element(self, kind: int):
        return self.byte() == 1 if kind in (1, 2) else self.value(kind)  # bools in a container are one byte


def plain_value_ranges(data: bytes, first: int, uncompressed: bool, max_definition: int,
                       max_repetition: int) -> Optional[List[Tuple[int, int]]]:
    """``[(first byte, last byte)]`` in the file of each non-null value of a
    BYTE_ARRAY column chunk held in ``data`` (which starts at byte ``first``),
    in order; None when the values are not stored as they are. See NOTE
    [ Parquet audio as byte ranges ]."""
    ranges, pos = [], 0
    try:
        while pos < len(data):
            reader = _Compact(data, pos)
            header = reader.struct()
            pos, kind = reader.pos, header.get(1)
            end = pos + header.get(3, -1)
            if kind == _DATA_PAGE:
                if not uncompressed or header.get(5, {}).get(2) != _PLAIN:
                    return None
                start = pos
                for present in (max_repetition, max_definition):  # v1 levels: a 4-byte length, then RLE
                    if present:
                        start += 4 + int.from_bytes(data[start:start + 4], "little")
            elif kind == _DATA_PAGE_V2:
                v2 = header.get(8, {})
                if v2.get(4) != _PLAIN or (v2.get(7, True) and not uncompressed):
                    return None
                start = pos + v2.get(5, 0) + v2.get(6, 0)
            elif kind == _DICTIONARY_PAGE:
                return None
            else:  # an index page: no values
                pos = end
                continue
            while start < end:
                size = int.from_bytes(data[start:start + 4], "little")
                ranges.append((first + start + 4, first + start + 3 + size))
                start += 4 + size
            if start != end or end > len(data):
                return None
            pos = end
    except (IndexError, ValueError):
        return None
    return ranges
