"""SpeeChain's ``data_selection`` rules: parsing them and applying them to ids.

A rule is ``[mode, number]`` or ``[mode, number, meta_file]``; a Dataset
applies a list of them in order (see :meth:`Dataset.select`).

Without metadata, ``number`` is a fraction in (0, 1) or a negative integer
``-n`` meaning n utterances: ``order`` keeps the first ones, ``rev_order`` the
last ones and ``random`` a seeded draw without replacement (in dataset order;
SpeeChain draws with replacement from numpy's global state, a bug we do not
copy). With ``meta_file`` (an idx2 file of numbers or labels) the rule only
ever removes utterances listed in it; those it does not list are kept, as in
SpeeChain. ``min`` / ``max`` keep the utterances with the smallest / largest
values (a count as above, counted among the listed ones, or a threshold given
as a string: ``!str 10``); ``middle`` drops ``int((N - n) / 2)`` from each
end; ``group`` keeps the utterances whose label is ``number`` (a string or a
list of strings). See NOTE [ SpeeChain's selection arithmetic ].

# NOTE [ SpeeChain's selection arithmetic ]
The count rules are SpeeChain's slices, kept exactly, edge cases included:
with the listed ids sorted by value (stable, ties in id order) and k the
count, ``min`` removes ``sorted[k:]``, ``max`` removes ``sorted[:-k]`` and
``middle`` removes ``sorted[:c]`` and ``sorted[-c:]`` with
``c = int((N - k) / 2)``. So ``max`` with k = 0 and ``rev_order`` with
k = 0 (``ids[-0:]``) keep everything, and ``middle`` with c = 0 removes every
listed id; each of these warns.
"""
import warnings
from typing import Any, List, Optional, Sequence

import numpy as np

from speechiter.errors import ConfigError, DataError
from speechiter.ids import Column, IdIndex
from speechiter.idx2 import Idx2Table, read_idx2_table

SELECTION_MODES = ("order", "rev_order", "random", "min", "max", "middle", "group")
POSITION_MODES = ("order", "rev_order", "random")


def selection_rules(data_selection: Any) -> List[Sequence]:
    """The rules of a ``data_selection`` option: one rule or a list of them (None: none)."""
    if data_selection is None:
        return []
    if not isinstance(data_selection, (list, tuple)) or not data_selection:
        raise ConfigError("data_selection", f"expected [mode, number] or a list of them, got {data_selection!r}")
    rules = [data_selection] if not isinstance(data_selection[0], (list, tuple)) else data_selection
    for rule in rules:
        if not isinstance(rule, (list, tuple)) or len(rule) not in (2, 3):
            raise ConfigError("data_selection", f"each rule is [mode, number] or [mode, number, meta_file], "
                                                f"got {rule!r}")
    return rules


def select_ids(ids: np.ndarray, mode: str, number, meta_file: Optional[str] = None, seed: int = 0) -> np.ndarray:
    """Apply one rule to ``ids`` (an ``S`` array); the kept ids, in their order.

    ``seed`` drives the ``random`` mode. Its warnings point at the caller's
    caller (the code that built the Dataset, when the constructor calls it).
    """
    where = f"data_selection [{mode}, {number}{', ' + str(meta_file) if meta_file else ''}]"
    if mode not in SELECTION_MODES:
        raise ConfigError(where, f"unknown mode {mode!r}; expected one of {', '.join(SELECTION_MODES)}")
    if meta_file is None:
        if mode not in POSITION_MODES:
            raise ConfigError(where, f"mode {mode!r} needs a metadata file as third element")
        count = _selection_count(number, len(ids), where)
        if mode == "order":
            return ids[:count]
        if mode == "rev_order":
            if count == 0:
                warnings.warn(f"{where}: selects 0 utterances, which SpeeChain's rule turns into keeping all "
                              f"of them", stacklevel=3)
            return ids[-count:]
        chosen = np.random.default_rng(seed).choice(len(ids), size=count, replace=False)
        return ids[np.sort(chosen)]

    if mode in POSITION_MODES:
        raise ConfigError(where, f"mode {mode!r} takes no metadata file")
    table = read_idx2_table(meta_file)
    rows = IdIndex(table.ids).find(ids)
    found = rows >= 0
    by_id = IdIndex(ids[found]).id_order()  # the listed ids in id order, as SpeeChain reads meta_file
    present = ids[found] if by_id is None else ids[found][by_id]
    rows = rows[found] if by_id is None else rows[found][by_id]
    meta = Column(IdIndex(table.ids), [table.buffer], table.starts, table.ends, None, [meta_file])
    if mode == "group":
        groups = [str(g).encode("utf-8") for g in (number if isinstance(number, (list, tuple)) else [number])]
        removed = present[~np.isin(meta.take(rows).raw_values(), np.array(groups, dtype="S"))]
        return _without(ids, removed)
    values = _meta_numbers(meta_file, mode, table, meta, present, rows)
    if isinstance(number, str):
        if mode == "middle":
            raise ConfigError(where, "mode 'middle' takes a count, not a threshold string")
        threshold = _threshold(number, where)
        return _without(ids, present[values > threshold if mode == "min" else values < threshold])
    count = _selection_count(number, len(ids), where, of=len(present))
    by_value = present[np.argsort(values, kind="stable")]
    if mode == "min":
        removed = by_value[count:]
    elif mode == "max":
        removed = by_value[:-count]
        if count == 0:
            warnings.warn(f"{where}: selects 0 utterances, which SpeeChain's rule turns into keeping all "
                          f"of them", stacklevel=3)
    else:
        cut = int((len(by_value) - count) / 2)
        removed = np.concatenate([by_value[:cut], by_value[-cut:]])
        if cut == 0:
            warnings.warn(f"{where}: removes nothing from either end, which SpeeChain's rule turns into "
                          f"removing every utterance listed in {meta_file}", stacklevel=3)
    return _without(ids, removed)


def _without(ids: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """``ids`` (in their order) less ``removed``."""
    return ids[~np.isin(ids, removed)] if len(removed) else ids


def _meta_numbers(meta_file: str, mode: str, table, meta: Column, present: np.ndarray,
                  rows: np.ndarray) -> np.ndarray:
    """The numeric metadata of ``present`` (rows ``rows`` of ``table``), as float64."""
    try:
        return Idx2Table(meta_file, present, table.buffer, table.starts[rows], table.ends[rows]).numbers()
    except DataError:  # some line of meta_file is not a number: name the first one we use
        values = []
        for value in meta.take(rows).raw_values().tolist():
            try:
                values.append(float(value.decode("utf-8")))
            except ValueError as e:
                raise DataError(f"{meta_file}: mode {mode!r} needs numeric values ({e})") from None
        return np.asarray(values, dtype=np.float64)


def _selection_count(number, total: int, where: str, of: Optional[int] = None) -> int:
    """The count of a rule over ``total`` utterances; a fraction is taken of
    ``of`` (the utterances listed in the metadata file) when given."""
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ConfigError(where, f"expected a fraction in (0, 1) or a negative count, got {number!r}")
    if isinstance(number, float) and 0 < number < 1:
        return int((total if of is None else of) * number)
    if number < 0 and float(number).is_integer():
        if -number > total:
            raise ConfigError(where, f"asks for {int(-number)} utterances but only {total} are available")
        return int(-number)
    raise ConfigError(where, f"expected a fraction in (0, 1) or a negative count, got {number!r}")


def _threshold(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(where, f"expected a numeric threshold, got {text!r}") from None
