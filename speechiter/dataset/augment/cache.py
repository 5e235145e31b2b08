"""A least-recently-used cache of arrays, bounded in bytes, per process.

Noise and RIR files (corpus.py) and RIR spectra (reverb.py) are kept in one.
Thread workers share their process's; a pickled copy (a new worker process)
starts empty. What it holds changes the speed, never a batch.
"""
import threading
from collections import OrderedDict
from typing import Callable, Hashable

import numpy as np


class ArrayCache:
    """``get(key, make)``: the cached array, else ``make()``, kept while the cache holds at most ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._clear()

    def _clear(self):
        self._arrays: "OrderedDict[Hashable, np.ndarray]" = OrderedDict()
        self.nbytes = 0
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state):
        self.max_bytes = state["max_bytes"]
        self._clear()

    def __len__(self):
        return len(self._arrays)

    def keys(self) -> list:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._arrays)

    def get(self, key: Hashable, make: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            array = self._arrays.get(key)
            if array is not None:
                self._arrays.move_to_end(key)
                return array
        array = make()  # outside the lock: two threads may make the same array once each
        with self._lock:
            if key not in self._arrays and array.nbytes <= self.max_bytes:
                self._arrays[key] = array
                self.nbytes += array.nbytes
                while self.nbytes > self.max_bytes:
                    _, old = self._arrays.popitem(last=False)
                    self.nbytes -= old.nbytes
        return array
