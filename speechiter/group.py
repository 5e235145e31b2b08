"""Groups of iterators that step together: ``{name: batch}`` per step, one state for the group.

# NOTE [ Group steps ]
A group (``train: {sup: ..., unsup: ...}``) runs all its iterators in lock
step; its ``steps`` policy (a data_cfg key beside the named iterators) sets
how long an epoch is:

- ``shortest`` (SpeeChain's behaviour, the default): as many steps as the
  shortest iterator; each iterator runs epoch e of its own plan and the rest
  of the longer ones is skipped (counted in ``skipped`` and in the report).
- ``longest``: as many steps as the longest; each iterator walks through its
  own epochs one after the other, so after s steps of group epoch e it has
  consumed ``g = (e - 1) * steps + s`` batches of its stream of epochs and
  stands at its own epoch ``g // len + 1``, step ``g % len`` (each epoch
  clipped and shuffled as usual). Nothing is skipped; a shorter iterator starts
  its next epoch (the cursor rule moves on with it) inside the group's epoch.

Both are deterministic in (seed, epoch, step), so a group resumes exactly from
``(epoch, step)``. Its state (speechiter.state.GroupState) holds each
iterator's state at that iterator's own position (``own_position``), and a
state whose positions disagree with the group's (epoch, step) is refused.
Each iterator's state carries the layout of its epoch, so a group resumes on
another layout too (NOTE [ Elastic resume ] in speechiter/iterator/elastic.py):
under ``shortest`` the continued epoch has the steps the saved run planned;
``longest`` needs every epoch of the same length, so a resume whose continued
epoch has another length than the next ones (a changed ngpu) is refused.
"""
import dataclasses
from typing import Any, Dict, Iterable, Iterator as PyIterator, List, Mapping, Optional, Tuple, Union

from speechiter.checks import check_choice, check_int
from speechiter.config.groups import STEPS_POLICIES
from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.skips import is_empty
from speechiter.state import GroupState, LoaderState, check_step


class IteratorGroup(dict):
    """``{name: Iterator}`` of one data_cfg group with its ``steps`` policy (what build_iterators returns
    for named iterators)."""

    def __init__(self, iterators: Mapping = (), steps: str = "shortest"):
        super().__init__(iterators)
        self.steps = check_choice(steps, "steps", STEPS_POLICIES)


def policy_of(group: Any) -> str:
    """The steps policy of a build_iterators() group value (``shortest`` unless set)."""
    return getattr(group, "steps", "shortest")


def steps_per_epoch(sizes: Iterable[int], policy: str) -> int:
    """A group's steps per epoch: its shortest or longest iterator's batches per epoch (``sizes``)."""
    return min(sizes) if policy == "shortest" else max(sizes)


def group_steps(group: Any) -> int:
    """Steps per epoch of a build_iterators() group value (an Iterator or a group) under its policy."""
    iterators = {None: group} if isinstance(group, Iterator) else group
    return steps_per_epoch((len(iterator) for iterator in iterators.values()), policy_of(group))


def stream_position(consumed: int, size: int) -> Tuple[int, int]:
    """(own epoch, steps of it done) of an iterator of ``size`` batches per epoch after ``consumed`` batches
    of its stream of epochs (under ``steps: longest``)."""
    epoch, step = divmod(consumed, size)
    return epoch + 1, step


def own_position(epoch: int, step: int, size: int, steps: int, policy: str) -> Tuple[int, int]:
    """Where an iterator of ``size`` batches per epoch stands when its group (``steps`` per epoch) has done
    ``step`` steps of ``epoch`` (see NOTE [ Group steps ])."""
    if policy == "shortest" or not size:
        return epoch, step
    return stream_position((epoch - 1) * steps + step, size)


@dataclasses.dataclass(frozen=True)
class Segment:
    """A stretch of one iterator's own epoch: steps ``start + 1 .. stop``."""

    epoch: int
    start: int
    stop: int


class GroupLoader:
    """One epoch of a group: yields ``{name: batch}`` per step (``{None: batch}`` for a lone Iterator);
    a batch that lost every row is left out, unless ``keep_empty`` (NOTE [ Empty steps ] in skips.py).

    ``steps``: ``shortest`` or ``longest`` (see NOTE [ Group steps ]); None takes
    the group's own policy (``IteratorGroup.steps``). ``state_dict`` /
    ``load_state_dict`` save and restore the whole group (speechiter.state.Stateful).
    """

    def __init__(self, iterators: Union[Iterator, Mapping[Any, Iterator]], epoch: int = 1, start_step: int = 0,
                 steps: Optional[str] = None, prefetch_next: bool = True):
        group = {None: iterators} if isinstance(iterators, Iterator) else iterators
        if not isinstance(group, Mapping) or not group:
            raise ConfigError("iterators", f"expected an Iterator or a non-empty {{name: Iterator}}, got {group!r}")
        for name, iterator in group.items():
            if not isinstance(iterator, Iterator):
                raise ConfigError(f"iterators.{name}", f"expected an Iterator, got {type(iterator).__name__}")
        self.iterators: Dict[Any, Iterator] = dict(group)
        self.policy: str = check_choice(policy_of(group) if steps is None else steps, "steps", STEPS_POLICIES)
        self.prefetch_next = prefetch_next
        self.keep_empty = False  # yield steps whose batches lost every row (NOTE [ Empty steps ] in skips.py)
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

    def epoch_steps(self, epoch: int) -> int:
        """Steps of ``epoch`` under the policy (an epoch continued from another layout may differ)."""
        return steps_per_epoch((it.epoch_len(epoch) for it in self.iterators.values()), self.policy)

    # --- the plan -----------------------------------------------------------------
    def segments(self, name) -> List[Segment]:
        """The stretches of ``name``'s own epochs from the current step to the end of the group's epoch
        (see NOTE [ Group steps ])."""
        size = len(self.iterators[name])
        if self.policy == "shortest":
            return [Segment(self.epoch, self.step, self.steps)]
        first, end = (self.epoch - 1) * self.steps + self.step, self.epoch * self.steps
        segments = []
        while first < end:
            own_epoch, start = stream_position(first, size)
            stop = min(size, start + end - first)
            segments.append(Segment(own_epoch, start, stop))
            first += stop - start
        return segments

    def skipped(self) -> Dict[Any, Tuple[int, int]]:
        """``{name: (batches, utterances)}`` of this epoch that ``shortest`` leaves out (longer iterators only)."""
        result = {}
        if self.policy != "shortest":
            return result
        for name, iterator in self.iterators.items():
            size = iterator.epoch_len(self.epoch)
            if size > self.steps:
                plan = iterator.epoch_tasks(self.epoch, self.steps).batches
                result[name] = (size - self.steps, int(plan.sizes()[self.steps:].sum()))
        return result

    # --- iteration ------------------------------------------------------------------
    def _stream(self, name) -> PyIterator:
        iterator, segments = self.iterators[name], self.segments(name)
        self.loaders[name] = []
        for i, segment in enumerate(segments):
            last = i == len(segments) - 1
            # the workers may start on the next epoch only where it follows (See NOTE [ Group steps ])
            prefetch = segment.stop == len(iterator) and (not last or self.prefetch_next) \
                if self.policy == "longest" else self.prefetch_next
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
    def state_at(self, epoch: int, step: int, steps: Optional[int] = None) -> GroupState:
        """The group's state when ``step`` steps of ``epoch`` are done: each iterator at its own position
        (``steps``: the epoch's steps, by default this loader's)."""
        steps = self.steps if steps is None else steps
        return GroupState(epoch, step, self.policy, {
            str(name): LoaderState.of(it, *own_position(epoch, step, len(it), steps, self.policy))
            for name, it in self.iterators.items()})

    def state(self) -> GroupState:
        """Where this group stands."""
        return self.state_at(self.epoch, self.step)

    def load_state(self, saved: GroupState, where: str = "state") -> None:
        """Continue from ``saved``: the next step is the one after it, on this group's layout (see NOTE
        [ Group steps ]). Raises a ConfigError (at ``where``) if it belongs to another group or
        configuration, or its positions disagree."""
        iterators = {str(name): it for name, it in self.iterators.items()}
        saved.check_setup(self.state_at(saved.epoch, saved.step), iterators, where)
        try:
            for name, iterator in iterators.items():
                iterator.continue_from(saved.iterators[name])
            self._check_longest(saved, iterators, where)
            steps = self.epoch_steps(saved.epoch)
            saved.check_positions(self.state_at(saved.epoch, saved.step, steps), steps, where)
        except ConfigError:
            for iterator in iterators.values():
                iterator.continue_epoch(saved.epoch, None)
            raise
        self.start_at(saved.epoch, saved.step, f"{where}.step")

    def _check_longest(self, saved: GroupState, iterators: Dict[str, Iterator], where: str) -> None:
        """``longest`` walks every iterator through epochs of one length (see NOTE [ Group steps ])."""
        if self.policy != "longest":
            return
        for name, iterator in iterators.items():
            epoch = saved.iterators[name].epoch
            if iterator.epoch_len(epoch) != len(iterator):
                raise ConfigError(f"{where}.iterators.{name}.layout", f"steps: longest cannot continue epoch {epoch} "
                                  f"of {name} on a layout that changes its length: {iterator.epoch_len(epoch)} "
                                  f"batches under {iterator.layout_of(epoch)}, {len(iterator)} under {iterator.layout}")

    def state_dict(self) -> Dict[str, Any]:
        """Where this group stands (a GroupState as a dict): resume with :meth:`load_state_dict`."""
        return self.state().to_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a saved ``state_dict()``; a ConfigError if it is malformed or does not fit."""
        self.load_state(GroupState.from_dict(state, "state"))


def build_group_loader(iterators: Union[Iterator, Mapping[Any, Iterator]], epoch: int = 1, start_step: int = 0,
                       steps: Optional[str] = None, prefetch_next: bool = True) -> GroupLoader:
    """A :class:`GroupLoader` over a group of build_iterators() (``iterators["train"]``)."""
    return GroupLoader(iterators, epoch, start_step, steps=steps, prefetch_next=prefetch_next)
