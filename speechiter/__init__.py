"""speechiter: YAML-configured, reproducible, fast data iterators for speech.

    data_cfg = speechiter.load_config("recipes/demo/asr.yaml")
    iterators = speechiter.build_iterators(data_cfg, seed=0, num_workers=2)
    for batch in iterators["train"].build_loader(epoch=1):
        ...
"""
from speechiter.seeding import rng

__version__ = "0.1.0"

__all__ = ["load_config", "build_iterators", "Batch", "GroupLoader", "build_group_loader", "rng", "__version__"]


def __getattr__(name):
    # Imported on first use, so `import speechiter` stays light.
    if name == "load_config":
        from speechiter.config import load_config
        return load_config
    if name == "build_iterators":
        from speechiter.build import build_iterators
        return build_iterators
    if name == "Batch":
        from speechiter.batch import Batch
        return Batch
    if name in ("GroupLoader", "build_group_loader"):
        from speechiter import group
        return getattr(group, name)
    raise AttributeError(f"module 'speechiter' has no attribute {name!r}")
