"""Shared-memory transport of numpy payloads, with reusable slots.

A worker process walks the batch it built, copies every ndarray (and CPU
tensor) into a *slot* -- a POSIX shared-memory segment -- and sends only a
small :class:`Packed` message: the batch with each array replaced by an
:class:`ArrayRef` (offset, dtype, shape). The main process maps the same
segment and hands the consumer arrays that view it (see NOTE [ Zero-copy
batches ]), or, for small batches and CUDA output, copies them out. Array
payloads are never pickled and buffers are not allocated per batch.

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

NOTE [ Batch arrays in place ]
While a process worker builds a batch, :func:`batch_empty` hands out space in
the slot the batch will travel in (an :class:`Arena`), so a dataset that
builds its padded arrays with it (SpeechTextDataset does) fills the slot
directly, and :meth:`SlotWriter.pack` copies only the other arrays. If the
batch then does not fit, the whole batch moves to a new, larger segment as
usual. Such arrays must not outlive the batch: the slot is reused.

NOTE [ Segment cleanup ]
Segments are created and unlinked with ``_posixshmem`` directly, not with
``multiprocessing.shared_memory``: in Python 3.11 that class registers every
segment with the resource tracker of the process that opens it, which warns
about and double-unlinks segments created in one process and unlinked in
another. Here the main process alone unlinks, and every segment name starts
with the session prefix ``speechiter_<main pid>_<token>_``, so
:meth:`SlotTable.close` can also remove segments it never heard of (a worker
killed between creating a segment and reporting it) by listing /dev/shm
after the workers have ended. See NOTE [ Shutdown order ] in scheduler.py.
"""
import mmap
import os
import queue
import secrets
import sys
import threading
import weakref
from contextlib import contextmanager
from typing import Any, List, NamedTuple, Optional

import numpy as np

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

_ALIGN = 64
_GROW_STEP = 1 << 20
# Batches smaller than this are copied out of their slot: views are not worth
# the bookkeeping. See NOTE [ Zero-copy batches ].
SHARE_MIN_BYTES = 1 << 16
_SHM_DIR = "/dev/shm"


def session_prefix() -> str:
    """A name prefix unique to one started sequence of this process."""
    return f"speechiter_{os.getpid()}_{secrets.token_hex(3)}_"


def _check_available():
    if _posixshmem is None:
        raise RuntimeError("thread_type='proc' needs POSIX shared memory; use thread_type='thread' on this system")


def create_segment(name: str, size: int) -> mmap.mmap:
    _check_available()
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    except BaseException:
        unlink_segment(name)
        raise
    finally:
        os.close(fd)


def open_segment(name: str, size: int) -> mmap.mmap:
    _check_available()
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def unlink_segment(name: str) -> None:
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def close_map(mm: Optional[mmap.mmap]) -> None:
    """Unmap, tolerating views that are still alive (then GC unmaps later)."""
    if mm is None:
        return
    try:
        mm.close()
    except BufferError:
        pass


def leftover_segments(prefix: str) -> List[str]:
    """Names of existing segments that start with ``prefix``."""
    try:
        return [name for name in os.listdir(_SHM_DIR) if name.startswith(prefix)]
    except OSError:
        return []


class Arena:
    """Space in the slot a batch will travel in, handed out while the batch is
    built, so its big arrays need no second copy. See NOTE [ Batch arrays in
    place ]."""

    def __init__(self, mm: mmap.mmap, size: int):
        self._whole = np.frombuffer(mm, dtype=np.uint8, count=size)
        self.base = self._whole.ctypes.data
        self.size = size
        self.used = 0

    def allocate(self, shape, dtype) -> Optional[np.ndarray]:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset = -(-self.used // _ALIGN) * _ALIGN
        if nbytes == 0 or dtype.hasobject or offset + nbytes > self.size:
            return None
        self.used = offset + nbytes
        return self._whole[offset:offset + nbytes].view(dtype).reshape(shape)

    def offset_of(self, array: np.ndarray) -> Optional[int]:
        """The array's offset in the slot, if it lies in space handed out here."""
        if array.nbytes == 0 or not array.flags.c_contiguous:
            return None
        offset = array.ctypes.data - self.base
        return offset if 0 <= offset and offset + array.nbytes <= self.used else None

    def release(self):
        self._whole = None


_building = threading.local()


def batch_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised array for the batch being built.

    In a process worker it is carved from the shared-memory slot the batch
    will travel in, so it crosses to the main process without another copy;
    elsewhere (threads, the main process, no room) it is ``np.empty``. Fill
    every element (padding included), and do not keep it after the batch is
    returned: its memory is reused for later batches.
    """
    arena = getattr(_building, "arena", None)
    array = arena.allocate(shape, dtype) if arena is not None else None
    return array if array is not None else np.empty(shape, dtype)


class SlotRef(NamedTuple):
    """A slot of the table: its index and current segment (None = no segment yet)."""

    index: int
    name: Optional[str]
    size: int


class ArrayRef(NamedTuple):
    """Where one array of a packed batch lives in its slot.

    ``tensor`` is None for a numpy array, else the name of the torch dtype the
    worker returned (``'float32'``, ``'bfloat16'`` ...), so that 'null'
    output gives back a tensor as the worker made it.
    """

    offset: int
    dtype: np.dtype
    shape: tuple
    tensor: Optional[str] = None


class Packed(NamedTuple):
    """A batch in shared memory: the structure with ArrayRefs, its slot, and
    the bytes of the slot it uses."""

    skeleton: Any
    slot: SlotRef
    nbytes: int = 0


def torch_module():
    """torch if it is imported already (workers never import it for us)."""
    return sys.modules.get("torch")


class _Packer:
    """Replaces arrays by ArrayRefs and lays them out, 64-byte aligned."""

    def __init__(self, arena: Optional[Arena] = None):
        self.arena = arena
        self.arrays = []
        self.refs = []
        self.in_place = []  # whether each array already lies in the slot at its offset
        self.total = arena.used if arena is not None else 0

    def _add(self, array: np.ndarray, tensor: Optional[str]):
        offset = self.arena.offset_of(array) if self.arena is not None else None
        in_place = offset is not None
        if not in_place:
            offset = -(-self.total // _ALIGN) * _ALIGN
            self.total = offset + array.nbytes
        ref = ArrayRef(offset, array.dtype, array.shape, tensor)
        self.arrays.append(array)
        self.refs.append(ref)
        self.in_place.append(in_place)
        return ref

    def walk(self, obj):
        kind = type(obj)
        if kind is np.ndarray:
            if obj.dtype.hasobject or obj.nbytes == 0:
                return obj  # travels pickled; object arrays cannot be shared
            return self._add(obj, None)
        if kind is dict:
            return {key: self.walk(value) for key, value in obj.items()}
        if kind is list:
            return [self.walk(value) for value in obj]
        if kind is tuple:
            return tuple(self.walk(value) for value in obj)
        if kind in (str, int, float, bool, bytes, type(None)):
            return obj
        torch = torch_module()
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor(obj, torch)
        if isinstance(obj, np.ndarray):  # subclasses: share as plain arrays
            return self.walk(np.asarray(obj))
        if isinstance(obj, dict):
            return kind((key, self.walk(value)) for key, value in obj.items())
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return kind(*(self.walk(value) for value in obj))
        if isinstance(obj, (list, tuple)):
            return kind(self.walk(value) for value in obj)
        return obj

    def _tensor(self, tensor, torch):
        if tensor.device.type != "cpu":
            raise TypeError(f"loading workers must return CPU tensors, but got a tensor on {tensor.device}")
        tensor = tensor.detach().resolve_conj().resolve_neg()
        name = str(tensor.dtype).rpartition(".")[2]
        if tensor.numel() == 0:
            return tensor
        if tensor.dtype == torch.bfloat16:
            array = tensor.view(torch.int16).numpy()
        else:
            array = tensor.numpy()
        return self._add(array, name)


def _grown(needed: int) -> int:
    """Segment size for ``needed`` bytes: 25% headroom, whole MiB."""
    # Untouched pages of a tmpfs segment cost no memory, so headroom is cheap.
    return -(-(needed + needed // 4) // _GROW_STEP) * _GROW_STEP


class SlotWriter:
    """Worker side: packs batches into the slots it is given.

    See NOTE [ Slot ownership ].
    """

    def __init__(self, prefix: str, worker_id: int):
        self._prefix = f"{prefix}w{worker_id}_"
        self._created = 0
        self._maps = {}  # slot index -> (name, mmap)

    def _mapping(self, slot: SlotRef, needed: int):
        # See NOTE [ Slot ownership ]: a batch that does not fit gets a new, larger segment.
        cached = self._maps.get(slot.index)
        if needed > slot.size:
            name, size = f"{self._prefix}{self._created}", _grown(needed)
            self._created += 1
            mm = create_segment(name, size)
        elif cached is not None and cached[0] == slot.name:
            return slot, cached[1]
        else:
            name, size = slot.name, slot.size
            mm = open_segment(name, size)
        if cached is not None:
            close_map(cached[1])
        self._maps[slot.index] = (name, mm)
        return SlotRef(slot.index, name, size), mm

    @contextmanager
    def building(self, slot: SlotRef):
        """While a batch is built for ``slot``: :func:`batch_empty` carves from it."""
        arena = None
        if slot.name is not None and slot.size > 0:
            slot, mm = self._mapping(slot, 0)
            arena = Arena(mm, slot.size)
        _building.arena = arena
        try:
            yield arena
        finally:
            _building.arena = None
            if arena is not None:
                arena.release()

    def pack(self, batch, slot: SlotRef, arena: Optional[Arena] = None) -> Packed:
        packer = _Packer(arena)
        skeleton = packer.walk(batch)
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


class SlotReader:
    """Main side: the arrays of one packed batch, as views of its slot.

    ``shared``: the views are handed to the consumer, and the slot goes back to
    the table when the last of them dies. Otherwise the caller copies what it
    reads and releases the slot itself. See NOTE [ Zero-copy batches ].
    """

    __slots__ = ("shared", "_mm", "_owner")

    def __init__(self, mm: Optional[mmap.mmap], owner: Optional[np.ndarray]):
        self._mm = mm
        self._owner = owner
        self.shared = owner is not None

    def __call__(self, ref: ArrayRef) -> np.ndarray:
        if self._owner is None:
            return np.ndarray(ref.shape, ref.dtype, buffer=self._mm, offset=ref.offset)
        dtype = np.dtype(ref.dtype)
        count = dtype.itemsize
        for n in ref.shape:
            count *= n
        return self._owner[ref.offset:ref.offset + count].view(dtype).reshape(ref.shape)


class SlotTable:
    """Main side: the slot table, mappings to read batches, and all unlinking.

    ``max_viewed``: the most batches handed out as views at a time; ``free``:
    indices of free slots, the next one to use last. See NOTE [ Slot ownership ],
    NOTE [ Zero-copy batches ] and NOTE [ Segment cleanup ].
    """

    def __init__(self, prefix: str, num_slots: int, max_viewed: int = 4):
        _check_available()
        self.prefix = prefix
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
            return
        mapped = self._maps[slot.index]
        if mapped is not None:
            close_map(mapped[1])
            self._maps[slot.index] = None
        if old.name is not None:
            unlink_segment(old.name)
        self._slots[slot.index] = slot

    def _map(self, slot: SlotRef) -> mmap.mmap:
        mapped = self._maps[slot.index]
        if mapped is None or mapped[0] != slot.name:
            if mapped is not None:
                close_map(mapped[1])
            mapped = (slot.name, open_segment(slot.name, slot.size))
            self._maps[slot.index] = mapped
        return mapped[1]

    def reader(self, packed: Packed, share: bool) -> SlotReader:
        """Views of ``packed``'s arrays. Maps the segment now, in the calling thread.

        With ``share``, the slot belongs to the views from now on and comes back
        by itself (the caller must not release it). See NOTE [ Zero-copy batches ].
        """
        slot = packed.slot
        if slot.name is None:
            return SlotReader(None, None)
        mm = self._map(slot)
        if share and packed.nbytes:
            self.collect()
            share = self.viewed < self.max_viewed
        if not share or packed.nbytes == 0:
            return SlotReader(mm, None)
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
        for i, mapped in enumerate(self._maps):
            if mapped is not None:
                close_map(mapped[1])
                self._maps[i] = None
        for i, slot in enumerate(self._slots):
            if slot.name is not None:
                unlink_segment(slot.name)
                self._slots[i] = SlotRef(i, None, 0)
        for name in leftover_segments(self.prefix):
            unlink_segment(name)
