"""The Iterator base class: a Dataset plus a batching view of its ids.

    Dataset -> data_len, group_info -> sort -> batches_generate_fn -> as_view
            -> ngpu divisibility, this rank's share (distributed) = the batching view

Each epoch, :meth:`Iterator.build_loader` clips the view to
``batches_per_epoch`` (the cursor rule), shuffles it (SpeeChain's cumulative
or fresh shuffle, see NOTE [ Epoch shuffle ] in shuffle.py), cuts it at
``start_step`` and hands the plan to the engine.
Subclasses override :meth:`batches_generate_fn` (and :meth:`budgets_longest`
for a rule that is a hard bound). The view steps are in
speechiter/iterator/view.py, lengths and the sort in lengths.py.
"""
import weakref
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from speechiter.checks import check_bool, check_int, check_optional_int
from speechiter.dataset.abs import Dataset
from speechiter.engine import Engine, EngineSettings, make_engine
from speechiter.errors import ConfigError, DataError
from speechiter.iterator.distributed import resolve_rank, share_view
from speechiter.iterator.lengths import load_group_info, load_lengths, sort_ids
from speechiter.iterator.shuffle import EpochShuffle
from speechiter.iterator.tasks import EpochTasks, check_plan_size
from speechiter.iterator.view import (Batches, BatchView, as_view, batches_from_bounds, clip_batches,
                                      is_vectorised, vectorised)
from speechiter.ids import Column, SortedIds
from speechiter.seeding import stream_id
from speechiter.state import fingerprint, settings_summary, view_fingerprint

#: the largest seed: seed + epoch (epochs up to 2**31 - 1) must fit the 32-bit shuffle seed
MAX_SEED = 2 ** 31 - 1


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
        shuffle: shuffle the batches every epoch, seeded by seed + epoch
            (see NOTE [ Epoch shuffle ] in speechiter/iterator/shuffle.py).
        seed: the run's seed.
        ngpu: make every batch's size divisible by ngpu.
        num_workers: loading workers; 0 loads in the main process.
        pin_memory: accepted for SpeeChain compatibility (see out_type).
        distributed: take this rank's share of every batch (torch.distributed).
        rank, world_size: override the distributed rank and world size.
        evaluation: a valid or test iterator (build_iterators sets it): under
            distributed, each utterance goes to one rank only and padding rows
            are marked (see speechiter.iterator.view.eval_share).
        engine: ``msequence`` (default), ``inline`` or ``torch``.
        thread_type: ``proc`` or ``thread`` workers of the msequence engine.
        start_method: how ``proc`` workers start: ``forkserver`` (the default
            where the OS has it, else ``spawn``), ``spawn`` or ``fork``; see
            NOTE [ Start method ] in speechiter/sequence/start.py.
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
                 rank: Optional[int] = None, world_size: Optional[int] = None, evaluation: bool = False,
                 engine: str = "msequence",
                 thread_type: str = "proc", out_type: str = "cpu", buffer: Optional[int] = None,
                 start_method: Optional[str] = None,
                 name: Optional[str] = None, **iter_conf):
        self.batches_per_epoch = check_optional_int(batches_per_epoch, "batches_per_epoch")
        self.ngpu = check_int(ngpu, "ngpu")
        self.engine_settings = EngineSettings(kind=engine, num_workers=num_workers, thread_type=thread_type,
                                              start_method=start_method, out_type=out_type, buffer=buffer)
        self.seed = check_int(seed, "seed", minimum=0)
        if self.seed > MAX_SEED:  # seed + epoch seeds the 32-bit shuffle (see speechiter.seeding.permutation)
            raise ConfigError("seed", f"expected at most {MAX_SEED}, got {seed!r}")
        if is_descending is not None and not isinstance(is_descending, (bool, np.bool_)):
            raise ConfigError("is_descending", f"expected true, false or null, got {is_descending!r}")
        self.is_descending = is_descending
        self.shuffle = check_bool(shuffle, "shuffle")
        self._shuffle = EpochShuffle(self.seed)
        self.evaluation = check_bool(evaluation, "evaluation")
        self.pin_memory = check_bool(pin_memory, "pin_memory")
        distributed = check_bool(distributed, "distributed")
        if is_descending not in (True, False, None):
            raise ConfigError("is_descending", f"expected true, false or null, got {is_descending!r}")
        self.name = name or type(self).__name__
        self.stream = stream_id(self.name)

        if isinstance(dataset_type, str):
            from speechiter.registry import resolve_class
            dataset_type = resolve_class("dataset", dataset_type, "dataset_type", base=Dataset)
        self.dataset: Dataset = dataset_type(**(dataset_conf or {}))

        lengths = load_lengths(self.dataset, data_len, longest=self.budgets_longest(iter_conf))
        self.data_len_files, self.iter_conf = data_len, dict(iter_conf)  # for plots and reports
        self.group_info: Optional[Dict[str, Column]]
        self.group_info, kept = load_group_info(self.dataset, group_info)
        if lengths is not None and kept is not None:
            lengths = lengths.take(kept)
        # the hooks' form: compact for a built-in batches_generate_fn, a dict for a subclass's own
        self.data_len: Optional[Mapping[str, float]] = (lengths if lengths is None or is_vectorised(self)
                                                        else lengths.to_dict())
        view = self._generate_view(sort_ids(self.dataset.get_data_index(), lengths, is_descending), iter_conf)
        self.rank, self.world_size = resolve_rank(distributed, rank, world_size)
        self._set_view(self._distribute(view))
        check_plan_size(self.batches_per_epoch, self._view)
        settings = {"type": f"{type(self).__module__}.{type(self).__qualname__}",
                    "dataset": f"{type(self.dataset).__module__}.{type(self.dataset).__qualname__}",
                    "dataset_conf": dataset_conf, "batches_per_epoch": batches_per_epoch, "data_len": data_len,
                    "group_info": group_info, "is_descending": is_descending, "shuffle": shuffle, "ngpu": ngpu,
                    "rank": self.rank, "world_size": self.world_size, "iter_conf": iter_conf,
                    **({"evaluation": True} if self.evaluation and self.world_size > 1 else {})}
        self.config_fingerprint = fingerprint(settings)
        # the same settings, readable: saved in state files to say what changed (see speechiter.state)
        self.config_summary = settings_summary(settings)
        self._engine: Optional[Engine] = None
        self._engine_finalizer: Optional[weakref.finalize] = None

    # --- construction ----------------------------------------------------------
    def _generate_view(self, sorted_ids: SortedIds, iter_conf: dict) -> BatchView:
        """batches_generate_fn's batches as a BatchView (the one conversion)."""
        data_index = sorted_ids if is_vectorised(self) else sorted_ids.tolist()
        batches = self.batches_generate_fn(data_index, self.data_len, **iter_conf)
        view = as_view(batches, f"{type(self).__name__}.batches_generate_fn")
        if not len(view):
            raise DataError(f"{self.name}: the batching view is empty")
        return view

    def _distribute(self, view: BatchView) -> BatchView:
        """The ngpu rule, then this rank's share (see speechiter.iterator.distributed.share_view)."""
        return share_view(view, self.ngpu, self.rank, self.world_size, self.is_descending is not False,
                          self.evaluation, self.name)

    def _set_view(self, view: BatchView):
        self._view = view
        self._shuffle.forget()
        self._batch_lists: Optional[List[List[str]]] = None
        self._view_fingerprint: Optional[str] = None

    def _public_form(self, view: BatchView) -> Sequence[List[str]]:
        """A view as the public API gives it: the BatchView itself (reads like
        a list of lists), or real lists for a subclass whose hook returns lists."""
        return view if is_vectorised(self) else view.tolist()

    @property
    def batches(self) -> Sequence[List[str]]:
        """The batching view (before clipping and shuffling). For a subclass
        whose hook returns lists, a list made once from the view: assign
        ``self.batches = ...`` to replace the view, in place edits are not seen."""
        if is_vectorised(self):
            return self._view
        if self._batch_lists is None:
            self._batch_lists = self._view.tolist()
        return self._batch_lists

    @batches.setter
    def batches(self, batches: Sequence[List[str]]):
        self._set_view(as_view(batches, f"{type(self).__name__}.batches"))

    # --- the hooks -------------------------------------------------------------
    def budgets_longest(self, iter_conf: dict) -> bool:
        """Hook: whether batching budgets each utterance at the longest it can
        be once built (the dataset's ``max_batch_length_fn``, e.g. the slowest
        speed perturbation) rather than its usual length (``batch_length_fn``).
        True for rules that promise a hard bound (block ``never_exceed``,
        bucket); ``iter_conf`` holds the iterator's options."""
        return False

    @vectorised
    def batches_generate_fn(self, data_index: Sequence[str], data_len: Optional[Mapping[str, float]],
                            batch_size: Optional[int] = None) -> Batches:
        """Hook: the batching view, a list of batches of ids.

        A subclass's own hook gets ``data_index`` as a list of ids in sorted
        order and ``data_len`` as a dict (or None), and returns a list of
        non-empty lists of ids.

        This one puts ``batch_size`` utterances in every batch (the last may
        have fewer); the default batch_size is ngpu, one utterance per GPU.
        """
        batch_size = self.ngpu if batch_size is None else check_int(batch_size, "batch_size")
        bounds = np.append(np.arange(0, len(data_index), batch_size), len(data_index))
        return batches_from_bounds(data_index, bounds if len(data_index) else bounds[:1])

    # --- per-epoch plan --------------------------------------------------------
    def __len__(self):
        """Batches per epoch."""
        return self.batches_per_epoch if self.batches_per_epoch is not None else len(self._view)

    def view_fingerprint(self) -> str:
        """A digest of the batching view (computed once)."""
        if self._view_fingerprint is None:
            self._view_fingerprint = view_fingerprint(self._view)
        return self._view_fingerprint

    def get_batch_indices(self) -> Sequence[List[str]]:
        return self.batches

    def get_group_info(self) -> Optional[Dict[str, Column]]:
        return self.group_info

    def epoch_view(self, epoch: int) -> Sequence[List[str]]:
        """Hook: the batching view of ``epoch`` (before clipping and shuffling).

        The same every epoch here; an iterator whose batches change per epoch
        (bucket.BucketIterator) overrides it, deterministically in (seed, epoch)
        and with the same number of batches every epoch.
        """
        return self.batches

    def _epoch_view(self, epoch: int) -> BatchView:
        if type(self).epoch_view is Iterator.epoch_view:
            return self._view
        return as_view(self.epoch_view(epoch), f"{type(self).__name__}.epoch_view")

    def _epoch_plan(self, epoch: int) -> BatchView:
        view = clip_batches(self._epoch_view(epoch), self.batches_per_epoch, epoch)
        if not self.shuffle:
            return view
        # See NOTE [ Epoch shuffle ]: in place over the epochs when the whole, fixed view is used
        cumulative = view is self._view and type(self).epoch_view is Iterator.epoch_view
        return view.take(self._shuffle.order(epoch, len(view), cumulative))

    def epoch_batches(self, epoch: int) -> Sequence[List[str]]:
        """The epoch's full plan: the clipped, shuffled batching view."""
        return self._public_form(self._epoch_plan(epoch))

    def epoch_tasks(self, epoch: int, start_step: int = 0) -> EpochTasks:
        """The engine's tasks for one epoch from ``start_step`` on.

        Each task keeps its position in the full plan and its own seed, so a
        resumed epoch builds the same batches as an uninterrupted one.
        """
        epoch = check_int(epoch, "epoch")  # epochs count from 1, as SpeeChain's; at most MAX_SEED
        if epoch > MAX_SEED:
            raise ConfigError("epoch", f"expected at most {MAX_SEED}, got {epoch}")
        start_step = check_int(start_step, "start_step", minimum=0)
        plan = self._epoch_plan(epoch)
        if start_step > len(plan):
            raise ConfigError("start_step", f"epoch {epoch} has {len(plan)} batches, got start_step={start_step}")
        return EpochTasks(plan, start_step, len(plan), self.seed, epoch, self.stream + self.rank)

    def build_loader(self, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                     stop_step: Optional[int] = None):
        """An iterable over the batches of ``epoch``, steps ``start_step + 1``
        to ``stop_step`` (default: the end of the epoch).

        With ``prefetch_next`` the workers start on the next epoch's first
        batches while this one drains.
        """
        from speechiter.loader import Loader
        return Loader(self, epoch, start_step, prefetch_next=prefetch_next, stop_step=stop_step)

    # --- the engine ------------------------------------------------------------
    def engine(self) -> Engine:
        """The loading engine of this iterator, started on first use; its
        workers persist across epochs until :meth:`close` (or exit)."""
        if self._engine is None:
            self._engine = make_engine(self.engine_settings, self.dataset)
            self._engine_finalizer = weakref.finalize(self, self._engine.close)
        return self._engine

    def close(self):
        """End the loading workers (also done at exit)."""
        if self._engine is not None:
            self._engine_finalizer()  # closes the engine once
            self._engine = self._engine_finalizer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        sizes = self._view.sizes()
        return (f"{type(self).__name__}(dataset={type(self.dataset).__name__}, utterances={len(self.dataset)}, "
                f"total_batches={len(self._view)}, batches_per_epoch={len(self)}, min_batch={int(sizes.min())}, "
                f"mean_batch={int(sizes.sum()) / len(sizes):.1f}, max_batch={int(sizes.max())}, "
                f"shuffle={self.shuffle}, seed={self.seed}, ngpu={self.ngpu}, "
                f"num_workers={self.engine_settings.num_workers})")
