"""MixIterator: several corpora in one iterator, each step's batch from one of them by weight.

# NOTE [ Mixing corpora ]
``type: mix.MixIterator`` holds named ordinary iterators (``iterators``), a
weight for each (``weights``) and its own epoch length (``batches_per_epoch``,
required: a mix has no natural epoch).

- Schedule: the corpus of every step is a function of the global step alone
  (NOTE [ Mixing schedule ] in speechiter/plan/schedule.py): the shares hold
  in every window of batches, and the batches each corpus gave before any
  step take O(k).
- Corpora: each corpus walks its own stream of epochs, as an iterator does in
  a ``steps: longest`` group (NOTE [ Group steps ] in speechiter/plan/steps.py):
  after giving ``c`` batches it stands at its own epoch ``c // len + 1``, step
  ``c % len``, each of its epochs clipped and shuffled by its own planner. A
  mixed batch is that corpus's own task there, its ids and its own per-batch
  seed, so it is exactly the batch the corpus alone would give at that
  position (speed perturbation and every other draw included), for any
  workers, engine, rank or resume point (speechiter/plan/mixed.py).
- One engine: the mix loads with one set of workers whose reader
  (mix_loader.MixReader) holds every corpus's reader and builds each task
  with its corpus's; the corpora's own engines never start. The loading
  options (num_workers, engine, ...) are the mix's.
- A composition, beside the Iterator: a MixIterator is a Loadable
  (speechiter/iterator/loadable.py), as an Iterator is, not an Iterator: it
  has no dataset, options or view of its own. Each batch carries its corpus's
  group_info values and its corpus's name (``batch.source``).
- State: the mix's (epoch, step) decides every corpus's position; its state
  (speechiter.state.MixState) holds its schedule and each corpus's
  LoaderState at its own position (saved under ``sources``), checked on
  resume, so a state never resumes under another schedule unless the resume
  allows a changed mix (NOTE [ Changed mix ] in mix_changes.py).
"""
from collections.abc import Mapping
from fractions import Fraction
from numbers import Real
from typing import Any, Dict, List, Optional

from speechiter.checks import check_int, is_finite
from speechiter.engine import EngineSettings
from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.iterator.loadable import Loadable
from speechiter.iterator.mix_changes import carry_over
from speechiter.iterator.mix_loader import Chained, MixLoader, MixReader
from speechiter.plan.mixed import MixPlanner
from speechiter.plan.options import qualified_name
from speechiter.plan.schedule import SCHEDULE_VERSION, MixSchedule
from speechiter.seeding import stream_id
from speechiter.state import MixState
from speechiter.state_keys import CURRENT
from speechiter.state_versions import mix_configuration, mix_view_digest


class MixIterator(Loadable):
    """Batches from several corpora by weight (see NOTE [ Mixing corpora ]).

    Args:
        iterators: ``{name: Iterator}``, the corpora (ordinary iterators; build_iterators builds them from
            the YAML ``iterators: {name: {type, conf}}``).
        weights: ``{name: weight}``, one non-negative number per corpus, with a positive sum; normalised.
        batches_per_epoch: the mixed iterator's epoch, in batches (required).
        seed, num_workers, engine, thread_type, start_method, out_type, buffer, hedge, pin_memory, worker_threads:
            as Iterator's;
            the loading options apply to the mix's one engine. ngpu, distributed, rank, world_size and
            evaluation shape each corpus's batches and are given to the corpora (build_iterators does).
        name: the iterator's name in reports and states.
    """

    #: the conf option that holds the nested iterators (speechiter.build builds them first)
    nested_option = "iterators"
    mixed = True

    def __init__(self, iterators: Mapping[str, Iterator], weights: Mapping[str, Any] = None,
                 batches_per_epoch: Optional[int] = None, seed: int = 0, num_workers: int = 1,
                 engine: str = "msequence", thread_type: str = "proc", start_method: Optional[str] = None,
                 out_type: str = "cpu", buffer: Optional[int] = None, pin_memory: bool = False, ngpu: int = 1,
                 distributed: bool = False, rank: Optional[int] = None, world_size: Optional[int] = None,
                 evaluation: bool = False, name: Optional[str] = None, hedge: bool = True, worker_threads: int = 1):
        self.engine_settings = EngineSettings(kind=engine, num_workers=num_workers, thread_type=thread_type,
                                              start_method=start_method, out_type=out_type, buffer=buffer, hedge=hedge,
                                              worker_threads=worker_threads)
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
        self._planner = MixPlanner({name: it.planner for name, it in self.iterators.items()}, self.schedule,
                                   self.batches_per_epoch, self.seed, stream_id(self.name))
        self._settings = {"type": qualified_name(type(self)), "batches_per_epoch": self.batches_per_epoch,
                          "weights": {name: str(share) for name, share in shares.items()},
                          "schedule": SCHEDULE_VERSION}
        self._digests: Dict[str, tuple] = {}  # scheme -> view_digest
        self.config_fingerprint, self.config_summary = self._configuration(CURRENT)
        self.data_len = None  # no lengths of its own: its batches come from corpora whose ids may repeat
        self.group_info = None  # each batch carries its own corpus's (see MixLoader)

    # --- the plan ------------------------------------------------------------------
    @property
    def planner(self) -> MixPlanner:
        """The mix's epochs (speechiter/plan/mixed.py); each corpus's planner is its iterator's."""
        return self._planner

    @planner.setter
    def planner(self, planner: MixPlanner):
        self._planner = planner
        for name, iterator in self.iterators.items():
            iterator.planner = planner.planners[name]

    @property
    def batches(self) -> Chained:
        """The corpora's batching views, one after the other (their order in ``iterators``)."""
        return Chained([iterator.batches for iterator in self.iterators.values()])

    @property
    def datasets(self) -> List[Any]:
        return [iterator.dataset for iterator in self.iterators.values()]

    def epoch_batches(self, epoch: int) -> List[List[str]]:
        """The ids of every batch of mixed epoch ``epoch``."""
        return self.planner.plan(epoch).tolist()

    def source_of(self, epoch: int, step: int) -> str:
        """The corpus of step ``step`` (from 1) of ``epoch``: its batch's ``batch.source``."""
        return self.planner.corpus_of(epoch, step)

    # --- state (see speechiter.state.MixState) -----------------------------------------
    def configuration(self, scheme: str = CURRENT):
        if scheme == CURRENT:
            return self.config_fingerprint, self.config_summary
        return self._configuration(scheme)

    def _configuration(self, scheme: str):
        return mix_configuration(self._settings, {name: it.configuration(scheme)
                                                  for name, it in self.iterators.items()})

    def view_digest(self, scheme: str = CURRENT):
        if scheme not in self._digests:
            views = {name: iterator.view_digest(scheme) for name, iterator in self.iterators.items()}
            self._digests[scheme] = mix_view_digest(views)
        return self._digests[scheme]

    def state_at(self, epoch: int, step: int, scheme: str = CURRENT) -> MixState:
        config, settings = self.configuration(scheme)
        view, batches = self.view_digest(scheme)
        corpora = {name: self.iterators[name].state_at(*position, scheme)
                   for name, position in self.planner.own_positions(epoch, step).items()}
        return MixState(iterator=self.name, epoch=epoch, step=step, seed=self.seed, config=config, view=view,
                        batches=batches, corpora=corpora, schedule=self.schedule_settings(), settings=settings,
                        layout=self.layout if scheme == CURRENT else None, scheme=scheme, start=self.planner.start)

    def schedule_settings(self) -> dict:
        """``{"version", "batches_per_epoch", "weights": {corpus: "7/10"}}``: a MixState's ``schedule``."""
        return {"version": SCHEDULE_VERSION, "batches_per_epoch": self.batches_per_epoch,
                "weights": dict(self._settings["weights"])}

    def carry_over(self, saved, changes=frozenset(), where: str = "state"):
        """A state saved by this mix before it changed, in its terms now, where ``changes`` allows it (see
        NOTE [ Changed mix ] in mix_changes.py)."""
        return carry_over(self, saved, changes, where)

    # --- loading ---------------------------------------------------------------------
    def build_loader(self, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                     stop_step: Optional[int] = None) -> MixLoader:
        return MixLoader(self, epoch, start_step, prefetch_next=prefetch_next, stop_step=stop_step)

    def reader(self) -> MixReader:
        """Every corpus's reader in one (see mix_loader.MixReader)."""
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
