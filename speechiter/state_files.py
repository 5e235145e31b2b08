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
earliest is still that position. States of versions 1 to 3 resume on the same
ranks only: each rank reads its own file.

Without ``--distributed``, ``--resume FILE.rank<r>`` (any rank's file) reads
the same files and continues from the earliest, on one process: a rank's own
position would skip the steps the other ranks had not done. A file that holds
one rank of a bigger run under a name without ``.rank<r>``, a rank file whose
run had no such rank, and a missing file of the saving run are errors, never
a resume from part of the run.

# NOTE [ First state files ]
Before the first step, every rank of a run stands at the same position, and a
state holds no rank, so rank 0 writes that first state into every rank's file,
the highest rank first, and the others only wait for it. A job killed while
rank 0 writes them leaves rank 0's file of the run before (its files all
stand at or after that position), or every file of this run: never a rank 0
of this run beside an older run's file that stands earlier, which a file each
rank wrote for itself could leave. Temporaries (``FILE.tmp<pid>``) of writers
that were killed are removed there, and at ``--resume``.
"""
import glob
import os
from typing import Dict, Iterable, List, Optional, Tuple

from speechiter.build import flat_iterators
from speechiter.config import iterator_label
from speechiter.dump import rank_files, rank_path, split_rank
from speechiter.errors import ConfigError
from speechiter.group import policy_of
from speechiter.iterator.loadable import Loadable
from speechiter.state import GroupState, MixState, RunState
from speechiter.state_keys import CURRENT, ELASTIC_VERSION
from speechiter.state_versions import read_run_state, run_configuration
from speechiter.user_files import read_json, write_json_atomic

WHERE = "--resume"


def read_state(path: str) -> RunState:
    """The run state in ``path``, checked (a ConfigError names the file or the bad key)."""
    return read_run_state(read_json(path, WHERE), WHERE)


def _missing(path: str, distributed: bool) -> ConfigError:
    """No state file at ``path`` (under --distributed, nor at ``path.rank0``), with what lies there instead."""
    first = rank_path(path, 0)
    others = rank_files(path)
    shown = ", ".join(others[:3]) + (f" ... ({len(others)} files)" if len(others) > 3 else "")
    if distributed:
        return ConfigError(WHERE, f"no such state file: {first}" + (f" (found {shown})" if others else ""))
    if others:
        return ConfigError(WHERE, f"no such state file: {path}; a --distributed run saved {shown}: resume from "
                                  f"them with --resume {others[0]} (its run's other rank files are read too), or "
                                  f"under torchrun with --distributed --resume {path}")
    return ConfigError(WHERE, f"no such state file: {path}")


def saved_states(path: str, rank: int, distributed: bool) -> List[Tuple[str, RunState]]:
    """``[(file, state)]`` of the run that saved ``--resume path`` (see NOTE [ State files ])."""
    first = rank_path(path, 0) if distributed else path
    if distributed and os.path.exists(first) and os.path.exists(path):
        raise ConfigError(WHERE, f"both {path} (a run without --distributed) and {first} (a --distributed run) "
                                 f"exist: resume from one by its own name (--resume {first} reads its run's other "
                                 f"rank files too), and move the other aside")
    if not os.path.exists(first):
        if not distributed or not os.path.exists(path):
            raise _missing(path, distributed)
        first = path  # saved without --distributed, or a rank's own file named
    state = read_state(first)
    if state.version < ELASTIC_VERSION:  # the same ranks only: each rank its own file
        own = rank_path(path, rank)
        return [(own, read_state(own))] if distributed and rank and first != path else [(first, state)]
    if state.world_size == 1:
        return [(first, state)]
    base, index = (path, 0) if first != path else split_rank(first) or (None, None)
    if base is None:
        raise ConfigError(WHERE, f"{first} holds one rank's state of a run of {state.world_size} ranks, and its name "
                                 f"has no .rank<r> to find the other ranks' files by: resume from the files as "
                                 f"--save_state named them (FILE.rank0 ... FILE.rank{state.world_size - 1})")
    if index >= state.world_size:
        raise ConfigError(WHERE, f"{first} was saved by a run of {state.world_size} ranks, which has no rank {index}")
    states = []
    for other in range(state.world_size):
        source = rank_path(base, other)
        saved = state if other == index else _read_rank_file(source, first, state.world_size)
        if saved.version < ELASTIC_VERSION:
            raise ConfigError(WHERE, f"{source} is a state of version {saved.version}, {first} of version "
                                     f"{state.version}: not the files of one run")
        if saved.world_size <= other:
            raise ConfigError(WHERE, f"{source} was saved by a run of {saved.world_size} ranks, which has no rank "
                                     f"{other}: not a state file of the run that wrote {first}")
        states.append((source, saved))
    return states


def _read_rank_file(source: str, first: str, world_size: int) -> RunState:
    if not os.path.exists(source):
        raise ConfigError(WHERE, f"{source} is missing: the run that wrote {first} had {world_size} ranks, each "
                                 f"with its own state file")
    return read_state(source)


def earliest(states: List[Tuple[str, RunState]]) -> Tuple[str, RunState]:
    """The state that stands first: the steps every rank of the saving run has done."""
    return min(states, key=lambda item: (item[1].epoch, item[1].step))


def configuration_of(iterators: Dict, scheme: str, kept: Optional[Dict[str, Tuple]] = None) -> Tuple[str, Dict]:
    """A run's config fingerprint and ``{label: settings summary}`` of build_iterators()'s ``iterators``, as a
    state of ``scheme`` holds them (NOTE [ State versions ] in speechiter/state_versions.py); ``kept``:
    ``{label: (config, summary)}`` taken as they are (see :func:`saved_mixes`)."""
    policy = policy_of(iterators["train"]) if "train" in iterators else "shortest"
    configurations = {label: it.configuration(scheme) for label, it in flat_iterators(iterators)}
    return run_configuration({**configurations, **(kept or {})}, policy)


def saved_mixes(iterators: Dict, saved: RunState) -> Dict[str, Tuple]:
    """``{label: (config, summary)}`` of ``saved`` for each train mix that its own state checks, changes
    allowed or not (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py): the run's check leaves them
    out."""
    train = iterators.get("train")
    group = {None: train} if isinstance(train, Loadable) else train or {}
    kept = {}
    for name, iterator in group.items():
        state = saved.train.iterators.get(str(name))
        if getattr(iterator, "mixed", False) and isinstance(state, MixState):
            label = iterator_label("train", None, name)
            kept[label] = (state.config, (saved.settings or {}).get(label))
    return kept


def remove_temporaries(path: str) -> None:
    """Remove ``path.tmp<pid>`` files whose writer is gone (a kill during write_json_atomic)."""
    for name in glob.glob(f"{glob.escape(path)}.tmp*"):
        pid = name[len(path) + 4:]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                os.unlink(name)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class StateFiles:
    """A command line run's state files: ``save`` writes this rank's, ``resume`` reads the saving run's
    (see NOTE [ State files ])."""

    def __init__(self, iterators: Dict, seed: int, save_state: Optional[str], distributed: bool, rank: int = 0,
                 world_size: int = 1):
        self.iterators, self.seed, self.distributed = iterators, seed, distributed
        self.rank, self.world_size = rank, world_size
        self.save_state = save_state
        self.path = rank_path(save_state, rank) if save_state and distributed else save_state
        self.config, self.settings = configuration_of(iterators, CURRENT)

    def state(self, train: GroupState, scheme: str = CURRENT, kept: Optional[Dict[str, Tuple]] = None) -> RunState:
        """The run's state with the train group at ``train`` (``scheme``: as an older state holds it; ``kept``:
        see :func:`configuration_of`)."""
        if scheme != CURRENT or kept:
            config, settings = configuration_of(self.iterators, scheme, kept)
            world_size = self.world_size if scheme == CURRENT else None
            return RunState(self.seed, config, train, settings=settings, scheme=scheme, world_size=world_size)
        return RunState(self.seed, self.config, train, settings=self.settings, world_size=self.world_size)

    def resume(self, path: str, train, allow_changes: Iterable[str] = ()) -> Tuple[str, RunState]:
        """Put the train group (a GroupLoader) where the saving run stands; ``(file, state)`` it resumes from.
        ``allow_changes``: see GroupLoader.load_state."""
        states = saved_states(path, self.rank, self.distributed)
        for source, saved in states:
            current = self.state(train.state_at(saved.epoch, saved.step), saved.scheme,
                                 saved_mixes(self.iterators, saved))
            saved.check_fits(current, WHERE, source)
        source, saved = earliest(states)
        train.load_state(saved.train, f"{WHERE} {source}: train", allow_changes)
        if self.rank == 0:  # no rank writes before the barrier
            for name, _ in states:
                remove_temporaries(name)
        self._barrier()  # every rank has read the files before any writes
        return source, saved

    def save(self, train: GroupState, first: bool = False) -> None:
        """Write this rank's state; ``first``: before the first step, every rank's (NOTE [ First state
        files ]), then wait for every rank."""
        if not self.path:
            return
        state = self.state(train).to_dict()
        paths = [self.path] if not (first and self.distributed) else [] if self.rank else [
            rank_path(self.save_state, rank) for rank in reversed(range(self.world_size))]
        for path in paths:
            if first:
                remove_temporaries(path)
            write_json_atomic(path, state)
        if first:
            self._barrier()

    def _barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist
            dist.barrier()
