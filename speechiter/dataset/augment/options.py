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


def check_range(value: Any, where: str, unit: str) -> Tuple[float, float]:
    """``[low, high]`` with low <= high (a single number is ``[x, x]``)."""
    if not isinstance(value, (list, tuple)):
        value = [value, value]
    if len(value) != 2:
        raise ConfigError(where, f"expected [low, high] in {unit}, got {value!r}")
    low, high = (float(check_number(v, where)) for v in value)
    if low > high:
        raise ConfigError(where, f"the range is reversed: [{low:g}, {high:g}] {unit}; write [{high:g}, {low:g}]")
    return low, high


def fires(generator, prob: float) -> bool:
    """Whether a step with probability ``prob`` applies: always one draw, so that the draws after it do not
    depend on ``prob`` being 0 or 1."""
    return generator.random() < prob
