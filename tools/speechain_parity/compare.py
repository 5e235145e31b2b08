"""Compare speechiter's batches with SpeeChain's, run by run, and classify every difference.

    python compare.py speechain.json speechiter.json [details.json]

A unit is one iterator's variant of a run: its view and its epochs' batch lists (ids, order, epoch after
epoch). Each unit is
  identical   speechiter == SpeeChain's own output,
  fix 2       != SpeeChain, == SpeeChain's own classes with fix 2 applied (its [] batches removed),
  fix 3       a rank's share: != SpeeChain's DDP process, == SpeeChain's classes with fixes 2 and 3
              applied (same seed on every rank; an empty share takes the batch's last utterance),
  REAL        anything else (or an error on either side).
A run is identical when all its units are, "fix N" when its units differ only by fixes, else REAL.
Exit status 0 when no run is REAL.
"""
import json
import sys


def first_difference(a, b):
    if a.get("error") or b.get("error"):
        return f"error: SpeeChain {a.get('error')!r}, speechiter {b.get('error')!r}"
    if a["view"] != b["view"]:
        return f"view: SpeeChain {a['view']} speechiter {b['view']}"
    for e, (x, y) in enumerate(zip(a["epochs"], b["epochs"]), 1):
        if x != y:
            return f"epoch {e}: SpeeChain {x} speechiter {y}"
    return None if len(a["epochs"]) == len(b["epochs"]) else "number of epochs"


def classify(sc, si, variant):
    """(class, detail) of one unit."""
    if first_difference(sc[variant], si[variant]) is None:
        return "identical", None
    fixed = sc.get(variant + ("_fix2" if variant == "global" else "_fix"))
    if fixed is not None and first_difference(fixed, si[variant]) is None:
        return ("fix 2" if variant == "global" else "fix 3"), None
    return "REAL", first_difference(sc[variant], si[variant])


def main():
    speechain, speechiter = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    runs, details = {}, {}
    for run in speechain:
        sc_its, si_its = speechain[run]["iterators"], speechiter.get(run, {}).get("iterators", {})
        classes = set()
        for key, sc in sc_its.items():
            si = si_its.get(key) or si_its.get(key.split("/")[0]) or {"error": "iterator missing"}
            if "error" in sc or "error" in si:
                classes.add("REAL")
                details[f"{run} {key}"] = first_difference(sc, si)
                continue
            for variant in (v for v in sc if not v.endswith("fix") and not v.endswith("fix2")):
                if variant not in si:
                    cls, detail = "REAL", f"speechiter has no {variant}"
                else:
                    cls, detail = classify(sc, si, variant)
                classes.add(cls)
                if cls != "identical":
                    details[f"{run} {key} {variant}"] = detail or cls
        runs[run] = "REAL" if "REAL" in classes else " + ".join(sorted(classes - {"identical"})) or "identical"
    files = {run.rsplit(":", 1)[0] for run in runs}
    counts = {}
    for cls in runs.values():
        counts[cls] = counts.get(cls, 0) + 1
    print(f"recipe files: {len(files)}   runs: {len(runs)}")
    for cls, n in sorted(counts.items()):
        print(f"  {cls:12s} {n}")
    for run, cls in runs.items():
        if cls != "identical":
            print(f"{cls:12s} {run}")
    for unit, detail in details.items():
        if detail not in ("fix 2", "fix 3"):
            print(f"REAL {unit}: {str(detail)[:2000]}")
    if len(sys.argv) > 3:
        json.dump({"runs": runs, "units": details}, open(sys.argv[3], "w"), indent=1)
    sys.exit(1 if "REAL" in counts else 0)


if __name__ == "__main__":
    main()
