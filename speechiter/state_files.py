"""The command line's state files: ``--save_state`` writes them, ``--resume`` reads them back.

# NOTE [ State files ]
``--save_state FILE`` writes the run's state (speechiter.state.RunState) after
every train step, atomically (a temporary file, then os.replace), one file per
rank under ``--distributed`` (``FILE.rank<r>``). The ranks do not wait for
each other, so the files of one run may stand at different steps.

``--resume FILE`` under ``--distributed`` reads the files of the run that
saved them, whatever the number of ranks now: a version 4 state holds that
run's world size W, so every rank reads FILE.rank0 .. FILE.rank<W-1> (files
of higher ranks, left by an earlier and larger run, are not read), checks
that each fits this run, and continues from the earliest (epoch, step) among
them: a step counts as done only when every rank did it; the steps some ranks
did past it are loaded again. All ranks so start from the same step, on their
new layout (NOTE [ Elastic resume ] in speechiter/iterator/elastic.py). Then
they wait for each other (a barrier) before the first step, so that no rank
overwrites a file another is still reading. States of versions 1 to 3 resume
on the same ranks only: each rank reads its own file.
"""
import os
from typing import Any, Dict, List, Tuple

from speechiter.build import flat_iterators
from speechiter.dump import rank_path
from speechiter.errors import ConfigError
from speechiter.fingerprints import fingerprint
from speechiter.group import policy_of
from speechiter.state import ELASTIC_VERSION, RunState
from speechiter.user_files import read_json

WHERE = "--resume"


def read_state(path: str) -> RunState:
    """The run state in ``path``, checked (a ConfigError names the file or the bad key)."""
    return RunState.from_dict(read_json(path, WHERE), WHERE)


def saved_states(path: str, rank: int, distributed: bool) -> List[Tuple[str, RunState]]:
    """``[(file, state)]`` of the run that saved ``--resume path`` (see NOTE [ State files ])."""
    if not distributed:
        return [(path, read_state(path))]
    first = rank_path(path, 0)
    states = [(first, read_state(first))]
    world_size = states[0][1].world_size
    if states[0][1].version < ELASTIC_VERSION:
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
        if state.version < ELASTIC_VERSION or state.world_size != world_size:
            raise ConfigError(WHERE, f"{source} was written by a run of {state.world_size or 'unknown'} ranks, "
                                     f"{first} by a run of {world_size}: they are not one run's files")
        states.append((source, state))
    return states


def earliest(states: List[Tuple[str, RunState]]) -> Tuple[str, RunState]:
    """The state that stands first: the steps every rank of the saving run has done."""
    return min(states, key=lambda item: (item[1].epoch, item[1].step))



def run_configuration(iterators: Dict, legacy: bool) -> Tuple[str, Dict[str, Dict[str, Any]]]:
    """A run's config fingerprint and ``{label: settings summary}`` of build_iterators()'s ``iterators``
    (``legacy``: with the layout, as states of versions 1 to 3 hold them)."""
    flat = list(flat_iterators(iterators))
    configs = {label: it.plan.fingerprint(legacy) for label, it in flat}
    if "train" in iterators and policy_of(iterators["train"]) != "shortest":
        configs["train.steps"] = policy_of(iterators["train"])  # shortest keeps the saved fingerprints
    return fingerprint(configs), {label: it.plan.summary(legacy) for label, it in flat}
