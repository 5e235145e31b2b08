"""BatchOptions: the options that decide an Iterator's batches, as one frozen value.

An Iterator (speechiter/iterator/abs.py) holds a :class:`BatchOptions`, what
its batches are, and a :class:`speechiter.engine.EngineSettings`, how they are
loaded. A resume may change the second, never the first (see
speechiter/state.py), so the options' fingerprint and the readable summary
that says what changed come from their declared fields.

# NOTE [ Options fingerprint ]
Every field of :class:`BatchOptions` counts in its fingerprint and summary
unless the field's ``fingerprint`` metadata says otherwise, so an option added
here is checked on resume with no other code:

- ``False``: the state saves and checks it under a key of its own (``seed``;
  ``name``, the state's ``iterator``);
- a predicate of the options: the field counts only where it is true. An
  option added later takes one that is false at its default, so that states
  saved before the option existed still fit (tests/state/test_state_fixtures.py
  resumes real states of every version).

The layout (``ngpu``, ``rank``, ``world_size``) does not count: a state saves
the layout of its epoch under ``layout``, and a resume may change it (see
speechiter/plan/layout.py). States of versions 1 to 3 hold fingerprints of
their own, which speechiter/state_versions.py computes from a fixed list of
fields, so no option added here changes them.

The fields' order is the summary's order (settings_summary turns what is past
its size limit into a digest); the values are the checked options, JSON-able.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np

from speechiter.checks import check_bool, check_int, check_optional_int
from speechiter.errors import ConfigError
from speechiter.seeding import stream_id
from speechiter.fingerprints import fingerprint, settings_summary

#: the largest seed: seed + epoch (epochs up to 2**31 - 1) must fit the 32-bit shuffle seed
MAX_SEED = 2 ** 31 - 1

Files = Union[str, List[str]]


Counts = Union[bool, Callable[["BatchOptions"], bool]]


def _option(default: Any, counts: Counts):
    """A field that counts in the fingerprint as ``counts`` says (see NOTE [ Options fingerprint ])."""
    return dataclasses.field(default=default, metadata={"fingerprint": counts})


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """What decides an Iterator's batches: its keyword arguments of the same
    names (see speechiter.iterator.abs.Iterator), checked. Invalid values
    raise a ConfigError naming the option."""

    type: str  # the Iterator class, "module.Class"
    dataset: str  # the Dataset class, "module.Class"
    dataset_conf: Optional[Dict[str, Any]] = None
    batches_per_epoch: Optional[int] = None
    data_len: Optional[Files] = None
    group_info: Optional[Dict[str, Files]] = None
    is_descending: Optional[bool] = True
    shuffle: bool = True
    ngpu: int = _option(1, False)
    rank: int = _option(0, False)
    world_size: int = _option(1, False)
    iter_conf: Dict[str, Any] = dataclasses.field(default_factory=dict)  # batches_generate_fn's options
    evaluation: bool = _option(False, lambda options: options.evaluation)
    seed: int = _option(0, False)
    name: str = _option("", False)  # names the iterator in reports and its random stream

    def __post_init__(self):
        def put(name: str, value: Any):  # a checked value, in place of the given one
            object.__setattr__(self, name, value)

        put("batches_per_epoch", check_optional_int(self.batches_per_epoch, "batches_per_epoch"))
        put("ngpu", check_int(self.ngpu, "ngpu"))
        put("seed", check_int(self.seed, "seed", minimum=0))
        if self.seed > MAX_SEED:  # seed + epoch seeds the 32-bit shuffle (see speechiter.seeding.permutation)
            raise ConfigError("seed", f"expected at most {MAX_SEED}, got {self.seed!r}")
        if self.is_descending is not None:
            if not isinstance(self.is_descending, (bool, np.bool_)):
                raise ConfigError("is_descending", f"expected true, false or null, got {self.is_descending!r}")
            put("is_descending", bool(self.is_descending))
        put("shuffle", check_bool(self.shuffle, "shuffle"))
        put("evaluation", check_bool(self.evaluation, "evaluation"))

    @property
    def stream(self) -> int:
        """The random stream of these batches (see speechiter.seeding.batch_seed): apart per iterator name,
        and per rank."""
        return stream_id(self.name) + self.rank

    @property
    def descending(self) -> bool:
        """Whether the view runs longest first (the rank share's order; unsorted counts as descending)."""
        return self.is_descending is not False

    def settings(self) -> Dict[str, Any]:
        """``{field: value}`` of the fields that count (see NOTE [ Options fingerprint ])."""
        settings = {}
        for field in dataclasses.fields(self):
            counts = field.metadata.get("fingerprint", True)
            if counts if not callable(counts) else counts(self):
                settings[field.name] = getattr(self, field.name)
        return settings

    def fingerprint(self) -> str:
        """A short digest of :meth:`settings`, saved in states and compared on resume."""
        return fingerprint(self.settings())

    def summary(self) -> Dict[str, Any]:
        """:meth:`settings`, readable: what a state says changed (see speechiter.fingerprints.settings_summary)."""
        return settings_summary(self.settings())


def qualified_name(cls: type) -> str:
    """``"speechiter.iterator.block.BlockIterator"``."""
    return f"{cls.__module__}.{cls.__qualname__}"
