"""Loading a data_cfg: YAML, SpeeChain tags, --set overrides, structure checks.

All YAML handling of speechiter lives in this package:
  tags.py       the YAML reader (SpeechLoader): ``!ref``, ``!tuple``, ``!list``, ``!str``
  refs.py       ``!ref`` resolution
  overrides.py  ``--set dotted.key=value``
  groups.py     groups / test sets / iterators (IteratorSpec) and their labels
  read_yaml_file (here) reads every YAML file speechiter reads: recipes and feat_conf files

Relative paths follow the recipe's PathPolicy (speechiter/paths.py, NOTE [ Path policy ]),
made here once per recipe and kept as ``DataConfig.paths``.

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

import os
from pathlib import Path
from typing import Any, Iterable

from speechiter.checks import check_int, did_you_mean
from speechiter.config.groups import (ALLOWED_COMBINATIONS, GROUPS, IteratorSpec, check_groups, ignore_strays,
                                      iter_specs, iterator_label)
from speechiter.config.overrides import apply_overrides, parse_override
from speechiter.config.refs import Resolver
from speechiter.config.tags import KNOWN_TAGS, Ref, SpeechLoader, one_line, parse_yaml
from speechiter.errors import ConfigError
from speechiter.paths import PathPolicy, speechain_root_path
from speechiter.user_files import read_user_file

#: the largest YAML file read (a recipe is kilobytes; a mistyped /dev/zero must not fill the memory)
MAX_YAML_BYTES = 64 * 2 ** 20

__all__ = ["ALLOWED_COMBINATIONS", "GROUPS", "KNOWN_TAGS", "DataConfig", "IteratorSpec", "Ref", "SpeechLoader",
           "check_groups", "config_dir", "iter_specs", "iterator_label", "load_config", "parse_override",
           "read_yaml_file", "speechain_root_path"]


class DataConfig(dict):
    """The data groups (``train`` / ``valid`` / ``test``) as a plain dict.

    ``source``: absolute Path of the YAML file (relative data paths in the
    recipe are meant relative to ``source.parent``; see ``config_dir``).
    ``paths``: the recipe's :class:`speechiter.paths.PathPolicy` (None: made
    from ``source`` and the environment when the iterators are built).
    ``variables``: the resolved top-level keys other than the groups. A
    variable whose ``!ref`` cannot be resolved (e.g. in train_cfg, which the
    data layer ignores) keeps that ``!ref`` text as a string.

    ``settings``: run settings an exp_cfg gives at top level (``seed``, ``ngpu``,
    ``num_workers``, ``{train,valid,test}_num_workers``), checked integers;
    build_iterators and the CLI use them where the caller gives no value.
    ``setting_files``: ``{setting: the exp_cfg file that gave it}`` (for messages).
    """

    def __init__(self, groups=(), source: Path | None = None, variables: dict | None = None,
                 settings: dict | None = None, paths: PathPolicy | None = None):
        super().__init__(groups)
        self.source = source
        self.paths = paths
        self.variables = variables if variables is not None else {}
        self.settings = settings if settings is not None else {}
        self.setting_files = {key: source for key in self.settings}


# exp_cfg top-level keys that are run settings, with their minimum (SpeeChain's runner arguments).
EXP_SETTINGS = {"seed": 0, "ngpu": 1, "num_workers": 0, "train_num_workers": 0, "valid_num_workers": 0,
                "test_num_workers": 0}


def config_dir(data_cfg: dict) -> Path | None:
    """The folder of the YAML file a DataConfig came from (None for a plain dict)."""
    source = getattr(data_cfg, "source", None)
    return Path(source).parent if source is not None else None


def read_yaml_file(path: Path) -> Any:
    """Parse a YAML file with the checks of tags.py (duplicate keys, alias bombs, no object tags); a UTF-8
    BOM at its start is dropped. Errors are ConfigErrors naming the file (and line)."""
    if path.is_dir() or not os.path.lexists(path):
        raise ConfigError(str(path), "is a folder, not a YAML file" if path.is_dir() else "no such file")
    try:  # a FIFO or /dev/zero is refused, never read
        data = read_user_file(str(path), "", "YAML file", MAX_YAML_BYTES)
    except ConfigError as error:  # its message starts with the file
        raise ConfigError(str(path), error.message.split(": ", 1)[-1]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), f"cannot read: {one_line(error)}") from None
    return parse_yaml(text, str(path))


def _read_raw(path: Path) -> dict:
    raw = read_yaml_file(path)
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise ConfigError(str(path), f"expected a mapping at top level, got {got}")
    return raw


def load_config(path, overrides: Iterable[str] = (), _chain: tuple = ()) -> DataConfig:
    """Load a recipe (exp_cfg or bare data_cfg) and return its checked data groups.

    ``overrides`` are ``dotted.key=value`` strings applied before ``!ref``
    resolution, so overriding a variable reaches every ``!ref`` to it.

    An exp_cfg's ``data_cfg:`` may be the path of a data_cfg file (SpeeChain):
    that file is loaded with its own variables (the overrides of its groups go
    to it), and the exp_cfg's run settings are kept (see DataConfig).
    """
    paths = PathPolicy.from_environment()
    source = paths.recipe_file(path) if not _chain else Path(path).expanduser().absolute()
    paths = paths.in_folder(source.parent)
    if not _chain and not os.path.lexists(source):
        raise ConfigError(str(source), f"no such file{paths.tried(os.fspath(path), recipe=True)}")
    raw = _read_raw(source)
    groups_under_data_cfg = "data_cfg" in raw
    if not groups_under_data_cfg and not any(key in raw for key in GROUPS):
        raise ConfigError("data_cfg", f"{source} has no data groups: expected train / valid / "
                          "test at top level or under a data_cfg key")
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    forwarded, here = [], []
    for text in overrides:
        if groups_under_data_cfg and isinstance(raw.get("data_cfg"), str) and _for_data_file(raw, text):
            forwarded.append(text)  # meant for the data_cfg file
        else:
            here.append(text)
    apply_overrides(raw, here, groups_under_data_cfg, new_top_keys=EXP_SETTINGS if groups_under_data_cfg else ())

    resolver = Resolver(raw, source.name)
    settings = _exp_settings(raw, resolver) if groups_under_data_cfg else {}
    if groups_under_data_cfg and isinstance(raw["data_cfg"], str):
        target = paths.included_file(raw["data_cfg"])
        if target.absolute() in (source, *_chain):
            raise ConfigError("data_cfg", f"{raw['data_cfg']!r} loads {target}, which is already being loaded")
        data_cfg = load_config(target, forwarded, (*_chain, source))
        data_cfg.settings = {**data_cfg.settings, **settings}
        data_cfg.setting_files = {**data_cfg.setting_files, **{key: source for key in settings}}
        return data_cfg
    if groups_under_data_cfg:
        data_node = raw["data_cfg"]
        if not isinstance(data_node, (dict, Ref)):
            raise ConfigError("data_cfg", f"expected a mapping of groups, got "
                              f"{type(data_node).__name__} {data_node!r}"[:200])
        resolved = resolver.value(data_node, "data_cfg")
        if not isinstance(resolved, dict):
            raise ConfigError("data_cfg", f"expected a mapping of groups, got {type(resolved).__name__}")
        resolved = ignore_strays(resolved)
        variable_keys = [key for key in raw if key != "data_cfg"]
    else:
        group_keys = [key for key in raw if key in GROUPS]
        variable_keys = [key for key in raw if key not in GROUPS]
        check_groups(group_keys, strays=[str(k) for k in variable_keys])
        resolved = ignore_strays({key: resolver.value(raw[key], f"data_cfg.{key}") for key in group_keys})

    data_cfg = DataConfig(resolved, source=source, settings=settings, paths=paths)
    iter_specs(data_cfg)
    data_cfg.variables = {key: resolver.cache[key] if key in resolver.cache
                          else resolver.value(raw[key], str(key), tolerant=True)
                          for key in variable_keys}
    return data_cfg


def _for_data_file(raw: dict, text: str) -> bool:
    """Whether an exp_cfg's override is meant for its data_cfg file: inside the groups, or a top-level
    variable the exp_cfg itself lacks (the file's own variables, or a typo the file's check answers)."""
    top = parse_override(text)[0].split(".")[0]
    near_setting = bool(did_you_mean(top, EXP_SETTINGS))  # `ngpus`: answered here, with the settings' names
    return _inside_groups(raw, text) or (top not in raw and top not in EXP_SETTINGS and top not in GROUPS
                                         and not near_setting)


def _inside_groups(raw: dict, text: str) -> bool:
    """Whether an override's key points inside the data groups (``data_cfg.x``, ``train.x`` ...)."""
    key = text.split("=", 1)[0].strip() if isinstance(text, str) else ""
    parts = key.split(".")
    in_group = parts[0] in GROUPS and not isinstance(raw.get(parts[0]), dict) and (len(parts) > 1 or parts[0] not in raw)
    return (parts[0] == "data_cfg" and len(parts) > 1) or in_group


def _exp_settings(raw: dict, resolver: Resolver) -> dict:
    """An exp_cfg's top-level run settings (EXP_SETTINGS), resolved and checked."""
    settings = {}
    for key, minimum in EXP_SETTINGS.items():
        if key in raw and raw[key] is not None:
            settings[key] = check_int(resolver.value(raw[key], key), key, minimum)
    return settings
