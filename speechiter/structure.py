"""Nested batch structures: dicts, lists, tuples and named tuples of leaves.

One walker for every place that rebuilds a batch leaf by leaf (packing into
shared memory, converting to tensors, moving to a device, checksums).
"""
from typing import Any, Callable

import numpy as np

_SCALARS = (str, int, float, bool, bytes, type(None))


def is_tensor(value: Any) -> bool:
    """A torch tensor, without importing torch."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def is_array_leaf(value: Any) -> bool:
    """The default leaf test: a numpy array or a torch tensor."""
    return isinstance(value, np.ndarray) or is_tensor(value)


def map_structure(obj: Any, leaf: Callable[[Any], Any], is_leaf: Callable[[Any], bool] = is_array_leaf) -> Any:
    """Rebuild ``obj`` with every leaf (``is_leaf``) replaced by ``leaf(value)``.

    dicts, lists and tuples keep their types (dict subclasses and named tuples
    included, as far as their constructors allow); any other value is kept.
    """
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if is_leaf(obj):
        return leaf(obj)
    if kind is dict:
        return {key: map_structure(value, leaf, is_leaf) for key, value in obj.items()}
    if kind is list:
        return [map_structure(value, leaf, is_leaf) for value in obj]
    if kind is tuple:
        return tuple(map_structure(value, leaf, is_leaf) for value in obj)
    if isinstance(obj, dict):
        return kind((key, map_structure(value, leaf, is_leaf)) for key, value in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return kind(*(map_structure(value, leaf, is_leaf) for value in obj))
    if isinstance(obj, (list, tuple)):
        return kind(map_structure(value, leaf, is_leaf) for value in obj)
    return obj

