"""The Iterator base class: SpeeChain's facade over a Dataset, BatchOptions, EngineSettings and an EpochPlanner.

The keyword arguments become two frozen values: :class:`speechiter.plan.options.BatchOptions` (what the
batches are; its fingerprint guards resumes) and :class:`speechiter.engine.EngineSettings` (how they are
loaded). The views:

    Dataset -> data_len, group_info -> sort -> batches_generate_fn -> as_view = the base view
    -> ngpu rule, rank share = the view

and each epoch's plan is the :class:`speechiter.plan.epochs.EpochPlanner`'s (``planner``): the view clipped to
``batches_per_epoch``, shuffled (NOTE [ Epoch shuffle ] in speechiter/plan/shuffle.py), cut at ``start_step``
and handed to the engine, which builds the batches with :meth:`Iterator.reader`. Subclasses override
:meth:`batches_generate_fn` (and :meth:`budgets_longest` for a hard bound, :meth:`base_epoch_view` or
:meth:`epoch_view` for batches that change per epoch). Lengths and the sort are in lengths.py.
"""
import dataclasses
import weakref
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from speechiter.checks import check_bool, check_int
from speechiter.dataset.abs import Dataset
from speechiter.dataset.bad_audio import plan_conf  # not of the options: See NOTE [ Skipped utterances ]
from speechiter.dataset.reader import DatasetReader
from speechiter.engine import EngineSettings
from speechiter.errors import DataError
from speechiter.ids import Column, SortedIds
from speechiter.index.views import planned_view  # See NOTE [ Plan cache ] in speechiter/index/__init__.py
from speechiter.iterator.lengths import load_group_info, load_lengths, sort_ids
from speechiter.iterator.loadable import Loadable
from speechiter.paths import FILES, NAMED_FILES
from speechiter.plan.epochs import EpochPlanner
from speechiter.plan.options import BatchOptions, qualified_name
from speechiter.plan.ranks import resolve_rank, share_view
from speechiter.plan.tasks import check_plan_size
from speechiter.plan.view import (Batches, BatchView, as_view, batches_from_bounds, cacheable, is_vectorised,
                                  vectorised)
from speechiter.state import LoaderState
from speechiter.state_keys import CURRENT
from speechiter.state_versions import configuration, view_digest


def _option(name: str) -> property:
    """A read-only attribute that reads the option ``name`` of the Iterator's BatchOptions."""
    return property(lambda self: getattr(self.batch_options, name),
                    doc=f"The option {name} (see speechiter.plan.options.BatchOptions).")


class Iterator(Loadable):
    """Base iterator: batches of a fixed number of utterances (``batch_size``).

    Args:
        dataset_type: a Dataset subclass, or its ``file.Class`` name (resolved by the caller; see speechiter.build).
        dataset_conf: keyword arguments of the Dataset.
        batches_per_epoch: batches in each epoch, smaller or larger than the view; None uses the whole view.
        data_len: idx2 length file(s) used for sorting and batching; None uses the lengths the dataset
            registers, if any.
        group_info: ``{name: idx2 file}`` metadata for group-wise evaluation.
        is_descending: sort by length, longest first (True), shortest first (False) or keep the dataset order
            (None). Ties keep the id order.
        shuffle: shuffle the batches every epoch, seeded by seed + epoch (see NOTE [ Epoch shuffle ] in
            speechiter/plan/shuffle.py).
        seed: the run's seed.
        ngpu: make every batch's size divisible by ngpu.
        num_workers: loading workers; 0 loads in the main process.
        pin_memory: accepted for SpeeChain compatibility (see out_type).
        distributed: take this rank's share of every batch (torch.distributed).
        rank, world_size: override the distributed rank and world size.
        evaluation: a valid or test iterator (build_iterators sets it): under distributed, each utterance goes
            to one rank only and padding rows are marked (see speechiter.plan.view.eval_share).
        engine: ``msequence`` (default), ``inline`` or ``torch``.
        thread_type: ``proc`` or ``thread`` workers of the msequence engine.
        start_method: how ``proc`` workers start: ``forkserver`` (the default where the OS has it, else
            ``spawn``), ``spawn`` or ``fork``; see NOTE [ Start method ] in speechiter/sequence/start.py.
        out_type: ``cpu`` (torch tensors), ``cuda`` or ``null`` (numpy).
        buffer: batches in flight; default 2 per worker (at least 2).
        hedge: build a late batch again on an idle worker (NOTE [ Hedging ] in speechiter/sequence/hedge.py).
        worker_threads: threads each worker's torch, OpenMP, MKL and OpenBLAS use (default 1; see
            NOTE [ One thread per worker ] in speechiter/sequence/threads.py).
        name: the iterator's name in reports (``train/sup``); also names its random stream.
        **iter_conf: options of :meth:`batches_generate_fn`.

    The options that decide the batches are in ``batch_options`` (a BatchOptions), also read as attributes
    of the same names (``iterator.shuffle``); the loading options in ``engine_settings`` (an EngineSettings).
    """

    file_options = {"data_len": FILES, "group_info": NAMED_FILES}  # see NOTE [ Path policy ] in paths.py

    def __init__(self, dataset_type: Union[type, str], dataset_conf: Optional[Dict] = None,
                 batches_per_epoch: Optional[int] = None, data_len: Union[str, List[str], None] = None,
                 group_info: Optional[Dict[str, Union[str, List[str]]]] = None,
                 is_descending: Optional[bool] = True, shuffle: bool = True, seed: int = 0, ngpu: int = 1,
                 num_workers: int = 1, pin_memory: bool = False, distributed: bool = False,
                 rank: Optional[int] = None, world_size: Optional[int] = None, evaluation: bool = False,
                 engine: str = "msequence", thread_type: str = "proc", out_type: str = "cpu",
                 buffer: Optional[int] = None, start_method: Optional[str] = None, name: Optional[str] = None,
                 hedge: bool = True, worker_threads: int = 1, **iter_conf):
        self.engine_settings = EngineSettings(kind=engine, num_workers=num_workers, thread_type=thread_type,
                                              start_method=start_method, out_type=out_type, buffer=buffer, hedge=hedge,
                                              worker_threads=worker_threads)
        self.pin_memory = check_bool(pin_memory, "pin_memory")  # SpeeChain's option; out_type decides
        rank, world_size = resolve_rank(check_bool(distributed, "distributed"), rank, world_size)
        # the options are checked before the dataset loads; they name the dataset's class once it is built
        options = BatchOptions(type=qualified_name(type(self)), dataset="", dataset_conf=plan_conf(dataset_conf),
                               batches_per_epoch=batches_per_epoch, data_len=data_len, group_info=group_info,
                               is_descending=is_descending, shuffle=shuffle, ngpu=ngpu, rank=rank,
                               world_size=world_size, iter_conf=iter_conf, evaluation=evaluation, seed=seed,
                               name=name or type(self).__name__)
        if isinstance(dataset_type, str):
            from speechiter.registry import resolve_class
            dataset_type = resolve_class("dataset", dataset_type, "dataset_type", base=Dataset)
        self.dataset: Dataset = dataset_type(**(dataset_conf or {}))
        self.batch_options = dataclasses.replace(options, dataset=qualified_name(type(self.dataset)))
        self.config_fingerprint, self.config_summary = configuration(self.batch_options, CURRENT)
        self._make_view()

    # --- the options, as SpeeChain's attributes (read-only: see speechiter.plan.options.BatchOptions) ---
    batches_per_epoch = _option("batches_per_epoch")
    data_len_files = _option("data_len")  # the data_len option, for plots and reports
    is_descending = _option("is_descending")
    shuffle = _option("shuffle")
    seed = _option("seed")
    ngpu = _option("ngpu")
    rank = _option("rank")
    world_size = _option("world_size")
    evaluation = _option("evaluation")
    name = _option("name")
    iter_conf = _option("iter_conf")

    # --- construction ----------------------------------------------------------
    def _make_view(self):
        """Lengths and group_info -> sort -> batches_generate_fn (the base view) -> the ngpu rule and this
        rank's share; from the plan cache where it has them."""
        options = self.batch_options
        lengths, self._expected_lengths = load_lengths(self.dataset, options.data_len,
                                                       longest=self.budgets_longest(options.iter_conf))
        self.group_info: Optional[Dict[str, Column]]
        self.group_info, kept = load_group_info(self.dataset, options.group_info)
        if lengths is not None and kept is not None:
            lengths = lengths.take(kept)
        # the hooks' form: compact for a built-in batches_generate_fn, a dict for a subclass's own
        self.data_len: Optional[Mapping[str, float]] = (lengths if lengths is None or is_vectorised(self)
                                                        else lengths.to_dict())
        sorted_ids = sort_ids(self.dataset.get_data_index(), lengths, options.is_descending)

        def make():
            base = self._generate_view(sorted_ids, options.iter_conf)
            return share_view(base, options.ngpu, options.rank, options.world_size, options.descending,
                              options.evaluation, options.name), base

        hook = type(self).batches_generate_fn
        cached = getattr(hook, "cacheable", False)
        code = {cls.__module__ for cls in type(self).__mro__ if cls.__module__.startswith("speechiter.")}
        self._set_view(*planned_view(options, sorted_ids, make, f"{hook.__module__}.{hook.__qualname__}"
                                     if cached else None, code | {as_view.__module__, share_view.__module__}))
        check_plan_size(options.batches_per_epoch, self.planner.view)

    def _generate_view(self, sorted_ids: SortedIds, iter_conf: dict) -> BatchView:
        """batches_generate_fn's batches as a BatchView (the one conversion)."""
        data_index = sorted_ids if is_vectorised(self) else sorted_ids.tolist()
        batches = self.batches_generate_fn(data_index, self.data_len, **iter_conf)
        view = as_view(batches, f"{type(self).__name__}.batches_generate_fn")
        if not len(view):
            raise DataError(f"{self.name}: the batching view is empty")
        return view

    def _set_view(self, view: BatchView, base: BatchView):
        """This rank's view and the base view it was made of (an assigned view is both)."""
        own_view, cls = type(self).epoch_view is not Iterator.epoch_view, type(self)
        hooks = _Hooks(self, own_view) if own_view or cls.base_epoch_view is not Iterator.base_epoch_view else None
        self.planner = EpochPlanner(self.batch_options, view, base, hooks)
        self._batch_lists: Optional[List[List[str]]] = None
        self._digests: Dict[str, tuple] = {}  # scheme -> view_digest

    @property
    def batches(self) -> Sequence[List[str]]:
        """The batching view (before clipping and shuffling). For a subclass whose hook returns lists, a list
        made once from the view: assign ``self.batches = ...`` to replace the view, in place edits are not seen."""
        if is_vectorised(self):
            return self.planner.view
        if self._batch_lists is None:
            self._batch_lists = self.planner.view.tolist()
        return self._batch_lists

    @batches.setter
    def batches(self, batches: Sequence[List[str]]):
        view = as_view(batches, f"{type(self).__name__}.batches")
        self._set_view(view, view)

    # --- the hooks -------------------------------------------------------------
    def budgets_longest(self, iter_conf: dict) -> bool:
        """Hook: whether batching budgets each utterance at the longest it can be once built (the dataset's
        ``max_batch_length_fn``, e.g. the slowest speed perturbation) rather than its usual length
        (``batch_length_fn``). True for rules that promise a hard bound (block ``never_exceed``, bucket);
        ``iter_conf`` holds the iterator's options."""
        return False

    @cacheable
    @vectorised
    def batches_generate_fn(self, data_index: Sequence[str], data_len: Optional[Mapping[str, float]],
                            batch_size: Optional[int] = None) -> Batches:
        """Hook: the batching view, a list of batches of ids.

        A subclass's own hook gets ``data_index`` as a list of ids in sorted order and ``data_len`` as a dict
        (or None), and returns a list of non-empty lists of ids.

        This one puts ``batch_size`` utterances in every batch (the last may have fewer); the default
        batch_size is ngpu, one utterance per GPU.
        """
        batch_size = self.ngpu if batch_size is None else check_int(batch_size, "batch_size")
        bounds = np.append(np.arange(0, len(data_index), batch_size), len(data_index))
        return batches_from_bounds(data_index, bounds if len(data_index) else bounds[:1])

    def base_epoch_view(self, epoch: int) -> BatchView:
        """Hook: batches_generate_fn's view of ``epoch``, before the ngpu rule and the rank share.

        The same every epoch here; an iterator whose batches change per epoch (bucket.BucketIterator)
        overrides it, deterministically in (seed, epoch) and with the same number of batches every epoch.
        """
        return self.planner.base

    def epoch_view(self, epoch: int) -> Sequence[List[str]]:
        """Hook: this rank's view of ``epoch`` (before clipping and shuffling), as :attr:`batches`. A subclass
        with a list hook may override it instead of base_epoch_view (its states then resume on the same layout
        only: NOTE [ Elastic resume ] in speechiter/plan/layout.py)."""
        view = self.planner.epoch_view(epoch)
        return view if is_vectorised(self) else view.tolist()

    # --- per epoch (see Loadable for the rest) --------------------------------------
    def get_batch_indices(self) -> Sequence[List[str]]:
        return self.batches

    def get_group_info(self) -> Optional[Dict[str, Column]]:
        return self.group_info

    @property
    def datasets(self) -> List[Dataset]:
        return [self.dataset]

    def epoch_batches(self, epoch: int) -> Sequence[List[str]]:
        """The epoch's full plan: the clipped, shuffled batching view (as :attr:`batches`: lists for a
        subclass whose hook returns lists)."""
        plan = self.planner.plan(epoch)
        return plan if is_vectorised(self) else plan.tolist()

    # --- state (see speechiter.state, NOTE [ State versions ] in speechiter/state_versions.py) ---
    def configuration(self, scheme: str = CURRENT):
        return (self.config_fingerprint, self.config_summary) if scheme == CURRENT else \
            configuration(self.batch_options, scheme)

    def view_digest(self, scheme: str = CURRENT):
        if scheme not in self._digests:  # computed once: a million ids take 0.1 s
            self._digests[scheme] = view_digest(self.planner.view, self.planner.base, scheme)
        return self._digests[scheme]

    def state_at(self, epoch: int, step: int, scheme: str = CURRENT) -> LoaderState:
        config, settings = self.configuration(scheme)
        view, batches = self.view_digest(scheme)
        return LoaderState(iterator=self.name, epoch=epoch, step=step, seed=self.seed, config=config, view=view,
                           batches=batches, settings=settings, scheme=scheme,
                           layout=self.layout_of(epoch) if scheme == CURRENT else None)

    # --- loading ----------------------------------------------------------------
    def build_loader(self, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                     stop_step: Optional[int] = None):
        from speechiter.loader import Loader
        return Loader(self, epoch, start_step, prefetch_next=prefetch_next, stop_step=stop_step)

    def reader(self) -> DatasetReader:
        """The reader factory the engine's workers build batches with: the dataset, and the length file its
        audio is checked against (NOTE [ Length files are checked ] in speechiter/dataset/length_check.py)."""
        return DatasetReader(self.dataset, self._expected_lengths)

    def __repr__(self):
        view = self.planner.view
        sizes = view.sizes()
        return (f"{type(self).__name__}(dataset={type(self.dataset).__name__}, utterances={len(self.dataset)}, "
                f"total_batches={len(view)}, batches_per_epoch={len(self)}, min_batch={int(sizes.min())}, "
                f"mean_batch={int(sizes.sum()) / len(sizes):.1f}, max_batch={int(sizes.max())}, "
                f"shuffle={self.shuffle}, seed={self.seed}, ngpu={self.ngpu}, "
                f"num_workers={self.engine_settings.num_workers})")


class _Hooks:
    """An Iterator's own epoch views for its planner (see speechiter.plan.epochs.EpochHooks), held weakly so
    that an Iterator no one holds is closed at once (its engine's finalizer)."""

    def __init__(self, iterator: Iterator, own_epoch_view: bool):
        self._iterator = weakref.ref(iterator)
        self.own_epoch_view = own_epoch_view

    def base_view(self, epoch: int) -> BatchView:
        return self._iterator().base_epoch_view(epoch)

    def rank_view(self, epoch: int) -> BatchView:
        iterator = self._iterator()
        return as_view(iterator.epoch_view(epoch), f"{type(iterator).__name__}.epoch_view")
