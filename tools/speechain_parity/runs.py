"""What both sides record, the same way: the groups of a run's mode, the epochs of a group, the seed
override, and the results file. Imported by speechain_batches.py (SpeeChain's venv) and
speechiter_batches.py (speechiter's Python), so it imports neither project.
"""
import json
import os
import warnings

EPOCHS = {"train": 3, "valid": 1, "test": 1}
GROUPS = {"train": ("train", "valid"), "test": ("test",)}  # a run's mode -> the groups it builds


def parity_seed(default=None):
    """$PARITY_SEED as an int (as the runner's --seed), else ``default`` (the exp_cfg's seed)."""
    return int(os.environ["PARITY_SEED"]) if "PARITY_SEED" in os.environ else default


def save(results, path, who):
    with open(path, "w") as f:
        json.dump(results, f)
    print(f"{who}: {len(results)} runs")


def main_quietly(main):
    """Run ``main`` with warnings off: both projects warn on these small synthetic corpora."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main()
