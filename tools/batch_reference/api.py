"""The Python API part of tools/batch_reference: loader and group states at a few steps, and what loading
them gives, on 1 rank and across 2 -> 1 and 3 ranks (mid-epoch elastic resumes).

    python tools/batch_reference/api.py RECIPE OUT_JSON
"""
import json, sys
import speechiter
from speechiter.build import close_all

path, out = sys.argv[1:3]
records = {}


def ids_of(step):
    return {str(k): (v.ids if hasattr(v, "ids") else None) for k, v in step.items()}


def train_states(rank=0, world_size=1):
    its = speechiter.build_iterators(speechiter.load_config(path), num_workers=0, engine="inline", out_type="null",
                                     groups=("train",), rank=rank, world_size=world_size)
    return its


def api(rank, world_size, stop, tag):
    its = train_states(rank, world_size)
    try:
        loader = speechiter.GroupLoader(its["train"], epoch=2)
        seen = []
        for step in loader:
            seen.append(ids_of(step))
            if loader.step == stop:
                break
        records[f"{tag}.state"] = loader.state_dict()
        records[f"{tag}.seen"] = seen
        if hasattr(its["train"], "build_loader"):
            one = its["train"].build_loader(2, 1)
            for i, batch in enumerate(one):
                if i == stop - 2:
                    break
            records[f"{tag}.loader_state"] = one.state_dict()
    finally:
        close_all(its)


def resume(rank, world_size, state, tag):
    its = train_states(rank, world_size)
    try:
        loader = speechiter.GroupLoader(its["train"])
        try:
            loader.load_state_dict(state)
        except Exception as e:
            records[f"{tag}.error"] = f"{type(e).__name__}: {e}"
            return
        records[f"{tag}.rest"] = [ids_of(step) for step in loader]
        records[f"{tag}.after"] = loader.state_dict()
    finally:
        close_all(its)


api(0, 1, 3, "w1")
resume(0, 1, records["w1.state"], "w1.resume")
for r in range(2):
    api(r, 2, 2, f"w2r{r}")
for ranks in (1, 3):
    for r in range(ranks):
        resume(r, ranks, records["w2r0.state"], f"w2to{ranks}r{r}")
json.dump(records, open(out, "w"), indent=1, sort_keys=True, default=str)
