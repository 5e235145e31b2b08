"""build_iterators: a loaded data_cfg in, Iterator objects out.

Resolves the ``type`` and ``dataset_type`` classes, checks every ``conf`` and
``dataset_conf`` key against the parameters of the class and its hooks (with
a did-you-mean), checks that the files exist, and reports every error with
its YAML path.
"""
import inspect
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple

from speechiter.config import config_dir, iter_specs, iterator_label, speechain_root_path
from speechiter.features import is_preset
from speechiter.dataset.abs import Dataset
from speechiter.errors import ConfigError
from speechiter.group import IteratorGroup
from speechiter.iterator.abs import Iterator
from speechiter.registry import check_keywords, resolve_class

# Iterator parameters the run supplies; a data_cfg conf may still set them.
RUN_SETTINGS = ("seed", "ngpu", "num_workers", "pin_memory", "distributed", "rank", "world_size", "engine",
                "thread_type", "out_type", "buffer", "start_method")


def build_iterators(data_cfg, seed: Optional[int] = None, num_workers: Optional[int] = None, groups=None,
                    **settings) -> Dict[str, Any]:
    """Build every iterator of ``data_cfg`` (from :func:`speechiter.load_config`).

    Returns ``{"train": Iterator | {name: Iterator}, "valid": ..., "test": {set: Iterator | {name: Iterator}}}``
    for the groups present (or those named in ``groups``); named iterators come as an
    :class:`speechiter.group.IteratorGroup` (a dict with the group's ``steps`` policy). valid and test
    iterators are built with ``evaluation=True`` (see Iterator). ``settings`` are
    further Iterator arguments for every iterator: ngpu, engine, thread_type, start_method,
    out_type, buffer, distributed, rank, world_size, pin_memory.

    ``seed``, ``num_workers`` and ``ngpu`` left out come from the exp_cfg's top level
    (``DataConfig.settings``: seed, ngpu, ``<group>_num_workers`` or num_workers), else 0, 1 and 1.
    """
    unknown = sorted(set(settings) - set(RUN_SETTINGS))
    if unknown:
        raise TypeError(f"build_iterators() got unexpected settings {', '.join(unknown)}; "
                        f"accepted: {', '.join(RUN_SETTINGS)}")
    folder = config_dir(data_cfg)
    exp = getattr(data_cfg, "settings", {})
    seed = exp.get("seed", 0) if seed is None else seed
    if "ngpu" in exp:
        settings.setdefault("ngpu", exp["ngpu"])
    result: Dict[str, Any] = {}
    try:
        for spec in iter_specs(data_cfg):
            if groups is not None and spec.group not in groups:
                continue
            workers = exp.get(f"{spec.group}_num_workers", exp.get("num_workers", 1)) if num_workers is None \
                else num_workers
            runtime = dict(settings, seed=seed, num_workers=workers, evaluation=spec.group != "train")
            iterator = build_one(spec, runtime, folder)
            _place(result, spec, iterator)
    except BaseException:
        close_all(result)
        raise
    return result


def build_one(spec, runtime: Dict[str, Any], folder: Optional[Path]) -> Iterator:
    extra_dirs = [str(folder)] if folder else []
    cls = resolve_class("iterator", spec.type, f"{spec.path}.type", base=Iterator, extra_dirs=extra_dirs)
    conf_path = f"{spec.path}.conf"
    conf = _resolve_paths(_rooted_paths(dict(spec.conf), conf_path), folder, conf_path)
    if "dataset_type" not in conf:
        raise ConfigError(f"{conf_path}.dataset_type", "missing; every iterator needs dataset_type: file.Class "
                                                       "(e.g. speech_text.SpeechTextDataset)")
    if not isinstance(conf["dataset_type"], str):
        raise ConfigError(f"{conf_path}.dataset_type", f"expected file.Class, got {conf['dataset_type']!r}")
    dataset_cls = resolve_class("dataset", conf["dataset_type"], f"{conf_path}.dataset_type", base=Dataset,
                                extra_dirs=extra_dirs)
    dataset_conf = conf.get("dataset_conf") or {}
    if not isinstance(dataset_conf, dict):
        raise ConfigError(f"{conf_path}.dataset_conf", f"expected a mapping, got {dataset_conf!r}")

    iter_options = {k: v for k, v in conf.items() if k not in ("dataset_type", "dataset_conf")}
    check_keywords(iter_options, [_without(cls.__init__, "self", "dataset_type", "dataset_conf", "name"),
                                  _without(cls.batches_generate_fn, "self", "data_index", "data_len")],
                   conf_path)
    check_keywords(dataset_conf, [_without(dataset_cls.__init__, "self"), _without(dataset_cls.dataset_init_fn, "self")],
                   f"{conf_path}.dataset_conf")
    _check_files(conf, conf_path)

    dataset_conf = dict(dataset_conf)
    dataset_conf.setdefault("seed", runtime.get("seed", 0))
    kwargs = {**runtime, **iter_options}
    try:
        return cls(dataset_type=_prefixed(dataset_cls, f"{conf_path}.dataset_conf"), dataset_conf=dataset_conf,
                   name=spec.label, **kwargs)
    except ConfigError as e:
        if e.path.startswith("data_cfg"):
            raise
        raise ConfigError(f"{conf_path}.{e.path}", e.message) from None


# --- Walking a build_iterators() result ------------------------------------
# {group: Iterator | {name: Iterator}}, test: {set: Iterator | {name: Iterator}}

def iterators_of(group_value) -> Dict[Optional[str], Iterator]:
    """``{name: Iterator}`` of one group (or test set); the name is None for a single iterator."""
    if isinstance(group_value, Iterator):
        return {None: group_value}
    return dict(group_value)


def iterator_groups(iterators: Dict[str, Any]) -> Iterable[Tuple[str, Optional[str], Dict[Optional[str], Iterator]]]:
    """``(group, test set or None, {name: Iterator})`` of every group and test set, in order."""
    for group, value in iterators.items():
        if group == "test":
            for set_name, set_value in value.items():
                yield group, set_name, iterators_of(set_value)
        else:
            yield group, None, iterators_of(value)


def flat_iterators(iterators: Dict[str, Any]) -> Iterable[Tuple[str, Iterator]]:
    """``(label, Iterator)`` of every iterator: ``train``, ``train/sup``, ``test/clean/asr`` ..."""
    for group, set_name, named in iterator_groups(iterators):
        for name, iterator in named.items():
            yield iterator_label(group, set_name, name), iterator


def close_all(iterators: Dict[str, Any]):
    """Close every Iterator in a build_iterators() result."""
    for _, iterator in flat_iterators(iterators):
        iterator.close()


def _place(result, spec, iterator):
    if spec.group == "test":
        target = result.setdefault("test", {})
        key = spec.set_name
    else:
        target, key = result, spec.group
    if spec.name is None:
        target[key] = iterator
    else:
        target.setdefault(key, IteratorGroup(steps=spec.steps))[spec.name] = iterator


def _prefixed(dataset_cls, path: str):
    """Build the dataset, naming ``path`` in its configuration errors."""
    def build(**conf):
        try:
            return dataset_cls(**conf)
        except ConfigError as e:
            if e.path.startswith("data_cfg"):
                raise
            raise ConfigError(f"{path}.{e.path}", e.message) from None
    build.__name__ = dataset_cls.__name__
    return build


def _without(func, *names):
    """A stand-in for ``func`` whose signature lacks ``names`` (filled by the framework)."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.name not in names]

    def stand_in(*args, **kwargs):
        pass
    stand_in.__signature__ = signature.replace(parameters=params)
    stand_in.__qualname__ = getattr(func, "__qualname__", "function")
    return stand_in


# The file options of a conf, by place (see NOTE [ SPEECHAIN_ROOT ] in the handbook):
# (dict key chain, shape): "files": a path or a list; "dict": {name: path or list}; "selection": rules.
_FILE_OPTIONS = ((("data_len",), "files"), (("group_info",), "dict"), (("dataset_conf", "main_data"), "dict"),
                 (("dataset_conf", "spk_feat"), "files"), (("dataset_conf", "feat_conf"), "files"),
                 (("dataset_conf", "data_selection"), "selection"))


def _rooted_paths(conf: Dict[str, Any], conf_path: str) -> Dict[str, Any]:
    """``conf`` with the relative file options joined to $SPEECHAIN_ROOT (speechain_root_path); each joined
    file must exist, and the error names the rule."""
    if not os.environ.get("SPEECHAIN_ROOT"):
        return conf

    def rooted(value, where):
        path = speechain_root_path(value)
        if path is None:
            return value
        if not os.path.exists(path):
            raise ConfigError(where, f"file not found: {path} ({value!r} is relative to $SPEECHAIN_ROOT="
                                     f"{os.environ['SPEECHAIN_ROOT']}; write ./{value} for the current folder)")
        return path

    def files(value, where):
        if isinstance(value, list):
            return [rooted(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return rooted(value, where)

    conf = dict(conf)
    for keys, shape in _FILE_OPTIONS:
        parent = conf
        for key in keys[:-1]:
            if not isinstance(parent.get(key), dict):
                parent = None
                break
            parent[key] = parent = dict(parent[key])
        if parent is None or parent.get(keys[-1]) is None:
            continue
        value, where = parent[keys[-1]], f"{conf_path}.{'.'.join(keys)}"
        if shape == "files":
            parent[keys[-1]] = files(value, where)
        elif shape == "dict" and isinstance(value, dict):
            parent[keys[-1]] = {k: files(v, f"{where}.{k}") for k, v in value.items()}
        elif shape == "selection" and isinstance(value, list) and value:
            rules = value if isinstance(value[0], (list, tuple)) else [value]
            rules = [[*r[:2], rooted(r[2], f"{where}[{i}]")] + list(r[3:]) if isinstance(r, (list, tuple))
                     and len(r) > 2 else r for i, r in enumerate(rules)]
            parent[keys[-1]] = rules if isinstance(value[0], (list, tuple)) else rules[0]
    return conf


def _resolve_paths(value, folder: Optional[Path], where: str = ""):
    """Relative paths resolve against the YAML file's folder.

    A path found only from the current folder is used with a warning naming both folders (SpeeChain
    recipes run from the toolkit root without $SPEECHAIN_ROOT rely on it); never silently, so that a
    copy of the corpus beside the current folder cannot replace the recipe's.
    """
    if isinstance(value, dict):
        return {k: _resolve_paths(v, folder, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_paths(v, folder, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str) and folder is not None and not os.path.isabs(value) and ("/" in value or "." in value):
        if os.environ.get("SPEECHAIN_ROOT") and value.startswith("."):
            return value  # SpeeChain's rule: with $SPEECHAIN_ROOT set, ./x and ../x name the current folder
        file = value.split(":")[0]
        if (folder / file).exists():
            return str(folder / value)
        if os.path.exists(file) and not is_preset(file):  # presets: found wherever the run starts
            warnings.warn(f"{where.lstrip('.')}: {value!r} is not in the YAML file's folder ({folder}); using "
                          f"{os.path.abspath(file)} from the current folder", stacklevel=2)
    return value


def _check_files(conf: Dict[str, Any], conf_path: str):
    dataset_conf = conf.get("dataset_conf") or {}
    main_data = dataset_conf.get("main_data")
    if isinstance(main_data, dict):
        for key, files in main_data.items():
            _check_exists(files, f"{conf_path}.dataset_conf.main_data.{key}")
    if conf.get("data_len") is not None:
        _check_exists(conf["data_len"], f"{conf_path}.data_len")
    if isinstance(conf.get("group_info"), dict):
        for key, files in conf["group_info"].items():
            _check_exists(files, f"{conf_path}.group_info.{key}")


def _check_exists(files, path: str):
    for i, file in enumerate([files] if isinstance(files, str) else files if isinstance(files, list) else [files]):
        if not isinstance(file, str):
            raise ConfigError(path, f"expected a file path or a list of them, got {file!r}")
        if not os.path.isfile(file):
            where = path if isinstance(files, str) else f"{path}[{i}]"
            raise ConfigError(where, f"file not found: {file}")
