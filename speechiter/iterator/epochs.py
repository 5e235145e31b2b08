"""EpochPlans: each epoch's plan of an Iterator (the Iterator's base class for its per-epoch part).

    the epoch's view (this rank's; base_epoch_view -> the ngpu rule, the rank share) -> clip_batches
    -> EpochShuffle (NOTE [ Epoch shuffle ] in speechiter/plan/shuffle.py) = the epoch's plan -> EpochTasks from a step on

An epoch begun by a run of another layout is planned from that run's global batches instead (see
:meth:`EpochPlans.continue_epoch` and NOTE [ Elastic resume ] in speechiter/plan/layout.py). The Iterator
(speechiter/iterator/abs.py) sets what this part reads: ``_view`` (this rank's view), ``_base`` (the base
view), ``_shuffle``, ``_continued`` and the plan's options, and provides ``batches`` and ``_distribute``.
"""
from typing import Dict, List, Optional, Sequence, Tuple

from speechiter.checks import check_int
from speechiter.errors import ConfigError
from speechiter.fingerprints import batches_fingerprint, view_fingerprint
from speechiter.plan.layout import ContinuedEpoch, Layout, check_continuable
from speechiter.plan.ordered import clip_batches, reorder
from speechiter.plan.tasks import EpochTasks, check_epoch
from speechiter.plan.view import BatchView, as_view, global_batches, is_vectorised, share_batches


class EpochPlans:
    """The per-epoch plan of an Iterator: its epoch views, their clip and shuffle, continued epochs, tasks."""

    _view: BatchView
    _base: BatchView
    _continued: Optional[ContinuedEpoch]
    _fingerprints: Dict[bool, str]
    _rank_views: Dict[int, BatchView]
    _last_plan: Optional[Tuple[int, BatchView]]

    def epoch_len(self, epoch: int) -> int:
        """Batches of ``epoch``: ``len(self)``, or the saved run's number in a continued epoch."""
        continued = self._continued
        if continued is None or continued.epoch != epoch or self.batches_per_epoch is not None:
            return len(self)
        return len(continued.global_view)

    def view_fingerprint(self, legacy: bool = False) -> str:
        """A digest of the base view (computed once); ``legacy``: of this rank's view (states of versions
        1 to 3)."""
        if legacy not in self._fingerprints:
            base = self._base
            self._fingerprints[legacy] = view_fingerprint(self._view) if legacy else batches_fingerprint(base.ids,
                                                                                                          base.bounds)
        return self._fingerprints[legacy]

    def base_batches(self) -> int:
        """Batches in the base view (saved in states with its fingerprint)."""
        return len(self._base)

    def base_epoch_view(self, epoch: int) -> BatchView:
        """Hook: batches_generate_fn's view of ``epoch``, before the ngpu rule and the rank share.

        The same every epoch here; an iterator whose batches change per epoch
        (bucket.BucketIterator) overrides it, deterministically in (seed, epoch)
        and with the same number of batches every epoch.
        """
        return self._base

    def epoch_view(self, epoch: int) -> Sequence[List[str]]:
        """This rank's view of ``epoch`` (before clipping and shuffling), as :attr:`batches`.

        A subclass with a list hook may override it instead of base_epoch_view
        (its states then resume on the same layout only: NOTE [ Elastic resume ]).
        """
        if self._fixed_view():
            return self.batches
        view = self._epoch_view(epoch)
        return view if is_vectorised(self) else view.tolist()

    def own_epoch_view(self) -> bool:
        """Whether a subclass overrides :meth:`epoch_view` (so its base views are unknown)."""
        return type(self).epoch_view is not EpochPlans.epoch_view

    def _fixed_view(self) -> bool:
        return not self.own_epoch_view() and type(self).base_epoch_view is EpochPlans.base_epoch_view

    def _epoch_view(self, epoch: int) -> BatchView:
        """This rank's view of ``epoch``."""
        if self.own_epoch_view():
            return as_view(self.epoch_view(epoch), f"{type(self).__name__}.epoch_view")
        base = self.base_epoch_view(epoch)
        if base is self._base:
            return self._view
        if epoch not in self._rank_views:
            if len(self._rank_views) >= 2:  # the loader asks for this epoch and the next
                self._rank_views.pop(next(iter(self._rank_views)))
            self._rank_views[epoch] = self._distribute(base)
        return self._rank_views[epoch]

    def _shuffled(self, view: BatchView, epoch: int) -> BatchView:
        """``view`` (an epoch's, this rank's or global) clipped and shuffled: an OrderedView of ``view``
        (NOTE [ Lazy epoch plans ] in speechiter/plan/ordered.py), or ``view`` itself."""
        clipped = clip_batches(view, self.batches_per_epoch, epoch)
        if not self.shuffle:
            return clipped
        # See NOTE [ Epoch shuffle ]: in place over the epochs when the whole, fixed view is used
        cumulative = clipped is view and self._fixed_view()
        return reorder(clipped, self._shuffle.order(epoch, len(clipped), cumulative))

    def _epoch_plan(self, epoch: int) -> BatchView:
        """The epoch's plan; the last one is kept (the next loader or its lookahead asks again)."""
        if self._last_plan is None or self._last_plan[0] != epoch:
            self._last_plan = (epoch, self._plan_of(epoch))
        return self._last_plan[1]

    def _plan_of(self, epoch: int) -> BatchView:
        continued = self._continued
        if continued is None or continued.epoch != epoch:
            return self._shuffled(self._epoch_view(epoch), epoch)
        # See NOTE [ Elastic resume ]: the saved run's global plan, shared among this layout's ranks
        return share_batches(self._shuffled(continued.global_view, epoch), self.rank, self.world_size,
                             self.is_descending is not False, self.evaluation)

    @property
    def layout(self) -> Layout:
        """Where this iterator's batches go: its ngpu and world size."""
        return Layout(self.ngpu, self.world_size)

    def layout_of(self, epoch: int) -> Layout:
        """The layout ``epoch`` is planned under: this iterator's, or the saved run's in a continued epoch."""
        continued = self._continued
        return continued.layout if continued is not None and continued.epoch == epoch else self.layout

    def continue_epoch(self, epoch: int, layout: Optional[Layout]) -> None:
        """Plan ``epoch`` as a run of ``layout`` did: its global batches, shared among this iterator's ranks
        (see NOTE [ Elastic resume ]). None or this iterator's own layout: as planned here."""
        check_continuable(self, layout)
        self._continued, self._last_plan = None, None
        if layout is not None and layout != self.layout:
            view = global_batches(self.base_epoch_view(epoch), layout.ngpu, layout.world_size, self.evaluation)
            self._continued = ContinuedEpoch(check_epoch(epoch), layout, view)

    def continue_from(self, saved) -> None:
        """Continue the epoch of ``saved`` (a LoaderState) on the layout it was saved with."""
        self.continue_epoch(saved.epoch, saved.layout)

    def epoch_batches(self, epoch: int) -> Sequence[List[str]]:
        """The epoch's full plan: the clipped, shuffled batching view (as
        :attr:`batches`: lists for a subclass whose hook returns lists)."""
        plan = self._epoch_plan(epoch)
        return plan if is_vectorised(self) else plan.tolist()

    def epoch_tasks(self, epoch: int, start_step: int = 0) -> EpochTasks:
        """The engine's tasks for one epoch from ``start_step`` on.

        Each task keeps its position in the full plan and its own seed, so a
        resumed epoch builds the same batches as an uninterrupted one.
        """
        epoch = check_epoch(epoch)
        start_step = check_int(start_step, "start_step", minimum=0)
        plan = self._epoch_plan(epoch)
        if start_step > len(plan):
            raise ConfigError("start_step", f"epoch {epoch} has {len(plan)} batches, got start_step={start_step}")
        return EpochTasks(plan, start_step, len(plan), self.seed, epoch, self.plan.stream)
