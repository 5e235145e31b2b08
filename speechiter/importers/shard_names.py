"""Tar shard names as the importers take them: brace ranges and globs expanded, made absolute."""
from __future__ import annotations

import glob
import os
import re
from typing import List, Tuple

from speechiter.importers.utterance import InputError
from speechiter.io.storage import is_url

__all__ = ["expand_shards", "shard_location"]

_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_shards(patterns: List[str]) -> List[str]:
    """Shard names from brace ranges (``audio_{0..7}.tar``, zero padding
    kept, as NeMo and WebDataset expand them) and, for local paths, globs;
    in the order given."""
    out: List[str] = []
    for pattern in patterns:
        pattern = pattern.replace("_OP_", "{").replace("_CL_", "}")  # NeMo's brace-free spelling
        for name in _braces(pattern):
            if not is_url(name) and glob.has_magic(name):
                found = sorted(glob.glob(name))
                if not found:
                    raise InputError(f"{name}: matches no shard")
                out += found
            else:
                out.append(name)
    return out


def _braces(pattern: str) -> List[str]:
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    low, high = match.group(1), match.group(2)
    width = len(low) if low.startswith("0") and len(low) > 1 else 0
    if int(high) < int(low):
        raise InputError(f"{pattern}: the range {{{low}..{high}}} is empty")
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [name for i in range(int(low), int(high) + 1) for name in _braces(f"{head}{i:0{width}d}{tail}")]


def shard_location(value: str, base: str = ".") -> Tuple[str, bool]:
    """``(absolute path or URL, given relative)`` of a shard name."""
    if "#" in value:
        raise InputError(f"{value!r}: a shard name may not contain '#' (idx2wav reserves it for #bytes=)")
    if is_url(value):
        return value, False
    value = os.path.expanduser(value)
    return os.path.normpath(os.path.join(os.path.abspath(base), value)), not os.path.isabs(value)
