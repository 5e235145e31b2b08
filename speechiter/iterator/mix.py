"""MixIterator: several corpora in one iterator, each step's batch from one of them by weight.

# NOTE [ Mixing corpora ]
``type: mix.MixIterator`` holds named ordinary iterators (``iterators``), a
weight for each (``weights``) and its own epoch length (``batches_per_epoch``,
required: a mix has no natural epoch).

- Schedule: the corpus of every step is a function of the global step alone
  (NOTE [ Mixing schedule ] in schedule.py): the shares hold in every window
  of batches, and the batches each corpus gave before any step take O(k).
- Corpora: each corpus walks its own stream of epochs, as an iterator does in
  a ``steps: longest`` group (speechiter/group.py): after giving ``c``
  batches it stands at its own epoch ``c // len + 1``, step ``c % len``, each
  of its epochs clipped and shuffled by its own plan. A mixed batch is that
  corpus's own task there, its ids and its own per-batch seed, so it is
  exactly the batch the corpus alone would give at that position (speed
  perturbation and every other draw included), for any workers, engine,
  rank or resume point.
- One engine: the mix loads with one set of workers whose reader
  (mix_plan.MixReader) holds every corpus's reader and builds each task with
  its corpus's; the corpora's own engines never start. The loading options
  (num_workers, engine, ...) are the mix's.
- An Iterator without a dataset: MixIterator subclasses Iterator (so
  GroupLoader, Loader, LoaderState.of, build_iterators' results and the
  report take it) but does not run Iterator.__init__: it has no dataset, no
  BatchPlan and no view of its own, and overrides what reads them
  (``batches``: the corpora's views one after the other; ``epoch_tasks``;
  ``reader``; the fingerprints). ``group_info`` is None (each batch carries
  its corpus's group_info values, and ``batch.source``); ``dataset`` is not
  a Dataset but what reports read of one (:class:`MixedCorpora`).
- State: the mix's (epoch, step) decides every corpus's position; a saved
  state also holds each corpus's LoaderState at its own position
  (``sources``), checked on resume, so a state never resumes under another
  schedule.
"""
from collections.abc import Mapping, Sequence
from fractions import Fraction
from numbers import Real
from typing import Any, Dict, List, Optional

from speechiter.checks import check_int, is_finite
from speechiter.engine import EngineSettings
from speechiter.errors import ConfigError
from speechiter.fingerprints import fingerprint, settings_summary
from speechiter.group import stream_position
from speechiter.iterator.abs import Iterator
from speechiter.iterator.mix_plan import MixLoader, MixPlan, MixReader, MixTasks, OwnPlans
from speechiter.iterator.schedule import SCHEDULE_VERSION, MixSchedule
from speechiter.iterator.tasks import check_epoch
from speechiter.plan import qualified_name
from speechiter.seeding import stream_id


class MixIterator(Iterator):
    """Batches from several corpora by weight (see NOTE [ Mixing corpora ]).

    Args:
        iterators: ``{name: Iterator}``, the corpora (ordinary iterators; build_iterators builds them from
            the YAML ``iterators: {name: {type, conf}}``).
        weights: ``{name: weight}``, one non-negative number per corpus, with a positive sum; normalised.
        batches_per_epoch: the mixed iterator's epoch, in batches (required).
        seed, num_workers, engine, thread_type, start_method, out_type, buffer, hedge, pin_memory: as Iterator's;
            the loading options apply to the mix's one engine. ngpu, distributed, rank, world_size and
            evaluation shape each corpus's batches and are given to the corpora (build_iterators does).
        name: the iterator's name in reports and states.
    """

    #: the conf option that holds the nested iterators (speechiter.build builds them first)
    nested_option = "iterators"
    group_info = None
    data_len = None
    data_len_files = None
    shuffle = is_descending = None
    iter_conf: Dict[str, Any] = {}
    seed = name = batches_per_epoch = ngpu = rank = world_size = evaluation = None  # set in __init__

    def __init__(self, iterators: Mapping[str, Iterator], weights: Mapping[str, Any] = None,
                 batches_per_epoch: Optional[int] = None, seed: int = 0, num_workers: int = 1,
                 engine: str = "msequence", thread_type: str = "proc", start_method: Optional[str] = None,
                 out_type: str = "cpu", buffer: Optional[int] = None, pin_memory: bool = False, ngpu: int = 1,
                 distributed: bool = False, rank: Optional[int] = None, world_size: Optional[int] = None,
                 evaluation: bool = False, name: Optional[str] = None, hedge: bool = True):
        self.engine_settings = EngineSettings(kind=engine, num_workers=num_workers, thread_type=thread_type,
                                              start_method=start_method, out_type=out_type, buffer=buffer, hedge=hedge)
        self.pin_memory, self.ngpu, self.evaluation = pin_memory, ngpu, evaluation
        self.seed = check_int(seed, "seed", minimum=0)
        self.name = name or type(self).__name__
        if batches_per_epoch is None:
            raise ConfigError("batches_per_epoch", "missing; a mix needs its epoch length in batches "
                              "(e.g. batches_per_epoch: 1000)")
        self.batches_per_epoch = check_int(batches_per_epoch, "batches_per_epoch")
        self.iterators: Dict[str, Iterator] = check_iterators(iterators)
        self.names: List[str] = list(self.iterators)
        shares = check_weights(weights, self.names)
        self.weights: Dict[str, float] = {name: float(share) for name, share in shares.items()}  # normalised
        self.schedule = MixSchedule([shares[name] for name in self.names])
        self.sizes = [len(iterator) for iterator in self.iterators.values()]
        self.dataset = MixedCorpora([iterator.dataset for iterator in self.iterators.values()])
        self.own_plans = OwnPlans(list(self.iterators.values()))
        settings = {"type": qualified_name(type(self)), "batches_per_epoch": self.batches_per_epoch,
                    "weights": {name: str(share) for name, share in shares.items()}, "schedule": SCHEDULE_VERSION}
        self.config_fingerprint = fingerprint({**settings, "iterators": {
            name: it.config_fingerprint for name, it in self.iterators.items()}})
        self.config_summary = settings_summary({**settings, "iterators": {
            name: getattr(it, "config_summary", None) or it.config_fingerprint for name, it in self.iterators.items()}})
        self._view_fingerprint: Optional[str] = None
        self._engine = self._engine_finalizer = None

    # --- the plan ------------------------------------------------------------------
    def __len__(self):
        return self.batches_per_epoch

    @property
    def stream(self) -> int:
        return stream_id(self.name)

    @property
    def batches(self) -> "Chained":
        """The corpora's batching views, one after the other (their order in ``iterators``)."""
        return Chained([iterator.batches for iterator in self.iterators.values()])

    def view_fingerprint(self, legacy: bool = False) -> str:
        """A digest of the corpora's base views (a mix's states are all of version 4 or later)."""
        if self._view_fingerprint is None:
            self._view_fingerprint = fingerprint({name: it.view_fingerprint() for name, it in self.iterators.items()})
        return self._view_fingerprint

    # --- layouts (see NOTE [ Elastic resume ] in elastic.py) ------------------------
    @property
    def plan(self):
        raise ConfigError("state.version", f"{self.name}: a mixed iterator's state has version 4 or later")

    def base_batches(self) -> int:
        return sum(iterator.base_batches() for iterator in self.iterators.values())

    @property
    def layout(self):
        return next(iter(self.iterators.values())).layout

    def layout_of(self, epoch: int):
        """The mix's own layout: each corpus's epoch records its own in the state's ``sources``."""
        return self.layout

    def epoch_len(self, epoch: int) -> int:
        return len(self)

    def continue_epoch(self, epoch: int, layout) -> None:
        """Only to forget: each corpus continues its own epoch (:meth:`continue_from`)."""
        for iterator in self.iterators.values():
            iterator.continue_epoch(epoch, None)
        self.own_plans.forget()

    def continue_from(self, saved) -> None:
        """Each corpus continues the epoch it was in on the layout it was saved with; its own epochs must
        keep their length (the mix walks each corpus through epochs of one length)."""
        self.continue_epoch(saved.epoch, None)
        for name, state in (saved.sources or {}).items():
            iterator = self.iterators[name]
            iterator.continue_from(state)
            if iterator.epoch_len(state.epoch) != len(iterator):
                self.continue_epoch(saved.epoch, None)
                raise ConfigError(f"state.sources.{name}.layout", f"a mix cannot continue epoch {state.epoch} of "
                                  f"{name} on a layout that changes its length: {iterator.epoch_len(state.epoch)} "
                                  f"batches under {state.layout}, {len(iterator)} under {iterator.layout}")

    def epoch_tasks(self, epoch: int, start_step: int = 0) -> MixTasks:
        """The engine's tasks of mixed epoch ``epoch`` from ``start_step`` on (see NOTE [ Mixing corpora ])."""
        epoch = check_epoch(epoch)
        start_step = check_int(start_step, "start_step", minimum=0)
        if start_step > len(self):
            raise ConfigError("start_step", f"epoch {epoch} has {len(self)} batches, got start_step={start_step}")
        return MixTasks(MixPlan(self, epoch), start_step, len(self), self.seed, epoch, self.stream)

    def epoch_batches(self, epoch: int) -> List[List[str]]:
        """The ids of every batch of mixed epoch ``epoch``."""
        return MixPlan(self, check_epoch(epoch)).tolist()

    def source_of(self, epoch: int, step: int) -> str:
        """The corpus of step ``step`` (from 1) of ``epoch``."""
        return self.names[self.schedule.source((epoch - 1) * len(self) + step - 1)]

    def own_positions(self, epoch: int, step: int) -> Dict[str, tuple]:
        """``{corpus: (its own epoch, its steps of it done)}`` once ``step`` steps of mixed ``epoch`` are done."""
        counts = self.schedule.counts((epoch - 1) * len(self) + step)
        return {name: stream_position(count, size) for name, count, size in zip(self.names, counts, self.sizes)}

    def source_states(self, epoch: int, step: int) -> Dict[str, Any]:
        """Each corpus's LoaderState at its own position (a saved state's ``sources``)."""
        from speechiter.state import LoaderState
        return {name: LoaderState.of(self.iterators[name], *position)
                for name, position in self.own_positions(epoch, step).items()}

    def check_sources(self, saved: Optional[Mapping[str, Any]], epoch: int, step: int, where: str) -> None:
        """Raise a ConfigError unless the saved corpus states ``saved`` fit this mix at (epoch, step)."""
        if saved is None:
            raise ConfigError(where, "missing: the state was not saved by a mixed iterator")
        if sorted(saved) != sorted(self.names):
            raise ConfigError(where, f"saved for corpora {sorted(saved)}, this mix has {sorted(self.names)}")
        for name, position in self.own_positions(epoch, step).items():
            saved[name].check_setup(self.iterators[name], f"{where}.{name}")
            if (saved[name].epoch, saved[name].step) != position:
                raise ConfigError(f"{where}.{name}", f"at epoch {saved[name].epoch} step {saved[name].step}, but the "
                                  f"mix's epoch {epoch} step {step} puts it at epoch {position[0]} step {position[1]}")

    # --- loading ---------------------------------------------------------------------
    def build_loader(self, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                     stop_step: Optional[int] = None) -> MixLoader:
        """An iterable over the batches of mixed ``epoch``, steps ``start_step + 1`` to ``stop_step``."""
        return MixLoader(self, epoch, start_step, prefetch_next=prefetch_next, stop_step=stop_step)

    def reader(self) -> MixReader:
        """Every corpus's reader in one (see mix_plan.MixReader)."""
        return MixReader([iterator.reader() for iterator in self.iterators.values()])

    def close(self):
        """End the loading workers of the mix (and of any corpus used on its own)."""
        super().close()
        for iterator in self.iterators.values():
            iterator.close()

    def __repr__(self):
        weights = ", ".join(f"{name}={weight:g}" for name, weight in self.weights.items())
        return (f"MixIterator(batches_per_epoch={len(self)}, weights=({weights}), seed={self.seed}, "
                f"num_workers={self.engine_settings.num_workers})")


def check_iterators(iterators: Any) -> Dict[str, Iterator]:
    """``{name: Iterator}``, at least one, none of them a mix."""
    if not isinstance(iterators, Mapping) or not iterators:
        raise ConfigError("iterators", f"expected the corpora as {{name: iterator}}, got {iterators!r}"[:200])
    for name, iterator in iterators.items():
        if isinstance(iterator, MixIterator):
            raise ConfigError(f"iterators.{name}", "a mix inside a mix is not supported: list its corpora in this "
                                                   "mix, with their weights multiplied")
        if not isinstance(iterator, Iterator):
            raise ConfigError(f"iterators.{name}", f"expected an Iterator, got {type(iterator).__name__}")
    return {str(name): iterator for name, iterator in iterators.items()}


def check_weights(weights: Any, names: List[str]) -> Dict[str, Fraction]:
    """``{name: share}`` for exactly ``names``, exact fractions summing to 1, from ``weights``: numbers, none
    negative, with a positive sum (``0.7`` counts as 7/10)."""
    if not isinstance(weights, Mapping):
        raise ConfigError("weights", f"expected {{corpus: weight}} for {', '.join(names)}, got {weights!r}"[:200])
    for name, weight in weights.items():
        if str(name) not in names:
            raise ConfigError(f"weights.{name}", f"no iterator {name!r} in this mix (it has {', '.join(names)})")
        if isinstance(weight, bool) or not isinstance(weight, Real) or not is_finite(weight):
            raise ConfigError(f"weights.{name}", f"expected a number, got {weight!r}"[:200])
        if weight < 0:
            raise ConfigError(f"weights.{name}", f"expected a weight of 0 or more, got {weight!r}")
    exact = {str(name): Fraction(str(weight)) for name, weight in weights.items()}
    for name in names:
        if name not in exact:
            raise ConfigError(f"weights.{name}", "missing; every corpus of the mix needs a weight")
    total = sum(exact.values())
    if total <= 0:
        raise ConfigError("weights", f"the weights sum to {sum(weights.values())!r}; at least one must be positive")
    return {name: exact[name] / total for name in names}


class MixedCorpora:
    """What reports read of a mix's ``dataset``: the corpora's sample rate (None unless they share one) and
    every corpus's main_data files (``sources``, keys ``<corpus index>.<key>``)."""

    def __init__(self, datasets: List[Any]):
        rates = {getattr(dataset, "sample_rate", None) for dataset in datasets}
        self.sample_rate = rates.pop() if len(rates) == 1 else None
        self.sources = {f"{index}.{key}": files for index, dataset in enumerate(datasets)
                        for key, files in getattr(dataset, "sources", {}).items()}
        self.datasets = datasets


class Chained(Sequence):
    """Sequences read as one, the first's items first."""

    def __init__(self, parts: List[Sequence]):
        self.parts = parts

    def __len__(self):
        return sum(len(part) for part in self.parts)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        if item < 0:
            item += len(self)
        for part in self.parts:
            if 0 <= item < len(part):
                return part[item]
            item -= len(part)
        raise IndexError("batch index out of range")
