"""An Iterator's per-utterance data: lengths (``data_len``), group labels
(``group_info``), and the length sort.

Ids without a length, or without a label in every group, are dropped from
the dataset with a warning. Everything stays compact (LengthMap, Column,
SortedIds; see NOTE [ Compact storage ] in speechiter/ids.py).
"""
import warnings
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from speechiter.dataset import length_check
from speechiter.dataset.abs import Dataset
from speechiter.errors import ConfigError, DataError
from speechiter.ids import Column, IdIndex, IdList, LengthMap, SortedIds, encode_ids
from speechiter.idx2 import check_lengths, read_idx2_files
from speechiter.index.sorting import sorted_by_length

Files = Union[str, List[str]]
ExpectedLengths = Tuple[LengthMap, List[str]]  # a waveform length file's lengths as read, and its files


def load_lengths(dataset: Dataset, data_len: Optional[Files], longest: bool = False
                 ) -> Tuple[Optional[LengthMap], Optional[ExpectedLengths]]:
    """Lengths after the dataset's batch_length_fn (``max_batch_length_fn``
    with ``longest``), for every id it keeps: from the ``data_len`` idx2
    files, else those the dataset registers, else None. And, for a waveform
    length file, ``(lengths as read, files)``: what the loaded audio is checked
    against (NOTE [ Length files are checked ] in dataset/length_check.py)."""
    ids = dataset.id_array()
    if data_len is None:
        registered = dataset.data_len
        if registered is None:
            return None, None
        if isinstance(registered, LengthMap):
            values = registered.values[registered.index.find(ids)].astype(np.float64)
        else:
            values = np.array([registered[uid] for uid in IdList(ids)], dtype=np.float64)
        check_lengths(f"{type(dataset).__name__}.data_len_register_fn", ids, values)
        return LengthMap(IdIndex(ids), values), None  # already in the dataset's own unit (text: characters)
    else:
        files = [data_len] if isinstance(data_len, str) else list(data_len)
        merged = read_idx2_files(files, "data_len", on_duplicate="last")  # a later file wins (SpeeChain)
        file_ids, file_values = merged.ids, merged.numbers(lengths=True)
        if file_ids is ids or (len(file_ids) == len(ids) and np.array_equal(file_ids, ids)):  # the usual case: no copy
            return _lengths(dataset, ids, file_values, files, longest)
        rows = IdIndex(file_ids).find(ids)
        missing = rows < 0
        if missing.any():
            warnings.warn(f"{int(missing.sum())} of {len(ids)} utterances have no length in {', '.join(files)} "
                          f"and are dropped (first: {ids[int(np.argmax(missing))].decode('utf-8')})",
                          stacklevel=4)
            if missing.all():
                raise DataError(f"no utterance of the dataset has a length in {', '.join(files)}")
            dataset.keep_only(ids[~missing])
            ids, rows = dataset.id_array(), rows[~missing]
        return _lengths(dataset, ids, file_values[rows], files, longest)


def _lengths(dataset: Dataset, ids: np.ndarray, values: np.ndarray, files: List[str], longest: bool):
    index = IdIndex(ids)
    expected = (LengthMap(index, values), files) if length_check.checked(files) else None
    return LengthMap(index, batch_lengths(dataset, values, longest)), expected


def length_hook(dataset: Dataset, longest: bool = False):
    """The dataset's length hook: ``batch_length_fn``, the usual length once
    built; with ``longest``, ``max_batch_length_fn`` (the longest it can be,
    random augmentation included) where the dataset defines its own."""
    if longest:
        fn = getattr(dataset, "max_batch_length_fn", None)
        if fn is not None and getattr(fn, "__func__", None) is not getattr(Dataset, "max_batch_length_fn", None):
            return fn
    return dataset.batch_length_fn


def batch_lengths(dataset: Dataset, values: np.ndarray, longest: bool = False) -> np.ndarray:
    """The dataset's length hook (see :func:`length_hook`) over ``values`` (float64).

    Tried once on the whole array; kept if it gives an array of the same
    shape that agrees with per-value calls on a sample. Otherwise it is called
    once per distinct value (ints for whole lengths, as the hook always got).
    """
    fn = length_hook(dataset, longest)
    if getattr(fn, "__func__", None) is Dataset.batch_length_fn or len(values) == 0:
        return values

    def one(value):
        return fn(int(value) if value.is_integer() else value)

    rows = np.concatenate([np.linspace(0, len(values) - 1, 64).astype(np.int64),
                           [int(values.argmin()), int(values.argmax())]])
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(fn(values.copy()), dtype=np.float64)
        if out.shape == values.shape:
            expected = np.array([one(v) for v in values[rows].tolist()], dtype=np.float64)
            if np.array_equal(out[rows], expected):
                return values if np.array_equal(out, values) else out  # unchanged: keep the (mapped) input
    except Exception:  # noqa: BLE001 - a hook that is not element-wise; call it per value
        pass
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([one(v) for v in distinct.tolist()], dtype=np.float64)[inverse]


def load_group_info(dataset: Dataset, group_info: Optional[Dict[str, Files]]
                    ) -> Tuple[Optional[Dict[str, Column]], Optional[np.ndarray]]:
    """``{group: {id: label}}`` (read-only mappings) and the rows of the
    dataset's ids that were kept (None when all were). Ids without an entry
    in every group are dropped with a warning. Later files of a group
    override earlier ones."""
    if group_info is None:
        return None, None
    if not isinstance(group_info, dict):
        raise ConfigError("group_info", f"expected a mapping of group names to idx2 files, got {group_info!r}")
    ids = dataset.id_array()
    kept = np.ones(len(ids), dtype=bool)
    found = {}
    for group, files in group_info.items():
        files = [files] if isinstance(files, str) else list(files)
        merged = read_idx2_files(files, f"group_info.{group}", on_duplicate="last")
        rows = IdIndex(merged.ids).find(ids) if len(merged) else np.full(len(ids), -1, dtype=np.int64)
        found[group] = (merged, rows)
        kept &= rows >= 0
    kept_rows = None
    if not kept.all():
        warnings.warn(f"{int((~kept).sum())} of {len(ids)} utterances have no group_info entry and are "
                      f"dropped", stacklevel=4)
        dataset.keep_only(ids[kept])
        kept_rows = np.flatnonzero(kept)
    index = IdIndex(ids[kept])
    info = {}
    for group, (merged, rows) in found.items():
        part = merged.take(rows[kept])
        info[group] = Column(index, part.buffers, part.starts, part.ends, part.file_no, part.files)
    return info, kept_rows


def sort_ids(ids: Sequence[str], lengths: Optional[LengthMap], is_descending: Optional[bool]) -> SortedIds:
    """By length, longest first (or shortest first), ties in id order; or
    the given order (``is_descending`` None or no lengths)."""
    array = encode_ids(ids)
    if lengths is None:
        return SortedIds(array, None)
    if lengths.index.ids is array or np.array_equal(lengths.index.ids, array):
        values = lengths.values
    else:  # a dataset whose get_data_index differs from its id order
        rows = lengths.index.find(array)
        if (rows < 0).any():
            raise KeyError(array[int(np.argmax(rows < 0))].decode("utf-8"))
        values = lengths.values[rows]
    if is_descending is not None:
        cached = sorted_by_length(array, values, is_descending, lambda: _length_order(array, values, is_descending))
        if cached is not None:  # See NOTE [ Plan cache ] in speechiter/index/__init__.py
            return SortedIds(*cached)
        order = _length_order(array, values, is_descending)
        array, values = array[order], values[order]
    return SortedIds(array, values)


def _length_order(ids: np.ndarray, lengths: np.ndarray, descending: bool) -> np.ndarray:
    """The stable length order of ``ids``, ties in id order."""
    by_id = IdIndex(ids).id_order()
    by_id = np.arange(len(ids)) if by_id is None else by_id
    keys = -lengths[by_id] if descending else lengths[by_id]
    span = keys.max(initial=0) - keys.min(initial=0)
    if (keys == np.floor(keys)).all() and span < 2.0 ** 32:
        # whole lengths: a stable LSD radix sort in two 16-bit passes (numpy's radix sort)
        key = (keys - keys.min()).astype(np.uint32)
        order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
        if span >= 2 ** 16:
            order = order[np.argsort((key >> 16).astype(np.uint16)[order], kind="stable")]
        return by_id[order]
    return by_id[np.argsort(keys, kind="stable")]
