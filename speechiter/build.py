"""build_iterators: a loaded data_cfg in, Iterator objects out.

Resolves the ``type`` and ``dataset_type`` classes, resolves the relative paths
of their options by the recipe's PathPolicy (the file options each class
declares; see NOTE [ Path policy ] in speechiter/paths.py), checks every
``conf`` and ``dataset_conf`` key against the parameters of the class and its
hooks (with a did-you-mean), checks that the declared files exist, and reports
every error with its YAML path.
"""
import contextlib
import dataclasses
import inspect
import os
from typing import Any, Dict, Iterable, Optional, Tuple

from speechiter.config import config_dir, iter_specs, iterator_label
from speechiter.config.groups import nested_specs
from speechiter.dataset.abs import Dataset
from speechiter.errors import ConfigError, DataError
from speechiter.group import IteratorGroup
from speechiter.iterator.abs import Iterator
from speechiter.iterator.loadable import Loadable
from speechiter.iterator.mix import MixIterator
from speechiter.messages import say
from speechiter.paths import PathPolicy, file_options
from speechiter.registry import check_keywords, resolve_class

# Iterator parameters the run supplies; a data_cfg conf may still set them.
RUN_SETTINGS = ("seed", "ngpu", "num_workers", "pin_memory", "distributed", "rank", "world_size", "engine",
                "thread_type", "out_type", "buffer", "start_method", "hedge", "worker_threads")


def build_iterators(data_cfg, seed: Optional[int] = None, num_workers: Optional[int] = None, groups=None,
                    root=None, **settings) -> Dict[str, Any]:
    """Build every iterator of ``data_cfg`` (from :func:`speechiter.load_config`, or a dict made in Python,
    whose ``type`` and ``dataset_type`` may be the classes themselves).

    Returns ``{"train": Iterator | {name: Iterator}, "valid": ..., "test": {set: Iterator | {name: Iterator}}}``
    (a ``mix.MixIterator`` where the data_cfg has one)
    for the groups present (or those named in ``groups``); named iterators come as an
    :class:`speechiter.group.IteratorGroup` (a dict with the group's ``steps`` policy). valid and test
    iterators are built with ``evaluation=True`` (see Iterator). ``settings`` are
    further Iterator arguments for every iterator: ngpu, engine, thread_type, start_method,
    out_type, buffer, hedge, distributed, rank, world_size, pin_memory, worker_threads.

    ``root``: the folder that relative paths are resolved against, as a recipe's are against its YAML
    file's folder (default: that folder for a loaded recipe, the current folder for a dict).

    ``seed``, ``num_workers`` and ``ngpu`` left out come from the exp_cfg's top level
    (``DataConfig.settings``: seed, ngpu, ``<group>_num_workers`` or num_workers), else 0, 1 and 1.
    """
    unknown = sorted(set(settings) - set(RUN_SETTINGS))
    if unknown:
        raise TypeError(f"build_iterators() got unexpected settings {', '.join(unknown)}; "
                        f"accepted: {', '.join(RUN_SETTINGS)}")
    paths = recipe_paths(data_cfg) if root is None else \
        dataclasses.replace(PathPolicy.from_environment(root), folder_name="the root folder")
    exp = getattr(data_cfg, "settings", {})
    seed = exp.get("seed", 0) if seed is None else seed
    if "ngpu" in exp:
        settings.setdefault("ngpu", exp["ngpu"])
    result: Dict[str, Any] = {}
    found_here: list = []  # paths read from the current folder, reported once
    most_workers: Optional[Tuple[int, str]] = None
    try:
        for spec in iter_specs(data_cfg):
            if groups is not None and spec.group not in groups:
                continue
            workers, source = group_workers(data_cfg, spec.group, num_workers)
            most_workers = max(most_workers or (workers, source), (workers, source), key=lambda w: w[0])
            runtime = dict(settings, seed=seed, num_workers=workers, evaluation=spec.group != "train")
            iterator = build_one(spec, runtime, paths, found_here)
            _place(result, spec, iterator)
    except BaseException:
        close_all(result)
        raise
    paths.warn_found_here(found_here)
    if most_workers is not None and _in_processes(settings):
        warn_more_workers_than_cpus(*most_workers)
    return result


def group_workers(data_cfg, group: str, num_workers: Optional[int]) -> Tuple[int, str]:
    """The workers of ``group``'s iterators and what set them: ``num_workers`` when given, else the
    exp_cfg's ``<group>_num_workers`` or ``num_workers``, else 1."""
    if num_workers is not None:
        return num_workers, f"num_workers={num_workers}"
    exp = getattr(data_cfg, "settings", {})
    files = getattr(data_cfg, "setting_files", {})
    for key in (f"{group}_num_workers", "num_workers"):
        if key in exp:
            return exp[key], f"{key}: {exp[key]} from exp_cfg {files.get(key, getattr(data_cfg, 'source', ''))}"
    return 1, "num_workers=1"


def warn_more_workers_than_cpus(workers: int, source: str) -> None:
    """One line on stderr when a group's loading workers outnumber the CPUs this process may use
    (the count stays: fewer may be slower, and the batches are the same for any count)."""
    cpus = available_cpus()
    if workers > cpus:
        say(f"speechiter: warning: {workers} loading workers ({source}) on {cpus} CPUs; "
            f"--num_workers {cpus} or fewer may load as fast")


def _in_processes(settings: Dict[str, Any]) -> bool:
    """Whether the run's workers are processes (threads waiting on storage may well outnumber the CPUs)."""
    engine = settings.get("engine", "msequence")
    return engine == "torch" or engine == "msequence" and settings.get("thread_type", "proc") == "proc"


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def recipe_paths(data_cfg) -> PathPolicy:
    """The PathPolicy of a loaded data_cfg; for a plain dict, the current folder's and $SPEECHAIN_ROOT's."""
    paths = getattr(data_cfg, "paths", None)
    return paths if paths is not None else PathPolicy.from_environment(config_dir(data_cfg))


def build_one(spec, runtime: Dict[str, Any], paths: PathPolicy, found_here: Optional[list] = None,
              inner: bool = False) -> Loadable:
    extra_dirs = paths.code_dirs()
    cls = resolve_class("iterator", spec.type, f"{spec.path}.type", base=(Iterator, MixIterator),
                        extra_dirs=extra_dirs)
    if getattr(cls, "nested_option", None):
        if inner:
            raise ConfigError(f"{spec.path}.type", "a mix inside a mix is not supported: list its corpora in the "
                                                   "outer mix, with their weights multiplied")
        return build_nested(cls, spec, runtime, paths, found_here)
    conf_path = f"{spec.path}.conf"
    conf = spec.conf
    if "dataset_type" not in conf:
        raise ConfigError(f"{conf_path}.dataset_type", "missing; every iterator needs dataset_type: file.Class "
                                                       "(e.g. speech_text.SpeechTextDataset)")
    if not isinstance(conf["dataset_type"], (str, type)):  # a class: a data_cfg built in Python
        raise ConfigError(f"{conf_path}.dataset_type", f"expected file.Class, got {conf['dataset_type']!r}")
    dataset_cls = resolve_class("dataset", conf["dataset_type"], f"{conf_path}.dataset_type", base=Dataset,
                                extra_dirs=extra_dirs)
    dataset_conf = conf.get("dataset_conf") or {}
    if not isinstance(dataset_conf, dict):
        raise ConfigError(f"{conf_path}.dataset_conf", f"expected a mapping, got {dataset_conf!r}")

    iter_files = file_options(cls)
    dataset_files = file_options(dataset_cls)
    iter_options = paths.options({k: v for k, v in conf.items() if k not in ("dataset_type", "dataset_conf")},
                                 iter_files, conf_path, found_here)
    dataset_conf = paths.options(dataset_conf, dataset_files, f"{conf_path}.dataset_conf", found_here)
    check_keywords(iter_options, [_without(cls.__init__, "self", "dataset_type", "dataset_conf", "name"),
                                  _without(cls.batches_generate_fn, "self", "data_index", "data_len")],
                   conf_path)
    check_keywords(dataset_conf, [_without(dataset_cls.__init__, "self"), _without(dataset_cls.dataset_init_fn, "self")],
                   f"{conf_path}.dataset_conf")
    paths.check_files(dataset_conf, dataset_files, f"{conf_path}.dataset_conf")
    paths.check_files(iter_options, iter_files, conf_path)

    dataset_conf.setdefault("seed", runtime.get("seed", 0))
    kwargs = {**runtime, **iter_options}
    with _prefixed_errors(conf_path):
        return cls(dataset_type=_prefixed(dataset_cls, f"{conf_path}.dataset_conf"), dataset_conf=dataset_conf,
                   name=spec.label, **kwargs)


def build_nested(cls, spec, runtime: Dict[str, Any], paths: PathPolicy, found_here: Optional[list]) -> Loadable:
    """An iterator whose conf holds named iterators (``mix.MixIterator``'s ``iterators``): each is built as
    an ordinary iterator with the run's settings (and those the outer conf sets), then the outer one."""
    conf_path, key = f"{spec.path}.conf", cls.nested_option
    options = {k: v for k, v in spec.conf.items() if k != key}
    check_keywords(options, [_without(cls.__init__, "self", key, "name")], conf_path)
    inner_runtime = {**runtime, **{k: v for k, v in options.items() if k in RUN_SETTINGS}}
    built: Dict[str, Iterator] = {}
    try:
        for name, inner in nested_specs(spec, key):
            try:
                built[name] = build_one(inner, inner_runtime, paths, found_here, inner=True)
            except DataError as e:  # an empty or unreadable corpus: say which of the mix
                raise DataError(f"{inner.path}: {e}") from e
        with _prefixed_errors(conf_path):
            return cls(**{key: built}, name=spec.label, **{**runtime, **options})
    except BaseException:
        for iterator in built.values():
            iterator.close()
        raise


@contextlib.contextmanager
def _prefixed_errors(conf_path: str):
    """ConfigErrors of a class's own options, named under its conf's YAML path."""
    try:
        yield
    except ConfigError as e:
        if e.path.startswith("data_cfg"):
            raise
        raise ConfigError(f"{conf_path}.{e.path}", e.message) from None


# --- Walking a build_iterators() result ------------------------------------
# {group: Iterator | {name: Iterator}}, test: {set: Iterator | {name: Iterator}}

def iterators_of(group_value) -> Dict[Optional[str], Loadable]:
    """``{name: iterator}`` of one group (or test set); the name is None for a single iterator."""
    if isinstance(group_value, Loadable):
        return {None: group_value}
    return dict(group_value)


def iterator_groups(iterators: Dict[str, Any]) -> Iterable[Tuple[str, Optional[str], Dict[Optional[str], Loadable]]]:
    """``(group, test set or None, {name: Iterator})`` of every group and test set, in order."""
    for group, value in iterators.items():
        if group == "test":
            for set_name, set_value in value.items():
                yield group, set_name, iterators_of(set_value)
        else:
            yield group, None, iterators_of(value)


def flat_iterators(iterators: Dict[str, Any]) -> Iterable[Tuple[str, Loadable]]:
    """``(label, iterator)`` of every iterator: ``train``, ``train/sup``, ``test/clean/asr`` ..."""
    for group, set_name, named in iterator_groups(iterators):
        for name, iterator in named.items():
            yield iterator_label(group, set_name, name), iterator


def close_all(iterators: Dict[str, Any]):
    """Close every iterator in a build_iterators() result."""
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
        with _prefixed_errors(path):
            return dataset_cls(**conf)
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
