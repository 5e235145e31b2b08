"""The Dataset base class: idx2data files in, one collated batch out.

A Dataset reads its ``main_data`` idx2 files (``<id> <value>`` per line),
keeps the ids present in every file, applies ``data_selection``, and builds
a batch from a list of ids:

    ids -> __getitem__(id) -> extract_main_data_fn -> collate_fn -> collate_main_data_fn

Batches are plain numpy arrays, lists of strings and numbers; the engine turns
them into torch tensors. Subclasses override the hooks, as in SpeeChain.
"""
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from speechiter.errors import ConfigError, DataError
from speechiter.idx2 import Idx2Table, read_idx2_table
from speechiter.plan import Column, IdIndex, IdList, LengthMap, decode_ids, encode_ids

SELECTION_MODES = ("order", "rev_order", "random", "min", "max", "middle", "group")


class Dataset:
    """Base class of all datasets.

    Args:
        main_data: ``{name: idx2 file or [files]}``. Several files for one name
            are merged; ids are intersected across names (dropped ids are
            counted in a warning).
        data_selection: one ``[mode, number]`` / ``[mode, number, meta_file]``
            rule or a list of them, applied in order (see :meth:`select`).
        seed: seed of the ``random`` selection mode.
        **dataset_conf: passed to :meth:`dataset_init_fn`.

    Storage is compact (see NOTE [ Compact storage ] in speechiter/plan.py):
    ``main_data[name]`` is a read-only mapping ``{id: value}`` and
    :meth:`get_data_index` a list-like view, both backed by numpy arrays, so
    10M utterances load in seconds and forked workers do not copy them.
    """

    #: main_data names whose values are file paths; relative ones resolve
    #: against the folder of the idx2 file that lists them.
    path_keys: Sequence[str] = ()

    def __init__(self, main_data: Dict[str, Union[str, List[str]]], data_selection=None, seed: int = 0,
                 **dataset_conf):
        if not isinstance(main_data, dict) or not main_data:
            raise ConfigError("main_data", f"expected a mapping of names to idx2 files, got {main_data!r}")
        self.seed = seed
        self.sources: Dict[str, List[str]] = {}
        self.main_data: Dict[str, Mapping] = {}
        for key, files in main_data.items():
            self.sources[key], self.main_data[key] = self._read_main_data(key, files)
        self._align(encode_ids(self._intersect_ids()))
        for rule in _selection_rules(data_selection):
            if type(self).select is Dataset.select:
                ids = self._select_array(self._index.ids, *rule)
            else:  # a subclass's own select() gets lists
                ids = self.select(list(self.get_data_index()), *rule)
            self.keep_only(ids)
        self.data_len = self.data_len_register_fn(self.main_data)
        self.dataset_init_fn(**dataset_conf)

    # --- loading ---------------------------------------------------------------
    def _read_main_data(self, key: str, files):
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        if not files:
            raise ConfigError(f"main_data.{key}", "expected an idx2 file or a list of them, got an empty list")
        files = [os.fspath(f) for f in files]
        tables, ids = [], None
        for number, file in enumerate(files):
            tables.append(read_idx2_table(file))
            if number:
                ids = np.concatenate([ids, tables[-1].ids])
                duplicate = IdIndex(ids).first_duplicate()
                if duplicate >= 0:
                    raise DataError(f"{file}: utterance {ids[duplicate].decode('utf-8')} is also listed in another "
                                    f"{key} file ({', '.join(f for f in files if f != file)})")
            else:
                ids = tables[0].ids
        index = IdIndex(ids)
        resolve = key in self.path_keys
        if len(tables) == 1:
            table = tables[0]
            return files, Column(index, [table.buffer], table.starts, table.ends, None, files, resolve)
        file_no = np.repeat(np.arange(len(tables), dtype=np.int32), [len(t) for t in tables])
        return files, Column(index, [t.buffer for t in tables], np.concatenate([t.starts for t in tables]),
                             np.concatenate([t.ends for t in tables]), file_no, files, resolve)

    def _intersect_ids(self) -> IdList:
        """The ids listed under every main_data name, in the first name's order."""
        keys = list(self.main_data)
        first = self.main_data[keys[0]].index
        present = np.ones(len(first), dtype=bool)
        for key in keys[1:]:
            present &= self.main_data[key].index.find(first.ids) >= 0
        common = first.ids[present]
        sizes = {k: len(d) for k, d in self.main_data.items()}
        if any(size > len(common) for size in sizes.values()):
            total = len(np.unique(np.concatenate([self.main_data[k].index.ids for k in keys])))
            detail = ", ".join(f"{total - size} missing from {k} ({', '.join(self.sources[k])})"
                               for k, size in sizes.items() if size < total)
            warnings.warn(f"{total - len(common)} of {total} utterances are not in every main_data file and "
                          f"are dropped: {detail}", stacklevel=3)
        if not len(common):
            raise DataError("no utterance id is common to all main_data files: "
                            + ", ".join(f"{k}: {self.sources[k]}" for k in keys))
        return IdList(common)

    def _align(self, ids: np.ndarray):
        """Make ``ids`` the dataset's index; every column follows its order."""
        index = IdIndex(ids)
        for key, column in self.main_data.items():
            rows = column.index.find(ids)
            if len(rows) != len(column) or not np.array_equal(rows, np.arange(len(rows))):
                column = column.take(rows, index)
            else:
                column.index = index
            self.main_data[key] = column
        self._index = index

    @property
    def data_index(self) -> IdList:
        return IdList(self._index.ids)

    def id_array(self) -> np.ndarray:
        """The ids in dataset order, as an ``S`` array of UTF-8 bytes."""
        return self._index.ids

    def keep_only(self, ids: Sequence[str]):
        """Restrict the dataset to ``ids`` (in that order; a list, an IdList or an S array)."""
        ids = encode_ids(ids)
        rows = self._index.find(ids)
        if (rows < 0).any():
            raise KeyError(f"keep_only: utterance {ids[int(np.argmax(rows < 0))].decode('utf-8')!r} "
                           f"is not in the dataset")
        if len(rows) == len(self._index) and np.array_equal(rows, np.arange(len(rows))):
            return
        index = IdIndex(ids)
        for key, data in self.main_data.items():
            if isinstance(data, (Column, LengthMap)):
                self.main_data[key] = data.take(rows, index)
            else:  # a subclass replaced it by its own mapping
                keep = IdList(ids)
                self.main_data[key] = {uid: data[uid] for uid in keep}
        self._index = index

    def remove_data_by_index(self, index: str):
        """SpeeChain compatibility: drop one utterance."""
        self.keep_only(self._index.ids[self._index.ids != index.encode("utf-8")])

    def get_data_index(self) -> IdList:
        """The ids in dataset order: a list-like view (``list()`` it for a real list)."""
        return IdList(self._index.ids)

    def __len__(self):
        return len(self._index)

    def origin(self, key: str, uid: str) -> str:
        """The idx2 file that lists ``uid`` under ``key`` (for error messages)."""
        data = self.main_data.get(key)
        if isinstance(data, Column):
            row = data.index.find_one(uid)
            if row >= 0:
                return data.file_of(row)
        return self.sources[key][0]

    def data_error(self, key: str, uid: str, problem: Any) -> DataError:
        """A DataError naming the utterance, its idx2 file and the problem."""
        return DataError(f"utterance {uid} ({key} from {self.origin(key, uid)}): {problem}")

    # --- data selection --------------------------------------------------------
    def select(self, data_index: List[str], mode: str, number, meta_file: Optional[str] = None) -> List[str]:
        """Apply one SpeeChain ``data_selection`` rule.

        Without metadata, ``number`` is a fraction in (0, 1) or a negative
        integer ``-n`` meaning n utterances:
          ``order`` keeps the first ones, ``rev_order`` the last ones and
          ``random`` a seeded draw without replacement (in dataset order).
        With ``meta_file`` (an idx2 file of numbers or labels):
          ``min`` / ``max`` keep the utterances with the smallest / largest
          values (a count as above, or a threshold given as a string: ``!str 10``);
          ``middle`` drops equally many from both ends; ``group`` keeps the
          utterances whose label is ``number`` (a string or a list of strings).
        """
        return decode_ids(self._select_array(encode_ids(data_index), mode, number, meta_file))

    def _select_array(self, ids: np.ndarray, mode: str, number, meta_file: Optional[str] = None) -> np.ndarray:
        where = f"data_selection [{mode}, {number}{', ' + str(meta_file) if meta_file else ''}]"
        if mode not in SELECTION_MODES:
            raise ConfigError(where, f"unknown mode {mode!r}; expected one of {', '.join(SELECTION_MODES)}")
        if meta_file is None:
            if mode not in ("order", "rev_order", "random"):
                raise ConfigError(where, f"mode {mode!r} needs a metadata file as third element")
            count = _selection_count(number, len(ids), where)
            if mode == "order":
                return ids[:count]
            if mode == "rev_order":
                return ids[len(ids) - count:]
            chosen = np.random.default_rng(self.seed).choice(len(ids), size=count, replace=False)
            return ids[np.sort(chosen)]

        if mode in ("order", "rev_order", "random"):
            raise ConfigError(where, f"mode {mode!r} takes no metadata file")
        table = read_idx2_table(meta_file)
        rows = IdIndex(table.ids).find(ids)
        found = rows >= 0
        if not found.all():
            warnings.warn(f"{int((~found).sum())} utterances have no entry in {meta_file} and are "
                          f"dropped by data_selection", stacklevel=3)
        present, rows = ids[found], rows[found]
        meta = Column(IdIndex(table.ids), [table.buffer], table.starts, table.ends, None, [meta_file])
        if mode == "group":
            groups = [str(g).encode("utf-8") for g in (number if isinstance(number, (list, tuple)) else [number])]
            return present[np.isin(meta.take(rows).raw_values(), np.array(groups, dtype="S"))]
        try:
            values = Idx2Table(meta_file, present, table.buffer, table.starts[rows], table.ends[rows]).numbers()
        except DataError:  # some line of meta_file is not a number: name the first one we use
            values = []
            for value in meta.take(rows).raw_values().tolist():
                try:
                    values.append(float(value.decode("utf-8")))
                except ValueError as e:
                    raise DataError(f"{meta_file}: mode {mode!r} needs numeric values ({e})") from None
            values = np.asarray(values, dtype=np.float64)
        by_value = np.argsort(values, kind="stable")
        if isinstance(number, str):
            if mode == "middle":
                raise ConfigError(where, "mode 'middle' takes a count, not a threshold string")
            threshold = _float(number, where)
            keep = values <= threshold if mode == "min" else values >= threshold
        else:
            count = _selection_count(number, len(present), where)
            if mode == "min":
                chosen = by_value[:count]
            elif mode == "max":
                chosen = by_value[len(by_value) - count:]
            else:
                cut = (len(by_value) - count) // 2
                chosen = by_value[cut:cut + count]
            keep = np.zeros(len(present), dtype=bool)
            keep[chosen] = True
        return present[keep]

    # --- hooks -----------------------------------------------------------------
    def data_len_register_fn(self, main_data: Dict[str, Mapping]) -> Optional[Dict[str, float]]:
        """Hook: lengths known from the data itself (``{id: length}``), or None
        (then give ``data_len`` files). ``main_data[name]`` maps ids to values."""
        return None

    def batch_length_fn(self, length: float) -> float:
        """Hook: the length an utterance of ``data_len`` length has once built.

        Batching budgets use it, so a dataset that changes lengths (speed
        perturbation, samples to feature frames) keeps ``batch_len`` valid.
        It is tried once on the array of all lengths; if it does not work
        element-wise there, it is called per utterance.
        """
        return length

    def dataset_init_fn(self):
        """Hook: subclass-specific initialisation. Declare your options as
        keyword parameters; data_cfg keys are checked against them."""

    def extract_main_data_fn(self, main_data: Dict[str, str]) -> Dict[str, Any]:
        """Hook: read one utterance. ``main_data`` maps names to idx2 values;
        the id is in ``main_data['id']``. Return ``{name: data}``."""
        main_data.pop("id", None)
        return main_data

    def collate_main_data_fn(self, batch_dict: Dict[str, List]) -> Dict[str, Any]:
        """Hook: turn ``{name: [value per utterance]}`` into the batch.

        Arrays are zero-padded along their first axis and stacked, with
        ``<name>_len`` holding the true lengths when they differ; numbers
        become arrays; strings stay lists.
        """
        return {key: value for name, values in batch_dict.items() for key, value in collate_values(name, values)}

    # --- batch building --------------------------------------------------------
    def __getitem__(self, uid: str) -> Dict[str, Any]:
        row = self._index.find_one(uid)
        if row < 0:
            raise KeyError(uid)
        main_data = {key: data.value(row) if isinstance(data, Column) and data.index is self._index else data[uid]
                     for key, data in self.main_data.items()}
        main_data["id"] = uid
        return self.extract_main_data_fn(main_data)

    def collate_fn(self, batch: List[Dict[str, Any]]) -> Dict[str, Any]:
        """Regroup per-utterance dicts by name, then ``collate_main_data_fn``."""
        batch_dict: Dict[str, List] = {}
        for item in batch:
            for key, value in item.items():
                batch_dict.setdefault(key, []).append(value)
        return self.collate_main_data_fn(batch_dict)

    def get_batch(self, ids: Sequence[str]) -> Dict[str, Any]:
        return self.collate_fn([self[uid] for uid in ids])

    def __repr__(self):
        return f"{type(self).__name__}({len(self)} utterances, data: {', '.join(self.main_data)})"


class DatasetReader:
    """The engine's indexer: ``reader[ids]`` is the collated batch.

    It is also its own picklable factory (``reader()`` returns itself), so
    each worker gets a copy: inherited on fork, pickled with spawn. Datasets
    that hold open handles must open them lazily (see speechiter/arrays.py).
    """

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __call__(self):
        return self

    def __getitem__(self, ids):
        return self.dataset.get_batch(ids)


def pad_stack(values: Sequence[np.ndarray], dtype) -> np.ndarray:
    """Stack arrays of different lengths (first axis), zero-padded at the end.

    The result comes from :func:`speechiter.sequence.batch_empty`: in process
    workers it is built right in the shared memory the batch travels in.
    """
    from speechiter.sequence import batch_empty
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
    if isinstance(first, (bool, np.bool_)):
        return [(name, np.array(values, dtype=bool))]
    if isinstance(first, (int, np.integer)):
        return [(name, np.array(values, dtype=np.int64))]
    if isinstance(first, (float, np.floating)):
        return [(name, np.array(values, dtype=np.float32))]
    return [(name, list(values))]


def _selection_rules(data_selection):
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


def _selection_count(number, total: int, where: str) -> int:
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ConfigError(where, f"expected a fraction in (0, 1) or a negative count, got {number!r}")
    if isinstance(number, float) and 0 < number < 1:
        return int(total * number)
    if number < 0 and float(number).is_integer():
        if -number > total:
            raise ConfigError(where, f"asks for {int(-number)} utterances but only {total} are available")
        return int(-number)
    raise ConfigError(where, f"expected a fraction in (0, 1) or a negative count, got {number!r}")


def _float(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(where, f"expected a numeric threshold, got {text!r}") from None
