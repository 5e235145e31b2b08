"""The Dataset base class: idx2data files in, one collated batch out.

A Dataset reads its ``main_data`` idx2 files (``<id> <value>`` per line),
keeps the ids present in every file, applies ``data_selection``, and builds
a batch from a list of ids:

    ids -> __getitem__(id) -> extract_main_data_fn -> collate_fn -> collate_main_data_fn

Batches are plain numpy arrays, lists of strings and numbers; the engine turns
them into torch tensors. Subclasses override the hooks, as in SpeeChain.
The ``data_selection`` rules live in selection.py, the collation helpers in
collate.py, and the reader the engine builds batches with (DatasetReader) in
reader.py.
"""
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from speechiter.batch import SKIPPED_KEY
from speechiter.dataset import options
from speechiter.dataset.bad_audio import MAX_BAD_FRACTION, check_options, read_rows
from speechiter.dataset.collate import check_same_keys, collate_values, odd_shape
from speechiter.dataset.collate import pad_stack  # noqa: F401 (re-exported)
from speechiter.dataset.augment.record import ROWS_KEY, rows_record, take_records
from speechiter.dataset.augment.views import view_rows
from speechiter.dataset.selection import select_ids, selection_rules
from speechiter.errors import ConfigError, DataError
from speechiter.ids import Column, IdIndex, IdList, LengthMap, decode_ids, encode_ids
from speechiter.idx2 import read_idx2_files
from speechiter.paths import NAMED_FILES, SELECTION


class Dataset:
    """Base class of all datasets.

    Args:
        main_data: ``{name: idx2 file or [files]}``. Several files for one name
            are merged, a later file's value winning for an id listed twice
            (as SpeeChain); ids are intersected across names (dropped ids are
            counted in a warning). The dataset order is id order (Python
            ``str`` order, which is UTF-8 byte order), as SpeeChain sorts
            every idx2 file by id when it reads it.
        data_selection: one ``[mode, number]`` / ``[mode, number, meta_file]``
            rule or a list of them, applied in order (see :meth:`select`).
        seed: seed of the ``random`` selection mode.
        on_bad_audio: ``error`` (stop at an utterance that cannot be read) or ``skip`` (leave it out of its
            batch); max_bad_fraction: the most of an epoch's utterances that may be skipped (NOTE [ Skipped
            utterances ] in bad_audio.py).
        **dataset_conf: passed to :meth:`dataset_init_fn`.

    Storage is compact (see NOTE [ Compact storage ] in speechiter/ids.py):
    ``main_data[name]`` is a read-only mapping ``{id: value}`` and
    :meth:`get_data_index` a list-like view, both backed by numpy arrays, so
    10M utterances load in seconds and forked workers do not copy them.
    """

    #: main_data names whose values are file paths; relative ones resolve
    #: against the folder of the idx2 file that lists them.
    path_keys: Sequence[str] = ()
    #: options that name files, rooted and checked by build_iterators (see NOTE [ Path policy ] in paths.py)
    file_options = {"main_data": NAMED_FILES, "data_selection": SELECTION}
    #: rows per utterance in a batch (see NOTE [ Views ] in augment/views.py)
    views: int = 1

    def __init__(self, main_data: Dict[str, Union[str, List[str]]], data_selection=None, seed: int = 0,
                 on_bad_audio: str = "error", max_bad_fraction: float = MAX_BAD_FRACTION, **dataset_conf):
        if not isinstance(main_data, dict) or not main_data:
            raise ConfigError("main_data", f"expected a mapping of names to idx2 files, got {main_data!r}")
        self.seed = seed
        self.on_bad_audio, self.max_bad_fraction = check_options(on_bad_audio, max_bad_fraction)
        self.main_data_files: Dict[str, List[str]] = {}
        self.main_data: Dict[str, Mapping] = {}
        for key, files in main_data.items():
            self.main_data_files[key], self.main_data[key] = self._read_main_data(key, files)
        self._align(encode_ids(self._intersect_ids()))
        counts = [len(self)]
        for number, rule in enumerate(selection_rules(data_selection), 1):
            if type(self).select is Dataset.select:
                ids = select_ids(self._index.ids, *rule, seed=self.seed)
            else:  # a subclass's own select() gets lists
                ids = self.select(list(self.get_data_index()), *rule)
            if not len(ids):
                steps = ", ".join(f"{count} before rule {i}" for i, count in enumerate(counts, 1))
                raise ConfigError("data_selection", f"leaves no utterance: rule {number} {list(rule)!r} keeps none "
                                                    f"({steps})")
            self.keep_only(ids)
            counts.append(len(self))
        self.data_len = self.data_len_register_fn(self.main_data)
        try:
            self.dataset_init_fn(**dataset_conf)
        except TypeError as error:
            option_error = options.option_error(type(self), error)
            if option_error is None:
                raise
            raise option_error from None

    # --- loading ---------------------------------------------------------------
    def _read_main_data(self, key: str, files):
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        if not files:
            raise ConfigError(f"main_data.{key}", "expected an idx2 file or a list of them, got an empty list")
        merged = read_idx2_files(files, key, on_duplicate="last")
        column = Column(IdIndex(merged.ids, merged.ids_sorted), merged.buffers, merged.starts, merged.ends,
                        merged.file_no, merged.files, key in self.path_keys)
        return merged.files, column

    def _intersect_ids(self) -> IdList:
        """The ids listed under every main_data name, in id order (SpeeChain's order)."""
        keys = list(self.main_data)
        first = self.main_data[keys[0]].index
        by_id = first.id_order()  # the argsort the lookups need anyway; None: sorted already
        ids = first.ids if by_id is None else first.ids[by_id]
        present = np.ones(len(ids), dtype=bool)
        for key in keys[1:]:
            present &= self.main_data[key].index.find(ids) >= 0
        common = ids if present.all() else ids[present]  # the same array when nothing is dropped: no copy
        sizes = {k: len(d) for k, d in self.main_data.items()}
        if any(size > len(common) for size in sizes.values()):
            total = len(np.unique(np.concatenate([self.main_data[k].index.ids for k in keys])))
            detail = ", ".join(f"{total - size} missing from {k} ({', '.join(self.main_data_files[k])})"
                               for k, size in sizes.items() if size < total)
            warnings.warn(f"{total - len(common)} of {total} utterances are not in every main_data file and "
                          f"are dropped: {detail}", stacklevel=3)
        if not len(common):
            raise DataError("no utterance id is common to all main_data files: "
                            + ", ".join(f"{k}: {self.main_data_files[k]}" for k in keys))
        return IdList(common)

    def _align(self, ids: np.ndarray):
        """Make ``ids`` the dataset's index; every column follows its order."""
        index = IdIndex(ids)
        for key, column in self.main_data.items():
            if column.index.ids is ids:
                column.index = index
                continue
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
        return self.main_data_files[key][0]

    def data_error(self, key: str, uid: str, problem: Any) -> DataError:
        """A DataError naming the utterance, its idx2 file and the problem."""
        return DataError(f"utterance {uid} ({key} from {self.origin(key, uid)}): {problem}")

    # --- data selection --------------------------------------------------------
    def select(self, data_index: List[str], mode: str, number, meta_file: Optional[str] = None) -> List[str]:
        """Apply one SpeeChain ``data_selection`` rule ``[mode, number(, meta_file)]``
        (see speechiter/dataset/selection.py); a subclass may override it."""
        return decode_ids(select_ids(encode_ids(data_index), mode, number, meta_file, self.seed))

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

    def max_batch_length_fn(self, length: float) -> float:
        """Hook: the longest a ``data_len`` length can become once built
        (random augmentation at its longest); hard-bound batching rules
        (block ``never_exceed``, bucket) budget it. Defaults to batch_length_fn."""
        return self.batch_length_fn(length)

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
        """The collated batch of ``ids``. A batch that cannot be collated is
        a DataError naming the utterance (and its file) that breaks it.
        Rows that carry an applied record, or several views, tell the loader
        under ``ROWS_KEY`` (NOTE [ The applied record ] in augment/record.py);
        utterances left out under ``on_bad_audio: skip``, under ``SKIPPED_KEY``
        (NOTE [ Skipped utterances ] in bad_audio.py)."""
        rows, items, skipped = read_rows(self, view_rows(ids, self.views) if self.views > 1 else ids)
        if not items:  # every row skipped: the loader counts the step and yields nothing
            return {SKIPPED_KEY: skipped}
        records = take_records(items)
        check_same_keys(rows, items)
        try:
            batch = self.collate_fn(items)
        except DataError:
            odd = odd_shape(rows, items)
            if odd is None:
                raise
            name, uid, problem = odd
            if name not in self.main_data:
                raise DataError(f"utterance {uid}: {name} {problem}") from None
            raise self.data_error(name, uid, f"{self.main_data[name][uid]} {problem}") from None
        if (records is not None or self.views > 1) and isinstance(batch, dict):
            batch[ROWS_KEY] = rows_record(records, self.views, len(rows) // self.views)
        if skipped:
            if not isinstance(batch, dict):
                raise DataError(f"on_bad_audio: skip needs a collate that returns a dict (to tell which rows it "
                                f"left out), got {type(batch).__name__}; skipped {skipped[0][1]}")
            batch[SKIPPED_KEY] = skipped
        return batch

    def __repr__(self):
        return f"{type(self).__name__}({len(self)} utterances, data: {', '.join(self.main_data)})"
