"""The structure of a data_cfg: groups, test sets, iterators, and their labels.

``train`` / ``valid`` hold one iterator ``{type, conf}`` or ``{name: iterator}``;
``test`` holds ``{set_name: iterator | {name: iterator}}``. Beside named
iterators, ``steps: shortest | longest`` sets how many steps the group runs
(see speechiter.group). An iterator is
labelled ``train``, ``train/sup``, ``test/<set>`` or ``test/<set>/<name>``
everywhere (Iterator names, reports, state files); see :func:`iterator_label`.

NOTE [ Stray keys ]
SpeeChain's runner builds the iterators of ``train`` and ``valid`` (train
mode) or of ``test`` (test mode) and never looks at the other keys of its
data_cfg: a recipe of its maintained continuation keeps a test set beside the
groups (``test-clean:`` under an empty ``test:``) and trains. Such keys, and
a group left empty, are dropped here with one warning naming them, where the
groups that are left still make an allowed combination; a recipe whose
groups do not (a typo of ``train``, an empty ``train:``) stays an error.
"""
from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from speechiter.checks import check_choice, did_you_mean
from speechiter.errors import ConfigError

GROUPS = ("train", "valid", "test")
ALLOWED_COMBINATIONS = (("train", "valid"), ("train", "valid", "test"), ("test",))
STEPS_POLICIES = ("shortest", "longest")  # a group key beside named iterators


def iterator_label(group: str, set_name: Optional[str] = None, name: Optional[str] = None) -> str:
    """``train``, ``train/sup``, ``test/test-clean``, ``test/test-clean/asr``."""
    return "/".join(str(part) for part in (group, set_name, name) if part is not None)


@dataclass(frozen=True)
class IteratorSpec:
    """One iterator of the data_cfg, in file order."""

    group: str  # 'train' | 'valid' | 'test'
    set_name: str | None  # test set name, None outside test
    name: str | None  # iterator name, None when the group/set holds a single iterator
    path: str  # YAML path, e.g. "data_cfg.train.sup"
    type: str | type  # "file.Class", or the class itself (a data_cfg built in Python)
    conf: dict
    steps: str = "shortest"  # the group's steps policy

    @property
    def label(self) -> str:
        """``train``, ``train/sup``, ``test/test-clean``, ``test/test-clean/asr``."""
        return iterator_label(self.group, self.set_name, self.name)


def _combination_error(found: list, strays: Iterable[str] = ()) -> ConfigError:
    allowed = ", ".join("+".join(combo) for combo in ALLOWED_COMBINATIONS)
    shown = "+".join(str(key) for key in found) if found else "no groups"
    hints = "".join(f"; {stray!r} is not a group, did you mean {match[0]!r}?"
                    for stray in strays
                    for match in [difflib.get_close_matches(str(stray), GROUPS, n=1, cutoff=0.8)] if match)
    return ConfigError("data_cfg", f"allowed group combinations are {allowed}; found {shown}{hints}")


def check_groups(keys: Iterable, strays: Iterable[str] = ()) -> None:
    """Raise unless the group keys are train+valid, train+valid+test or test."""
    keys = list(keys)
    if tuple(sorted(keys, key=lambda k: GROUPS.index(k) if k in GROUPS else 9)) not in ALLOWED_COMBINATIONS:
        raise _combination_error(keys, [k for k in keys if k not in GROUPS] + list(strays))


def ignore_strays(groups: dict) -> dict:
    """The data groups without the keys SpeeChain's runner ignores, with one warning naming them: keys
    beside train / valid / test, and an empty group (``test:`` with nothing under it). See NOTE [ Stray
    keys ]."""
    strays = [key for key in groups if key not in GROUPS or groups[key] is None]
    if not strays:
        return groups
    kept = {key: value for key, value in groups.items() if key not in strays}
    try:
        check_groups(kept)
    except ConfigError:
        return groups  # not what SpeeChain would run either: iter_specs says what is wrong
    told = [f"{key} (empty)" if key in GROUPS else f"{key} (did you mean {match[0]}?)" if match else str(key)
            for key in strays for match in [difflib.get_close_matches(str(key), GROUPS, n=1)]]
    shown = ", ".join(told[:-1]) + " and " + told[-1] if len(told) > 1 else told[0]
    warnings.warn(f"data_cfg: ignoring {shown}: SpeeChain's runner reads only the groups train, valid and test",
                  stacklevel=3)
    return kept


def _is_iterator(node: dict) -> bool:
    return "type" in node or "conf" in node


def _iterator_spec(node: Any, path: str, group: str, set_name, name, steps: str = "shortest") -> IteratorSpec:
    if not isinstance(node, dict):
        hint = did_you_mean(str(name), ["steps"]) if name is not None else ""
        raise ConfigError(path, f"expected an iterator {{type: file.Class, conf: {{...}}}}, "
                          f"got {type(node).__name__} {node!r}"[:200] + hint)
    for key in node:
        if key not in ("type", "conf"):
            raise ConfigError(f"{path}.{key}", "unknown key; an iterator holds only type and conf"
                              f"{did_you_mean(key, ['type', 'conf'])}")
    if "type" not in node:
        raise ConfigError(f"{path}.type", "missing; every iterator needs type: file.Class "
                          "(e.g. block.BlockIterator)")
    type_name = node["type"]
    if not isinstance(type_name, type) and (not isinstance(type_name, str) or "." not in type_name.strip(".")
                                                or " " in type_name):  # a class: a data_cfg built in Python
        raise ConfigError(f"{path}.type", f"expected file.Class (e.g. block.BlockIterator), "
                          f"got {type(type_name).__name__} {type_name!r}")
    conf = node.get("conf")
    if conf is None:
        conf = {}  # `conf:` left empty
    if not isinstance(conf, dict):
        raise ConfigError(f"{path}.conf", f"expected a mapping of options, got "
                          f"{type(conf).__name__} {conf!r}"[:200])
    return IteratorSpec(group, set_name, name, path, type_name, conf, steps)


def nested_specs(spec: IteratorSpec, key: str) -> list:
    """The iterators named in ``spec``'s conf under ``key`` (a mix's ``iterators``), as ``(name, spec)``
    pairs; each is labelled below ``spec`` (``train/libri``, ``train/sup/libri``)."""
    path, node = f"{spec.path}.conf.{key}", spec.conf.get(key)
    if not isinstance(node, dict) or not node:
        raise ConfigError(path, "expected named iterators {name: {type, conf}}, got "
                          f"{type(node).__name__} {node!r}"[:200])
    prefix = "" if spec.name is None else f"{spec.name}/"
    return [(str(name), _iterator_spec(item, f"{path}.{name}", spec.group, spec.set_name, f"{prefix}{name}"))
            for name, item in node.items()]


def _one_or_named(node: Any, path: str, group: str, set_name) -> list:
    """A group (or test set) holds one iterator or {name: iterator}."""
    if not isinstance(node, dict) or not node:
        raise ConfigError(path, "expected one iterator {type, conf} or named iterators "
                          f"{{name: {{type, conf}}}}, got {type(node).__name__} {node!r}"[:200])
    if _is_iterator(node):
        return [_iterator_spec(node, path, group, set_name, None)]
    steps = "shortest"
    if "steps" in node and not isinstance(node["steps"], dict):  # the policy, not an iterator named steps
        steps = check_choice(node["steps"], f"{path}.steps", STEPS_POLICIES)
        node = {name: item for name, item in node.items() if name != "steps"}
        if not node:
            raise ConfigError(path, "holds steps but no iterators")
    return [_iterator_spec(item, f"{path}.{name}", group, set_name, str(name), steps)
            for name, item in node.items()]


def iter_specs(data_cfg: dict) -> list:
    """Check the structure of the groups and list every iterator in file order."""
    if not isinstance(data_cfg, dict):
        raise ConfigError("data_cfg", f"expected a mapping of groups, got {type(data_cfg).__name__}")
    check_groups(data_cfg)
    specs = []
    for group, node in data_cfg.items():
        path = f"data_cfg.{group}"
        if group != "test":
            specs += _one_or_named(node, path, group, None)
            continue
        if not isinstance(node, dict) or not node:
            raise ConfigError(path, f"expected named test sets {{set_name: iterator(s)}}, "
                              f"got {type(node).__name__} {node!r}"[:200])
        if _is_iterator(node):
            raise ConfigError(path, "test holds named test sets ({set_name: {type, conf}}); "
                              "found an iterator directly, put it under a set name")
        for set_name, set_node in node.items():
            specs += _one_or_named(set_node, f"{path}.{set_name}", group, str(set_name))
    return specs
