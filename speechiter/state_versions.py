"""State versions, behind one door: a saved state of any supported version in, today's records out.

# NOTE [ State versions ]
Every version loads (the handbook's "Resuming"); tests/fixtures/states holds
real files of each, written by the command line of its time. They differ in
form and in how their fingerprints were made (a record's ``scheme``):

- version 1: no settings summaries; the run state is flat (``epoch``,
  ``step`` and ``iterators`` beside ``seed``), and each iterator's state holds
  the group's position, not its own;
- version 2: as 1, with settings summaries;
- versions 1 to 3 (scheme ``layout``): the configuration fingerprint counts
  the layout (``ngpu``, ``rank``, ``world_size``; ``evaluation`` only on
  several ranks), the view fingerprint is of this rank's view, as lists, and
  ``batches`` counts it; such a state resumes on the layout it was saved with;
- version 3 written by 9a54832 (scheme ``layout-free 3``: its summaries hold no
  ``ngpu``): today's configuration fingerprint, the view fingerprint of the
  base view, as lists, and ``batches`` of this rank's view;
- version 4 (scheme ``current``): the layout of the epoch apart (``layout``),
  the run's world size, the base view's fingerprint over its id arrays; it
  resumes on any layout (NOTE [ Elastic resume ] in speechiter/plan/layout.py);
- version 5 (scheme ``current``): as 4; a mix's state may also hold where its
  schedule started (``schedule_start``), after a resume under a changed mix
  (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py).

A mix's state (``sources``: its corpora's states) is a MixState in every
version that has one (3 to 5); its fingerprints are made of its corpora's in
the same scheme. Old schemes count a fixed list of options
(:data:`LAYOUT_OPTIONS`), so an option added to BatchOptions never changes
them. Only today's form is ever written.
"""
from fractions import Fraction
from typing import Any, Dict, Optional, Tuple

from speechiter.errors import ConfigError
from speechiter.fingerprints import batches_fingerprint, fingerprint, settings_summary, view_fingerprint
from speechiter.plan.layout import Layout
from speechiter.plan.options import BatchOptions
from speechiter.plan.schedule import ScheduleStart
from speechiter.state import GroupState, LoaderState, MixState, RunState
from speechiter.state_keys import (CURRENT, ELASTIC_VERSION, FLAT_RUN_KEYS, GROUP_KEYS, KEY_BATCHES, KEY_CONFIG,
                                   KEY_EPOCH, KEY_GROUP, KEY_ITERATORS, KEY_LAYOUT, KEY_MODE, KEY_NAME, KEY_POLICY,
                                   KEY_SCHEDULE_START, KEY_SEED, KEY_SETTINGS, KEY_SOURCES, KEY_STEP, KEY_VERSION,
                                   KEY_VIEW, KEY_WORLD_SIZE, LOADER_KEYS, MIX_CHANGES_VERSION, RUN_KEYS, check_keys,
                                   check_settings)

LAYOUT, LAYOUT_FREE_3 = "layout", "layout-free 3"  # the schemes of older states (see NOTE [ State versions ])
#: the options that versions 1 to 3 fingerprint, in their order (``evaluation`` only on several ranks)
LAYOUT_OPTIONS = ("type", "dataset", "dataset_conf", "batches_per_epoch", "data_len", "group_info", "is_descending",
                  "shuffle", "ngpu", "rank", "world_size", "iter_conf")
Fingerprints = Tuple[str, Optional[Dict[str, Any]]]  # (config, settings summary)


# --- fingerprints of a scheme ------------------------------------------------------------------------

def configuration(options: BatchOptions, scheme: str) -> Fingerprints:
    """The configuration fingerprint and summary of ``options`` as a state of ``scheme`` holds them."""
    if scheme != LAYOUT:
        return options.fingerprint(), options.summary()
    settings = {name: getattr(options, name) for name in LAYOUT_OPTIONS}
    if options.evaluation and options.world_size > 1:
        settings["evaluation"] = True
    return fingerprint(settings), settings_summary(settings)


def view_digest(view, base, scheme: str) -> Tuple[str, int]:
    """``(view fingerprint, batches)`` of an iterator with this rank's ``view`` and the ``base`` view."""
    if scheme == CURRENT:
        return batches_fingerprint(base.ids, base.bounds), len(base)
    return view_fingerprint(view if scheme == LAYOUT else base), len(view)


def mix_configuration(settings: Dict[str, Any], corpora: Dict[str, Fingerprints]) -> Fingerprints:
    """A mix's fingerprint and summary: its ``settings`` with its corpora's (any scheme: the same rule)."""
    summaries = {name: summary or config for name, (config, summary) in corpora.items()}
    return (fingerprint({**settings, "iterators": {name: config for name, (config, _) in corpora.items()}}),
            settings_summary({**settings, "iterators": summaries}))


def mix_view_digest(corpora: Dict[str, Tuple[str, int]]) -> Tuple[str, int]:
    """A mix's view fingerprint and batches: of its corpora's."""
    return fingerprint({name: view for name, (view, _) in corpora.items()}), sum(n for _, n in corpora.values())


def run_configuration(configurations: Dict[str, Fingerprints], policy: str) -> Fingerprints:
    """A run's fingerprint and ``{label: summary}`` from each iterator's (``{label: (config, summary)}``) and
    the train group's steps policy (``shortest`` keeps the fingerprints of runs saved before there was one)."""
    configs = {label: config for label, (config, _) in configurations.items()}
    if policy != "shortest":
        configs["train.steps"] = policy
    return fingerprint(configs), {label: summary for label, (_, summary) in configurations.items()}


# --- saved dicts to records ---------------------------------------------------------------------------

def _scheme(fields: Dict[str, Any]) -> str:
    if fields[KEY_VERSION] >= ELASTIC_VERSION:
        return CURRENT
    settings = fields.get(KEY_SETTINGS)
    layout_free = fields[KEY_VERSION] == 3 and isinstance(settings, dict) and "ngpu" not in settings
    return LAYOUT_FREE_3 if layout_free and KEY_SOURCES not in fields else LAYOUT


def _schedule(settings: Optional[Dict[str, Any]], names) -> Optional[Dict[str, Any]]:
    """A mix's schedule, read from its settings summary (None where the summary does not hold it)."""
    keys = ["schedule", "batches_per_epoch"] + [f"weights.{name}" for name in names]
    if not isinstance(settings, dict) or any(key not in settings for key in keys):
        return None
    return {"version": settings["schedule"], "batches_per_epoch": settings["batches_per_epoch"],
            "weights": {name: str(Fraction(settings[f"weights.{name}"])) for name in names}}


def read_loader_state(data: Any, where: str = "state"):
    """A saved loader state (a mix's: a MixState), checked: a ConfigError names the bad key."""
    fields = check_keys(data, LOADER_KEYS, where, "a loader state", optional=(KEY_SETTINGS, KEY_SOURCES),
                        elastic=(KEY_LAYOUT,), newer={MIX_CHANGES_VERSION: (KEY_SCHEDULE_START,)})
    settings = check_settings(fields.get(KEY_SETTINGS), f"{where}.{KEY_SETTINGS}")
    layout = Layout.from_dict(fields[KEY_LAYOUT], f"{where}.{KEY_LAYOUT}") if KEY_LAYOUT in fields else None
    common = dict(iterator=fields[KEY_NAME], epoch=fields[KEY_EPOCH], step=fields[KEY_STEP], seed=fields[KEY_SEED],
                  config=fields[KEY_CONFIG], view=fields[KEY_VIEW], batches=fields[KEY_BATCHES], settings=settings,
                  layout=layout)
    if fields.get(KEY_SOURCES) is None:
        if fields.get(KEY_SCHEDULE_START) is not None:
            raise ConfigError(f"{where}.{KEY_SCHEDULE_START}", "only a mix's state (with sources) has one")
        return LoaderState(**common, scheme=_scheme(fields))
    corpora = fields[KEY_SOURCES]
    if not isinstance(corpora, dict):
        raise ConfigError(f"{where}.{KEY_SOURCES}", f"expected a mapping of iterator states, got "
                                                   f"{type(corpora).__name__}")
    corpora = {str(name): read_loader_state(state, f"{where}.{KEY_SOURCES}.{name}") for name, state in corpora.items()}
    schemes = {state.scheme for state in corpora.values()} or {_scheme(fields)}
    start = _schedule_start(fields, list(corpora), f"{where}.{KEY_SCHEDULE_START}")
    return MixState(**common, corpora=corpora, schedule=_schedule(settings, list(corpora)), scheme=schemes.pop(),
                    start=start)


def _schedule_start(fields: Dict[str, Any], names, where: str) -> Optional[ScheduleStart]:
    """A mix state's schedule start, checked against its corpora and position (None where it has none)."""
    if fields.get(KEY_SCHEDULE_START) is None:
        return None
    start = ScheduleStart.from_dict(fields[KEY_SCHEDULE_START], where)
    if sorted(start.counts) != sorted(names):
        raise ConfigError(f"{where}.counts", f"counts corpora {sorted(start.counts)}, the state's sources are "
                                             f"{sorted(names)}")
    if (start.epoch, start.step) > (fields[KEY_EPOCH], fields[KEY_STEP]):
        raise ConfigError(where, f"the schedule starts at {start}, after the state's epoch {fields[KEY_EPOCH]} "
                                 f"step {fields[KEY_STEP]}")
    return start


def _loader_states(value: Any, where: str) -> Dict[str, Any]:
    """``{name: state}`` from a saved ``iterators`` mapping."""
    if not isinstance(value, dict):
        raise ConfigError(where, f"expected a mapping of iterator states, got {type(value).__name__}")
    return {str(name): read_loader_state(state, f"{where}.{name}") for name, state in value.items()}


def read_group_state(data: Any, where: str = "state") -> GroupState:
    """A saved group state, checked (before version 3, every iterator's state holds the group's position)."""
    fields = check_keys(data, GROUP_KEYS, where, "a group state", optional=())
    iterators = _loader_states(fields[KEY_ITERATORS], f"{where}.{KEY_ITERATORS}")
    return GroupState(fields[KEY_EPOCH], fields[KEY_STEP], fields[KEY_POLICY], iterators,
                      own_positions=fields[KEY_VERSION] >= 3)


def read_run_state(data: Any, where: str = "state") -> RunState:
    """A saved run state of any supported version, checked (a ConfigError names the bad key)."""
    flat = isinstance(data, dict) and type(data.get(KEY_VERSION)) is int and data[KEY_VERSION] in (1, 2)
    fields = check_keys(data, FLAT_RUN_KEYS if flat else RUN_KEYS, where, "a run state", elastic=(KEY_WORLD_SIZE,))
    if flat:  # versions 1 and 2: the train group's fields beside the run's, its position in every iterator's
        iterators = _loader_states(fields[KEY_ITERATORS], f"{where}.{KEY_ITERATORS}")
        train = GroupState(fields[KEY_EPOCH], fields[KEY_STEP], None, iterators, own_positions=False)
    else:
        train = read_group_state(fields[KEY_GROUP], f"{where}.{KEY_GROUP}")
    settings = check_settings(fields.get(KEY_SETTINGS), f"{where}.{KEY_SETTINGS}", nested=True)
    schemes = {state.scheme for state in train.iterators.values()} or {CURRENT}
    scheme = schemes.pop() if fields[KEY_VERSION] >= 3 else LAYOUT
    return RunState(fields[KEY_SEED], fields[KEY_CONFIG], train, mode=fields[KEY_MODE], settings=settings,
                    world_size=fields.get(KEY_WORLD_SIZE), scheme=scheme, version=fields[KEY_VERSION])
