"""The YAML reader: SafeLoader plus the SpeeChain tags and exponent floats.

  ``!ref <data_root>/<set>/idx2wav``  string interpolation of top-level keys
                                      (kept as a :class:`Ref`, resolved in refs.py)
  ``!tuple (valid, accuracy, max, 10)``, ``!list [a, b]``, ``!str 0.5``

No YAML object tags: configs are trusted like code but parsed safely.
Duplicate keys in a mapping are an error naming both lines, and a document
whose aliases expand to more than MAX_VALUES values is refused before it is
built (see NOTE [ Alias expansion ]).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from speechiter.errors import ConfigError

KNOWN_TAGS = ("!ref", "!tuple", "!list", "!str")
#: the most values (scalars, lists, mappings) a config may expand to, aliases counted at each use
MAX_VALUES = 1_000_000


@dataclass(frozen=True)
class Ref:
    """An unresolved ``!ref`` value; resolved after overrides are applied."""

    text: str
    line: int | None = None  # 1-based line in the YAML file, None for overrides


class SpeechLoader(yaml.SafeLoader):
    """SafeLoader plus the SpeeChain tags and exponent floats such as ``2.4e7``."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A value that its tag cannot hold (``!!int abc``, ``2001-13-01``) is a
        YAML error at its place, not a bare ValueError."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as error:
            value = node.value if isinstance(node, yaml.ScalarNode) else "..."
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {value!r} as {node.tag.replace('tag:yaml.org,2002:', '!!')}: "
                            f"{one_line(error)}"[:300], node.start_mark) from None


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
        items = load_checked(f"[{text}]")
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


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _problem(problem: str, node: yaml.Node) -> yaml.MarkedYAMLError:
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return []


def _check_keys(loader: SpeechLoader, node: yaml.MappingNode) -> None:
    """Raise at the second of two equal keys of one mapping, naming the first's line.

    Checked on the composed node, before merge keys (``<<``) are applied, so a
    key may still override a merged one, as YAML allows.
    """
    first_line: dict = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        try:
            seen = first_line.get(key)
        except TypeError:  # an unhashable key: the constructor reports it
            continue
        if seen is not None:
            raise _problem(f"duplicate key {key!r}, first on line {seen}; a key may appear once in a mapping "
                           f"(the last one would silently win)", key_node)
        first_line[key] = key_node.start_mark.line + 1


# NOTE [ Alias expansion ]
# PyYAML builds an alias as the same object, so `b: [*a, *a, ...]` nested nine
# deep ("billion laughs") loads fast, but every walk after it (``!ref``
# resolution, copies, checks, fingerprints) expands it: 9^9 values. So the
# composed node graph is measured first, each node once (sizes memoised), and
# a document that would expand to more than MAX_VALUES values, or whose alias
# refers to a node that contains it, is refused before anything is built.
def check_graph(loader: SpeechLoader, root: yaml.Node) -> None:
    """Refuse duplicate keys, recursive aliases and documents that expand past MAX_VALUES."""
    sizes: dict = {}  # id(node) -> values it expands to
    open_nodes: set = set()  # the ancestors of the node at hand
    stack = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_VALUES:
                raise _problem(f"this value expands to more than {MAX_VALUES:,} values (aliases counted at each "
                               "use); refusing it, as an alias bomb would never finish loading", node)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _problem("an alias refers to a value that contains it (a recursive alias)", node)
        if isinstance(node, yaml.MappingNode):
            _check_keys(loader, node)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def load_checked(text: str) -> Any:
    """``yaml.load(text, SpeechLoader)`` after :func:`check_graph`; raises yaml.YAMLError."""
    loader = SpeechLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_graph(loader, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text; errors become ``<name>:<line>:<col>: <problem>``."""
    try:
        return load_checked(text)
    except yaml.MarkedYAMLError as error:
        problem = one_line(error.problem or error.context or "invalid YAML")
        if "could not determine a constructor" in problem:
            problem += (f"; YAML object tags are not allowed, known tags: {', '.join(KNOWN_TAGS)}")
        mark = error.problem_mark or error.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise ConfigError(where, problem) from None
    except yaml.YAMLError as error:
        raise ConfigError(name, one_line(error)) from None
    except RecursionError:
        raise ConfigError(name, "values nested too deeply to read") from None
