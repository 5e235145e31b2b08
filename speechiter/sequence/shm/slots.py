"""The slot table: reusable shared-memory slots, one per batch in flight.

The main process's :class:`SlotTable` gives every dispatched task a slot; the
worker's :class:`SlotWriter` packs the batch into it (see pack.py) and grows
it when the batch does not fit.

NOTE [ Slot ownership ]
The main process owns a table of slots; each dispatched task carries one slot
(:class:`SlotRef`: index, segment name, size), and a slot belongs to exactly
one task until the main process releases it, or, when the batch was handed out
as views, until the consumer has dropped every view of it. A slot starts
without a segment. When a batch does not fit, the worker that builds it
creates a larger segment under a fresh name and reports it in its
:class:`Packed` message; the main process then unlinks the old segment
(no task and no view can be using it) and records the new one. Workers cache
one mapping per slot and remap when the name they are given changes.

NOTE [ Zero-copy batches ]
For 'null' and 'cpu' output, a batch of at least ``SHARE_MIN_BYTES`` is not
copied out of its slot: :class:`SlotReader` makes one uint8 array over the
slot's used bytes (the *owner*), every array of the batch is a view of it
(numpy's ``.base`` of a view is the owner; a tensor from ``torch.from_numpy``
keeps its array), and a ``weakref.finalize`` on the owner puts the slot's
index on a thread-safe queue when the last view dies, in whatever thread the
garbage collector runs it. :meth:`SlotTable.acquire` drains that queue, so a
slot is never given to a worker while a view of it is alive. When no slot is
free (the consumer holds batches) the table adds one and never waits; a loop
holds two (its batch and the one being handed over). At most ``max_viewed``
batches are views at a time: beyond that (a consumer that keeps a whole epoch
in a list) batches are copied out as before, so /dev/shm use stays bounded
(at most ``buffer + max_viewed`` slots, so never more than that many
segments; Docker gives /dev/shm 64 MiB by default). The owner holds a buffer
export of the mmap object, so :meth:`SlotTable.close` cannot unmap memory a
view still reads: ``mmap.close()`` refuses (see :func:`close_map`) and the
mapping goes when its last view does, long after its name was unlinked.
"""
import functools
import mmap
import queue
import weakref
from contextlib import contextmanager
from typing import NamedTuple, Optional

import numpy as np

from speechiter.batch_memory import install_allocator
from speechiter.errors import ResourceError
from speechiter.sequence.shm.pack import Arena, Packed, Packer, SlotReader
from speechiter.sequence.shm.pinning import HostPins
from speechiter.sequence.shm.segments import (check_available, close_map, create_segment, leftover_segments,
                                              open_segment, reserve_bytes, unlink_segment)

_GROW_STEP = 1 << 20
# Batches smaller than this are copied out of their slot: views are not worth
# the bookkeeping. See NOTE [ Zero-copy batches ].
SHARE_MIN_BYTES = 1 << 16


class SlotRef(NamedTuple):
    """A slot of the table: its index and current segment (None = no segment yet), and how many of the
    segment's bytes a worker has backed (NOTE [ Reserving slots ])."""

    index: int
    name: Optional[str]
    size: int
    backed: int = 0


def _grown(needed: int) -> int:
    """Segment size for ``needed`` bytes: 25% headroom, whole MiB."""
    # Untouched pages of a tmpfs segment cost no memory, so headroom is cheap.
    return -(-(needed + needed // 4) // _GROW_STEP) * _GROW_STEP


# NOTE [ Reserving slots ]
# A worker reserves (posix_fallocate) what it is about to write, so that a full
# /dev/shm is an error, not a SIGBUS (NOTE [ Machine limits ] in limits.py).
# Each reservation costs a few system calls and a walk over the range, so it is
# rounded up to whole MiB (the small arrays after a batch's big one, and the
# slightly larger batches that follow, need none of their own), and it is
# remembered per segment name, not per mapping: the pages stay backed as long
# as the segment lives, whichever slot brings it back to the worker. The
# worker reports it in its Packed's SlotRef (``backed``) and the table passes it
# on with the slot, so a segment reserved by one worker is not reserved again by
# the next one it goes to (a redundant fallocate still walks the range: ~0.3 ms
# for 8 MiB). So a segment is reserved about once, not once per batch or per
# worker. Where the rounded reservation does not fit, the exact one is tried
# (and its error raised).


def _backed(nbytes: int, size: int) -> int:
    """The bytes to reserve so that the first ``nbytes`` of a segment of ``size`` are backed: whole MiB."""
    return min(size, -(-nbytes // _GROW_STEP) * _GROW_STEP)


class SlotWriter:
    """Worker side: packs batches into the slots it is given.

    See NOTE [ Slot ownership ].
    """

    def __init__(self, prefix: str, worker_id: int, tracked: bool = False):
        self._prefix = f"{prefix}w{worker_id}_"
        self._tracked = tracked  # NOTE [ Segments of a killed main process ] in segments.py
        self._created = 0
        self._maps = {}  # slot index -> (name, mmap)
        self._reserved = {}  # segment name -> bytes known to be backed: NOTE [ Reserving slots ]

    def _mapping(self, slot: SlotRef, needed: int):
        # See NOTE [ Slot ownership ]: a batch that does not fit gets a new, larger segment.
        cached = self._maps.get(slot.index)
        if slot.backed > self._reserved.get(slot.name, 0):  # backed by another worker: NOTE [ Reserving slots ]
            self._reserved[slot.name] = slot.backed
        if needed > slot.size:
            name, size = f"{self._prefix}{self._created}", _grown(needed)
            self._created += 1
            mm = create_segment(name, size, reserve=needed, tracked=self._tracked)
            self._reserved[name] = needed
        elif cached is not None and cached[0] == slot.name:
            self._reserve(slot.name, slot.size, needed)
            return slot._replace(backed=self._reserved.get(slot.name, 0)), cached[1]
        else:
            name, size = slot.name, slot.size
            self._reserve(name, size, needed)
            mm = open_segment(name, size)
        if cached is not None:
            close_map(cached[1])
        self._maps[slot.index] = (name, mm)
        return SlotRef(slot.index, name, size, self._reserved.get(name, 0)), mm

    def _reserve(self, name: str, size: int, nbytes: int) -> None:
        """Back ``nbytes`` of segment ``name`` before writing there (no SIGBUS when /dev/shm is full)."""
        if nbytes > self._reserved.get(name, 0):
            backed = _backed(nbytes, size)
            try:
                reserve_bytes(name, backed)
            except ResourceError:
                if backed == nbytes:
                    raise
                reserve_bytes(name, nbytes)  # /dev/shm's last MiB: only what is written (its own error)
                backed = nbytes
            self._reserved[name] = backed

    @contextmanager
    def building(self, slot: SlotRef):
        """While a batch is built for ``slot``: :func:`batch_empty` carves from it."""
        arena = None
        if slot.name is not None and slot.size > 0:
            slot, mm = self._mapping(slot, 0)
            arena = Arena(mm, slot.size, functools.partial(self._reserve, slot.name, slot.size))
        previous = install_allocator(arena)
        try:
            yield arena
        finally:
            install_allocator(previous)
            if arena is not None:
                arena.release()

    def pack(self, batch, slot: SlotRef, arena: Optional[Arena] = None) -> Packed:
        packer = Packer(arena)
        skeleton = packer.pack(batch)
        if not packer.arrays:
            return Packed(skeleton, slot)
        target_slot, mm = self._mapping(slot, max(packer.total, arena.used if arena is not None else 0))
        moved = target_slot.name != slot.name  # a new, larger segment: in-place arrays move too
        for array, ref, in_place in zip(packer.arrays, packer.refs, packer.in_place):
            if in_place and not moved:
                continue
            target = np.ndarray(ref.shape, ref.dtype, buffer=mm, offset=ref.offset)
            np.copyto(target, array, casting="no")
            del target
        return Packed(skeleton, target_slot, packer.total)

    def close(self):
        for _, mm in self._maps.values():
            close_map(mm)
        self._maps.clear()


class SlotTable:
    """Main side: the slot table, mappings to read batches, and all unlinking.

    ``max_viewed``: the most batches handed out as views at a time; ``free``:
    indices of free slots, the next one to use last. See NOTE [ Slot ownership ],
    NOTE [ Zero-copy batches ] and NOTE [ Segment cleanup ] in segments.py.
    """

    def __init__(self, prefix: str, num_slots: int, max_viewed: int = 4, tracked: bool = False,
                 pins: Optional[HostPins] = None):
        check_available()
        self.prefix = prefix
        self.pins = pins  # page-locks mappings read for CUDA copies: NOTE [ Pinned slots ] in pinning.py
        self.tracked = tracked  # NOTE [ Segments of a killed main process ] in segments.py
        self.max_viewed = max_viewed
        self.viewed = 0  # batches handed out as views whose slot did not come back yet
        self._slots = [SlotRef(i, None, 0) for i in range(num_slots)]
        self._maps = [None] * num_slots  # (name, mmap) or None
        self.free = list(range(num_slots - 1, -1, -1))
        self._freed = queue.SimpleQueue()  # indices whose last view died (any thread)

    def ref(self, index: int) -> SlotRef:
        return self._slots[index]

    def __len__(self) -> int:
        return len(self._slots)

    def acquire(self) -> int:
        """A free slot's index; a new slot when every slot is busy or viewed (never waits)."""
        self.collect()
        if self.free:
            return self.free.pop()
        self._slots.append(SlotRef(len(self._slots), None, 0))
        self._maps.append(None)
        return len(self._slots) - 1

    def release(self, index: int) -> None:
        """Give back a slot nothing reads any more."""
        self.free.append(index)

    def collect(self) -> None:
        """Take back the slots whose views all died. See NOTE [ Zero-copy batches ]."""
        while True:
            try:
                index = self._freed.get_nowait()
            except queue.Empty:
                return
            self.viewed -= 1
            self.release(index)

    def accept(self, slot: SlotRef) -> None:
        """Record the segment a worker used for ``slot`` (it may be new)."""
        old = self._slots[slot.index]
        if old.name == slot.name:
            if slot.backed > old.backed:
                self._slots[slot.index] = slot  # NOTE [ Reserving slots ]
            return
        self._unmap(slot.index)
        if old.name is not None:
            unlink_segment(old.name, self.tracked)
        self._slots[slot.index] = slot

    def _map(self, slot: SlotRef) -> mmap.mmap:
        mapped = self._maps[slot.index]
        if mapped is None or mapped[0] != slot.name:
            self._unmap(slot.index)
            mapped = (slot.name, open_segment(slot.name, slot.size))
            self._maps[slot.index] = mapped
        return mapped[1]

    def _unmap(self, index: int) -> None:
        mapped, self._maps[index] = self._maps[index], None
        if mapped is not None:
            if self.pins is not None:
                self.pins.unpin(mapped[1])  # before the mapping goes: NOTE [ Pinned slots ]
            close_map(mapped[1])

    def reader(self, packed: Packed, share: bool) -> SlotReader:
        """Views of ``packed``'s arrays. Maps the segment now, in the calling thread.

        With ``share``, the slot belongs to the views from now on and comes back
        by itself (the caller must not release it). See NOTE [ Zero-copy batches ].
        """
        slot = packed.slot
        if slot.name is None:
            return SlotReader(None, None)
        mm = self._map(slot)
        share = share and self.pins is None  # pinned slots are read by CUDA copies, never handed out
        if share and packed.nbytes:
            self.collect()
            share = self.viewed < self.max_viewed
        if not share or packed.nbytes == 0:
            return SlotReader(mm, None, pinned=self.pins is not None and self.pins.pin(mm))
        self.viewed += 1
        owner = np.frombuffer(mm, np.uint8, count=packed.nbytes)
        weakref.finalize(owner, self._freed.put, slot.index).atexit = False
        return SlotReader(mm, owner)

    def segment_count(self) -> int:
        return sum(slot.name is not None for slot in self._slots)

    def close(self) -> None:
        """Unmap and unlink every segment of this session, known or not.

        Mappings that batches still view stay mapped until those views die.
        """
        for i in range(len(self._maps)):
            self._unmap(i)
        for i, slot in enumerate(self._slots):
            if slot.name is not None:
                unlink_segment(slot.name, self.tracked)
                self._slots[i] = SlotRef(i, None, 0)
        for name in leftover_segments(self.prefix):
            unlink_segment(name, self.tracked)
