"""speechiter: YAML-configured, reproducible, fast data iterators for speech."""
from speechiter.seeding import rng

__version__ = "0.1.0"

__all__ = ["rng", "__version__"]
