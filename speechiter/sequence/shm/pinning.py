"""Page-locked slot mappings: CUDA copies straight from the shared memory the workers wrote.

NOTE [ Pinned slots ]
With ``out_type: cuda``, a batch used to cross the main process twice: copied
out of its slot into a pinned staging buffer, then copied to the device. The
main process's mapping of a slot is page-locked instead (``cudaHostRegister``,
once per mapping, as long as it lives: slots are reused batch after batch), so
the converter copies each array to the device with one DMA from the slot
itself, on its side stream, and the batch's bytes are touched by no CPU in
the main process. Rules:

- a mapping is registered before its first copy and unregistered before it is
  unmapped (a slot's segment grew, or the table closes: early exit, an error,
  Ctrl-C all close it, NOTE [ Shutdown order ] in sequence/scheduler.py);
- a slot goes back to the table only once the copies that read it have run:
  the converter waits for their CUDA event before it returns the batch
  (NOTE [ CUDA copies ] in sequence/convert.py);
- where registering fails (a driver or container that refuses it), one
  warning says so and batches go through pinned staging buffers as before.

:class:`HostPins` does the bookkeeping with the two functions it is given, so
tests check it without CUDA; :func:`cuda_host_pins` gives it CUDA's.
"""
import warnings
from typing import Callable, Dict, Tuple

import numpy as np


class HostPins:
    """The registered mappings of one slot table: ``register(address, size)`` and ``unregister(address)``
    raise on failure. See NOTE [ Pinned slots ]."""

    def __init__(self, register: Callable[[int, int], None], unregister: Callable[[int], None]):
        self._register = register
        self._unregister = unregister
        self._pinned: Dict[int, Tuple[object, int]] = {}  # id(mapping) -> (mapping, address)
        self.failed = False

    def __len__(self) -> int:
        return len(self._pinned)

    def pin(self, mm) -> bool:
        """Register ``mm`` (an mmap) unless it is already; False once registering has failed."""
        if id(mm) in self._pinned:
            return True
        if self.failed or len(mm) == 0:
            return False
        view = np.frombuffer(mm, np.uint8)
        address = view.ctypes.data
        del view  # no buffer export left: the mapping can still be closed
        try:
            self._register(address, len(mm))
        except Exception as error:
            self.failed = True
            warnings.warn(f"could not page-lock the loading workers' shared memory for CUDA copies ({error}); "
                          "batches are copied through pinned staging buffers instead", RuntimeWarning, stacklevel=2)
            return False
        self._pinned[id(mm)] = (mm, address)
        return True

    def unpin(self, mm) -> None:
        """Unregister ``mm`` if it is registered (before it is unmapped). A failure warns and lets the
        clean-up go on: the mapping is unmapped and its segment unlinked all the same."""
        entry = self._pinned.pop(id(mm), None)
        if entry is not None:
            try:
                self._unregister(entry[1])
            except Exception as error:
                warnings.warn(f"could not unregister shared memory from CUDA ({error})", RuntimeWarning,
                              stacklevel=2)

    def close(self) -> None:
        for mm, _ in list(self._pinned.values()):
            self.unpin(mm)


def cuda_host_pins() -> HostPins:
    """HostPins that page-lock with ``cudaHostRegister`` (torch's CUDA runtime bindings)."""
    import torch

    cudart = torch.cuda.cudart()

    def check(error, what):
        if int(error) != 0:
            raise RuntimeError(f"{what} returned CUDA error {int(error)}")

    def register(address: int, size: int) -> None:
        check(cudart.cudaHostRegister(address, size, 0), "cudaHostRegister")

    def unregister(address: int) -> None:
        check(cudart.cudaHostUnregister(address), "cudaHostUnregister")

    return HostPins(register, unregister)
