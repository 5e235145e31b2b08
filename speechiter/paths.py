"""Where a path points: one policy per recipe, and the explanation when a path is missing.

:class:`PathPolicy` is made once per recipe (``load_config`` keeps it as
``DataConfig.paths``) and used by the config loader, ``build_iterators`` and
the feature presets; see NOTE [ Path policy ]. A Dataset or Iterator declares
which of its options are files with ``file_options`` (see :func:`file_options`).
Values inside idx2 files follow speechiter/data_paths.py (its names are
re-exported here).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Union

from speechiter.data_paths import check_data_file, check_regular_file, resolve_data_path
from speechiter.errors import ConfigError
from speechiter.io.source import split_chunk_key
from speechiter.io.storage import is_url
from speechiter.messages import say

__all__ = ["PathPolicy", "speechain_root_path", "file_options", "FILES", "NAMED_FILES", "SELECTION", "YAML_FILE",
           "PRESETS_DIR", "find_preset", "is_preset", "check_files",
           "split_chunk_key", "resolve_data_path", "check_data_file", "check_regular_file"]

PathLike = Union[str, os.PathLike]


# NOTE [ Path policy ]
# Where a relative path of a recipe points, by what names it (one rule each, all here):
#   the recipe file (--data_cfg, load_config)   $SPEECHAIN_ROOT/<path> if that file exists, else the current folder
#   an exp_cfg's ``data_cfg: <file>``           $SPEECHAIN_ROOT/<path>, else the exp_cfg's folder
#   a file option (declared in file_options)    $SPEECHAIN_ROOT/<path>, which must exist; without the root, as
#                                               any other option value (next line); then checked to exist
#   any other option value naming a file        the YAML file's folder; else, if only the current folder has
#                                               it, the current folder with a warning (never silently)
#   a feat_conf YAML file                       as above, then the shipped presets (config/feat/..., feat/...)
#   a value inside an idx2 file                 the idx2 file's folder (resolve_data_path in data_paths.py)
# A path not found says where it was looked for (PathPolicy.tried); one found only from the current folder
# is reported once per build_iterators, in one line (PathPolicy.warn_found_here).
# $SPEECHAIN_ROOT (SpeeChain's parse_path_args) applies to a relative path that does not start with '.': with
# the root set, ./x and ../x name the current folder. User modules (file.Class) are imported from sys.path,
# then from the YAML file's folder (PathPolicy.code_dirs; see speechiter/registry.py).

#: shapes of a file option: a path or a list of them; {name: path or list}; data_selection rules, whose third
#: item is a file; a YAML file (shipped presets included) or an inline mapping
FILES, NAMED_FILES, SELECTION, YAML_FILE = "files", "named files", "selection", "yaml file"
#: the shipped presets (package data, so they survive ``pip install .``); the repo's config/feat links here
PRESETS_DIR = Path(__file__).resolve().parent / "presets"


def file_options(cls: type) -> Dict[str, str]:
    """``{option: shape}`` of a class: the ``file_options`` declared along its MRO (a subclass adds its own)."""
    declared: Dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        declared.update(vars(klass).get("file_options") or {})
    return declared


@dataclass(frozen=True)
class PathPolicy:
    """The path rules of one recipe (NOTE [ Path policy ]).

    ``folder``: the YAML file's folder, or the ``root`` given to build_iterators with a plain dict (None:
    the current folder); ``root``: ``$SPEECHAIN_ROOT`` when the recipe was loaded (None when unset);
    ``folder_name``: what messages call the folder.
    """

    folder: Optional[Path] = None
    root: Optional[str] = None
    folder_name: str = "the YAML file's folder"

    @classmethod
    def from_environment(cls, folder: Optional[PathLike] = None) -> "PathPolicy":
        return cls(Path(folder) if folder is not None else None, os.environ.get("SPEECHAIN_ROOT") or None)

    def in_folder(self, folder: PathLike) -> "PathPolicy":
        return PathPolicy(Path(folder), self.root)

    def code_dirs(self) -> list:
        """Folders to import user modules from, after sys.path."""
        return [str(self.folder)] if self.folder else []

    def rooted(self, value: Any) -> Optional[str]:
        """``$SPEECHAIN_ROOT/value`` for a relative path that does not start with '.'; None otherwise
        (absolute, './x', '../x', no root, not a string)."""
        if not self.root or not isinstance(value, str) or not value or os.path.isabs(value) or value.startswith("."):
            return None
        return os.path.join(self.root, value)

    def recipe_file(self, path: PathLike) -> Path:
        """The recipe a user names: under $SPEECHAIN_ROOT when it is there (SpeeChain's runner reads
        ``--config recipes/asr/...`` from any folder), else from the current folder."""
        rooted = self.rooted(str(path)) if isinstance(path, (str, Path)) else None
        if rooted is not None and Path(rooted).is_file():
            return Path(rooted).absolute()
        return Path(path).expanduser().absolute()

    def included_file(self, value: str) -> Path:
        """An exp_cfg's ``data_cfg: <file>``: $SPEECHAIN_ROOT-relative, else relative to the exp_cfg's folder."""
        rooted = self.rooted(value)
        target = Path(rooted) if rooted is not None else self.folder / Path(value).expanduser()
        if not target.is_file():
            rule = ("relative to $SPEECHAIN_ROOT" if rooted is not None else
                    "absolute" if Path(value).expanduser().is_absolute() else "relative to the exp_cfg's folder")
            what = "is a folder, not a YAML file" if target.is_dir() else "no such file"
            raise ConfigError("data_cfg", f"{value!r} ({rule}): {target} {what}")
        return target

    def options(self, conf: Dict[str, Any], declared: Mapping[str, str], where: str,
                found_here: Optional[list] = None) -> Dict[str, Any]:
        """``conf`` (a class's options) with its paths resolved: the ``declared`` file options joined to
        $SPEECHAIN_ROOT, then every value against the YAML file's folder (see :meth:`value`)."""
        conf = dict(conf)
        for key, shape in declared.items():
            if conf.get(key) is not None:
                conf[key] = self._rooted_option(conf[key], shape, f"{where}.{key}")
        return {key: self.value(value, f"{where}.{key}", found_here) for key, value in conf.items()}

    def _rooted_option(self, value, shape: str, where: str):
        if shape == NAMED_FILES:
            return {k: self._rooted_files(v, f"{where}.{k}") for k, v in value.items()} \
                if isinstance(value, dict) else value
        if shape == SELECTION:
            if not isinstance(value, list) or not value:
                return value
            nested = isinstance(value[0], (list, tuple))
            rules = [[*r[:2], self._rooted_file(r[2], f"{where}[{i}]"), *r[3:]]
                     if isinstance(r, (list, tuple)) and len(r) > 2 else r
                     for i, r in enumerate(value if nested else [value])]
            return rules if nested else rules[0]
        return self._rooted_files(value, where)  # FILES, YAML_FILE

    def _rooted_files(self, value, where: str):
        if isinstance(value, list):
            return [self._rooted_file(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return self._rooted_file(value, where)

    def _rooted_file(self, value, where: str):
        path = self.rooted(value)
        if path is None:
            return value
        if not os.path.exists(path):
            raise ConfigError(where, f"file not found: {path} ({value!r} is relative to $SPEECHAIN_ROOT="
                                     f"{self.root}; write ./{value} for the current folder)")
        return path

    def value(self, value, where: str = "", found_here: Optional[list] = None):
        """A relative path (a string with '/' or '.') in the YAML file's folder, when there; one found only
        from the current folder is used, never silently, so that a copy of the corpus beside the current
        folder cannot replace the recipe's (SpeeChain recipes run from the toolkit root without
        $SPEECHAIN_ROOT rely on it): its ``(where, value)`` is added to ``found_here``, which the caller
        reports once (:meth:`warn_found_here`); without that list, it is reported at once. Mappings and
        lists are walked."""
        if isinstance(value, dict):
            return {k: self.value(v, f"{where}.{k}", found_here) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, f"{where}[{i}]", found_here) for i, v in enumerate(value)]
        folder = self.folder
        if isinstance(value, str) and folder is not None and not os.path.isabs(value) and ("/" in value or "." in value):
            if self.root and value.startswith("."):
                return value  # SpeeChain's rule: with $SPEECHAIN_ROOT set, ./x and ../x name the current folder
            file = value.split(":")[0]
            if (folder / file).exists():
                return str(folder / value)
            if os.path.exists(file) and not is_preset(file):  # presets: found wherever the run starts
                if found_here is None:
                    self.warn_found_here([(where, value)])
                else:
                    found_here.append((where, value))
        return value

    def warn_found_here(self, found: list) -> None:
        """One line on stderr for the ``(where, value)`` paths found only from the current folder."""
        if not found:
            return
        first = f"{found[0][0].lstrip('.')}: {found[0][1]!r}"
        what = f"{len(found)} paths (first {first}) are" if len(found) > 1 else f"{first} is"
        cwd = os.getcwd()
        hint = (f"; export SPEECHAIN_ROOT={cwd} to read them from there by SpeeChain's rule"
                if not self.root and any(_speechain_shaped(v) for _, v in found) else "")
        say(f"speechiter: warning: {what} not in {self.folder_name} ({self.folder}); read from the "
            f"current folder ({cwd}){hint}")

    def tried(self, value: str, recipe: bool = False) -> str:
        """Why the relative path ``value`` was not found: the folders looked in and, for a path shaped like
        a SpeeChain recipe's, what sets them right. ``recipe``: ``value`` names the recipe file."""
        if os.path.isabs(value) or is_url(value):
            return ""
        cwd = f"the current folder {os.getcwd()}"
        rooted = self.rooted(value)
        if rooted is not None:
            looked = f"$SPEECHAIN_ROOT={self.root}" + (f" and {cwd}" if recipe else "")
        elif self.folder is not None and not recipe and ("/" in value or "." in value) \
                and not (self.root and value.startswith(".")):  # see value()
            looked = f"{self.folder_name} {self.folder} and {cwd}"
        else:
            looked = cwd
        hint = ("; a SpeeChain recipe names its files from the SpeeChain folder: "
                "export SPEECHAIN_ROOT=/path/to/SpeeChain" if not self.root and _speechain_shaped(value) else "")
        return f" (looked in {looked}){hint}"

    def check_files(self, conf: Dict[str, Any], declared: Mapping[str, str], where: str) -> None:
        """:func:`check_files`, a missing relative file explained by :meth:`tried`."""
        check_files(conf, declared, where, self.tried)


#: how a SpeeChain recipe's relative paths start (they are meant relative to $SPEECHAIN_ROOT)
SPEECHAIN_PREFIXES = ("datasets/", "recipes/")


def _speechain_shaped(value: str) -> bool:
    return isinstance(value, str) and value.startswith(SPEECHAIN_PREFIXES)


def check_files(conf: Dict[str, Any], declared: Mapping[str, str], where: str,
                explain: Callable[[str], str] = lambda file: "") -> None:
    """Raise ConfigError naming the option unless each file of the ``declared`` FILES and NAMED_FILES
    options of ``conf`` exists (the others are checked by what reads them); ``explain(file)`` ends the
    message (see :meth:`PathPolicy.tried`)."""
    for key, shape in declared.items():
        value = conf.get(key)
        if shape == FILES and value is not None:
            _check_exist(value, f"{where}.{key}", explain)
        elif shape == NAMED_FILES and isinstance(value, dict):
            for name, files in value.items():
                _check_exist(files, f"{where}.{key}.{name}", explain)


def _check_exist(files, where: str, explain: Callable[[str], str]) -> None:
    for i, file in enumerate([files] if isinstance(files, str) else files if isinstance(files, list) else [files]):
        if not isinstance(file, str):
            raise ConfigError(where, f"expected a file path or a list of them, got {file!r}")
        if not os.path.isfile(file):
            raise ConfigError(where if isinstance(files, str) else f"{where}[{i}]",
                              f"file not found: {file}{explain(file)}")


def speechain_root_path(value) -> Optional[str]:
    """SpeeChain's rule under the current $SPEECHAIN_ROOT (see :meth:`PathPolicy.rooted`)."""
    return PathPolicy.from_environment().rooted(value)


def _preset_candidates(given: Path) -> list:
    if given.is_absolute():
        return []
    return [PRESETS_DIR / given] + ([PRESETS_DIR.joinpath(*given.parts[1:])] if given.parts[:1] == ("config",)
                                    else [])


def find_preset(value: PathLike) -> Optional[Path]:
    """The shipped preset ``value`` names (``config/feat/...`` or ``feat/...``), or None."""
    return next((p for p in _preset_candidates(Path(value)) if p.is_file()), None)


def is_preset(value: PathLike) -> bool:
    """Whether ``value`` names a shipped preset."""
    return find_preset(value) is not None
