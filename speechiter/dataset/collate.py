"""Collation helpers: per-utterance values in, batch arrays out.

Used by :meth:`Dataset.collate_main_data_fn` and by subclasses that collate
some names themselves (SpeechTextDataset).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from speechiter.batch_memory import batch_empty
from speechiter.errors import DataError


def pad_stack(values: Sequence[np.ndarray], dtype) -> np.ndarray:
    """Stack arrays of different lengths (first axis), zero-padded at the end.

    The result comes from :func:`speechiter.batch_memory.batch_empty`: in
    process workers it is built right in the shared memory the batch travels in.
    """
    longest = max(v.shape[0] for v in values)
    padded = batch_empty((len(values), longest) + values[0].shape[1:], dtype)
    for row, value in zip(padded, values):
        row[:value.shape[0]] = value
        row[value.shape[0]:] = 0
    return padded


def collate_values(name: str, values: List) -> List[tuple]:
    """Collate one named list of per-utterance values (see collate_main_data_fn)."""
    first = values[0]
    if isinstance(first, np.ndarray):
        lengths = np.array([v.shape[0] if v.ndim else 1 for v in values], dtype=np.int64)
        if first.ndim and len(set(v.shape[1:] for v in values)) > 1:
            raise DataError(f"cannot stack {name}: trailing shapes differ "
                            f"({sorted(set(v.shape[1:] for v in values))})")
        if first.ndim == 0 or (lengths == lengths[0]).all():
            return [(name, np.stack(values))]
        return [(name, pad_stack(values, first.dtype)), (f"{name}_len", lengths)]
    if isinstance(first, (bool, np.bool_, int, np.integer, float, np.floating)):
        return [(name, _numbers(name, values))]
    return [(name, list(values))]


def _numbers(name: str, values: List) -> np.ndarray:
    """One number per utterance as an array: bool, int64, or float32 as soon as one of them is a float
    (never an int64 that truncates a later 2.5)."""
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.array(values, dtype=bool)
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
        return np.array(values, dtype=np.int64)
    if all(isinstance(v, (int, np.integer, float, np.floating)) for v in values):
        return np.array(values, dtype=np.float32)
    kinds = sorted({type(v).__name__ for v in values})
    raise DataError(f"cannot collate {name}: the utterances of one batch give numbers and other values ({', '.join(kinds)})")


def check_same_keys(ids: Sequence[str], items: Sequence[Dict[str, Any]]) -> None:
    """Raise DataError unless every utterance of a batch gave the same names
    (collating them otherwise misaligns rows: one list shorter than the batch)."""
    first = set(items[0]) if items else set()
    for uid, item in zip(ids, items):
        if set(item) != first:
            raise DataError(f"utterances of one batch give different data: {ids[0]} gives "
                            f"{sorted(first)}, {uid} gives {sorted(item)}")


def odd_shape(ids: Sequence[str], items: Sequence[Dict[str, Any]]) -> Optional[Tuple[str, str, str]]:
    """``(name, id, what is wrong)`` of the first utterance whose array
    differs from most of the batch beyond the first axis (channels, feature
    dimension), or None."""
    for name, value in items[0].items() if items else ():
        if not isinstance(value, np.ndarray) or not value.ndim:
            continue
        shapes = [item[name].shape[1:] if isinstance(item.get(name), np.ndarray) else None for item in items]
        usual = max(set(shapes), key=shapes.count)
        for uid, shape in zip(ids, shapes):
            if shape != usual and shape is not None:
                return name, uid, (f"has shape (T, {', '.join(map(str, shape))}) but the batch's other "
                                   f"utterances have (T, {', '.join(map(str, usual))})")
    return None
