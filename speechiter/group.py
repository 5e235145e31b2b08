"""Groups of iterators that step together: ``{name: batch}`` per step, one state for the group.

# NOTE [ Group steps ]
A group (``train: {sup: ..., unsup: ...}``) runs all its iterators in lock
step; its ``steps`` policy (a data_cfg key beside the named iterators) sets
how long an epoch is:

- ``shortest`` (SpeeChain's behaviour, the default): as many steps as the
  shortest iterator; each iterator runs epoch e of its own plan and the rest
  of the longer ones is skipped (counted in ``skipped`` and in the report).
- ``longest``: as many steps as the longest; each iterator walks through its
  own epochs one after the other, so step s of group epoch e is batch
  ``g = (e - 1) * steps + s`` of its stream of epochs (its epoch ``g // len + 1``,
  step ``g % len``, each epoch clipped and shuffled as usual). Nothing is
  skipped; a shorter iterator starts its next epoch (the cursor rule moves on
  with it) inside the group's epoch.

Both are deterministic in (seed, epoch, step), so a group resumes exactly from
``(epoch, step)``.
"""
import dataclasses
from typing import Any, Dict, Iterator as PyIterator, List, Mapping, Optional, Tuple, Union

from speechiter.checks import check_choice, check_int
from speechiter.config.groups import STEPS_POLICIES
from speechiter.errors import ConfigError
from speechiter.iterator.abs import Iterator
from speechiter.state import STATE_VERSION, LoaderState

KEY_POLICY = "steps"
GROUP_KEYS = ("version", "epoch", "step", KEY_POLICY, "iterators")


class IteratorGroup(dict):
    """``{name: Iterator}`` of one data_cfg group with its ``steps`` policy (what build_iterators returns
    for named iterators)."""

    def __init__(self, iterators: Mapping = (), steps: str = "shortest"):
        super().__init__(iterators)
        self.steps = check_choice(steps, "steps", STEPS_POLICIES)


def policy_of(group: Any) -> str:
    """The steps policy of a build_iterators() group value (``shortest`` unless set)."""
    return getattr(group, "steps", "shortest")


@dataclasses.dataclass(frozen=True)
class Segment:
    """A stretch of one iterator's own epoch: steps ``start + 1 .. stop``."""

    epoch: int
    start: int
    stop: int


class GroupLoader:
    """One epoch of a group: yields ``{name: batch}`` per step (``{None: batch}`` for a lone Iterator).

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
        sizes = [len(iterator) for iterator in self.iterators.values()]
        self.steps = min(sizes) if self.policy == "shortest" else max(sizes)  # steps per epoch
        self.prefetch_next = prefetch_next
        self.loaders: Dict[Any, List] = {}
        self._start_at(check_int(epoch, "epoch"), check_int(start_step, "start_step", minimum=0))

    def _start_at(self, epoch: int, start_step: int):
        if start_step > self.steps:
            raise ConfigError("start_step", f"epoch {epoch} of the group has {self.steps} steps, "
                                            f"got start_step={start_step}")
        self.epoch, self.start_step, self.step = epoch, start_step, start_step

    def __len__(self):
        """Steps left in this epoch."""
        return self.steps - self.start_step

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
            own_epoch, start = divmod(first, size)
            stop = min(size, start + end - first)
            segments.append(Segment(own_epoch + 1, start, stop))
            first += stop - start
        return segments

    def skipped(self) -> Dict[Any, Tuple[int, int]]:
        """``{name: (batches, utterances)}`` of this epoch that ``shortest`` leaves out (longer iterators only)."""
        result = {}
        if self.policy != "shortest":
            return result
        for name, iterator in self.iterators.items():
            if len(iterator) > self.steps:
                plan = iterator.epoch_tasks(self.epoch, self.steps).batches
                result[name] = (len(iterator) - self.steps, int(plan.sizes()[self.steps:].sum()))
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
            yield from loader

    def __iter__(self) -> PyIterator[Dict[Any, Any]]:
        streams = {name: self._stream(name) for name in self.iterators}
        try:
            while self.step < self.steps:
                batch = {name: next(stream) for name, stream in streams.items()}
                self.step += 1
                yield batch
        finally:
            for stream in streams.values():
                stream.close()

    # --- state ----------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Where this group stands: resume with :meth:`load_state_dict`."""
        return {"version": STATE_VERSION, "epoch": self.epoch, "step": self.step, KEY_POLICY: self.policy,
                "iterators": {str(name): LoaderState.of(it, self.epoch, self.step).to_dict()
                              for name, it in self.iterators.items()}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a saved state: the next step is the one after it.

        Raises a ConfigError if the state is malformed or belongs to another group or configuration.
        """
        if not isinstance(state, dict):
            raise ConfigError("state", f"expected a group state dict, got {type(state).__name__}")
        unknown = sorted(set(state) - set(GROUP_KEYS))
        missing = [key for key in GROUP_KEYS if key not in state]
        if unknown or missing:
            raise ConfigError("state", f"a group state has {', '.join(GROUP_KEYS)}; "
                                       f"unknown keys: {', '.join(unknown) or '-'}; missing: {', '.join(missing) or '-'}")
        if state["version"] != STATE_VERSION:
            raise ConfigError("state.version", f"state version {state['version']!r} is not supported "
                                               f"(expected {STATE_VERSION})")
        if state[KEY_POLICY] != self.policy:
            raise ConfigError("state.steps", f"saved with steps: {state[KEY_POLICY]}, this group has {self.policy}")
        saved = state["iterators"]
        names = sorted(str(name) for name in self.iterators)
        if not isinstance(saved, dict) or sorted(saved) != names:
            shown = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
            raise ConfigError("state.iterators", f"saved for iterators {shown}, this group has {names}")
        for name, iterator in self.iterators.items():
            LoaderState.from_dict(saved[str(name)], f"state.iterators.{name}").check_fits(
                iterator, f"state.iterators.{name}")
        epoch = check_int(state["epoch"], "state.epoch")
        self._start_at(epoch, check_int(state["step"], "state.step", minimum=0))


def build_group_loader(iterators: Union[Iterator, Mapping[Any, Iterator]], epoch: int = 1, start_step: int = 0,
                       steps: Optional[str] = None, prefetch_next: bool = True) -> GroupLoader:
    """A :class:`GroupLoader` over a group of build_iterators() (``iterators["train"]``)."""
    return GroupLoader(iterators, epoch, start_step, steps=steps, prefetch_next=prefetch_next)
