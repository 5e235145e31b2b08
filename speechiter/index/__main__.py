"""Write the plan cache of a recipe's iterators: parsed idx2 files, length sorts and views.

    python -m speechiter.index RECIPE [--cache_dir DIR] [--group train] [--set key=value ...]
                                      [--world_size N]

Builds every iterator of the recipe (or of the groups named) once, writing the cache entries its planning
makes, whatever the corpus size; later runs (and every rank) map them read-only. --world_size N writes
the views of N ranks with ngpu N instead (a rank's first run writes its own view otherwise). The cache
folder is --cache_dir, else $SPEECHITER_INDEX_DIR, else ~/.cache/speechiter/index (NOTE [ Plan cache ] in speechiter/index/__init__.py; the handbook's "Plan cache").
"""
from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from unittest import mock

from speechiter.importers.command import Parser, run_main


def _iterators(built):
    for group in built.values():
        if isinstance(group, dict):
            for inner in group.values():
                yield from (inner.values() if isinstance(inner, dict) else [inner])
        else:
            yield group


def _index(args) -> str:
    from speechiter import build_iterators, load_config
    from speechiter.errors import ConfigError, DataError
    from speechiter.index import store

    if args.world_size < 1:
        raise DataError(f"--world_size should be a positive integer, but got {args.world_size}")
    settings = {"SPEECHITER_INDEX_MIN_ROWS": "0", "SPEECHITER_INDEX": "1"}
    if args.cache_dir:
        settings["SPEECHITER_INDEX_DIR"] = args.cache_dir
    with mock.patch.dict(os.environ, settings), warnings.catch_warnings():  # restored after
        warnings.simplefilter("error", store.CacheWriteWarning)  # writing is this command's only job
        args.out_dir = store.cache_dir()
        before = _entries(args.out_dir)
        store.forget_warnings()
        try:
            config = load_config(args.recipe, args.set)
            for rank in range(args.world_size):
                ranks = ({"rank": rank, "world_size": args.world_size, "ngpu": args.world_size}
                         if args.world_size > 1 else {})
                built = build_iterators(config, num_workers=0, groups=args.group or None, engine="inline", **ranks)
                for iterator in _iterators(built):
                    iterator.close()
        except ConfigError as e:
            raise DataError(str(e)) from None
        except store.CacheWriteWarning as e:
            raise DataError(f"cannot write the plan cache in {e.folder} ({e.reason}); give --cache_dir a folder "
                            f"this user can create and write") from None
        after = _entries(args.out_dir)
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(Counter(n.rsplit(".", 1)[-1] for n in after).items()))
    new = len(after - before)
    return f"{len(after)} plan cache entries in {args.out_dir} ({kinds}): {new} written now, {len(after) - new} already there"


def _entries(folder: str) -> set:
    try:
        return {name for name in os.listdir(folder) if not name.endswith(".tmp")}
    except OSError:
        return set()


def main(argv=None) -> int:
    parser = Parser("speechiter.index", __doc__)
    parser.add_argument("recipe", help="the recipe (exp_cfg or data_cfg)")
    parser.add_argument("--cache_dir", help="the cache folder (default $SPEECHITER_INDEX_DIR or "
                                            "~/.cache/speechiter/index)")
    parser.add_argument("--group", action="append", default=[], choices=("train", "valid", "test"),
                        help="only this group (repeatable; default all)")
    parser.add_argument("--world_size", type=int, default=1, help="write the views of N ranks (ngpu N)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    return run_main(parser, _index, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
