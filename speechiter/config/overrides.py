"""``--set dotted.key=value`` overrides, applied to the raw tree before ``!ref`` resolution.

NOTE [ Overrides and aliases ]
PyYAML builds an alias (``*anchor``) as the very object of its anchor, so
``valid: *train_conf`` and ``train`` share one dict. An override copies each
mapping and list on its path before it descends (shallow copies, so an alias
bomb is never expanded): it changes the path it names and nothing that only
shares a node with it.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from speechiter.checks import did_you_mean
from speechiter.config.groups import GROUPS
from speechiter.config.refs import REF_PATTERN
from speechiter.config.tags import Ref, parse_yaml
from speechiter.errors import ConfigError


def parse_override(text: str) -> tuple[str, Any]:
    """``"data_cfg.train.conf.shuffle=false"`` -> ``("data_cfg.train.conf.shuffle", False)``.

    The value is YAML read with the same loader, so tags work (``x=!ref <y>``).
    """
    where = f"override {text!r}"
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(where, "expected dotted.key=value")
    key, value_text = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(where, "expected dotted.key=value with a non-empty key")
    try:
        value = parse_yaml(value_text, "value")
    except ConfigError as error:
        raise ConfigError(where, f"cannot read the value: {error}") from None
    return key, value


def apply_overrides(raw: dict, texts, groups_under_data_cfg: bool, new_top_keys=()) -> None:
    """Apply ``--set`` overrides in order, then refuse a new top-level key that nothing uses.

    A key may be new inside a mapping (an option the recipe leaves at its default). At the top level a
    new key is a variable: unless a group, one of ``new_top_keys`` (an exp_cfg's run settings) or the
    target of a ``!ref``, it would change nothing, so it is a typo, answered with a did-you-mean.
    """
    known = [k for k in [*raw, *new_top_keys] if isinstance(k, str)]
    new = {}
    for text in texts:
        key = parse_override(text)[0]
        if "." not in key and key not in raw and key not in GROUPS and key not in new_top_keys and key != "data_cfg":
            new.setdefault(key, text)
        apply_override(raw, text, groups_under_data_cfg)
    used = _referenced(raw)
    for key, text in new.items():
        if key not in used:
            raise ConfigError(key, f"no such top-level key, and a new one would change nothing "
                                   f"(override {text!r}){did_you_mean(key, known)}")


def _referenced(node) -> set:
    """The top-level names the ``!ref`` values in ``node`` refer to."""
    if isinstance(node, Ref):
        return {match.group(1).strip() for match in REF_PATTERN.finditer(node.text)}
    if isinstance(node, dict):
        return set().union(*(_referenced(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_referenced(v) for v in node)) if node else set()
    return set()


def apply_override(raw: dict, text: str, groups_under_data_cfg: bool) -> None:
    """Set one ``dotted.key=value`` in the raw (unresolved) tree, in place."""
    key, value = parse_override(text)
    parts = key.split(".")
    if groups_under_data_cfg:
        # `train.conf.x` means `data_cfg.train.conf.x`; exp_cfg files may also
        # hold top-level flags such as `train: False`, which a bare `train=...` sets.
        top = raw.get(parts[0])
        if parts[0] in GROUPS and not isinstance(top, dict) and (len(parts) > 1 or parts[0] not in raw):
            parts = ["data_cfg"] + parts
    elif parts[0] == "data_cfg":
        parts = parts[1:]  # a bare data_cfg file: strip the prefix
        if not parts:
            raise ConfigError(f"override {text!r}", "cannot replace the whole data_cfg")

    def shown(upto: int) -> str:
        path = ".".join(parts[:upto])
        inside_groups = not groups_under_data_cfg and parts[0] in GROUPS
        return f"data_cfg.{path}" if inside_groups else path

    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, dict):
            key = part
            if not last and key not in node:
                raise ConfigError(shown(depth + 1), f"no such key"
                                  f"{did_you_mean(part, node)} (override {text!r})")
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", part):
            key = int(part)
            if not -len(node) <= key < len(node):
                raise ConfigError(shown(depth + 1), f"index out of range for a list of "
                                  f"{len(node)} items (override {text!r})")
        else:
            raise ConfigError(shown(depth), f"cannot set {part!r} inside a "
                              f"{type(node).__name__} value (override {text!r})")
        if last:
            node[key] = value
        elif isinstance(node[key], (dict, list)):
            # a copy, so that an alias (*anchor) of this node elsewhere keeps its value; see NOTE [ Overrides
            # and aliases ]
            node[key] = node = copy.copy(node[key])
        else:
            node = node[key]
