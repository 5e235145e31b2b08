"""Option checks: one family, one argument order ``check_x(value, where, ...)``.

Each returns the checked value (converted where noted) or raises a
ConfigError whose path is ``where`` (a YAML path such as
``data_cfg.train.conf.batch_len``, or an option name).
"""
import difflib
import math
from typing import Any, Iterable, Optional

import numpy as np

from speechiter.errors import ConfigError

_INTS = (int, np.integer)
_NUMBERS = (int, float, np.integer, np.floating)
_MAX_INT = 2 ** 63 - 1  # every integer option is a count or a size: int64 holds it


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest candidate, else ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_bool(value: Any, where: str) -> bool:
    """true or false, never a string such as "yes"."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(where, f"expected true or false, got {value!r}")
    return bool(value)


def check_number(value: Any, where: str, minimum: Optional[float] = None, above: Optional[float] = None) -> float:
    """A finite int or float (2.4e7 too): ``>= minimum`` and ``> above`` when given.

    Returns the value unchanged (an int stays an int).
    """
    if isinstance(value, bool) or not isinstance(value, _NUMBERS) or not is_finite(value):
        raise ConfigError(where, f"expected a number, got {value!r}"[:200])
    if above is not None and not value > above:
        kind = "a positive number" if above == 0 else f"a number above {above}"
        raise ConfigError(where, f"expected {kind}, got {value!r}")
    if minimum is not None and not value >= minimum:
        kind = "a non-negative number" if minimum == 0 else f"a number >= {minimum}"
        raise ConfigError(where, f"expected {kind}, got {value!r}")
    return value


def is_finite(value) -> bool:
    """math.isfinite; False for an int that no float can hold (10**400)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_positive_number(value: Any, where: str) -> float:
    return check_number(value, where, above=0)


def check_int(value: Any, where: str, minimum: int = 1) -> int:
    """A whole number ``>= minimum`` (1: positive, 0: non-negative) that int64 holds; 3.0 is accepted as 3."""
    if minimum == 1:
        kind = "a positive integer"
    elif minimum == 0:
        kind = "a non-negative integer"
    else:
        kind = f"an integer >= {minimum}"
    if (isinstance(value, bool) or not isinstance(value, _NUMBERS) or not is_finite(value)
            or not float(value).is_integer() or value < minimum or value > _MAX_INT):
        raise ConfigError(where, f"expected {kind}, got {value!r}"[:200])
    return int(value)


def check_optional_int(value: Any, where: str, minimum: int = 1) -> Optional[int]:
    return None if value is None else check_int(value, where, minimum)


def check_choice(value: Any, where: str, choices: Iterable[Any]) -> Any:
    """One of ``choices``; the message lists them and suggests the closest."""
    choices = list(choices)
    if value not in choices:
        shown = ", ".join(str(c) for c in choices)
        raise ConfigError(where, f"expected one of {shown}, got {value!r}"
                                 f"{did_you_mean(value, choices) if isinstance(value, str) else ''}")
    return value
