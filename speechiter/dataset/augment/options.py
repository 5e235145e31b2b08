"""Option checks shared by the augmentation steps: a probability, a ``[low, high]`` range."""
from typing import Any, Tuple

from speechiter.checks import check_number
from speechiter.errors import ConfigError


def check_prob(value: Any, where: str) -> float:
    """A probability in [0, 1]."""
    value = float(check_number(value, where))
    if not 0.0 <= value <= 1.0:
        raise ConfigError(where, f"expected a probability in [0, 1], got {value!r}")
    return value


#: the largest SNR or gain, in dB, either way: float32 holds about 144 dB between a sample and its rounding
#: error, so past this the mix is the speech or the noise alone, and gains past it overflow float32 soon after
DB_LIMIT = 120.0


def check_range(value: Any, where: str, unit: str, limit: float = DB_LIMIT) -> Tuple[float, float]:
    """``[low, high]`` with low <= high (a single number is ``[x, x]``), both within ``[-limit, limit]``."""
    if not isinstance(value, (list, tuple)):
        value = [value, value]
    if len(value) != 2:
        raise ConfigError(where, f"expected [low, high] in {unit}, got {value!r}")
    low, high = (float(check_number(v, where)) for v in value)
    if low > high:
        raise ConfigError(where, f"the range is reversed: [{low:g}, {high:g}] {unit}; write [{high:g}, {low:g}]")
    if not -limit <= low <= high <= limit:
        raise ConfigError(where, f"expected values within [{-limit:g}, {limit:g}] {unit}, got [{low:g}, {high:g}]: "
                                 f"float32 audio cannot hold the result past that")
    return low, high


def fires(generator, prob: float) -> bool:
    """Whether a step with probability ``prob`` applies: always one draw, so that the draws after it do not
    depend on ``prob`` being 0 or 1."""
    return generator.random() < prob
