"""Tests for speechiter.registry: the table of built-in types, class resolution and option checking.

A fake built-in package (with its own table) and user code are written into tmp_path under unique names;
the real table is asserted by itself.
"""
import importlib
import sys
import textwrap
import uuid

import pytest

from speechiter.errors import ConfigError
from speechiter.dataset.abs import Dataset
from speechiter.iterator.abs import Iterator
from speechiter.iterator.mix import MixIterator
from speechiter.registry import (ALIASES, BUILTIN_TYPES, builtin_types, check_keywords, resolve_class,
                                 signature_names)

PATH = "data_cfg.train.sup.type"


def write_tree(root, files: dict):
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A fake built-in package on sys.path and a user folder that is not on it."""
    pkg = f"fakepkg_{uuid.uuid4().hex[:8]}"
    lab = f"lab_{uuid.uuid4().hex[:8]}"
    write_tree(tmp_path / "site", {
        f"{pkg}/__init__.py": "",
        f"{pkg}/iterator/__init__.py": "",
        f"{pkg}/iterator/abs.py": "class Iterator:\n    pass\n",
        f"{pkg}/iterator/block.py": f"""
            from {pkg}.iterator.abs import Iterator
            class BlockIterator(Iterator):
                pass
            class Helper:
                pass
            def block_fn():
                pass
        """,
        f"{pkg}/iterator/piece.py": f"from {pkg}.iterator.abs import Iterator\n"
                                    "class PieceIterator(Iterator):\n    pass\n",
        f"{pkg}/iterator/_private.py": "",
        f"{pkg}/iterator/broken.py": "import no_such_dependency_xyz\n",
        f"{pkg}/dataset/__init__.py": "",
        f"{pkg}/dataset/abs.py": "class Dataset:\n    pass\n",
        f"{pkg}/dataset/speech_text.py": f"from {pkg}.dataset.abs import Dataset\n"
                                         "class SpeechTextDataset(Dataset):\n    pass\n",
        f"{pkg}/dataset/tts/__init__.py": "",
        f"{pkg}/dataset/tts/tts_data.py": f"from {pkg}.dataset.abs import Dataset\n"
                                          "class TTSDataset(Dataset):\n    pass\n",
    })
    write_tree(tmp_path / "recipe", {
        f"{lab}/__init__.py": "",
        f"{lab}/iterators.py": f"""
            from {pkg}.iterator.abs import Iterator
            class LongestFirst(Iterator):
                pass
            class NotAnIterator:
                pass
            def make_iterator():
                pass
        """,
        f"{lab}/block.py": f"""
            from {pkg}.iterator.abs import Iterator
            class BlockIterator(Iterator):
                pass
        """,
        f"{lab}/broken_inside.py": f"from {lab}.iterators import DoesNotExist\n",
        f"{lab}/missing_dep.py": "import another_missing_dependency_xyz\n",
        f"{lab}/syntax.py": "def oops(:\n",
        f"{lab}/raises.py": "raise RuntimeError('boom\\nsecond line')\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # sys.path is restored afterwards
    types = {"iterator": {"abs.Iterator": f"{pkg}.iterator.abs.Iterator",
                          "block.BlockIterator": f"{pkg}.iterator.block.BlockIterator",
                          "piece.PieceIterator": f"{pkg}.iterator.piece.PieceIterator",
                          "broken.Broken": f"{pkg}.iterator.broken.Broken"},
             "dataset": {"speech_text.SpeechTextDataset": f"{pkg}.dataset.speech_text.SpeechTextDataset",
                         "tts_data.TTSDataset": f"{pkg}.dataset.tts.tts_data.TTSDataset"}}
    aliases = {"dataset": {"speech.speech_text.SpeechTextDataset": "speech_text.SpeechTextDataset"}}
    iterator_base = importlib.import_module(f"{pkg}.iterator.abs").Iterator
    dataset_base = importlib.import_module(f"{pkg}.dataset.abs").Dataset

    class Env:
        pass
    e = Env()
    e.pkg, e.lab = pkg, lab
    e.Iterator, e.Dataset = iterator_base, dataset_base
    e.recipe_dir = tmp_path / "recipe"

    def resolve(name, kind="iterator", extra_dirs=(), path=PATH):
        base = iterator_base if kind == "iterator" else dataset_base
        return resolve_class(kind, name, path, base, extra_dirs, types=types, aliases=aliases)
    e.resolve = resolve
    return e


def resolve_error(env, name, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        env.resolve(name, **kwargs)
    assert "\n" not in str(info.value)
    return info.value


# ------------------------------------------------------------- resolve_class

def test_builtin_short_form(env):
    cls = env.resolve("block.BlockIterator")
    assert cls.__module__ == f"{env.pkg}.iterator.block" and cls.__name__ == "BlockIterator"
    assert env.resolve("abs.Iterator") is env.Iterator  # the base class itself is allowed


def test_dataset_names_and_aliases(env):
    cls = env.resolve("speech_text.SpeechTextDataset", kind="dataset")
    assert cls.__name__ == "SpeechTextDataset"
    assert env.resolve("speech.speech_text.SpeechTextDataset", kind="dataset") is cls  # an alias
    # a type may live in a module of another name (a sub-package here)
    assert env.resolve("tts_data.TTSDataset", kind="dataset").__module__ == f"{env.pkg}.dataset.tts.tts_data"


def test_helpers_beside_the_builtin_types_are_not_types(env):
    """Only the table's names are built-in: a class of a built-in module that the table lacks is unknown."""
    error = resolve_error(env, "block.Helper")
    assert error.message.startswith("unknown iterator type 'block.Helper'; built-ins: abs.Iterator, "
                                    "block.BlockIterator, broken.Broken, piece.PieceIterator;")


def test_user_module_named_like_a_builtin_one(env):
    cls = env.resolve(f"{env.lab}.block.BlockIterator", extra_dirs=[env.recipe_dir])
    assert cls.__module__ == f"{env.lab}.block"


def test_user_class_from_extra_dirs_stays_importable(env):
    recipe_dir = str(env.recipe_dir)
    assert recipe_dir not in sys.path
    cls = env.resolve(f"{env.lab}.iterators.LongestFirst", extra_dirs=[env.recipe_dir])
    assert cls.__name__ == "LongestFirst" and issubclass(cls, env.Iterator)
    # appended for good so that spawned workers can import the class too
    assert sys.path[-1] == recipe_dir
    env.resolve(f"{env.lab}.iterators.LongestFirst", extra_dirs=[env.recipe_dir])
    assert sys.path.count(recipe_dir) == 1


def test_user_class_already_on_sys_path(env, monkeypatch):
    monkeypatch.syspath_prepend(str(env.recipe_dir))
    assert env.resolve(f"{env.lab}.iterators.LongestFirst").__name__ == "LongestFirst"


def test_not_a_subclass(env):
    error = resolve_error(env, f"{env.lab}.iterators.NotAnIterator", extra_dirs=[env.recipe_dir])
    assert error.path == PATH
    assert error.message == (f"{env.lab}.iterators.NotAnIterator resolves to {env.lab}.iterators."
                             f"NotAnIterator, which is not a subclass of {env.pkg}.iterator.abs.Iterator")
    error = resolve_error(env, "speech.speech_text.SpeechTextDataset")  # a dataset type where an iterator is due
    assert error.message == ("speech.speech_text.SpeechTextDataset is a dataset type, expected an iterator type "
                             "here (e.g. block.BlockIterator)")


def test_not_a_class(env):
    error = resolve_error(env, f"{env.lab}.iterators.make_iterator", extra_dirs=[env.recipe_dir])
    assert error.message == (f"{env.lab}.iterators.make_iterator resolves to {env.lab}.iterators.make_iterator, "
                             f"which is not a class")


def test_unknown_type_suggests_a_builtin(env):
    error = resolve_error(env, "blok.BlockIterator")
    assert error.path == PATH
    assert error.message == ("unknown iterator type 'blok.BlockIterator'; did you mean 'block.BlockIterator'? "
                             "built-ins: abs.Iterator, block.BlockIterator, broken.Broken, piece.PieceIterator; "
                             "and no module 'blok' importable from sys.path")
    error = resolve_error(env, "block.BlokIterator")
    assert error.message.startswith("unknown iterator type 'block.BlokIterator'; did you mean 'block.BlockIterator'?")
    error = resolve_error(env, "speech.speech_txt.SpeechTextDataset", kind="dataset")  # near an alias
    assert "did you mean 'speech.speech_text.SpeechTextDataset'?" in error.message


def test_unknown_type_without_close_match(env):
    error = resolve_error(env, "zzz.Thing", extra_dirs=[env.recipe_dir])
    assert error.message.startswith("unknown iterator type 'zzz.Thing'; built-ins: abs.Iterator, block.BlockIterator")
    assert error.message.endswith(f"and no module 'zzz' importable from sys.path or {env.recipe_dir}")


def test_unknown_dotted_user_module(env):
    error = resolve_error(env, f"{env.lab}.nothere.Thing", extra_dirs=[env.recipe_dir])
    assert f"unknown iterator type '{env.lab}.nothere.Thing'" in error.message
    assert f"no module '{env.lab}.nothere' importable" in error.message


def test_unknown_class_of_a_user_module_suggests(env):
    error = resolve_error(env, f"{env.lab}.iterators.Longest", extra_dirs=[env.recipe_dir])
    assert error.message == (f"module {env.lab}.iterators has no class 'Longest'; did you mean 'LongestFirst'? "
                             f"classes: LongestFirst")


@pytest.mark.parametrize("module, expected", [
    ("broken_inside", "ImportError: cannot import name 'DoesNotExist'"),
    ("missing_dep", "ModuleNotFoundError: No module named 'another_missing_dependency_xyz'"),
    ("syntax", "SyntaxError"),
    ("raises", "RuntimeError: boom second line"),
])
def test_failing_user_module_is_not_unknown(env, module, expected):
    error = resolve_error(env, f"{env.lab}.{module}.X", extra_dirs=[env.recipe_dir])
    assert error.message.startswith(f"importing {env.lab}.{module} failed: ")
    assert expected in error.message and "unknown" not in error.message
    assert isinstance(error.__cause__, Exception)


def test_failing_builtin_module_is_not_unknown(env):
    error = resolve_error(env, "broken.Broken")
    assert error.message.startswith(f"importing {env.pkg}.iterator.broken failed: ModuleNotFoundError")


@pytest.mark.parametrize("name", ["BlockIterator", "block.", ".Block", "a..B", 3, None])
def test_malformed_names(env, name):
    error = resolve_error(env, name)
    assert error.path == PATH and "expected file.Class (e.g. block.BlockIterator)" in error.message


def test_dataset_example_in_malformed_name(env):
    error = resolve_error(env, "SpeechText", kind="dataset", path="data_cfg.train.conf.dataset_type")
    assert error.path == "data_cfg.train.conf.dataset_type"
    assert "e.g. speech_text.SpeechTextDataset" in error.message


def test_unknown_kind(env):
    with pytest.raises(ValueError, match="kind should be one of"):
        resolve_class("model", "a.B", PATH, object)


def test_the_builtin_types():
    """The table of built-in types, asserted: a new type is added here on purpose, and every entry resolves."""
    assert BUILTIN_TYPES == {
        "iterator": {"abs.Iterator": "speechiter.iterator.abs.Iterator",
                     "block.BlockIterator": "speechiter.iterator.block.BlockIterator",
                     "bucket.BucketIterator": "speechiter.iterator.bucket.BucketIterator",
                     "mix.MixIterator": "speechiter.iterator.mix.MixIterator",
                     "piece.PieceIterator": "speechiter.iterator.piece.PieceIterator"},
        "dataset": {"abs.Dataset": "speechiter.dataset.abs.Dataset",
                    "random_spk.RandomSpkFeatDataset": "speechiter.dataset.random_spk.RandomSpkFeatDataset",
                    "speech_text.SpeechTextDataset": "speechiter.dataset.speech_text.SpeechTextDataset"}}
    assert ALIASES == {"iterator": {}, "dataset": {
        "speech_text.RandomSpkFeatDataset": "random_spk.RandomSpkFeatDataset",
        "speech.speech_text.SpeechTextDataset": "speech_text.SpeechTextDataset",
        "speech.speech_text.RandomSpkFeatDataset": "random_spk.RandomSpkFeatDataset"}}
    for kind, base in (("iterator", (Iterator, MixIterator)), ("dataset", Dataset)):
        for name, target in BUILTIN_TYPES[kind].items():
            cls = resolve_class(kind, name, PATH, base)
            assert f"{cls.__module__}.{cls.__qualname__}" == target
        for alias, name in ALIASES[kind].items():
            assert resolve_class(kind, alias, PATH, base) is resolve_class(kind, name, PATH, base)
    assert builtin_types("dataset") == ["abs.Dataset", "random_spk.RandomSpkFeatDataset",
                                        "speech_text.SpeechTextDataset"]


def test_helper_modules_of_the_package_are_not_types():
    for name in ("shuffle.EpochShuffle", "view.BatchView", "tasks.EpochTasks"):
        with pytest.raises(ConfigError, match=f"unknown iterator type '{name}'; built-ins: abs.Iterator, "
                                              "block.BlockIterator, bucket.BucketIterator, mix.MixIterator, "
                                              "piece.PieceIterator;"):
            resolve_class("iterator", name, PATH, Iterator)
    with pytest.raises(ConfigError, match="unknown dataset type 'reader.DatasetReader'"):
        resolve_class("dataset", "reader.DatasetReader", PATH, Dataset)


def test_default_table_is_the_speechiter_one():
    with pytest.raises(ConfigError, match="unknown iterator type 'no_such_module_xyz.X'; built-ins: abs.Iterator"):
        resolve_class("iterator", "no_such_module_xyz.X", PATH, object)


# ------------------------------------------------------------ check_keywords

class Base:
    def __init__(self, dataset_type, dataset_conf, batches_per_epoch=None, shuffle=True, seed=0, **iter_conf):
        pass


class Block(Base):
    def batches_generate_fn(self, data_index, data_len, batch_len):
        pass

    @staticmethod
    def static_hook(max_len=10, *args):
        pass


def only_kwargs(**kwargs):
    pass


def positional_only(a, /, b=1):
    pass


HOOKS = [Base.__init__, Block.batches_generate_fn]
RESERVED = ("data_index", "data_len")
PATH_CONF = "data_cfg.train.conf"


def good_conf(**extra):
    return {"dataset_type": "speech_text.X", "dataset_conf": {}, "batch_len": 100, **extra}


def check_error(kwargs, functions=HOOKS, reserved=RESERVED) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check_keywords(kwargs, functions, PATH_CONF, reserved)
    return info.value


def test_signature_names():
    assert signature_names(Base.__init__) == (
        ["dataset_type", "dataset_conf", "batches_per_epoch", "shuffle", "seed"],
        ["dataset_type", "dataset_conf"], True)
    assert signature_names(Block.batches_generate_fn)[0] == ["data_index", "data_len", "batch_len"]
    assert signature_names(Block.static_hook) == (["max_len"], [], False)
    assert signature_names(Block("a.B", {}).batches_generate_fn) == (["data_index", "data_len", "batch_len"],
                                                            ["data_index", "data_len", "batch_len"], False)
    assert signature_names(Base) == signature_names(Base.__init__)
    assert signature_names(positional_only) == (["b"], [], False)
    assert signature_names(only_kwargs) == ([], [], True)


def test_accepts_a_valid_conf():
    check_keywords(good_conf(shuffle=False, seed=3), HOOKS, PATH_CONF, RESERVED)
    check_keywords(good_conf(data_index=[1]), HOOKS, PATH_CONF, RESERVED)  # reserved may be given


def test_unknown_option_with_suggestion():
    error = check_error(good_conf(batch_lne=3))
    assert error.path == "data_cfg.train.conf.batch_lne"
    assert error.message == ("unknown option; did you mean 'batch_len'? accepted: batch_len, batches_per_epoch, "
                             "data_index, data_len, dataset_conf, dataset_type, seed, shuffle")


def test_unknown_option_without_suggestion():
    error = check_error(good_conf(zzzz=1))
    assert error.message.startswith("unknown option; accepted: batch_len,")


def test_missing_required_option():
    error = check_error({"dataset_type": "a.B", "dataset_conf": {}})
    assert error.path == "data_cfg.train.conf.batch_len"
    assert error.message.startswith("missing required option")
    assert "Block.batches_generate_fn" in error.message


def test_required_in_the_declaring_function_even_if_optional_elsewhere():
    def hook(batch_len=5):
        pass
    error = check_error({"dataset_type": "a.B", "dataset_conf": {}}, [Base.__init__, hook, Block.batches_generate_fn])
    assert error.path == "data_cfg.train.conf.batch_len"


def test_reserved_names_are_not_required():
    with pytest.raises(ConfigError) as info:
        check_keywords(good_conf(), HOOKS, PATH_CONF)  # data_index not reserved -> required
    assert info.value.path == "data_cfg.train.conf.data_index"


def test_all_catch_all_accepts_everything():
    check_keywords(good_conf(anything=1), [only_kwargs, Base.__init__], PATH_CONF)
    check_keywords({"anything": 1}, [], PATH_CONF)


def test_catch_all_alone_does_not_hide_typos_when_a_hook_is_strict():
    error = check_error(good_conf(shufle=True))
    assert "did you mean 'shuffle'?" in error.message


def test_non_mapping_options():
    error = check_error([1, 2])
    assert error.path == PATH_CONF and "expected a mapping of options, got list" in error.message
    check_keywords(None, [only_kwargs], PATH_CONF)


def test_callable_without_signature_accepts_anything():
    assert signature_names(dict) == ([], [], True)
    check_keywords({"x": 1}, [dict], PATH_CONF)
