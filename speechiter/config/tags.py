"""The YAML reader: SafeLoader plus the SpeeChain tags and exponent floats.

  ``!ref <data_root>/<set>/idx2wav``  string interpolation of top-level keys
                                      (kept as a :class:`Ref`, resolved in refs.py)
  ``!tuple (valid, accuracy, max, 10)``, ``!list [a, b]``, ``!str 0.5``

No YAML object tags: configs are trusted like code but parsed safely.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from speechiter.errors import ConfigError

KNOWN_TAGS = ("!ref", "!tuple", "!list", "!str")


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


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text; errors become ``<name>:<line>:<col>: <problem>``."""
    try:
        return yaml.load(text, Loader=SpeechLoader)
    except yaml.MarkedYAMLError as error:
        problem = one_line(error.problem or error.context or "invalid YAML")
        if "could not determine a constructor" in problem:
            problem += (f"; YAML object tags are not allowed, known tags: {', '.join(KNOWN_TAGS)}")
        mark = error.problem_mark or error.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise ConfigError(where, problem) from None
    except yaml.YAMLError as error:
        raise ConfigError(name, one_line(error)) from None
