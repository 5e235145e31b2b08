"""Resolving ``type: file.Class`` strings to classes, and checking option names.

Resolution of ``resolve_class("iterator", name, ...)``:
  1. a built-in type: a name of BUILTIN_TYPES, or one of SpeeChain's names
     for it in ALIASES (``speech_text.RandomSpkFeatDataset``);
  2. user code by its dotted path (``my_lab.iterators.LongestFirst``),
     imported from sys.path and then from ``extra_dirs`` (the YAML file's folder).
An unknown name is answered with a did-you-mean and the list of built-in types.

NOTE [ extra_dirs and sys.path ]
A folder from ``extra_dirs`` is appended to sys.path for good (not removed
after the import): worker processes started with spawn re-import user classes
by module name, and multiprocessing copies the parent's sys.path into them.
Appending (not prepending) keeps it from shadowing installed modules.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Callable, Iterable, Mapping, Tuple, Union

from speechiter.checks import did_you_mean
from speechiter.errors import ConfigError

__all__ = ["BUILTIN_TYPES", "ALIASES", "builtin_types", "resolve_class", "add_search_dirs", "signature_names",
           "check_keywords"]

#: The built-in types, by kind: the name a YAML ``type`` / ``dataset_type`` gives -> the class's full path.
#: Only these names are built-in; the helper modules beside them are not types.
BUILTIN_TYPES = {
    "iterator": {
        "abs.Iterator": "speechiter.iterator.abs.Iterator",
        "block.BlockIterator": "speechiter.iterator.block.BlockIterator",
        "bucket.BucketIterator": "speechiter.iterator.bucket.BucketIterator",
        "mix.MixIterator": "speechiter.iterator.mix.MixIterator",
        "piece.PieceIterator": "speechiter.iterator.piece.PieceIterator",
    },
    "dataset": {
        "abs.Dataset": "speechiter.dataset.abs.Dataset",
        "random_spk.RandomSpkFeatDataset": "speechiter.dataset.random_spk.RandomSpkFeatDataset",
        "speech_text.SpeechTextDataset": "speechiter.dataset.speech_text.SpeechTextDataset",
    },
}
#: SpeeChain's names for built-in types (its module layout, and its older ``speech.`` sub-package) -> the name
ALIASES = {
    "iterator": {},
    "dataset": {
        "speech_text.RandomSpkFeatDataset": "random_spk.RandomSpkFeatDataset",
        "speech.speech_text.SpeechTextDataset": "speech_text.SpeechTextDataset",
        "speech.speech_text.RandomSpkFeatDataset": "random_spk.RandomSpkFeatDataset",
    },
}
_EXAMPLES = {"iterator": "block.BlockIterator", "dataset": "speech_text.SpeechTextDataset"}
_A = {"iterator": "an iterator", "dataset": "a dataset"}


def builtin_types(kind: str, types: Mapping | None = None) -> list:
    """The built-in type names of ``kind`` ("iterator" or "dataset"), sorted (aliases left out)."""
    return sorted((BUILTIN_TYPES if types is None else types)[kind])


class _NotFound(Exception):
    """The module itself does not exist (as opposed to failing inside)."""


def _import(module_name: str, path: str):
    """Import a module; _NotFound if it does not exist, ConfigError if its code fails."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            raise _NotFound(module_name) from None
        raise ConfigError(path, f"importing {module_name} failed: {_describe(error)}") from error
    except Exception as error:  # an ImportError, SyntaxError ... inside the module
        raise ConfigError(path, f"importing {module_name} failed: {_describe(error)}") from error
    except SystemExit as error:  # sys.exit() at import time; Ctrl-C (KeyboardInterrupt) still stops
        raise ConfigError(path, f"importing {module_name} ({_module_file(module_name)}) failed: the module "
                                f"called sys.exit({error.code!r}) while being imported"
                                f"{_called_at(error)}") from error


def _module_file(module_name: str) -> str:
    """The file a module is imported from, or its name when that cannot be told."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (Exception, SystemExit):  # a parent package that fails (or exits) again
        spec = None
    return getattr(spec, "origin", None) or module_name


def _called_at(error: BaseException) -> str:
    """`` (at file:line)``: the innermost Python frame of a traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    frames = [frame for frame in frames if not frame.filename.startswith("<frozen")]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _describe(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def add_search_dirs(extra_dirs: Iterable) -> None:
    """Append folders to sys.path for good. See NOTE [ extra_dirs and sys.path ]."""
    added = False
    for folder in extra_dirs:
        folder = str(Path(folder).absolute())
        if folder not in sys.path:
            sys.path.append(folder)
            added = True
    if added:
        importlib.invalidate_caches()


def _classes_in(module) -> dict:
    return {name: obj for name, obj in vars(module).items()
            if inspect.isclass(obj) and not name.startswith("_")}


def _hint_then(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` or ``";"``, to be followed by a listing."""
    return did_you_mean(word, candidates) or ";"


def _qualified(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def resolve_class(kind: str, name: str, path: str, base: Union[type, Tuple[type, ...]], extra_dirs: Iterable = (),
                  types: Mapping | None = None, aliases: Mapping | None = None) -> type:
    """The class named by ``name`` (a YAML ``type`` / ``dataset_type``), a subclass of ``base`` (or of one
    of several: errors name the first).

    ``name`` may also be the class itself (a data_cfg built in Python), which is only checked.
    ``kind`` is "iterator" or "dataset"; ``path`` is the YAML path used in errors;
    ``types`` and ``aliases`` replace BUILTIN_TYPES and ALIASES (tests point them elsewhere).
    """
    types = BUILTIN_TYPES if types is None else types
    aliases = ALIASES if aliases is None else aliases
    if kind not in types:
        raise ValueError(f"kind should be one of {sorted(types)}, got {kind!r}")
    if inspect.isclass(name):
        if not issubclass(name, base):
            raise ConfigError(path, f"{_qualified(name)} is not a subclass of {_first(base)}")
        return name
    if not isinstance(name, str) or "." not in name.strip(".") or any(not p for p in name.split(".")):
        raise ConfigError(path, f"expected file.Class (e.g. {_EXAMPLES.get(kind, 'file.Class')}), got {name!r}")
    builtin = types[kind].get(aliases.get(kind, {}).get(name, name))
    if builtin is not None:
        module_name, class_name = builtin.rsplit(".", 1)
        return _checked(getattr(_import(module_name, path), class_name), name, path, base)

    module_part, class_name = name.rsplit(".", 1)
    try:  # user code by full dotted path: sys.path first, then extra_dirs
        user = _import(module_part, path)
    except _NotFound:
        add_search_dirs(extra_dirs)
        try:
            user = _import(module_part, path)
        except _NotFound:
            user = None
    if user is not None and hasattr(user, class_name):
        return _checked(getattr(user, class_name), name, path, base)
    if user is not None:  # the module exists, the class does not
        classes = _classes_in(user)
        own = [n for n, c in classes.items() if c.__module__ == user.__name__]
        subclasses = [n for n in own if _is_subclass(classes[n], base)] or own
        message = f"module {user.__name__} has no class {class_name!r}"
        if subclasses:
            message += f"{_hint_then(class_name, classes)} classes: {', '.join(sorted(subclasses))}"
        raise ConfigError(path, message)

    other = [k for k in types if k != kind and aliases.get(k, {}).get(name, name) in types[k]]
    if other:
        raise ConfigError(path, f"{name} is {_A[other[0]]} type, expected {_A.get(kind, kind)} type here "
                                f"(e.g. {_EXAMPLES.get(kind, 'file.Class')})")
    known = builtin_types(kind, types)
    searched = ", ".join(str(Path(d).absolute()) for d in extra_dirs)
    raise ConfigError(path, f"unknown {kind} type {name!r}{_hint_then(name, [*known, *aliases.get(kind, {})])}"
                            f" built-ins: {', '.join(known) or 'none'}; and no module {module_part!r} importable "
                            f"from sys.path{' or ' + searched if searched else ''}")


def _first(base: Union[type, Tuple[type, ...]]) -> str:
    """The base class an error names (the first of several)."""
    return _qualified(base[0] if isinstance(base, tuple) else base)


def _is_subclass(obj, base: Union[type, Tuple[type, ...]]) -> bool:
    return inspect.isclass(obj) and issubclass(obj, base)


def _checked(obj, name: str, path: str, base: Union[type, Tuple[type, ...]]) -> type:
    if not inspect.isclass(obj):
        raise ConfigError(path, f"{name} resolves to {getattr(obj, '__module__', '?')}."
                          f"{getattr(obj, '__qualname__', name)}, which is not a class")
    if not issubclass(obj, base):
        raise ConfigError(path, f"{name} resolves to {_qualified(obj)}, which is not a subclass "
                          f"of {_first(base)}")
    return obj


# --- Option names against signatures ---------------------------------------

def signature_names(function: Callable) -> tuple:
    """``(names, required, catch_all)`` of what a callable accepts by keyword.

    ``self`` / ``cls`` (first parameter of a plain function), positional-only
    parameters and ``*args`` are left out; ``catch_all`` is True with ``**kwargs``.
    """
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return [], [], True  # no signature to check against: accept anything
    if parameters and parameters[0].name in ("self", "cls") and inspect.isfunction(function):
        parameters = parameters[1:]
    names, required, catch_all = [], [], False
    for parameter in parameters:
        if parameter.kind is parameter.VAR_KEYWORD:
            catch_all = True
        elif parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            names.append(parameter.name)
            if parameter.default is parameter.empty:
                required.append(parameter.name)
    return names, required, catch_all


def _function_label(function: Callable) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def check_keywords(kwargs: dict, functions: list, path: str, reserved: Iterable[str] = ()) -> None:
    """Check YAML options against the callables that will receive them.

    Every key must be a parameter of at least one function (or in
    ``reserved``), unless all the functions take ``**kwargs``. A parameter
    without a default in the function that declares it must be given, unless
    it is reserved (the caller supplies reserved names itself).
    Errors: ``<path>.<key>: unknown option; did you mean 'x'? accepted: a, b``
    and ``<path>.<name>: missing required option (no default in F)``.
    """
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise ConfigError(path, f"expected a mapping of options, got {type(kwargs).__name__}")
    reserved = list(reserved)
    accepted = list(reserved)
    required = {}  # name -> the function that needs it
    all_catch_all = True
    for function in functions:
        names, needed, catch_all = signature_names(function)
        all_catch_all = all_catch_all and catch_all
        accepted += [n for n in names if n not in accepted]
        for name in needed:
            required.setdefault(name, function)

    if not all_catch_all:
        for key in kwargs:
            if key not in accepted:
                raise ConfigError(f"{path}.{key}", f"unknown option{_hint_then(str(key), accepted)}"
                                  f" accepted: {', '.join(sorted(accepted)) or 'none'}")
    for name, function in required.items():
        if name not in kwargs and name not in reserved:
            raise ConfigError(f"{path}.{name}", f"missing required option (no default in "
                              f"{_function_label(function)})")
