"""The command line's state files: ``--save_state`` writes them, ``--resume`` reads them back.

# NOTE [ State files ]
``--save_state FILE`` writes the run's state (speechiter.state.RunState) before
the first train step and after every one, atomically (a temporary file, then
os.replace), one file per rank under ``--distributed`` (``FILE.rank<r>``).
The ranks wait for each other once, after the first write, so that every rank
has a file of this run before any goes on; after that they do not, so the
files of one run may stand at different steps.

``--resume FILE`` under ``--distributed`` reads the files of the run that
saved them, whatever the number of ranks now: a version 4 state holds that
run's world size W, so every rank reads FILE.rank0 .. FILE.rank<W-1> (files
of higher ranks, left by an earlier and larger run, are not read), checks
that each fits this run, and continues from the earliest (epoch, step) among
them: a step counts as done only when every rank did it; the steps some ranks
did past it are loaded again. All ranks so start from the same step, on their
new layout (NOTE [ Elastic resume ] in speechiter/plan/layout.py). Then
they wait for each other (a barrier) before writing, so that no rank
overwrites a file another is still reading. A job killed before that first
write and wait are done leaves files of two runs: both stand at or after the
position the later run resumed from, and the later run's at it, so the
earliest is still that position. States of versions 1 to 3 (no world size)
resume on the same ranks only: each rank reads its own file.
"""
import os
from typing import Any, Dict, List, Optional, Tuple

from speechiter.build import flat_iterators
from speechiter.dump import rank_path
from speechiter.errors import ConfigError
from speechiter.group import policy_of
from speechiter.state import GroupState, RunState
from speechiter.state_keys import CURRENT
from speechiter.state_versions import read_run_state, run_configuration
from speechiter.user_files import read_json, write_json_atomic

WHERE = "--resume"


def read_state(path: str) -> RunState:
    """The run state in ``path``, checked (a ConfigError names the file or the bad key)."""
    return read_run_state(read_json(path, WHERE), WHERE)


def saved_states(path: str, rank: int, distributed: bool) -> List[Tuple[str, RunState]]:
    """``[(file, state)]`` of the run that saved ``--resume path`` (see NOTE [ State files ])."""
    if not distributed:
        return [(path, read_state(path))]
    first = rank_path(path, 0)
    states = [(first, read_state(first))]
    world_size = states[0][1].world_size
    if world_size is None:  # a state before version 4: saved by a run of these ranks
        own = rank_path(path, rank)
        return [(own, read_state(own))] if rank else states
    for other in range(1, world_size):
        source = rank_path(path, other)
        try:
            state = read_state(source)
        except ConfigError:
            if not os.path.exists(source):
                raise ConfigError(WHERE, f"{source} is missing: the run that wrote {first} had {world_size} "
                                         f"ranks, each with its own state file") from None
            raise
        states.append((source, state))
    return states


def earliest(states: List[Tuple[str, RunState]]) -> Tuple[str, RunState]:
    """The state that stands first: the steps every rank of the saving run has done."""
    return min(states, key=lambda item: (item[1].epoch, item[1].step))


def configuration_of(iterators: Dict, scheme: str) -> Tuple[str, Dict[str, Dict[str, Any]]]:
    """A run's config fingerprint and ``{label: settings summary}`` of build_iterators()'s ``iterators``, as a
    state of ``scheme`` holds them (NOTE [ State versions ] in speechiter/state_versions.py)."""
    policy = policy_of(iterators["train"]) if "train" in iterators else "shortest"
    return run_configuration({label: it.configuration(scheme) for label, it in flat_iterators(iterators)}, policy)


class StateFiles:
    """A command line run's state files: ``save`` writes this rank's, ``resume`` reads the saving run's
    (see NOTE [ State files ])."""

    def __init__(self, iterators: Dict, seed: int, save_state: Optional[str], distributed: bool, rank: int = 0,
                 world_size: int = 1):
        self.iterators, self.seed, self.distributed = iterators, seed, distributed
        self.rank, self.world_size = rank, world_size
        self.path = rank_path(save_state, rank) if save_state and distributed else save_state
        self.config, self.settings = configuration_of(iterators, CURRENT)

    def state(self, train: GroupState, scheme: str = CURRENT) -> RunState:
        """The run's state with the train group at ``train`` (``scheme``: as an older state holds it)."""
        if scheme != CURRENT:
            config, settings = configuration_of(self.iterators, scheme)
            return RunState(self.seed, config, train, settings=settings, scheme=scheme)
        return RunState(self.seed, self.config, train, settings=self.settings, world_size=self.world_size)

    def resume(self, path: str, train) -> Tuple[str, RunState]:
        """Put the train group (a GroupLoader) where the saving run stands; ``(file, state)`` it resumes from."""
        states = saved_states(path, self.rank, self.distributed)
        for source, saved in states:
            saved.check_fits(self.state(train.state_at(saved.epoch, saved.step), saved.scheme), WHERE, source)
        source, saved = earliest(states)
        train.load_state(saved.train, f"{WHERE} {source}: train")
        self._barrier()  # every rank has read the files before any writes
        return source, saved

    def save(self, train: GroupState, first: bool = False) -> None:
        """Write this rank's state; ``first``: before the first step, then wait for every rank's."""
        if self.path:
            write_json_atomic(self.path, self.state(train).to_dict())
            if first:
                self._barrier()

    def _barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist
            dist.barrier()
