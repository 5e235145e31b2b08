"""EpochPlanner: each epoch's plan of one iterator, from its views and options.

    the epoch's view (this rank's; a hook's base view -> the ngpu rule, the rank share) -> clip_batches
    -> EpochShuffle (NOTE [ Epoch shuffle ] in shuffle.py) = the epoch's plan -> EpochTasks from a step on

An epoch begun by a run of another layout is planned from that run's global batches instead (NOTE [ Elastic
resume ] in layout.py): :meth:`EpochPlanner.continue_from` returns a new planner that does so, or raises; the
planner it is called on does not change, so a refused state leaves nothing to undo.
"""
from typing import Dict, Optional, Protocol, Tuple

from speechiter.checks import check_int
from speechiter.errors import ConfigError
from speechiter.plan.layout import ContinuedEpoch, Layout
from speechiter.plan.options import BatchOptions
from speechiter.plan.ordered import View, clip_batches, reorder
from speechiter.plan.ranks import share_view
from speechiter.plan.shuffle import EpochShuffle
from speechiter.plan.tasks import EpochTasks, check_epoch
from speechiter.plan.view import BatchView, global_batches, share_batches


class EpochHooks(Protocol):
    """An iterator's own epoch views (its ``base_epoch_view`` or ``epoch_view`` override)."""

    own_epoch_view: bool  # an epoch_view override: this rank's views only, its global batches unknown

    def base_view(self, epoch: int) -> BatchView:
        """batches_generate_fn's view of ``epoch`` (before the ngpu rule and the rank share)."""

    def rank_view(self, epoch: int) -> BatchView:
        """This rank's view of ``epoch`` (an ``epoch_view`` override's answer)."""


class EpochPlanner:
    """Each epoch's plan of one iterator: ``view`` (this rank's) and ``base`` (batches_generate_fn's) under
    ``options``; ``hooks`` gives the views of an iterator whose batches change per epoch (None: every epoch
    is ``view``); ``continued``: an epoch planned under another layout (see :meth:`continue_from`)."""

    def __init__(self, options: BatchOptions, view: BatchView, base: BatchView, hooks: Optional[EpochHooks] = None,
                 continued: Optional[ContinuedEpoch] = None, shuffle: Optional[EpochShuffle] = None):
        self.options, self.view, self.base, self.hooks, self.continued = options, view, base, hooks, continued
        self._shuffle = EpochShuffle(options.seed) if shuffle is None else shuffle  # its orders: any planner's
        self._rank_views: Dict[int, BatchView] = {}  # epoch -> this rank's view, the last two (hooks.base_view)
        self._last: Optional[Tuple[int, View]] = None  # (epoch, plan) of the last epoch planned

    def __len__(self):
        """Batches per epoch (see :meth:`epoch_len` for an epoch begun under another layout)."""
        batches_per_epoch = self.options.batches_per_epoch
        return batches_per_epoch if batches_per_epoch is not None else len(self.view)

    @property
    def layout(self) -> Layout:
        """Where the batches go: ngpu and the world size."""
        return Layout(self.options.ngpu, self.options.world_size)

    def _continues(self, epoch: int) -> bool:
        return self.continued is not None and self.continued.epoch == epoch

    def layout_of(self, epoch: int) -> Layout:
        """The layout ``epoch`` is planned under: this planner's, or the saved run's in a continued epoch."""
        return self.continued.layout if self._continues(epoch) else self.layout

    def epoch_len(self, epoch: int) -> int:
        """Batches of ``epoch``: ``len(self)``, or the saved run's number in a continued epoch."""
        if not self._continues(epoch) or self.options.batches_per_epoch is not None:
            return len(self)
        return len(self.continued.global_view)

    def epoch_view(self, epoch: int) -> BatchView:
        """This rank's view of ``epoch`` (before its clip and shuffle)."""
        if self.hooks is None:
            return self.view
        if self.hooks.own_epoch_view:
            return self.hooks.rank_view(epoch)
        base = self.hooks.base_view(epoch)
        if base is self.base:
            return self.view
        if epoch not in self._rank_views:
            if len(self._rank_views) >= 2:  # the loader asks for this epoch and the next
                self._rank_views.pop(next(iter(self._rank_views)))
            options = self.options
            self._rank_views[epoch] = share_view(base, options.ngpu, options.rank, options.world_size,
                                                 options.descending, options.evaluation, options.name)
        return self._rank_views[epoch]

    def _shuffled(self, view: BatchView, epoch: int) -> View:
        """``view`` (an epoch's, this rank's or global) clipped and shuffled: an OrderedView of ``view``
        (NOTE [ Lazy epoch plans ] in ordered.py), or ``view`` itself."""
        clipped = clip_batches(view, self.options.batches_per_epoch, epoch)
        if not self.options.shuffle:
            return clipped
        # See NOTE [ Epoch shuffle ]: in place over the epochs when the whole, fixed view is used
        cumulative = clipped is view and self.hooks is None
        return reorder(clipped, self._shuffle.order(epoch, len(clipped), cumulative))

    def plan(self, epoch: int) -> View:
        """The epoch's plan; the last one is kept (the next loader or its lookahead asks again)."""
        if self._last is None or self._last[0] != epoch:
            self._last = (epoch, self._plan_of(epoch))
        return self._last[1]

    def _plan_of(self, epoch: int) -> View:
        if not self._continues(epoch):
            return self._shuffled(self.epoch_view(epoch), epoch)
        # See NOTE [ Elastic resume ]: the saved run's global plan, shared among this layout's ranks
        options = self.options
        return share_batches(self._shuffled(self.continued.global_view, epoch), options.rank, options.world_size,
                             options.descending, options.evaluation)

    def tasks(self, epoch: int, start_step: int = 0) -> EpochTasks:
        """The engine's tasks for one epoch from ``start_step`` on.

        Each task keeps its position in the full plan and its own seed, so a
        resumed epoch builds the same batches as an uninterrupted one.
        """
        epoch = check_epoch(epoch)
        start_step = check_int(start_step, "start_step", minimum=0)
        plan = self.plan(epoch)
        if start_step > len(plan):
            raise ConfigError("start_step", f"epoch {epoch} has {len(plan)} batches, got start_step={start_step}")
        return EpochTasks(plan, start_step, len(plan), self.options.seed, epoch, self.options.stream)

    def continue_from(self, saved) -> "EpochPlanner":
        """A planner that plans ``saved.epoch`` as the run that saved ``saved`` (a state: its ``epoch`` and
        ``layout``) did: that run's global batches, shared among this layout's ranks (see NOTE [ Elastic
        resume ]); with no saved layout, or this one, as planned here. Raises a ConfigError for an iterator
        whose global batches are unknown (its own ``epoch_view``) on another layout."""
        layout, continued = saved.layout, None
        if layout is not None and layout != self.layout:
            if self.hooks is not None and self.hooks.own_epoch_view:
                kind = self.options.type.rsplit(".", 1)[-1]
                raise ConfigError("state.layout", f"{self.options.name}: {kind} has its own epoch_view, so its state "
                                                  f"resumes on the layout it was saved with ({layout}), not on "
                                                  f"{self.layout}")
            epoch = check_epoch(saved.epoch)
            base = self.base if self.hooks is None else self.hooks.base_view(epoch)
            continued = ContinuedEpoch(epoch, layout, global_batches(base, layout.ngpu, layout.world_size,
                                                                     self.options.evaluation))
        return EpochPlanner(self.options, self.view, self.base, self.hooks, continued, self._shuffle)
