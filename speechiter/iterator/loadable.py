"""Loadable: what a Loader and a GroupLoader use of an iterator, an ordinary Iterator or a mix of several.

Both kinds of a data_cfg's ``type`` implement it: :class:`speechiter.iterator.abs.Iterator` (one dataset,
SpeeChain's facade) and :class:`speechiter.iterator.mix.MixIterator` (several corpora by weight, a composition
of Iterators). What they share is small:

- ``name``, ``seed``, ``engine_settings``; ``len()``, the batches per epoch;
- ``planner``: the epoch planner (speechiter/plan/epochs.py, speechiter/plan/mixed.py), whose
  ``continue_from(state)`` returns a new planner or raises; ``epoch_len``, ``layout_of``, ``epoch_tasks``;
- ``state_at(epoch, step)``: its state record there (speechiter.state), ``configuration`` and ``view_digest``:
  the fingerprints a state of a scheme holds (speechiter/state_versions.py); ``carry_over``: a saved state in
  its terms (a changed mix's);
- ``build_loader``, ``reader``, ``engine`` (one per iterator, its workers kept across epochs), ``close``.
"""
import abc
import weakref
from typing import Any, FrozenSet, List, Optional, Tuple

from speechiter.engine import Engine, EngineSettings, make_engine
from speechiter.plan.layout import Layout
from speechiter.plan.tasks import EpochTasks
from speechiter.state_keys import CURRENT


class Loadable(abc.ABC):
    """An iterator as loaders see it (see the module's docstring)."""

    name: str
    seed: int
    engine_settings: EngineSettings
    planner: Any  # EpochPlanner or MixPlanner
    mixed = False  # True for a mix: its states hold its corpora's
    _engine: Optional[Engine] = None
    _engine_finalizer: Optional[weakref.finalize] = None

    # --- the plan -----------------------------------------------------------------------------
    def __len__(self):
        """Batches per epoch (see :meth:`epoch_len` for an epoch begun under another layout)."""
        return len(self.planner)

    def epoch_len(self, epoch: int) -> int:
        """Batches of ``epoch``: ``len(self)``, or the saved run's number in a continued epoch."""
        return self.planner.epoch_len(epoch)

    @property
    def layout(self) -> Layout:
        """Where this iterator's batches go: its ngpu and world size."""
        return self.planner.layout

    def layout_of(self, epoch: int) -> Layout:
        """The layout ``epoch`` is planned under (see NOTE [ Elastic resume ] in speechiter/plan/layout.py)."""
        return self.planner.layout_of(epoch)

    def epoch_tasks(self, epoch: int, start_step: int = 0) -> EpochTasks:
        """The engine's tasks for one epoch from ``start_step`` on; each keeps its position in the full plan
        and its own seed, so a resumed epoch builds the same batches as an uninterrupted one."""
        return self.planner.tasks(epoch, start_step)

    @abc.abstractmethod
    def epoch_batches(self, epoch: int) -> List[List[str]]:
        """The ids of every batch of ``epoch``, in loading order."""

    @property
    @abc.abstractmethod
    def datasets(self) -> List[Any]:
        """The datasets its batches come from."""

    # --- state --------------------------------------------------------------------------------
    @abc.abstractmethod
    def configuration(self, scheme: str = CURRENT) -> Tuple[str, Optional[dict]]:
        """``(fingerprint, settings summary)`` of what decides the batches, as a state of ``scheme`` holds it."""

    @abc.abstractmethod
    def view_digest(self, scheme: str = CURRENT) -> Tuple[str, int]:
        """``(fingerprint, batches)`` of the batching view, as a state of ``scheme`` holds it."""

    @abc.abstractmethod
    def state_at(self, epoch: int, step: int, scheme: str = CURRENT):
        """Its state when ``step`` steps of ``epoch`` are done (a LoaderState, or a mix's MixState)."""

    def carry_over(self, saved, changes: FrozenSet[str] = frozenset(), where: str = "state") -> Tuple[Any, List[str]]:
        """``(state, lines)``: a saved state in this iterator's terms, and what carried over, one line each, where
        a resume may change more than the layout (``changes``: a mix's, NOTE [ Changed mix ] in
        speechiter/iterator/mix_changes.py); here the state as it is."""
        return saved, []

    # --- loading ------------------------------------------------------------------------------
    @abc.abstractmethod
    def build_loader(self, epoch: int = 1, start_step: int = 0, prefetch_next: bool = True,
                     stop_step: Optional[int] = None):
        """An iterable over the batches of ``epoch``, steps ``start_step + 1`` to ``stop_step`` (default: the
        end of the epoch). With ``prefetch_next`` the workers start on the next epoch's first batches while
        this one drains."""

    @abc.abstractmethod
    def reader(self):
        """The reader factory the engine's workers build batches with."""

    def engine(self) -> Engine:
        """The loading engine, started on first use; its workers persist across epochs until :meth:`close`
        (or exit)."""
        if self._engine is None:
            self._engine = make_engine(self.engine_settings, self.reader())
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
