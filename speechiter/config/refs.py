"""``!ref`` resolution: ``<key>``, ``<key[0]>`` and string interpolation of top-level keys.

Resolution is bounded like loading (see NOTE [ Alias expansion ] in tags.py):
every value it builds counts against MAX_VALUES, so ``!ref`` chains that copy a
large value many times are refused, and one interpolated string holds at most
MAX_TEXT characters.
"""
from __future__ import annotations

import re
from typing import Any

from speechiter.checks import did_you_mean
from speechiter.config.tags import MAX_VALUES, Ref
from speechiter.errors import ConfigError

REF_PATTERN = re.compile(r"<([^<>\[\]]+?)\s*((?:\[\s*-?\d+\s*\])*)\s*>")
#: the longest string one ``!ref`` interpolation may build
MAX_TEXT = 1_000_000


class ExpansionError(ConfigError):
    """Resolution would build more than the bounds allow; never tolerated."""


class Resolver:
    """Resolves ``!ref`` lazily: only what is asked for, each top-level key once."""

    def __init__(self, raw: dict, file_name: str):
        self.raw = raw
        self.file_name = file_name
        self.cache: dict = {}
        self.stack: list = []  # top-level keys being resolved, for cycle detection
        self.built = 0  # values built so far, bounded by MAX_VALUES

    def value(self, node: Any, path: str, tolerant: bool = False) -> Any:
        """Resolve every !ref in node; when tolerant, a failing one stays as ``!ref ...`` text."""
        self.count(path)
        if isinstance(node, Ref):
            try:
                return self.ref(node, path)
            except ExpansionError:
                raise
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

    def count(self, path: str) -> None:
        self.built += 1
        if self.built > MAX_VALUES:
            raise ExpansionError(path, f"resolving !ref would build more than {MAX_VALUES:,} values; refusing "
                                       "the configuration (a !ref chain that copies a large value many times?)")

    def copy(self, value: Any, path: str) -> Any:
        """A deep copy of a resolved value, counted like resolution."""
        self.count(path)
        if isinstance(value, dict):
            return {key: self.copy(item, path) for key, item in value.items()}
        if isinstance(value, list):
            return [self.copy(item, path) for item in value]
        if isinstance(value, tuple):
            return tuple(self.copy(item, path) for item in value)
        if isinstance(value, set):  # !!set: hashable members
            return set(value)
        return value

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
        whole = REF_PATTERN.fullmatch(ref.text.strip())
        if whole:  # `!ref <batch_len>` keeps the value's type
            return self.copy(self.lookup(whole, ref, path), path)
        size = len(ref.text)

        def piece(match: re.Match) -> str:
            nonlocal size
            text = str(self.lookup(match, ref, path))
            size += len(text)
            if size > MAX_TEXT:
                raise ExpansionError(path, f"{self.describe(ref)}: the interpolated text would be longer than "
                                           f"{MAX_TEXT:,} characters; refusing it")
            return text
        return REF_PATTERN.sub(piece, ref.text)

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
