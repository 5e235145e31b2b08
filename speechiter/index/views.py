"""A rank's batching view in the plan cache: what batches_generate_fn and the rank share made of a cached sort.

Only for a hook marked :func:`speechiter.plan.view.cacheable` (a pure function of its inputs: the sorted ids
and lengths, the options, ngpu; the built-in hooks but bucketing's, which keeps state for its epochs); any
other hook runs every time. The key is the sort's digest, the hook, the code that makes the view (the size
and mtime of the modules the caller names, so an edited speechiter rebuilds), the options, and the rank and
world size: each rank of a job writes and maps its own share.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
from typing import Callable, Iterable, Optional, Tuple

import numpy as np

from speechiter.index import store
from speechiter.plan.options import BatchOptions
from speechiter.plan.view import BatchView

__all__ = ["planned_view"]

Views = Tuple[BatchView, BatchView]  # (this rank's view, the base view)


def _code_key(modules: Iterable[str]):
    stats = []
    for name in sorted(modules):
        module = importlib.import_module(name)
        stat = os.stat(module.__file__)
        stats.append([name, stat.st_size, stat.st_mtime_ns])
    return stats


def _key(options: BatchOptions, sorted_ids, hook: Optional[str], code: Iterable[str]) -> Optional[dict]:
    from speechiter import __version__

    digest = getattr(sorted_ids, "digest", None)
    if (digest is None or hook is None
            or (options.world_size > 1 and options.ngpu != options.world_size)):  # keep share_view's warning
        return None
    try:
        iter_conf = json.dumps(options.iter_conf, sort_keys=True)
        code = _code_key(code)
    except (TypeError, ValueError, OSError, AttributeError):
        return None
    return {"entry": 2, "sort": digest, "hook": hook, "version": __version__, "code": code,
            "iter_conf": iter_conf, "ngpu": options.ngpu, "rank": options.rank, "world_size": options.world_size,
            "descending": options.descending, "evaluation": bool(options.evaluation)}


def planned_view(options: BatchOptions, sorted_ids, make: Callable[[], Views], hook: Optional[str] = None,
                 code: Iterable[str] = ()) -> Views:
    """``(this rank's view, the base view)``: ``make()``, or mapped from the cache when they are there (See
    NOTE [ Plan cache ] in speechiter/index/__init__.py). ``hook``: the qualified name of a cacheable
    batches_generate_fn (None: never cached); ``code``: the modules whose code makes the views."""
    key = _key(options, sorted_ids, hook, code) if store.enabled() else None
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
