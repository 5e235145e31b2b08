"""Loading a data_cfg: YAML, SpeeChain tags, --set overrides, structure checks.

A recipe is either an exp_cfg file (the groups live under ``data_cfg:``, next to
train_cfg, infer_cfg, ...) or a bare data_cfg file (the groups train / valid /
test sit at top level next to "reference zone" variables). In both, the
top-level keys other than the groups are the variables that ``!ref`` reads.

Tags, as in SpeeChain:
  ``!ref <data_root>/<set>/idx2wav``  string interpolation of top-level keys
  ``!ref <batch_len>``                a whole-value reference keeps the type
  ``!ref <sets[0]>``                  indexes into a list
  ``!tuple (valid, accuracy, max, 10)``, ``!list [a, b]``, ``!str 0.5``

Every problem is a one-line ConfigError whose path starts with ``data_cfg`` for
anything inside the groups, or with the variable name for a variable.
"""
from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from speechiter.errors import ConfigError

GROUPS = ("train", "valid", "test")
ALLOWED_COMBINATIONS = (("train", "valid"), ("train", "valid", "test"), ("test",))
KNOWN_TAGS = ("!ref", "!tuple", "!list", "!str")


# --- YAML loader -----------------------------------------------------------

@dataclass(frozen=True)
class Ref:
    """An unresolved ``!ref`` value; resolved after overrides are applied."""

    text: str
    line: int | None = None  # 1-based line in the YAML file, None for overrides


class SpeechLoader(yaml.SafeLoader):
    """SafeLoader plus the SpeeChain tags and exponent floats such as ``2.4e7``."""


# NOTE [ Exponent floats ]
# YAML 1.1 (PyYAML) needs a dot and a signed exponent, so `2.4e7` and `1e5`
# load as strings. This resolver is appended after the standard ones and only
# matches what they leave as strings; plain ints still load as ints.
SpeechLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _construct_ref(loader: SpeechLoader, node: yaml.Node) -> Ref:
    return Ref(loader.construct_scalar(node), node.start_mark.line + 1)


def _flow_items(loader: SpeechLoader, node: yaml.Node, brackets: str) -> list:
    """Items of ``(a, b)`` / ``[a, b]`` / ``a, b`` (a scalar) or of a YAML sequence."""
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    text = str(loader.construct_scalar(node)).strip()
    if text[:1] == brackets[0] and text[-1:] == brackets[1]:
        text = text[1:-1]
    try:
        items = yaml.load(f"[{text}]", Loader=SpeechLoader)
    except yaml.YAMLError:
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read the items of {node.tag} {text!r}", node.start_mark
        ) from None
    return items


def _construct_tuple(loader: SpeechLoader, node: yaml.Node) -> tuple:
    return tuple(_flow_items(loader, node, "()"))


def _construct_list(loader: SpeechLoader, node: yaml.Node) -> list:
    return list(_flow_items(loader, node, "[]"))


def _construct_str(loader: SpeechLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))


SpeechLoader.add_constructor("!ref", _construct_ref)
SpeechLoader.add_constructor("!tuple", _construct_tuple)
SpeechLoader.add_constructor("!list", _construct_list)
SpeechLoader.add_constructor("!str", _construct_str)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text; errors become ``<name>:<line>:<col>: <problem>``."""
    try:
        return yaml.load(text, Loader=SpeechLoader)
    except yaml.MarkedYAMLError as error:
        problem = _one_line(error.problem or error.context or "invalid YAML")
        if "could not determine a constructor" in problem:
            problem += (f"; YAML object tags are not allowed, known tags: {', '.join(KNOWN_TAGS)}")
        mark = error.problem_mark or error.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise ConfigError(where, problem) from None
    except yaml.YAMLError as error:
        raise ConfigError(name, _one_line(error)) from None


# --- The returned tree -----------------------------------------------------

class DataConfig(dict):
    """The data groups (``train`` / ``valid`` / ``test``) as a plain dict.

    ``source``: absolute Path of the YAML file (relative data paths in the
    recipe are meant relative to ``source.parent``; see ``config_dir``).
    ``variables``: the resolved top-level keys other than the groups. A
    variable whose ``!ref`` cannot be resolved (e.g. in train_cfg, which the
    data layer ignores) keeps that ``!ref`` text as a string.
    """

    def __init__(self, groups=(), source: Path | None = None, variables: dict | None = None):
        super().__init__(groups)
        self.source = source
        self.variables = variables if variables is not None else {}


def config_dir(data_cfg: dict) -> Path | None:
    """The folder of the YAML file a DataConfig came from (None for a plain dict)."""
    source = getattr(data_cfg, "source", None)
    return Path(source).parent if source is not None else None


# --- Overrides -------------------------------------------------------------

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
        value = _parse_yaml(value_text, "value")
    except ConfigError as error:
        raise ConfigError(where, f"cannot read the value: {error}") from None
    return key, value


def _apply_override(raw: dict, text: str, groups_under_data_cfg: bool) -> None:
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
            if not last and part not in node:
                raise ConfigError(shown(depth + 1), f"no such key"
                                  f"{_did_you_mean(part, [str(k) for k in node])} (override {text!r})")
            if last:
                node[part] = value
            else:
                node = node[part]
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", part):
            index = int(part)
            if not -len(node) <= index < len(node):
                raise ConfigError(shown(depth + 1), f"index out of range for a list of "
                                  f"{len(node)} items (override {text!r})")
            if last:
                node[index] = value
            else:
                node = node[index]
        else:
            raise ConfigError(shown(depth), f"cannot set {part!r} inside a "
                              f"{type(node).__name__} value (override {text!r})")


# --- !ref resolution -------------------------------------------------------

_REF = re.compile(r"<([^<>\[\]]+?)\s*((?:\[\s*-?\d+\s*\])*)\s*>")


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Resolver:
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
                              f"{_did_you_mean(key, [str(k) for k in self.raw])}")
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


# --- Structure: groups, test sets, iterators -------------------------------

@dataclass(frozen=True)
class IteratorSpec:
    """One iterator of the data_cfg, in file order."""

    group: str  # 'train' | 'valid' | 'test'
    set_name: str | None  # test set name, None outside test
    name: str | None  # iterator name, None when the group/set holds a single iterator
    path: str  # YAML path, e.g. "data_cfg.train.sup"
    type: str  # "file.Class"
    conf: dict

    @property
    def label(self) -> str:
        """``train``, ``train/sup``, ``test/test-clean``, ``test/test-clean/asr``."""
        return "/".join(str(part) for part in (self.group, self.set_name, self.name) if part is not None)


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


def _is_iterator(node: dict) -> bool:
    return "type" in node or "conf" in node


def _iterator_spec(node: Any, path: str, group: str, set_name, name) -> IteratorSpec:
    if not isinstance(node, dict):
        raise ConfigError(path, f"expected an iterator {{type: file.Class, conf: {{...}}}}, "
                          f"got {type(node).__name__} {node!r}"[:200])
    for key in node:
        if key not in ("type", "conf"):
            raise ConfigError(f"{path}.{key}", "unknown key; an iterator holds only type and conf"
                              f"{_did_you_mean(str(key), ['type', 'conf'])}")
    if "type" not in node:
        raise ConfigError(f"{path}.type", "missing; every iterator needs type: file.Class "
                          "(e.g. block.BlockIterator)")
    type_name = node["type"]
    if not isinstance(type_name, str) or "." not in type_name.strip(".") or " " in type_name:
        raise ConfigError(f"{path}.type", f"expected file.Class (e.g. block.BlockIterator), "
                          f"got {type(type_name).__name__} {type_name!r}")
    conf = node.get("conf")
    if conf is None:
        conf = {}  # `conf:` left empty
    if not isinstance(conf, dict):
        raise ConfigError(f"{path}.conf", f"expected a mapping of options, got "
                          f"{type(conf).__name__} {conf!r}"[:200])
    return IteratorSpec(group, set_name, name, path, type_name, conf)


def _one_or_named(node: Any, path: str, group: str, set_name) -> list:
    """A group (or test set) holds one iterator or {name: iterator}."""
    if not isinstance(node, dict) or not node:
        raise ConfigError(path, "expected one iterator {type, conf} or named iterators "
                          f"{{name: {{type, conf}}}}, got {type(node).__name__} {node!r}"[:200])
    if _is_iterator(node):
        return [_iterator_spec(node, path, group, set_name, None)]
    return [_iterator_spec(item, f"{path}.{name}", group, set_name, str(name))
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


# --- load_config -----------------------------------------------------------

def _read_raw(path: Path) -> dict:
    if not path.is_file():
        what = "is a folder, not a YAML file" if path.is_dir() else "no such file"
        raise ConfigError(str(path), what)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(str(path), f"cannot read: {_one_line(error)}") from None
    raw = _parse_yaml(text, str(path))
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise ConfigError(str(path), f"expected a mapping at top level, got {got}")
    return raw


def load_config(path, overrides: Iterable[str] = ()) -> DataConfig:
    """Load a recipe (exp_cfg or bare data_cfg) and return its checked data groups.

    ``overrides`` are ``dotted.key=value`` strings applied before ``!ref``
    resolution, so overriding a variable reaches every ``!ref`` to it.
    """
    source = Path(path).expanduser().absolute()
    raw = _read_raw(source)
    groups_under_data_cfg = "data_cfg" in raw
    if not groups_under_data_cfg and not any(key in raw for key in GROUPS):
        raise ConfigError("data_cfg", f"{source} has no data groups: expected train / valid / "
                          "test at top level or under a data_cfg key")
    if isinstance(overrides, str):
        overrides = [overrides]
    for text in overrides:
        _apply_override(raw, text, groups_under_data_cfg)

    resolver = _Resolver(raw, source.name)
    if groups_under_data_cfg:
        data_node = raw["data_cfg"]
        if not isinstance(data_node, (dict, Ref)):
            raise ConfigError("data_cfg", f"expected a mapping of groups, got "
                              f"{type(data_node).__name__} {data_node!r}"[:200])
        resolved = resolver.value(data_node, "data_cfg")
        if not isinstance(resolved, dict):
            raise ConfigError("data_cfg", f"expected a mapping of groups, got {type(resolved).__name__}")
        variable_keys = [key for key in raw if key != "data_cfg"]
    else:
        group_keys = [key for key in raw if key in GROUPS]
        variable_keys = [key for key in raw if key not in GROUPS]
        check_groups(group_keys, strays=[str(k) for k in variable_keys])
        resolved = {key: resolver.value(raw[key], f"data_cfg.{key}") for key in group_keys}

    data_cfg = DataConfig(resolved, source=source)
    iter_specs(data_cfg)
    data_cfg.variables = {key: resolver.cache[key] if key in resolver.cache
                          else resolver.value(raw[key], str(key), tolerant=True)
                          for key in variable_keys}
    return data_cfg
