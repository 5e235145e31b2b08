"""The Iterator base class: a Dataset plus a batching view of its ids.

    Dataset -> data_len -> sort -> batches_generate_fn -> ngpu divisibility
            -> this rank's share (distributed) = the batching view

Each epoch, :meth:`Iterator.build_loader` clips the view to
``batches_per_epoch`` (the cursor rule), shuffles it with a seed that depends
on the epoch, cuts it at ``start_step`` and hands the plan to the engine.
Subclasses override :meth:`batches_generate_fn` only.
"""
import warnings
import weakref
from collections.abc import Sequence
from typing import Dict, List, Optional, Union

import numpy as np

from speechiter.dataset.abs import Dataset
from speechiter.engine import Engine, EngineSettings, make_engine
from speechiter.errors import ConfigError, DataError
from speechiter.idx2 import read_idx2_numbers, read_idx2_table
from speechiter.plan import (BatchView, Column, IdIndex, IdList, LengthMap, SortedIds, batch_lengths,
                             batches_from_bounds, decode_ids, encode_ids, is_vectorised, vectorised)
from speechiter.seeding import batch_seed, permutation, stream_id
from speechiter.state import fingerprint, view_fingerprint


class Iterator:
    """Base iterator: batches of a fixed number of utterances (``batch_size``).

    Args:
        dataset_type: a Dataset subclass, or its ``file.Class`` name (resolved
            by the caller; see speechiter.build).
        dataset_conf: keyword arguments of the Dataset.
        batches_per_epoch: batches in each epoch, smaller or larger than the
            view; None uses the whole view.
        data_len: idx2 length file(s) used for sorting and batching; None uses
            the lengths the dataset registers, if any.
        group_info: ``{name: idx2 file}`` metadata for group-wise evaluation.
        is_descending: sort by length, longest first (True), shortest first
            (False) or keep the dataset order (None). Ties keep the id order.
        shuffle: shuffle the batches every epoch, seeded by seed + epoch.
        seed: the run's seed.
        ngpu: make every batch's size divisible by ngpu.
        num_workers: loading workers; 0 loads in the main process.
        pin_memory: accepted for SpeeChain compatibility (see out_type).
        distributed: take this rank's share of every batch (torch.distributed).
        rank, world_size: override the distributed rank and world size.
        engine: ``msequence`` (default), ``inline`` or ``torch``.
        thread_type: ``proc`` or ``thread`` workers of the msequence engine.
        start_method: how ``proc`` workers start: ``fork`` (the default on
            Linux), ``spawn`` or ``forkserver``.
        out_type: ``cpu`` (torch tensors), ``cuda`` or ``null`` (numpy).
        buffer: batches in flight; default 2 per worker (at least 2).
        name: the iterator's name in reports (``train/sup``); also names its
            random stream.
        **iter_conf: options of :meth:`batches_generate_fn`.
    """

    def __init__(self, dataset_type: Union[type, str], dataset_conf: Optional[Dict] = None,
                 batches_per_epoch: Optional[int] = None, data_len: Union[str, List[str], None] = None,
                 group_info: Optional[Dict[str, Union[str, List[str]]]] = None,
                 is_descending: Optional[bool] = True, shuffle: bool = True, seed: int = 0, ngpu: int = 1,
                 num_workers: int = 1, pin_memory: bool = False, distributed: bool = False,
                 rank: Optional[int] = None, world_size: Optional[int] = None, engine: str = "msequence",
                 thread_type: str = "proc", out_type: str = "cpu", buffer: Optional[int] = None,
                 start_method: Optional[str] = None,
                 name: Optional[str] = None, **iter_conf):
        self.batches_per_epoch = _positive_int_or_none(batches_per_epoch, "batches_per_epoch")
        self.ngpu = _positive_int(ngpu, "ngpu")
        self.seed = int(seed)
        self.is_descending = is_descending
        self.shuffle = _bool(shuffle, "shuffle")
        self.pin_memory = pin_memory
        if is_descending not in (True, False, None):
            raise ConfigError("is_descending", f"expected true, false or null, got {is_descending!r}")
        # --- engine settings (sequence branch; see speechiter/engine.py) ---
        self.engine_settings = EngineSettings(engine, num_workers, thread_type, start_method, out_type, buffer)
        self._engine: Optional[Engine] = None
        # --- end engine settings ---
        self.name = name or type(self).__name__
        self.stream = stream_id(self.name)

        if isinstance(dataset_type, str):
            from speechiter.registry import resolve_class
            dataset_type = resolve_class("dataset", dataset_type, "dataset_type", base=Dataset)
        self.dataset: Dataset = dataset_type(**(dataset_conf or {}))

        self.data_len = self._load_data_len(data_len)
        self.group_info = self._load_group_info(group_info)
        sorted_ids = self._sort(self.dataset.get_data_index())
        self.batches: List[List[str]] = self.batches_generate_fn(sorted_ids, self.data_len, **iter_conf)
        self._check_batches()
        if self.ngpu > 1:
            self.batches = make_divisible(self.batches, self.ngpu)
        self.rank, self.world_size = _distributed_rank(distributed, rank, world_size)
        if self.world_size > 1:
            self.batches = rank_share(self.batches, self.rank, self.world_size, self.is_descending is not False)
        self.config_fingerprint = fingerprint({
            "type": f"{type(self).__module__}.{type(self).__qualname__}",
            "dataset": f"{type(self.dataset).__module__}.{type(self.dataset).__qualname__}",
            "dataset_conf": dataset_conf, "batches_per_epoch": batches_per_epoch, "data_len": data_len,
            "group_info": group_info, "is_descending": is_descending, "shuffle": shuffle, "ngpu": ngpu,
            "rank": self.rank, "world_size": self.world_size, "iter_conf": iter_conf})
        self._view_fingerprint: Optional[str] = None

    # --- construction ----------------------------------------------------------
    def _load_data_len(self, data_len) -> Optional[Dict[str, float]]:
        """Lengths after the dataset's batch_length_fn, for every kept id.

        A compact LengthMap for the built-in batches_generate_fn (see
        NOTE [ Compact storage ] in speechiter/plan.py), a dict for a
        subclass's own.
        """
        ids = self.dataset.id_array()
        if data_len is None:
            registered = self.dataset.data_len
            if registered is None:
                return None
            values = np.array([registered[uid] for uid in IdList(ids)], dtype=np.float64)
        else:
            files = [data_len] if isinstance(data_len, str) else list(data_len)
            file_ids, file_values = read_idx2_numbers(files[0])
            for file in files[1:]:
                more_ids, more_values = read_idx2_numbers(file)
                file_ids = np.concatenate([file_ids, more_ids])
                file_values = np.concatenate([file_values, more_values])
                duplicate = IdIndex(file_ids).first_duplicate()
                if duplicate >= 0:
                    raise DataError(f"{file}: utterance {file_ids[duplicate].decode('utf-8')} has a length in more "
                                    f"than one data_len file")
            rows = IdIndex(file_ids).find(ids)
            missing = rows < 0
            if missing.any():
                warnings.warn(f"{int(missing.sum())} of {len(ids)} utterances have no length in {', '.join(files)} "
                              f"and are dropped (first: {ids[int(np.argmax(missing))].decode('utf-8')})",
                              stacklevel=3)
                if missing.all():
                    raise DataError(f"no utterance of the dataset has a length in {', '.join(files)}")
                self.dataset.keep_only(ids[~missing])
                ids, rows = self.dataset.id_array(), rows[~missing]
            values = file_values[rows]
        lengths = LengthMap(IdIndex(ids), batch_lengths(self.dataset, values, Dataset.batch_length_fn))
        return lengths if is_vectorised(self) else lengths.to_dict()

    def _load_group_info(self, group_info) -> Optional[Dict[str, Dict[str, str]]]:
        """``{group: {id: label}}`` (read-only mappings); ids without an entry
        in every group are dropped with a warning. Later files of a group
        override earlier ones."""
        if group_info is None:
            return None
        if not isinstance(group_info, dict):
            raise ConfigError("group_info", f"expected a mapping of group names to idx2 files, got {group_info!r}")
        ids = self.dataset.id_array()
        kept = np.ones(len(ids), dtype=bool)
        found = {}
        for group, files in group_info.items():
            files = [files] if isinstance(files, str) else list(files)
            tables = [read_idx2_table(file) for file in files]
            file_no = np.full(len(ids), -1, dtype=np.int32)
            rows = np.full(len(ids), -1, dtype=np.int64)
            for number in range(len(tables) - 1, -1, -1):
                hit = (IdIndex(tables[number].ids).find(ids) if len(tables[number]) else rows)
                new = (file_no < 0) & (hit >= 0)
                file_no[new], rows[new] = number, hit[new]
            found[group] = (files, tables, file_no, rows)
            kept &= file_no >= 0
        if not kept.all():
            warnings.warn(f"{int((~kept).sum())} of {len(ids)} utterances have no group_info entry and are "
                          f"dropped", stacklevel=3)
            self.dataset.keep_only(ids[kept])
            if self.data_len is not None:
                if isinstance(self.data_len, LengthMap):
                    self.data_len = self.data_len.take(np.flatnonzero(kept))
                else:
                    self.data_len = {uid: self.data_len[uid] for uid in IdList(ids[kept])}
        index = IdIndex(ids[kept])
        info = {}
        for group, (files, tables, file_no, rows) in found.items():
            file_no, rows = file_no[kept], rows[kept]
            starts = np.concatenate([t.starts for t in tables])
            ends = np.concatenate([t.ends for t in tables])
            offsets = np.cumsum([0] + [len(t) for t in tables])[:-1]
            flat = offsets[file_no] + rows
            info[group] = Column(index, [t.buffer for t in tables], starts[flat], ends[flat], file_no, files)
        return info

    def _sort(self, ids: List[str]) -> List[str]:
        """By length, longest first (or shortest first), ties in id order; or
        the dataset order. SortedIds (with the lengths) for the built-in
        batches_generate_fn, a list for a subclass's own."""
        array = encode_ids(ids)
        lengths = None
        if self.data_len is not None:
            if isinstance(self.data_len, LengthMap) and np.array_equal(self.data_len.index.ids, array):
                lengths = self.data_len.values
            else:
                lengths = np.array([self.data_len[uid] for uid in IdList(array)], dtype=np.float64)
            if self.is_descending is not None:
                by_id = IdIndex(array).id_order()
                by_id = np.arange(len(array)) if by_id is None else by_id
                keys = -lengths[by_id] if self.is_descending else lengths[by_id]
                span = keys.max(initial=0) - keys.min(initial=0)
                if (keys == np.floor(keys)).all() and span < 2.0 ** 32:
                    # whole lengths: a stable LSD radix sort in two 16-bit passes (numpy's radix sort)
                    key = (keys - keys.min()).astype(np.uint32)
                    order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
                    if span >= 2 ** 16:
                        order = order[np.argsort((key >> 16).astype(np.uint16)[order], kind="stable")]
                    order = by_id[order]
                else:
                    order = by_id[np.argsort(keys, kind="stable")]
                array, lengths = array[order], lengths[order]
        if is_vectorised(self):
            return SortedIds(array, lengths)
        return decode_ids(array)

    def _check_batches(self):
        if isinstance(self.batches, BatchView):
            if not len(self.batches):
                raise DataError(f"{self.name}: the batching view is empty")
            if not (self.batches.sizes() > 0).all():
                raise ConfigError("type", f"{type(self).__name__}.batches_generate_fn must return a list of "
                                          f"non-empty lists of ids")
            return
        if not isinstance(self.batches, list) or not all(isinstance(b, list) and b for b in self.batches):
            raise ConfigError("type", f"{type(self).__name__}.batches_generate_fn must return a list of "
                                      f"non-empty lists of ids")
        if not self.batches:
            raise DataError(f"{self.name}: the batching view is empty")

    # --- the hook --------------------------------------------------------------
    @vectorised
    def batches_generate_fn(self, data_index: List[str], data_len: Optional[Dict[str, float]],
                            batch_size: Optional[int] = None) -> List[List[str]]:
        """Hook: the batching view, a list of batches of ids.

        This one puts ``batch_size`` utterances in every batch (the last may
        have fewer); the default batch_size is ngpu, one utterance per GPU.
        """
        batch_size = self.ngpu if batch_size is None else _positive_int(batch_size, "batch_size")
        bounds = np.append(np.arange(0, len(data_index), batch_size), len(data_index))
        return batches_from_bounds(data_index, bounds if len(data_index) else bounds[:1])

    # --- per-epoch plan --------------------------------------------------------
    def __len__(self):
        """Batches per epoch."""
        return self.batches_per_epoch if self.batches_per_epoch is not None else len(self.batches)

    def view_fingerprint(self) -> str:
        """A digest of the batching view (computed once)."""
        if self._view_fingerprint is None:
            self._view_fingerprint = view_fingerprint(self.batches)
        return self._view_fingerprint

    def get_batch_indices(self) -> List[List[str]]:
        return self.batches

    def get_group_info(self) -> Optional[Dict[str, Dict[str, str]]]:
        return self.group_info

    def epoch_view(self, epoch: int) -> List[List[str]]:
        """The batching view of ``epoch`` (before clipping and shuffling).

        The same every epoch here; an iterator whose batches change per epoch
        (bucket.BucketIterator) overrides it, deterministically in (seed, epoch)
        and with the same number of batches every epoch.
        """
        return self.batches

    def epoch_batches(self, epoch: int) -> List[List[str]]:
        """The epoch's full plan: the clipped, shuffled batching view."""
        batches = clip_batches(self.epoch_view(epoch), self.batches_per_epoch, epoch)
        if self.shuffle:
            order = permutation(epoch + self.seed, len(batches))
            batches = batches.take(order) if isinstance(batches, BatchView) else [batches[i] for i in order]
        return batches

    def epoch_tasks(self, epoch: int, start_step: int = 0):
        """The engine's tasks for one epoch from ``start_step`` on.

        Each task keeps its position in the full plan and its own seed, so a
        resumed epoch builds the same batches as an uninterrupted one.
        """
        start_step = _non_negative_int(start_step, "start_step")
        batches = self.epoch_batches(epoch)
        if start_step > len(batches):
            raise ConfigError("start_step", f"epoch {epoch} has {len(batches)} batches, got start_step={start_step}")
        return EpochTasks(batches, start_step, len(batches), self.seed, epoch, self.stream + self.rank)

    def build_loader(self, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                     stop_step: Optional[int] = None):
        """An iterable over the batches of ``epoch``, steps ``start_step + 1``
        to ``stop_step`` (default: the end of the epoch).

        With ``prefetch_next`` the workers start on the next epoch's first
        batches while this one drains.
        """
        from speechiter.loader import Loader
        return Loader(self, epoch, start_step, prefetch_next=prefetch_next, stop_step=stop_step)

    # --- engine (sequence branch; see speechiter/engine.py) ---
    def engine(self) -> Engine:
        """The loading engine, started on first use; its workers persist across epochs."""
        if self._engine is None:
            self._engine = make_engine(self.engine_settings, self.dataset)
            weakref.finalize(self, self._engine.close)
        return self._engine

    def close(self):
        """End the loading workers (also done at exit)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
    # --- end engine ---

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        sizes = [len(b) for b in self.batches]
        return (f"{type(self).__name__}(dataset={type(self.dataset).__name__}, utterances={len(self.dataset)}, "
                f"total_batches={len(self.batches)}, batches_per_epoch={len(self)}, min_batch={min(sizes)}, "
                f"mean_batch={sum(sizes) / len(sizes):.1f}, max_batch={max(sizes)}, shuffle={self.shuffle}, "
                f"seed={self.seed}, ngpu={self.ngpu}, num_workers={self.engine_settings.num_workers})")


class EpochTasks(Sequence):
    """One epoch's tasks ``[start, stop)``, each built when it is read, so a
    long epoch costs nothing to plan beyond its shuffle."""

    def __init__(self, batches, start: int, stop: int, seed: int, epoch: int, stream: int):
        self.batches, self.start, self.stop = batches, start, stop
        self.seed, self.epoch, self.stream = seed, epoch, stream

    def __len__(self):
        return self.stop - self.start

    def __getitem__(self, item):
        if isinstance(item, slice):
            first, last, step = item.indices(len(self))
            if step != 1:
                raise ValueError("EpochTasks slices take no step")
            return EpochTasks(self.batches, self.start + first, self.start + max(first, last), self.seed,
                              self.epoch, self.stream)
        if not -len(self) <= item < len(self):
            raise IndexError(item)
        from speechiter.sequence import Task
        position = self.start + item % len(self)
        return Task(position, self.batches[position], batch_seed(self.seed, self.epoch, position, self.stream))

    def __eq__(self, other):
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self):
        return f"EpochTasks(epoch {self.epoch}, steps {self.start + 1}..{self.stop})"


def clip_batches(batches: List[List[str]], batches_per_epoch: Optional[int], epoch: int) -> List[List[str]]:
    """SpeeChain's cursor rule.

    The clip of epoch e starts at ``(batches_per_epoch * (e - 1)) % len(batches)``
    and takes ``batches_per_epoch`` batches, wrapping around to the start as
    often as needed. So consecutive epochs walk through the whole view.
    """
    total = len(batches)
    if batches_per_epoch is None or batches_per_epoch == total:
        return batches if isinstance(batches, BatchView) else list(batches)
    cursor = (batches_per_epoch * (epoch - 1)) % total
    if isinstance(batches, BatchView):
        return batches.take((cursor + np.arange(batches_per_epoch)) % total)
    return [batches[(cursor + i) % total] for i in range(batches_per_epoch)]


def make_divisible(batches: List[List[str]], ngpu: int) -> List[List[str]]:
    """SpeeChain's ngpu rule: move each batch's remainder (size % ngpu) to the
    front of the next batch; what is left after the last batch becomes a
    batch of its own.

    The ids keep their order; only the cuts move: after batch i the cut is at
    ``cum_i - cum_i % ngpu`` (cum_i: utterances up to batch i), which is how
    the BatchView form computes it.
    """
    if isinstance(batches, BatchView):
        cum = np.cumsum(batches.sizes())
        cuts = np.unique(cum - cum % ngpu)
        cuts = cuts[cuts > 0]
        total = len(batches.ids)
        tail = [total] if not len(cuts) or cuts[-1] != total else []
        return BatchView(batches.ids, np.concatenate([[0], cuts, tail]).astype(np.int64))
    result, carry = [], []
    for batch in batches:
        batch = carry + list(batch)
        remain = len(batch) % ngpu
        carry = batch[len(batch) - remain:] if remain else []
        if len(batch) > remain:
            result.append(batch[:len(batch) - remain])
    if carry:
        result.append(carry)
    return result


def rank_share(batches: List[List[str]], rank: int, world_size: int, descending: bool) -> List[List[str]]:
    """This rank's share of every batch (SpeeChain's split-each-batch rule).

    Rank r takes ``batch[start::world_size]`` with ``start = world_size - r - 1``
    for descending views (rank 0 gets the shortest utterances) and ``r``
    otherwise. Every rank keeps one share per batch, so all ranks run the same
    number of steps. NOTE [ Distributed padding ]: a batch with fewer
    utterances than ranks would leave some shares empty; such a rank takes the
    batch's last utterance again. These are the only repeated utterances.
    """
    start = world_size - rank - 1 if descending else rank
    if isinstance(batches, BatchView):
        sizes = batches.sizes()
        within = np.arange(len(batches.ids)) - np.repeat(batches.bounds[:-1], sizes)
        take = (within >= start) & ((within - start) % world_size == 0)
        rows = np.flatnonzero(take)
        counts = np.bincount(np.repeat(np.arange(len(sizes)), sizes)[rows], minlength=len(sizes))
        rows = np.sort(np.concatenate([rows, batches.bounds[1:][counts == 0] - 1]))
        bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.maximum(counts, 1), out=bounds[1:])
        return BatchView(batches.ids[rows], bounds)
    return [batch[start::world_size] or [batch[-1]] for batch in batches]


def _distributed_rank(distributed: bool, rank, world_size):
    if rank is not None or world_size is not None:
        rank, world_size = int(rank or 0), int(world_size or 1)
    elif distributed:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise ConfigError("distributed", "is true but torch.distributed is not initialised "
                                             "(run under torchrun with --distributed)")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank, world_size = 0, 1
    if not 0 <= rank < world_size:
        raise ConfigError("rank", f"expected 0 <= rank < world_size={world_size}, got {rank}")
    return rank, world_size


def _bool(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(name, f"expected true or false, got {value!r}")
    return bool(value)


def _positive_int(value, name: str) -> int:
    number = _number(value, name)
    if number <= 0 or not float(number).is_integer():
        raise ConfigError(name, f"expected a positive integer, got {value!r}")
    return int(number)


def _positive_int_or_none(value, name: str) -> Optional[int]:
    return None if value is None else _positive_int(value, name)


def _non_negative_int(value, name: str) -> int:
    number = _number(value, name)
    if number < 0 or not float(number).is_integer():
        raise ConfigError(name, f"expected a non-negative integer, got {value!r}")
    return int(number)


def _number(value, name: str, kind: str = "a number"):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(name, f"expected {kind}, got {value!r}")
    return value


def positive_number(value, name: str) -> float:
    """Check a positive number option (accepts ints and floats such as 2.4e7)."""
    number = _number(value, name, "a positive number")
    if not number > 0:
        raise ConfigError(name, f"expected a positive number, got {value!r}")
    return number
