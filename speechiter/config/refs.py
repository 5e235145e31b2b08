"""``!ref`` resolution: ``<key>``, ``<key[0]>`` and string interpolation of top-level keys."""
from __future__ import annotations

import copy
import re
from typing import Any

from speechiter.checks import did_you_mean
from speechiter.config.tags import Ref
from speechiter.errors import ConfigError

_REF = re.compile(r"<([^<>\[\]]+?)\s*((?:\[\s*-?\d+\s*\])*)\s*>")


class Resolver:
    """Resolves ``!ref`` lazily: only what is asked for, each top-level key once."""

    def __init__(self, raw: dict, file_name: str):
        self.raw = raw
        self.file_name = file_name
        self.cache: dict = {}
        self.stack: list = []  # top-level keys being resolved, for cycle detection

    def value(self, node: Any, path: str, tolerant: bool = False) -> Any:
        """Resolve every !ref in node; when tolerant, a failing one stays as ``!ref ...`` text."""
        if isinstance(node, Ref):
            try:
                return self.ref(node, path)
            except ConfigError:
                if tolerant:
                    return f"!ref {node.text}"
                raise
        if isinstance(node, dict):
            return {key: self.value(item, f"{path}.{key}", tolerant) for key, item in node.items()}
        if isinstance(node, (list, tuple)):
            items = [self.value(item, f"{path}.{i}", tolerant) for i, item in enumerate(node)]
            return items if isinstance(node, list) else tuple(items)
        return node

    def variable(self, key: str, path: str, ref: Ref) -> Any:
        if key in self.cache:
            return self.cache[key]
        if key not in self.raw:
            raise ConfigError(path, f"{self.describe(ref)}: no top-level key {key!r}"
                              f"{did_you_mean(key, self.raw)}")
        if key in self.stack:
            cycle = self.stack[self.stack.index(key):] + [key]
            raise ConfigError(path, f"{self.describe(ref)}: reference cycle {' -> '.join(cycle)}")
        self.stack.append(key)
        try:
            resolved = self.value(self.raw[key], key)
        finally:
            self.stack.pop()
        self.cache[key] = resolved
        return resolved

    def ref(self, ref: Ref, path: str) -> Any:
        whole = _REF.fullmatch(ref.text.strip())
        if whole:  # `!ref <batch_len>` keeps the value's type
            return copy.deepcopy(self.lookup(whole, ref, path))
        return _REF.sub(lambda match: str(self.lookup(match, ref, path)), ref.text)

    def lookup(self, match: re.Match, ref: Ref, path: str) -> Any:
        key = match.group(1).strip()
        value = self.variable(key, path, ref)
        for index_text in re.findall(r"-?\d+", match.group(2)):
            index = int(index_text)
            if not isinstance(value, (list, tuple)):
                raise ConfigError(path, f"{self.describe(ref)}: cannot index [{index}] into a "
                                  f"{type(value).__name__} value")
            if not -len(value) <= index < len(value):
                raise ConfigError(path, f"{self.describe(ref)}: index [{index}] out of range "
                                  f"for a list of {len(value)} items")
            value = value[index]
        return value

    def describe(self, ref: Ref) -> str:
        where = f" ({self.file_name} line {ref.line})" if ref.line else ""
        return f"!ref {ref.text}{where}"
