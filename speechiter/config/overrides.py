"""``--set dotted.key=value`` overrides, applied to the raw tree before ``!ref`` resolution."""
from __future__ import annotations

import re
from typing import Any

from speechiter.checks import did_you_mean
from speechiter.config.groups import GROUPS
from speechiter.config.tags import parse_yaml
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


def apply_override(raw: dict, text: str, groups_under_data_cfg: bool, new_top_keys=()) -> None:
    """Set one ``dotted.key=value`` in the raw (unresolved) tree, in place.

    A key may be new only inside a mapping (an option the recipe leaves at its default); at the top
    level, where a new variable would change nothing, only a group or one of ``new_top_keys`` (an
    exp_cfg's run settings) may be new: anything else is a typo, answered with a did-you-mean.
    """
    key, value = parse_override(text)
    parts = key.split(".")
    if len(parts) == 1 and parts[0] not in raw and parts[0] not in GROUPS and parts[0] not in new_top_keys:
        known = [k for k in [*raw, *new_top_keys] if isinstance(k, str)]
        raise ConfigError(parts[0], f"no such top-level key, and a new one would change nothing "
                          f"(override {text!r}){did_you_mean(parts[0], known)}")
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
        else:
            node = node[key]
