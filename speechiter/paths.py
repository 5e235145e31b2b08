"""Where a path points: one policy per recipe, and the rule for idx2 data values.

:class:`PathPolicy` is made once per recipe (``load_config`` keeps it as
``DataConfig.paths``) and used by the config loader, ``build_iterators`` and
the feature presets; see NOTE [ Path policy ]. A Dataset or Iterator declares
which of its options are files with ``file_options`` (see :func:`file_options`).

A data value is a file path, relative to the idx2 file's folder or absolute,
or a URL (``s3://``, ``gs://``, ``http(s)://``; see :mod:`speechiter.io.storage`),
optionally naming an entry of a chunk file: ``chunk_000.hdf5:<key>``,
``feats.npz:<key>``, and optionally ending in a time range ``#t=<start>,<end>``
(see NOTE [ Segment values ] in speechiter/io/source.py). Values of a main_data
file named ``segments`` are Kaldi segments (see NOTE [ Kaldi segments ]).
"""
from __future__ import annotations

import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from speechiter.errors import ConfigError, DataError
from speechiter.io.kaldi_segments import is_kaldi_segments, kaldi_segment_value
from speechiter.io.source import split_chunk_key
from speechiter.io.storage import is_url

__all__ = ["PathPolicy", "speechain_root_path", "file_options", "FILES", "NAMED_FILES", "SELECTION", "YAML_FILE",
           "PRESETS_DIR", "find_preset", "is_preset",
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
#   a value inside an idx2 file                 the idx2 file's folder (resolve_data_path)
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

    ``folder``: the YAML file's folder (None for a data_cfg given as a plain dict); ``root``:
    ``$SPEECHAIN_ROOT`` when the recipe was loaded (None when unset).
    """

    folder: Optional[Path] = None
    root: Optional[str] = None

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

    def options(self, conf: Dict[str, Any], declared: Mapping[str, str], where: str) -> Dict[str, Any]:
        """``conf`` (a class's options) with its paths resolved: the ``declared`` file options joined to
        $SPEECHAIN_ROOT, then every value against the YAML file's folder (see :meth:`value`)."""
        conf = dict(conf)
        for key, shape in declared.items():
            if conf.get(key) is not None:
                conf[key] = self._rooted_option(conf[key], shape, f"{where}.{key}")
        return {key: self.value(value, f"{where}.{key}") for key, value in conf.items()}

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

    def value(self, value, where: str = ""):
        """A relative path (a string with '/' or '.') in the YAML file's folder, when there; one found only
        from the current folder is used with a warning naming both folders (SpeeChain recipes run from the
        toolkit root without $SPEECHAIN_ROOT rely on it); never silently, so that a copy of the corpus
        beside the current folder cannot replace the recipe's. Mappings and lists are walked."""
        if isinstance(value, dict):
            return {k: self.value(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, f"{where}[{i}]") for i, v in enumerate(value)]
        folder = self.folder
        if isinstance(value, str) and folder is not None and not os.path.isabs(value) and ("/" in value or "." in value):
            if self.root and value.startswith("."):
                return value  # SpeeChain's rule: with $SPEECHAIN_ROOT set, ./x and ../x name the current folder
            file = value.split(":")[0]
            if (folder / file).exists():
                return str(folder / value)
            if os.path.exists(file) and not is_preset(file):  # presets: found wherever the run starts
                warnings.warn(f"{where.lstrip('.')}: {value!r} is not in the YAML file's folder ({folder}); using "
                              f"{os.path.abspath(file)} from the current folder", stacklevel=3)
        return value


def check_files(conf: Dict[str, Any], declared: Mapping[str, str], where: str) -> None:
    """Raise ConfigError naming the option unless each file of the ``declared`` FILES and NAMED_FILES
    options of ``conf`` exists (the others are checked by what reads them)."""
    for key, shape in declared.items():
        value = conf.get(key)
        if shape == FILES and value is not None:
            _check_exist(value, f"{where}.{key}")
        elif shape == NAMED_FILES and isinstance(value, dict):
            for name, files in value.items():
                _check_exist(files, f"{where}.{key}.{name}")


def _check_exist(files, where: str) -> None:
    for i, file in enumerate([files] if isinstance(files, str) else files if isinstance(files, list) else [files]):
        if not isinstance(file, str):
            raise ConfigError(where, f"expected a file path or a list of them, got {file!r}")
        if not os.path.isfile(file):
            raise ConfigError(where if isinstance(files, str) else f"{where}[{i}]", f"file not found: {file}")


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


def resolve_data_path(value: PathLike, idx2_path: PathLike) -> str:
    """Resolve a data value from an idx2 file against that file's folder.

    Relative file paths are joined to ``dirname(idx2_path)``; for chunk
    entries (``file.hdf5:key``, ``file.npz:key``) only the file part is
    resolved and the key (and a ``#t=`` suffix) is kept. Absolute paths and
    URLs are returned unchanged. In a file named ``segments`` a value is
    ``<recording> <start> <end>``, looked up in the wav.scp beside it; relative
    wav.scp paths resolve against the current folder, as in Kaldi.
    """
    value, idx2_path = os.fspath(value), os.fspath(idx2_path)
    if is_kaldi_segments(idx2_path):
        return kaldi_segment_value(value, idx2_path)
    if is_url(value):
        return value
    file, key = split_chunk_key(value)
    if os.path.isabs(file):
        return value
    file = os.path.normpath(os.path.join(os.path.dirname(idx2_path), file))
    return file if key is None else f"{file}:{key}"


def check_data_file(file: str) -> None:
    """Raise DataError naming ``file`` unless it is an existing regular file
    (URLs are checked when read)."""
    if not is_url(file):
        check_regular_file(file, "a data file")


# Reading a FIFO blocks until a writer comes (forever, inline); /dev/zero never
# ends; a socket cannot be opened. So only regular files are read.
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def check_regular_file(file: str, expected: str = "a regular file") -> None:
    """Raise DataError naming ``file`` unless it exists and is a regular file
    (symbolic links are followed); call it before opening a file to read.
    ``expected`` names what the file should be (``"an idx2 file"``)."""
    try:
        mode = os.stat(file).st_mode
    except FileNotFoundError:
        raise DataError(f"{file}: no such file") from None
    except OSError as e:
        raise DataError(f"{file}: cannot read it ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise DataError(f"{file}: is {kind}, expected {expected}")
