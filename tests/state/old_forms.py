"""States as older versions saved them, made for a given configuration with the fingerprints
speechiter/state_versions.py reads them by (real files of every version: tests/fixtures/states)."""
import copy

from speechiter.state_files import configuration_of
from speechiter.state_versions import LAYOUT


def loader_state(iterator, epoch: int, step: int, version: int) -> dict:
    """``iterator``'s state at (epoch, step) as version ``version`` (1 to 4) saved it."""
    state = iterator.state_at(epoch, step).to_dict()
    if version < 4:
        config, settings = iterator.configuration(LAYOUT)
        view, batches = iterator.view_digest(LAYOUT)
        del state["layout"]
        state.update(version=version, config=config, settings=settings, view=view, batches=batches)
        if version == 1:
            del state["settings"]
    return state


def run_state(saved: dict, iterators, version: int = 3) -> dict:
    """A version 4 run state of a one-iterator train group (``saved``) as version 3 saved it."""
    state = copy.deepcopy(saved)
    del state["world_size"]
    state["config"], state["settings"] = configuration_of(iterators, LAYOUT)
    train = state["train"]
    train["iterators"]["None"] = loader_state(iterators["train"], train["epoch"], train["step"], version)
    state["version"] = train["version"] = version
    return state
