"""The pack format: a batch as a small skeleton plus its arrays in a slot.

:class:`Packer` replaces every ndarray (and CPU tensor) of a batch by an
:class:`ArrayRef` (offset, dtype, shape) and lays the arrays out 64-byte
aligned; the skeleton travels pickled in a :class:`Packed` message, the
arrays in the slot's shared memory. :class:`SlotReader` turns ArrayRefs back
into arrays that view the slot.

NOTE [ Batch arrays in place ]
While a process worker builds a batch, :func:`speechiter.batch_memory.batch_empty` hands out space in
the slot the batch will travel in (an :class:`Arena`), so a dataset that
builds its padded arrays with it (SpeechTextDataset does) fills the slot
directly, and :meth:`SlotWriter.pack` copies only the other arrays. If the
batch then does not fit, the whole batch moves to a new, larger segment as
usual. Such arrays must not outlive the batch: the slot is reused.
"""
import mmap
import sys
from typing import Any, Callable, List, NamedTuple, Optional

import numpy as np

from speechiter.structure import map_structure

ALIGN = 64


def aligned(offset: int) -> int:
    """The first ``ALIGN``-byte boundary at or after ``offset``."""
    return -(-offset // ALIGN) * ALIGN


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
    """A batch in shared memory: the structure with ArrayRefs, its slot
    (a :class:`~speechiter.sequence.shm.slots.SlotRef`), and the bytes of the
    slot it uses."""

    skeleton: Any
    slot: Any
    nbytes: int = 0


def torch_module():
    """torch if it is imported already (workers never import it for us)."""
    return sys.modules.get("torch")


class Arena:
    """Space in the slot a batch will travel in, handed out while the batch is
    built, so its big arrays need no second copy. See NOTE [ Batch arrays in
    place ]."""

    def __init__(self, mm: mmap.mmap, size: int, reserve: Optional[Callable[[int], None]] = None):
        self._whole = np.frombuffer(mm, dtype=np.uint8, count=size)
        self.base = self._whole.ctypes.data
        self.size = size
        self.used = 0
        self._reserve = reserve  # backs the first n bytes before they are handed out (slots.py)

    def allocate(self, shape, dtype) -> Optional[np.ndarray]:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset = aligned(self.used)
        if nbytes == 0 or dtype.hasobject or offset + nbytes > self.size:
            return None
        if self._reserve is not None:
            self._reserve(offset + nbytes)
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


class Packer:
    """Replaces arrays by ArrayRefs and lays them out, 64-byte aligned.

    Arrays that already lie in ``arena`` keep their offset (``in_place``).
    """

    def __init__(self, arena: Optional[Arena] = None):
        self.arena = arena
        self.arrays: List[np.ndarray] = []
        self.refs: List[ArrayRef] = []
        self.in_place: List[bool] = []  # whether each array already lies in the slot at its offset
        self.total = arena.used if arena is not None else 0

    def pack(self, batch: Any) -> Any:
        """The skeleton of ``batch``: its structure, arrays replaced by ArrayRefs."""
        return map_structure(batch, self._leaf)

    def _leaf(self, value):
        if not isinstance(value, np.ndarray):
            return self._tensor(value)
        array = value if type(value) is np.ndarray else np.asarray(value)  # subclasses: share as plain arrays
        if array.dtype.hasobject or array.nbytes == 0:
            return array  # travels pickled; object arrays cannot be shared
        return self._add(array, None)

    def _add(self, array: np.ndarray, tensor: Optional[str]) -> ArrayRef:
        offset = self.arena.offset_of(array) if self.arena is not None else None
        in_place = offset is not None
        if not in_place:
            offset = aligned(self.total)
            self.total = offset + array.nbytes
        ref = ArrayRef(offset, array.dtype, array.shape, tensor)
        self.arrays.append(array)
        self.refs.append(ref)
        self.in_place.append(in_place)
        return ref

    def _tensor(self, tensor):
        torch = torch_module()
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


class SlotReader:
    """Main side: the arrays of one packed batch, as views of its slot.

    ``shared``: the views are handed to the consumer, and the slot goes back to
    the table when the last of them dies. Otherwise the caller copies what it
    reads and releases the slot itself. See NOTE [ Zero-copy batches ] in slots.py.
    ``pinned``: the slot's mapping is page-locked (NOTE [ Pinned slots ] in pinning.py).
    """

    __slots__ = ("shared", "pinned", "_mm", "_owner")

    def __init__(self, mm: Optional[mmap.mmap], owner: Optional[np.ndarray], pinned: bool = False):
        self._mm = mm
        self._owner = owner
        self.shared = owner is not None
        self.pinned = pinned

    def __call__(self, ref: ArrayRef) -> np.ndarray:
        if self._owner is None:
            return np.ndarray(ref.shape, ref.dtype, buffer=self._mm, offset=ref.offset)
        dtype = np.dtype(ref.dtype)
        count = dtype.itemsize
        for n in ref.shape:
            count *= n
        return self._owner[ref.offset:ref.offset + count].view(dtype).reshape(ref.shape)
