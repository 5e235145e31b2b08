"""The errors of a Dataset's options that checking them before the call could not catch."""
import re
from typing import Optional

from speechiter.checks import did_you_mean
from speechiter.errors import ConfigError
from speechiter.registry import signature_names

_BINDING = re.compile(r"dataset_init_fn\(\) (?:got an unexpected keyword argument '(?P<unknown>[^']+)'|"
                      r"missing \d+ required (?:keyword-only |positional )?arguments?: '(?P<missing>[^']+)')")


def option_error(cls: type, error: TypeError) -> Optional[ConfigError]:
    """The ConfigError for a dataset_init_fn that refused its options, where checking them before the call
    could not (a subclass's ``**kwargs`` passed on to its parent's); None for any other TypeError."""
    match = _BINDING.search(str(error))
    if match is None:
        return None
    if match["missing"]:
        return ConfigError(match["missing"], f"missing required option of {cls.__qualname__}")
    accepted = sorted({name for klass in cls.__mro__ if "dataset_init_fn" in vars(klass)
                       for name in signature_names(vars(klass)["dataset_init_fn"])[0]})
    return ConfigError(match["unknown"], f"unknown option of {cls.__qualname__}{did_you_mean(match['unknown'], accepted)}"
                                         f" accepted: {', '.join(accepted) or 'none'}")
