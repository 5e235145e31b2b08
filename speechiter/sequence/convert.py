"""Output converters: numpy -> torch -> pinned -> cuda.

A converter turns one raw batch into the output type. The raw batch is either
the object a worker or the indexer returned (in-process and thread mode), or
a :class:`~speechiter.sequence.shm.Packed` batch whose arrays are views into
a shared-memory slot (process mode). When its reader is ``shared`` the
converter hands out those views (see NOTE [ Zero-copy batches ] in shm/slots.py);
otherwise it copies every array out, so that the slot can be reused as soon
as the converter returns.

* ``'null'``: arrays stay numpy (tensors stay tensors), as the worker made them.
* ``'cpu'``: numeric ndarrays become torch tensors; strings, lists of strings,
  object arrays and scalars stay as they are.
* ``'cuda'`` / ``'cuda:N'``: as 'cpu', then copied to the device from
  page-locked memory. See NOTE [ CUDA copies ].

Then the batch's device steps run (speechiter/device_steps.py: log-mel
computed on the GPU, for one), on the device the batch goes to.

torch is imported lazily, so workers and 'null' output never need it.
"""
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Optional, Tuple

import numpy as np

from speechiter import interrupts
from speechiter.device_steps import run_device_steps
from speechiter.sequence.shm import ArrayRef, Packed
from speechiter.sequence.workers import POLL_S
from speechiter.structure import is_array_leaf, map_structure

OUT_TYPES = ("null", "cpu", "cuda")


def is_out_type(value) -> bool:
    """One of ``OUT_TYPES`` or ``'cuda:N'``."""
    return isinstance(value, str) and (value in OUT_TYPES or (value.startswith("cuda:") and value[5:].isdigit()))


def resolve_out_type(out_type: str, stacklevel: int = 3) -> str:
    """Validate ``out_type``; 'cuda' without CUDA falls back to 'cpu' with a warning."""
    if not is_out_type(out_type):
        raise ValueError(f"out_type should be one of 'cuda', 'cuda:N', 'cpu', 'null', but got out_type={out_type!r}")
    if out_type.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            warnings.warn(f"out_type={out_type!r} but CUDA is not available; batches stay on the CPU "
                          "(out_type='cpu')", RuntimeWarning, stacklevel=stacklevel)
            return "cpu"
    return out_type


def device_of(out_type: str):
    """The torch device of a cuda out type, else None."""
    if not out_type.startswith("cuda"):
        return None
    import torch
    return torch.device(out_type)


def _is_leaf(value) -> bool:
    """An array, a tensor, or an ArrayRef of a packed batch."""
    return type(value) is ArrayRef or is_array_leaf(value)


def _numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biufc"


def _from_numpy(array: np.ndarray, copy: bool):
    """A torch tensor of a numeric array; copies when asked or when torch needs it."""
    import torch
    if not copy and (not array.flags.writeable or any(s < 0 for s in array.strides)
                     or not array.dtype.isnative):
        copy = True
    if copy:
        array = np.array(array, dtype=array.dtype.newbyteorder("=")) if not array.dtype.isnative else np.array(array)
    try:
        return torch.from_numpy(array)
    except TypeError:  # a dtype torch does not have (e.g. uint64 on old torch): keep numpy
        return array


def _tensor_from_view(view: np.ndarray, name: str, copy: bool = True):
    """A tensor from a shm view of an array a worker returned as a tensor (a fresh one if ``copy``)."""
    import torch
    tensor = torch.from_numpy(np.array(view) if copy else view)
    if name == "bfloat16":
        tensor = tensor.view(torch.bfloat16)
    return tensor


class Converter:
    """Converts raw batches to one out type. One per converter thread for CUDA."""

    def __init__(self, out_type: str):
        self.out_type = out_type
        self.device = device_of(out_type)
        self._stream = None
        if self.device is not None:
            import torch
            self._stream = torch.cuda.Stream(self.device)

    def __call__(self, raw, resolver: Optional[Callable] = None) -> Tuple[object, object]:
        """Convert ``raw``; returns ``(batch, cuda_event_or_None)``.

        ``resolver`` (a :class:`~speechiter.sequence.shm.SlotReader`) maps
        ArrayRefs of a Packed batch to shm views (process mode); it is None for
        objects straight from an indexer. When it is ``shared`` the views are
        handed out as they are, for 'null' and 'cpu'.
        """
        skeleton = raw.skeleton if isinstance(raw, Packed) else raw
        if self.out_type in ("null", "cpu"):
            batch = map_structure(skeleton, self._host_leaf(resolver, tensors=self.out_type == "cpu"), _is_leaf)
            return run_device_steps(batch, None if self.out_type == "null" else _cpu()), None
        return self._to_cuda(skeleton, resolver)

    @staticmethod
    def _host_leaf(resolver, tensors: bool):
        """Arrays out of their slot (views when shared); numeric ones as torch tensors when ``tensors``."""
        copy = resolver is None or not resolver.shared

        def leaf(obj):
            if type(obj) is ArrayRef:
                view = resolver(obj)
                if obj.tensor:
                    return _tensor_from_view(view, obj.tensor, copy)
                if tensors and _numeric(view.dtype):
                    return _from_numpy(view, copy=copy)
                return np.array(view) if copy else view
            if tensors and isinstance(obj, np.ndarray):
                return _from_numpy(obj, copy=False) if _numeric(obj.dtype) else obj
            return obj  # a tensor already, or not an array
        return leaf

    # NOTE [ CUDA copies ]
    # Each converter owns a side stream. An array of a slot whose mapping is
    # page-locked (NOTE [ Pinned slots ] in shm/pinning.py) is copied to the
    # device straight from the slot; any other host array is copied once into
    # a pinned tensor from torch's caching host allocator (which keeps the
    # block from reuse until the copy that reads it has run) and from there.
    # Copies are non_blocking, on the side stream; the batch's device steps
    # follow on the same stream, and an event is recorded after them. A
    # converter that copied from a slot waits for its copies before it
    # returns, so the slot is free when the scheduler releases it. The
    # consumer thread makes its current stream wait on the event and calls
    # record_stream on every device tensor (see hand_over), so the work
    # overlaps the consumer's compute and the caching allocator does not
    # reuse the memory too early.
    def _to_cuda(self, skeleton, resolver):
        import torch
        direct = resolver is not None and resolver.pinned

        def leaf(obj):
            if type(obj) is ArrayRef:
                host = resolver(obj)
                if not _numeric(host.dtype) and not obj.tensor:
                    return np.array(host)
                if direct and host.dtype.isnative:
                    pinned = torch.from_numpy(host)  # the page-locked slot itself
                else:
                    pinned = torch.empty(obj.shape, dtype=_torch_dtype(host.dtype), pin_memory=True)
                    pinned.numpy()[...] = host
                if obj.tensor == "bfloat16":
                    pinned = pinned.view(torch.bfloat16)
            elif isinstance(obj, np.ndarray):
                if not _numeric(obj.dtype):
                    return obj
                pinned = torch.empty(obj.shape, dtype=_torch_dtype(obj.dtype), pin_memory=True)
                pinned.numpy()[...] = obj
            else:  # a tensor
                if obj.device.type != "cpu":
                    return obj
                pinned = obj if obj.is_pinned() else obj.pin_memory()
            return pinned.to(self.device, non_blocking=True)

        with torch.cuda.stream(self._stream):
            batch = map_structure(skeleton, leaf, _is_leaf)
            copied = torch.cuda.Event()
            copied.record(self._stream)
            batch = run_device_steps(batch, self.device)
            event = torch.cuda.Event()
            event.record(self._stream)
        if direct:
            _wait_copied(copied)  # the slot is read: See NOTE [ Pinned slots ] in shm/pinning.py
        return batch, event


_TORCH_DTYPES = {}
# How long a converter waits for the copies from a slot (a few ms normally); polled, never spun or unbounded.
COPY_TIMEOUT_S = 60.0
_COPY_POLL_S = 0.0002


def _wait_copied(event) -> None:
    deadline = time.monotonic() + COPY_TIMEOUT_S
    while not event.query():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the copies of a batch to the GPU did not finish within {COPY_TIMEOUT_S:g} s")
        time.sleep(_COPY_POLL_S)


def _cpu():
    import torch
    return torch.device("cpu")


def _torch_dtype(dtype: np.dtype):
    import torch
    dtype = np.dtype(dtype).newbyteorder("=")
    found = _TORCH_DTYPES.get(dtype)
    if found is None:
        found = _TORCH_DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype)).dtype
    return found


def hand_over(batch, event, device):
    """In the consumer thread: wait for a converter's CUDA copies. See NOTE [ CUDA copies ]."""
    if event is None:
        return batch
    import torch
    stream = torch.cuda.current_stream(device)
    stream.wait_event(event)

    def leaf(obj):
        if isinstance(obj, torch.Tensor) and obj.is_cuda:
            obj.record_stream(stream)
        return obj

    map_structure(batch, leaf)
    return batch


class ConverterThreads:
    """``count`` converter threads, each with its own :class:`Converter` (and CUDA stream)."""

    def __init__(self, out_type: str, count: int):
        self.out_type = out_type
        self.count = count
        self._executor = ThreadPoolExecutor(count, thread_name_prefix="speechiter-converter")
        self._local = threading.local()

    def submit(self, raw, resolver: Optional[Callable]) -> Future:
        """Convert ``raw`` in a converter thread; the future's result is ``(batch, cuda_event_or_None)``."""
        return self._executor.submit(self._convert, raw, resolver)

    def _convert(self, raw, resolver):
        converter = getattr(self._local, "converter", None)
        if converter is None:
            converter = self._local.converter = Converter(self.out_type)
        return converter(raw, resolver)

    def close(self) -> None:
        """Finish what runs, cancel the rest."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def wait_converted(future: Future, timeout: float):
    """``future.result(timeout)``, polling so that a swallowed Ctrl-C still ends the wait
    (NOTE [ One shutdown path ] in speechiter/interrupts.py)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except FutureTimeout:
            interrupts.check()
            if time.monotonic() >= deadline:
                raise
