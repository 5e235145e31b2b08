"""SpeeChain's own batches for every recipe run, with SpeeChain's own classes.

    SPEECHAIN_ROOT=... python speechain_batches.py SPEECHAIN_SRC recipes.json out.json   (in the SpeeChain venv)

As runner.py does: set_random_seeds(seed), iterator_class(seed, ngpu, num_workers, pin_memory, distributed,
**conf) per iterator of the mode's groups (train: train + valid; test: test), then build_loader(1),
build_loader(2), ... on that one object; the epoch's batches are the DataLoader's batch_sampler.
Epochs 1..3 for train iterators, epoch 1 for valid and test ones. ngpu and seed come from the exp_cfg
(SpeeChain's defaults 1 and 0 otherwise); $PARITY_SEED overrides the seed as the runner's --seed would.

Variants per iterator ("view" = it.batches after construction, "epochs" = the batch lists):
  global         distributed=False: the ngpu rule, no rank split
  global_fix2    the same, with SpeeChain's empty [] batches taken out of the view before epoch 1
  rank<r>        train iterators with ngpu > 1: the runner's DDP process r (torch.distributed faked:
                 world size ngpu, rank r; seed + r as main_worker sets it unless same_proc_seed)
  rank<r>_fix    the rank's share with fixes 2 and 3 applied to SpeeChain's view: [] batches out,
                 share = batch[start::world] or [batch[-1]] when empty, seed not offset by rank
"""
import copy
import json
import os
import sys

import numpy
import torch.distributed

numpy.in1d = numpy.isin  # numpy 2.4 removed in1d, which SpeeChain's data_selection calls
sys.path.insert(0, sys.argv[1])
from speechain.runner import Runner  # noqa: E402
from speechain.utilbox.import_util import import_class  # noqa: E402
from scan_recipes import data_cfg_of, leaves  # noqa: E402
from runs import EPOCHS, GROUPS, main_quietly, parity_seed, save  # noqa: E402


def build(it_cfg, seed, ngpu, distributed=False):
    cls = import_class("speechain.iterator." + it_cfg["type"])
    return cls(seed=seed, ngpu=ngpu, num_workers=0, pin_memory=False, distributed=distributed,
               **copy.deepcopy(it_cfg["conf"]))


def epochs(it, n):
    out = []
    for epoch in range(1, n + 1):
        out.append([list(b) for b in it.build_loader(epoch).batch_sampler])
    return out


def record(it, n, view=None):
    if view is not None:
        it.batches = view
    result = {"view": [list(b) for b in it.batches]}
    result["epochs"] = epochs(it, n)
    return result


def fake_rank(rank, world):
    torch.distributed.get_world_size = lambda *a, **k: world
    torch.distributed.get_rank = lambda *a, **k: rank


def one_iterator(it_cfg, group, seed, ngpu, same_proc_seed):
    n = EPOCHS[group]
    out = {"global": record(build(it_cfg, seed, ngpu), n)}
    view = out["global"]["view"]
    if [] in view:
        out["global_fix2"] = record(build(it_cfg, seed, ngpu), n, [b for b in view if b])
    if ngpu > 1 and group == "train":
        descending = it_cfg["conf"].get("is_descending", True) is not False
        for rank in range(ngpu):
            fake_rank(rank, ngpu)
            Runner.set_random_seeds(seed + rank)
            rank_seed = seed if same_proc_seed else seed + rank
            out[f"rank{rank}"] = record(build(it_cfg, rank_seed, ngpu, distributed=True), n)
            start = ngpu - rank - 1 if descending else rank
            shares = [b[start::ngpu] or [b[-1]] for b in view if b]
            out[f"rank{rank}_fix"] = record(build(it_cfg, seed, ngpu), n, shares)
    return out


def main():
    recipes = json.load(open(sys.argv[2]))
    results = {}
    for r in recipes:
        data_cfg, exp = data_cfg_of(os.path.join(os.environ["SPEECHAIN_ROOT"], r["recipe"]))
        seed, ngpu = parity_seed(exp.get("seed", 0)), exp.get("ngpu", 1)
        for mode in r["modes"]:
            Runner.set_random_seeds(seed)  # main_worker, before build_iterators
            run = results[f"{r['recipe']}:{mode}"] = {"seed": seed, "ngpu": ngpu, "iterators": {}}
            for group in GROUPS[mode]:
                for name, it_cfg in leaves(data_cfg[group]):
                    key = "/".join((group,) + name)
                    try:
                        run["iterators"][key] = one_iterator(it_cfg, group, seed, ngpu,
                                                             exp.get("same_proc_seed", False))
                    except Exception as e:  # recorded, compared as a failure
                        run["iterators"][key] = {"error": f"{type(e).__name__}: {e}"}
    save(results, sys.argv[3], "speechain_batches")


if __name__ == "__main__":
    main_quietly(main)
