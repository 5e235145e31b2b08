"""Groups of iterators that step together: ``{name: batch}`` per step, one state for the group.

A group (``train: {sup: ..., unsup: ...}``) runs its iterators (ordinary ones or mixes: anything Loadable,
speechiter/iterator/loadable.py) in lock step under its ``steps`` policy: see NOTE [ Group steps ] in
speechiter/plan/steps.py for the rule, which positions are pure functions of (epoch, step).
"""
import dataclasses
from typing import Any, Dict, Iterable, Iterator as PyIterator, List, Mapping, Optional, Tuple, Union

from speechiter.checks import check_choice, check_int
from speechiter.config.groups import STEPS_POLICIES
from speechiter.errors import ConfigError
from speechiter.iterator.loadable import Loadable
from speechiter.plan.steps import LONGEST, SHORTEST, own_position, segments, steps_per_epoch
from speechiter.skips import is_empty
from speechiter.state import GroupState, check_changes, check_step
from speechiter.state_versions import read_group_state

__all__ = ["IteratorGroup", "GroupLoader", "build_group_loader", "policy_of", "group_steps"]


class IteratorGroup(dict):
    """``{name: iterator}`` of one data_cfg group with its ``steps`` policy (what build_iterators returns
    for named iterators)."""

    def __init__(self, iterators: Mapping = (), steps: str = SHORTEST):
        super().__init__(iterators)
        self.steps = check_choice(steps, "steps", STEPS_POLICIES)


def policy_of(group: Any) -> str:
    """The steps policy of a build_iterators() group value (``shortest`` unless set)."""
    return getattr(group, "steps", SHORTEST)


def group_steps(group: Any) -> int:
    """Steps per epoch of a build_iterators() group value (an iterator or a group) under its policy."""
    iterators = {None: group} if isinstance(group, Loadable) else group
    return steps_per_epoch((len(iterator) for iterator in iterators.values()), policy_of(group))


class GroupLoader:
    """One epoch of a group: yields ``{name: batch}`` per step (``{None: batch}`` for a lone iterator);
    a batch that lost every row is left out, unless ``keep_empty`` (NOTE [ Empty steps ] in skips.py).

    ``steps``: ``shortest`` or ``longest`` (see NOTE [ Group steps ]); None takes
    the group's own policy (``IteratorGroup.steps``). ``state_dict`` /
    ``load_state_dict`` save and restore the whole group (speechiter.state.Stateful).
    """

    def __init__(self, iterators: Union[Loadable, Mapping[Any, Loadable]], epoch: int = 1, start_step: int = 0,
                 steps: Optional[str] = None, prefetch_next: bool = True):
        group = {None: iterators} if isinstance(iterators, Loadable) else iterators
        if not isinstance(group, Mapping) or not group:
            raise ConfigError("iterators", f"expected an Iterator or a non-empty {{name: Iterator}}, got {group!r}")
        for name, iterator in group.items():
            if not isinstance(iterator, Loadable):
                raise ConfigError(f"iterators.{name}", f"expected an Iterator, got {type(iterator).__name__}")
        self.iterators: Dict[Any, Loadable] = dict(group)
        self.policy: str = check_choice(policy_of(group) if steps is None else steps, "steps", STEPS_POLICIES)
        self.prefetch_next = prefetch_next
        self.keep_empty = False  # yield steps whose batches lost every row (NOTE [ Empty steps ] in skips.py)
        self.resume_notes: List[str] = []  # what a resume under a changed mix carried over (load_state)
        self.loaders: Dict[Any, List] = {}
        self.start_at(check_int(epoch, "epoch"), check_int(start_step, "start_step", minimum=0))

    def start_at(self, epoch: int, start_step: int, where: str = "start_step"):
        """Go to step ``start_step`` of ``epoch`` (a ConfigError at ``where`` past the epoch's end)."""
        self.steps = self.epoch_steps(epoch)
        check_step(start_step, self.steps, epoch, where)
        self.epoch, self.start_step, self.step = epoch, start_step, start_step

    def __len__(self):
        """Steps left in this epoch."""
        return self.steps - self.start_step

    def epoch_steps(self, epoch: int, planners: Optional[Dict[Any, Any]] = None) -> int:
        """Steps of ``epoch`` under the policy (an epoch continued from another layout may differ), by the
        iterators' planners (or ``planners``: ``{name: planner}``)."""
        planners = planners or {name: it.planner for name, it in self.iterators.items()}
        return steps_per_epoch((planner.epoch_len(epoch) for planner in planners.values()), self.policy)

    # --- the plan -----------------------------------------------------------------
    def skipped(self) -> Dict[Any, Tuple[int, int]]:
        """``{name: (batches, utterances)}`` of this epoch that ``shortest`` leaves out (longer iterators only)."""
        result = {}
        if self.policy != SHORTEST:
            return result
        for name, iterator in self.iterators.items():
            size = iterator.epoch_len(self.epoch)
            if size > self.steps:
                plan = iterator.epoch_tasks(self.epoch, self.steps).batches
                result[name] = (size - self.steps, int(plan.sizes()[self.steps:].sum()))
        return result

    # --- iteration ------------------------------------------------------------------
    def _stream(self, name) -> PyIterator:
        iterator = self.iterators[name]
        parts = segments(self.epoch, self.step, self.steps, len(iterator), self.policy)
        self.loaders[name] = []
        for i, segment in enumerate(parts):
            last = i == len(parts) - 1
            # the workers may start on the next epoch only where it follows (See NOTE [ Group steps ])
            prefetch = segment.stop == len(iterator) and (not last or self.prefetch_next) \
                if self.policy == LONGEST else self.prefetch_next
            loader = iterator.build_loader(segment.epoch, segment.start, prefetch_next=prefetch,
                                           stop_step=segment.stop)
            self.loaders[name].append(loader)
            yield from loader.all_steps()  # empty steps too, to stay in step (NOTE [ Empty steps ] in skips.py)

    def __iter__(self) -> PyIterator[Dict[Any, Any]]:
        streams = {name: self._stream(name) for name in self.iterators}
        try:
            while self.step < self.steps:
                batch = {name: next(stream) for name, stream in streams.items()}
                self.step += 1
                if not self.keep_empty:
                    batch = {name: one for name, one in batch.items() if not is_empty(one)}
                if batch:
                    yield batch
        finally:
            for stream in streams.values():
                stream.close()

    # --- state ----------------------------------------------------------------------
    def positions(self, epoch: int, step: int, steps: Optional[int] = None) -> Dict[str, Tuple[int, int]]:
        """``{str(name): (own epoch, own step)}`` of each iterator when ``step`` steps of ``epoch`` are done
        (``steps``: the epoch's steps, by default this loader's)."""
        steps = self.steps if steps is None else steps
        return {str(name): own_position(epoch, step, len(it), steps, self.policy)
                for name, it in self.iterators.items()}

    def state_at(self, epoch: int, step: int, steps: Optional[int] = None) -> GroupState:
        """The group's state when ``step`` steps of ``epoch`` are done: each iterator at its own position
        (``steps``: the epoch's steps, by default this loader's)."""
        positions = self.positions(epoch, step, steps)
        return GroupState(epoch, step, self.policy, {str(name): it.state_at(*positions[str(name)])
                                                     for name, it in self.iterators.items()})

    def state(self) -> GroupState:
        """Where this group stands."""
        return self.state_at(self.epoch, self.step)

    def load_state(self, saved: GroupState, where: str = "state", allow_changes: Iterable[str] = ()) -> None:
        """Continue from ``saved``: the next step is the one after it, on this group's layout (see NOTE
        [ Group steps ]); ``allow_changes=["mix"]``: a mix of the group also resumes under changes of its own
        (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py; ``resume_notes`` says what carried over).
        Raises a ConfigError (at ``where``), and changes nothing, if it belongs to another group or
        configuration, or its positions disagree."""
        changes = check_changes(allow_changes)
        iterators = {str(name): it for name, it in self.iterators.items()}
        saved.check_members(self.policy, iterators, where)
        carried, notes = {}, []
        for name, iterator in iterators.items():
            carried[name], lines = iterator.carry_over(saved.iterators[name], changes, f"{where}.iterators.{name}")
            if lines:
                self._check_kept_length(saved.iterators[name], iterator, f"{where}.iterators.{name}")
            notes += lines
        saved = dataclasses.replace(saved, iterators=carried)
        saved.check_setup(self.policy, iterators, where)
        planners = {name: it.planner.continue_from(saved.iterators[name]) for name, it in iterators.items()}
        self._check_longest(saved, planners, where)
        steps = self.epoch_steps(saved.epoch, planners)
        saved.check_positions(self.positions(saved.epoch, saved.step, steps), steps, where)
        for name, iterator in iterators.items():
            iterator.planner = planners[name]
        self.start_at(saved.epoch, saved.step, f"{where}.step")
        self.resume_notes = notes

    def _check_kept_length(self, saved, mix, where: str) -> None:
        """``longest`` places each iterator by its epoch length, so a changed mix in it keeps its
        batches_per_epoch (See NOTE [ Changed mix ])."""
        if self.policy == LONGEST and saved.schedule["batches_per_epoch"] != len(mix):
            raise ConfigError(where, f"a mix in a steps: longest group keeps its batches_per_epoch on resume (the "
                                     f"group places each iterator by its epoch length): saved "
                                     f"{saved.schedule['batches_per_epoch']}, now {len(mix)}")

    def _check_longest(self, saved: GroupState, planners: Dict[str, Any], where: str) -> None:
        """``longest`` walks every iterator through epochs of one length (see NOTE [ Group steps ])."""
        if self.policy != LONGEST:
            return
        for name, planner in planners.items():
            epoch = saved.iterators[name].epoch
            if planner.epoch_len(epoch) != len(planner):
                raise ConfigError(f"{where}.iterators.{name}.layout", f"steps: longest cannot continue epoch {epoch} "
                                  f"of {name} on a layout that changes its length: {planner.epoch_len(epoch)} "
                                  f"batches under {planner.layout_of(epoch)}, {len(planner)} under {planner.layout}")

    def state_dict(self) -> Dict[str, Any]:
        """Where this group stands (a GroupState as a dict): resume with :meth:`load_state_dict`."""
        return self.state().to_dict()

    def load_state_dict(self, state: Dict[str, Any], allow_changes: Iterable[str] = ()) -> None:
        """Continue from a saved ``state_dict()``; a ConfigError if it is malformed or does not fit.
        ``allow_changes``: see :meth:`load_state`."""
        self.load_state(read_group_state(state, "state"), allow_changes=allow_changes)


def build_group_loader(iterators: Union[Loadable, Mapping[Any, Loadable]], epoch: int = 1, start_step: int = 0,
                       steps: Optional[str] = None, prefetch_next: bool = True) -> GroupLoader:
    """A :class:`GroupLoader` over a group of build_iterators() (``iterators["train"]``)."""
    return GroupLoader(iterators, epoch, start_step, steps=steps, prefetch_next=prefetch_next)
