"""speechiter's batches for every recipe run, from the unchanged recipe files.

    SPEECHAIN_ROOT=... python speechiter_batches.py recipes.json out.json    (the Python with speechiter)

speechiter.build_iterators(speechiter.load_config(recipe), num_workers=0, groups=[group]); the recipe is
given as its path under $SPEECHAIN_ROOT, as to SpeeChain's runner; seed and ngpu come from the exp_cfg.
Per iterator: "view" = it.batches, "epochs" = it.epoch_batches(e) for e = 1..3 (train) or 1 (valid, test).
Variants: "global" (no rank split) and, for train iterators with ngpu > 1, "rank<r>" built with
rank=r, world_size=ngpu (speechiter's distributed share). $PARITY_SEED overrides the seed (--seed).
"""
import json
import sys

import speechiter
from runs import EPOCHS, GROUPS, main_quietly, parity_seed, save


def flat(node, key):
    """("group/name", Iterator) pairs, named as SpeeChain's data_cfg nests them."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from flat(value, f"{key}/{name}")
    else:
        yield key, node


def record(it, n):
    return {"view": [list(b) for b in it.batches],
            "epochs": [[list(b) for b in it.epoch_batches(e)] for e in range(1, n + 1)]}


def build(cfg, group, **settings):
    seed = parity_seed()  # None: the exp_cfg's
    iterators = speechiter.build_iterators(cfg, seed=seed, num_workers=0, groups=[group], **settings)
    return dict(flat(iterators[group], group))


def main():
    recipes = json.load(open(sys.argv[1]))
    results = {}
    for r in recipes:
        cfg = speechiter.load_config(r["recipe"])
        ngpu = getattr(cfg, "settings", {}).get("ngpu", 1)
        for mode in r["modes"]:
            run = results[f"{r['recipe']}:{mode}"] = {"ngpu": ngpu, "iterators": {}}
            for group in GROUPS[mode]:
                try:
                    iterators = build(cfg, group)
                    ranks = [build(cfg, group, rank=k, world_size=ngpu) for k in range(ngpu)] \
                        if group == "train" and ngpu > 1 else []
                except Exception as e:
                    run["iterators"][group] = {"error": f"{type(e).__name__}: {e}"}
                    continue
                for key, it in iterators.items():
                    out = run["iterators"][key.rstrip("/")] = {"global": record(it, EPOCHS[group])}
                    for k, rank in enumerate(ranks):
                        out[f"rank{k}"] = record(rank[key], EPOCHS[group])
    save(results, sys.argv[2], "speechiter_batches")


if __name__ == "__main__":
    main_quietly(main)
