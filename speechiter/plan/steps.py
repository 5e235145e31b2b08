"""Where each iterator of a group stands: a group's steps per epoch and each iterator's own position.

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
iterator's state at that iterator's own position (:func:`own_position`), and a
state whose positions disagree with the group's (epoch, step) is refused.
Each iterator's state carries the layout of its epoch, so a group resumes on
another layout too (NOTE [ Elastic resume ] in speechiter/plan/layout.py):
under ``shortest`` the continued epoch has the steps the saved run planned;
``longest`` needs every epoch of the same length, so a resume whose continued
epoch has another length than the next ones (a changed ngpu) is refused.
The loader of a group is speechiter/group.py (GroupLoader).
"""
import dataclasses
from typing import Iterable, List, Tuple

SHORTEST, LONGEST = "shortest", "longest"


def steps_per_epoch(sizes: Iterable[int], policy: str) -> int:
    """A group's steps per epoch: its shortest or longest iterator's batches per epoch (``sizes``)."""
    return min(sizes) if policy == SHORTEST else max(sizes)


def stream_position(consumed: int, size: int) -> Tuple[int, int]:
    """(own epoch, steps of it done) of an iterator of ``size`` batches per epoch after ``consumed`` batches
    of its stream of epochs (under ``steps: longest``)."""
    epoch, step = divmod(consumed, size)
    return epoch + 1, step


def own_position(epoch: int, step: int, size: int, steps: int, policy: str) -> Tuple[int, int]:
    """Where an iterator of ``size`` batches per epoch stands when its group (``steps`` per epoch) has done
    ``step`` steps of ``epoch`` (see NOTE [ Group steps ])."""
    if policy == SHORTEST or not size:
        return epoch, step
    return stream_position((epoch - 1) * steps + step, size)


@dataclasses.dataclass(frozen=True)
class Segment:
    """A stretch of one iterator's own epoch: steps ``start + 1 .. stop``."""

    epoch: int
    start: int
    stop: int


def segments(epoch: int, step: int, steps: int, size: int, policy: str) -> List[Segment]:
    """The stretches of the own epochs of an iterator of ``size`` batches per epoch from step ``step`` to the
    end of its group's ``epoch`` of ``steps`` steps (see NOTE [ Group steps ])."""
    if policy == SHORTEST:
        return [Segment(epoch, step, steps)]
    first, end = (epoch - 1) * steps + step, epoch * steps
    found = []
    while first < end:
        own_epoch, start = stream_position(first, size)
        stop = min(size, start + end - first)
        found.append(Segment(own_epoch, start, stop))
        first += stop - start
    return found
