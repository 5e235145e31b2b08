"""The Iterator base class: SpeeChain's facade over a Dataset, a BatchPlan and EngineSettings.

The keyword arguments become two frozen values: a :class:`speechiter.plan.BatchPlan` (what the batches are; its
fingerprint guards resumes) and a :class:`speechiter.engine.EngineSettings` (how they are loaded). The plan:

    Dataset -> data_len, group_info -> sort -> batches_generate_fn -> as_view = the base view
    -> ngpu rule, rank share = the view

Each epoch, :meth:`Iterator.build_loader` clips the view to ``batches_per_epoch``, shuffles it (NOTE [ Epoch
shuffle ] in shuffle.py), cuts it at ``start_step`` and hands the tasks to the engine, which builds them with
:meth:`Iterator.reader`. Subclasses override :meth:`batches_generate_fn` (and :meth:`budgets_longest` for a
hard bound). The view steps are in view.py, lengths and the sort in lengths.py, an epoch begun under another
layout in elastic.py (NOTE [ Elastic resume ]).
"""
import dataclasses
import weakref
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from speechiter.checks import check_bool, check_int
from speechiter.dataset.abs import Dataset
from speechiter.dataset.bad_audio import plan_conf  # NOTE [ Skipped utterances ]: not part of the plan
from speechiter.dataset.reader import DatasetReader
from speechiter.engine import Engine, EngineSettings, make_engine
from speechiter.errors import DataError
from speechiter.ids import Column, SortedIds
from speechiter.index.views import planned_view  # See NOTE [ Plan cache ] in speechiter/index/__init__.py
from speechiter.iterator.distributed import resolve_rank, share_view
from speechiter.iterator.epochs import EpochPlans
from speechiter.iterator.lengths import load_group_info, load_lengths, sort_ids
from speechiter.iterator.shuffle import EpochShuffle
from speechiter.iterator.tasks import check_plan_size
from speechiter.iterator.view import Batches, BatchView, as_view, batches_from_bounds, is_vectorised, vectorised
from speechiter.paths import FILES, NAMED_FILES
from speechiter.plan import BatchPlan, qualified_name


def _plan_option(name: str) -> property:
    """A read-only attribute that reads the option ``name`` of the Iterator's BatchPlan."""
    return property(lambda self: getattr(self.plan, name), doc=f"The plan's {name} (see speechiter.plan.BatchPlan).")


class Iterator(EpochPlans):
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
            speechiter/iterator/shuffle.py).
        seed: the run's seed.
        ngpu: make every batch's size divisible by ngpu.
        num_workers: loading workers; 0 loads in the main process.
        pin_memory: accepted for SpeeChain compatibility (see out_type).
        distributed: take this rank's share of every batch (torch.distributed).
        rank, world_size: override the distributed rank and world size.
        evaluation: a valid or test iterator (build_iterators sets it): under distributed, each utterance goes
            to one rank only and padding rows are marked (see speechiter.iterator.view.eval_share).
        engine: ``msequence`` (default), ``inline`` or ``torch``.
        thread_type: ``proc`` or ``thread`` workers of the msequence engine.
        start_method: how ``proc`` workers start: ``forkserver`` (the default where the OS has it, else
            ``spawn``), ``spawn`` or ``fork``; see NOTE [ Start method ] in speechiter/sequence/start.py.
        out_type: ``cpu`` (torch tensors), ``cuda`` or ``null`` (numpy).
        buffer: batches in flight; default 2 per worker (at least 2).
        hedge: build a late batch again on an idle worker (NOTE [ Hedging ] in speechiter/sequence/hedge.py).
        name: the iterator's name in reports (``train/sup``); also names its random stream.
        **iter_conf: options of :meth:`batches_generate_fn`.

    The options that decide the batches are in ``plan`` (a BatchPlan), also read as attributes of the same
    names (``iterator.shuffle``); the loading options in ``engine_settings`` (an EngineSettings).
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
                 hedge: bool = True, **iter_conf):
        self.engine_settings = EngineSettings(kind=engine, num_workers=num_workers, thread_type=thread_type,
                                              start_method=start_method, out_type=out_type, buffer=buffer, hedge=hedge)
        self.pin_memory = check_bool(pin_memory, "pin_memory")  # SpeeChain's option; out_type decides
        rank, world_size = resolve_rank(check_bool(distributed, "distributed"), rank, world_size)
        # the options are checked before the dataset loads; the plan names the dataset's class once it is built
        plan = BatchPlan(type=qualified_name(type(self)), dataset="", dataset_conf=plan_conf(dataset_conf),
                         batches_per_epoch=batches_per_epoch, data_len=data_len, group_info=group_info,
                         is_descending=is_descending, shuffle=shuffle, ngpu=ngpu, rank=rank, world_size=world_size,
                         iter_conf=iter_conf, evaluation=evaluation, seed=seed, name=name or type(self).__name__)
        if isinstance(dataset_type, str):
            from speechiter.registry import resolve_class
            dataset_type = resolve_class("dataset", dataset_type, "dataset_type", base=Dataset)
        self.dataset: Dataset = dataset_type(**(dataset_conf or {}))
        self.plan = dataclasses.replace(plan, dataset=qualified_name(type(self.dataset)))
        self._shuffle = EpochShuffle(self.seed)
        self._make_view()
        self.config_fingerprint = self.plan.fingerprint()
        self.config_summary = self.plan.summary()  # readable: state files say what changed with it
        self._engine: Optional[Engine] = None
        self._engine_finalizer: Optional[weakref.finalize] = None

    # --- the plan's options, as SpeeChain's attributes (read-only: see speechiter.plan.BatchPlan) ---
    batches_per_epoch = _plan_option("batches_per_epoch")
    data_len_files = _plan_option("data_len")  # the data_len option, for plots and reports
    is_descending = _plan_option("is_descending")
    shuffle = _plan_option("shuffle")
    seed = _plan_option("seed")
    ngpu = _plan_option("ngpu")
    rank = _plan_option("rank")
    world_size = _plan_option("world_size")
    evaluation = _plan_option("evaluation")
    name = _plan_option("name")
    iter_conf = _plan_option("iter_conf")

    # --- construction ----------------------------------------------------------
    def _make_view(self):
        """Lengths and group_info -> sort -> batches_generate_fn (the base view) -> the ngpu rule and this
        rank's share."""
        plan = self.plan
        lengths, self._expected_lengths = load_lengths(self.dataset, plan.data_len,
                                                       longest=self.budgets_longest(plan.iter_conf))
        self.group_info: Optional[Dict[str, Column]]
        self.group_info, kept = load_group_info(self.dataset, plan.group_info)
        if lengths is not None and kept is not None:
            lengths = lengths.take(kept)
        # the hooks' form: compact for a built-in batches_generate_fn, a dict for a subclass's own
        self.data_len: Optional[Mapping[str, float]] = (lengths if lengths is None or is_vectorised(self)
                                                        else lengths.to_dict())
        sorted_ids = sort_ids(self.dataset.get_data_index(), lengths, plan.is_descending)
        self._set_view(*planned_view(self, sorted_ids, plan.iter_conf))  # _distribute(_generate_view()), or cached
        check_plan_size(plan.batches_per_epoch, self._view)

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

    def _set_view(self, view: BatchView, base: BatchView):
        """This rank's view and the base view it was made of (an assigned view is both)."""
        self._view, self._base = view, base
        self._shuffle.forget()
        self._batch_lists: Optional[List[List[str]]] = None
        self._fingerprints: Dict[bool, str] = {}  # legacy -> view_fingerprint
        self._rank_views: Dict[int, BatchView] = {}  # epoch -> this rank's view, the last two (base_epoch_view)
        self._continued = None  # an epoch begun under another layout (see continue_epoch)
        self._last_plan = None  # (epoch, plan) of the last epoch planned

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
        view = as_view(batches, f"{type(self).__name__}.batches")
        self._set_view(view, view)

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
        """Batches per epoch (see :meth:`epoch_len` for an epoch begun under another layout)."""
        return self.batches_per_epoch if self.batches_per_epoch is not None else len(self._view)

    def get_batch_indices(self) -> Sequence[List[str]]:
        return self.batches

    def get_group_info(self) -> Optional[Dict[str, Column]]:
        return self.group_info

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
            self._engine = make_engine(self.engine_settings, self.reader())
            self._engine_finalizer = weakref.finalize(self, self._engine.close)
        return self._engine

    def reader(self) -> DatasetReader:
        """The reader factory the engine's workers build batches with: the
        dataset, and the length file its audio is checked against (see
        NOTE [ Length files are checked ] in speechiter/dataset/length_check.py)."""
        return DatasetReader(self.dataset, self._expected_lengths)

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
