"""A rank's batching view in the plan cache: what batches_generate_fn and the rank share made of a cached sort.

Only for the built-in hooks that are pure functions of their inputs (:data:`PURE_HOOKS`: the sorted ids and
lengths, the options, ngpu); a subclass's own hook, and bucketing (whose hook keeps state for its epochs),
run every time. The key is the sort's digest, the hook, the code that makes the view (the size and mtime of
its modules, so an edited speechiter rebuilds), the options, and the rank and world size: each rank of a job
writes and maps its own share.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
from typing import Optional

import numpy as np

from speechiter.index import store

__all__ = ["PURE_HOOKS", "planned_view"]

#: batches_generate_fn's whose view depends only on their inputs (qualified names)
PURE_HOOKS = ("speechiter.iterator.abs.Iterator.batches_generate_fn",
              "speechiter.iterator.block.BlockIterator.batches_generate_fn",
              "speechiter.iterator.piece.PieceIterator.batches_generate_fn")
_CODE = ("speechiter.iterator.abs", "speechiter.iterator.block", "speechiter.iterator.piece",
         "speechiter.iterator.view", "speechiter.iterator.distributed")


def _hook_name(iterator) -> str:
    fn = type(iterator).batches_generate_fn
    return f"{fn.__module__}.{fn.__qualname__}"


def _code_key():
    stats = []
    for name in _CODE:
        module = importlib.import_module(name)
        stat = os.stat(module.__file__)
        stats.append([name, stat.st_size, stat.st_mtime_ns])
    return stats


def _key(iterator, sorted_ids) -> Optional[dict]:
    from speechiter import __version__
    from speechiter.iterator.abs import Iterator

    digest = getattr(sorted_ids, "digest", None)
    plan = iterator.plan
    if (digest is None or _hook_name(iterator) not in PURE_HOOKS
            or any(getattr(type(iterator), name) is not getattr(Iterator, name)
                   for name in ("_generate_view", "_distribute"))
            or (plan.world_size > 1 and plan.ngpu != plan.world_size)):  # keep share_view's warning
        return None
    try:
        options = json.dumps(plan.iter_conf, sort_keys=True)
        code = _code_key()
    except (TypeError, ValueError, OSError, AttributeError):
        return None
    return {"entry": 2, "sort": digest, "hook": _hook_name(iterator), "version": __version__, "code": code,
            "iter_conf": options, "ngpu": plan.ngpu, "rank": plan.rank, "world_size": plan.world_size,
            "descending": plan.is_descending is not False, "evaluation": bool(plan.evaluation)}


def planned_view(iterator, sorted_ids, iter_conf: dict):
    """``(this rank's view, the base view)``: ``iterator._generate_view(sorted_ids, iter_conf)`` and its
    ``iterator._distribute``, mapped from the cache when they are there (See NOTE [ Plan cache ] in
    speechiter/index/__init__.py)."""
    from speechiter.iterator.view import BatchView

    def make():
        base = iterator._generate_view(sorted_ids, iter_conf)
        return iterator._distribute(base), base

    key = _key(iterator, sorted_ids) if store.enabled() else None
    if key is None:
        return make()
    path = store.entry_path("view", hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest())
    entry = store.open_entry(path, key)
    if entry is None:
        view, base = make()
        arrays = _arrays(view, sorted_ids, "")
        if base is not view:
            arrays.update(_arrays(base, sorted_ids, "base_"))
        if not store.write_entry(path, key, arrays):
            return view, base
        entry = store.open_entry(path, key)
        if entry is None:  # pragma: no cover - removed between the write and the read
            return view, base
    arrays = entry[1]

    def view_of(prefix: str) -> BatchView:
        return BatchView(arrays.get(prefix + "ids", sorted_ids.array), arrays[prefix + "bounds"],
                         arrays.get(prefix + "padding"))

    view = view_of("")
    return view, (view_of("base_") if "base_bounds" in arrays else view)


def _arrays(view, sorted_ids, prefix: str) -> dict:
    """A view's arrays to store under ``prefix``: its ids only where they are not the sorted ids."""
    arrays = {prefix + "bounds": view.bounds}
    if not (len(view.ids) == len(sorted_ids.array) and np.array_equal(view.ids, sorted_ids.array)):
        arrays[prefix + "ids"] = view.ids
    if view.padding is not None:
        arrays[prefix + "padding"] = view.padding
    return arrays
