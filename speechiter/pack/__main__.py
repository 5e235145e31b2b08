"""Pack an iterator's audio into shards in its plan order, with idx2 files pointing at them.

    python -m speechiter.pack --data_cfg RECIPE --group train [--iterator NAME] --out DIR_OR_URL
                              [--shard_size 256M] [--idx2_out DIR] [--set key=value ...]
    python -m speechiter.pack --reseal DIR_OR_URL

Point the recipe's main_data, data_len and group_info at the idx2 files in
--out (or --idx2_out) and it gives the same batches, read with one request per
block batch (see NOTE [ Pack layout ] in speechiter/pack/writer.py). --reseal
records the current size and mtime / ETag of a pack's shards in its
shards.json, after a deliberate copy.

A mix (mix.MixIterator) is packed one corpus at a time: --iterator names the
corpus (each corpus's recipe then points at its own pack).

A BucketIterator is packed in the order of its first epoch's batches
(utterances of similar length together); later epochs draw other batches
from the same buckets, so their ranges are near each other but not one
range: expect a few requests per batch (the handbook's "Packs and shards").
"""
from __future__ import annotations

import json
import re
import sys

from speechiter.importers.command import Parser, run_main

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``"256M"`` -> 268435456; K, M, G, T (powers of 1024), an optional B / iB; 1 byte to 1 PiB."""
    match = _SIZE_RE.match(str(text))
    size = float(match.group(1)) * _UNITS[match.group(2).upper()] if match else 0.0
    if not 1 <= size <= _UNITS["T"] << 10:
        raise ValueError(f"shard_size should be a positive size up to 1024T, such as 256M or 1G, but got "
                         f"{str(text)[:40]!r}")
    return int(size)


def _pick(built, group: str, name):
    from speechiter.errors import DataError

    found = built.get(group)
    if found is None:
        raise DataError(f"the recipe has no {group!r} group (it has {', '.join(built) or 'none'})")
    if isinstance(found, dict):
        if name is None:
            if len(found) != 1:
                raise DataError(f"group {group!r} has iterators {', '.join(found)}; name one with --iterator")
            name = next(iter(found))
        if name not in found:
            raise DataError(f"group {group!r} has no iterator {name!r} (it has {', '.join(found)})")
        if found[name].mixed:
            raise DataError(f"{group}/{name} is a mix (mix.MixIterator) of {', '.join(found[name].names)}: pack "
                            f"each corpus from a recipe whose {group} group is that corpus")
        return found[name]
    if found.mixed:  # one corpus at a time
        if name not in found.names:
            named = "needs --iterator" if name is None else f"has no corpus {name!r}"
            raise DataError(f"group {group!r} is a mix (mix.MixIterator) of {', '.join(found.names)}: packing it "
                            f"{named}, naming one corpus at a time")
        return found.iterators[name]
    if name is not None:
        raise DataError(f"group {group!r} has one unnamed iterator; leave --iterator out")
    return found


def _pack(args) -> dict:
    from speechiter import build_iterators, load_config
    from speechiter.build import close_all
    from speechiter.errors import ConfigError, DataError
    from speechiter.pack.writer import write_pack

    if args.reseal:
        return _reseal(args.reseal)
    if not args.data_cfg or not args.out:
        raise DataError("give --data_cfg and --out (or --reseal DIR)")
    try:
        config = load_config(args.data_cfg, args.set)
        if args.group not in config:
            raise DataError(f"the recipe has no {args.group!r} group (it has {', '.join(config) or 'none'})")
        built = build_iterators(config, num_workers=0, groups=(args.group,))
    except ConfigError as e:
        raise DataError(str(e)) from None
    try:
        result = write_pack(_pick(built, args.group, args.iterator), args.out, args.shard_size, args.idx2_out)
    finally:
        close_all(built)
    args.out_dir = args.idx2_out or args.out
    return {"shards": result["shards"], "utterances": result["utterances"], "bytes": result["bytes"],
            **result["files"]}


def _reseal(folder: str) -> dict:
    from speechiter.io.shards import SHARDS_FILE
    from speechiter.pack.out import Out, shard_records

    records = shard_records(folder)
    with Out(folder).open(SHARDS_FILE) as f:
        f.write(json.dumps({"format": "speechiter-pack", "version": 1, "shards": records}, indent=1).encode())
    return {SHARDS_FILE: len(records)}


def main(argv=None) -> int:
    parser = Parser("speechiter.pack", __doc__)
    parser.add_argument("--data_cfg", help="the recipe (exp_cfg or data_cfg)")
    parser.add_argument("--group", default="train", choices=("train", "valid", "test"),
                        help="train, valid or test (default train)")
    parser.add_argument("--iterator", help="the iterator's name, in a group of named iterators; a corpus's, in a mix")
    parser.add_argument("--out", help="folder or URL the shards (and idx2 files) are written to")
    parser.add_argument("--idx2_out", help="folder for the idx2 files (default --out)")
    parser.add_argument("--shard_size", type=_size_arg, default="256M", help="about this many bytes per shard")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--reseal", metavar="DIR_OR_URL", help="record the shards as they are now")
    args = parser.parse_args(argv)
    args.out_dir = args.reseal or args.out
    return run_main(parser, _pack, args)


def _size_arg(text):
    import argparse

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


if __name__ == "__main__":
    sys.exit(main())
