"""One recipe builder for the tests: a data_cfg over a test corpus, written as real YAML.

- ``entry(corpus, type="block.BlockIterator", data=("feat",), dataset_type="speech_text.SpeechTextDataset",
  dataset_conf=None, data_len=True, **conf) -> dict``: one iterator of a group. ``data`` names the
  main_data keys to read from the corpus (feat -> idx2wav, text -> idx2text, spk -> idx2spk), or is a
  mapping {key: path} used as is; ``dataset_conf`` holds the other dataset options; ``data_len`` True
  means ``<corpus>/idx2wav_len``, False none, a string that file; ``conf`` are the iterator's options.
- ``write_recipe(path, corpus, type="block.BlockIterator", *, train=None, valid=VALID, test=None,
  variables=None, exp_cfg=None, **options) -> Path``: ``train`` is ``entry(corpus, type, **options)``
  unless given (an entry, a {name: entry} mapping, or False for none); ``valid`` is by default
  ``entry(corpus, "abs.Iterator", data_len=False)`` (None for none); ``test`` is {set: entry};
  ``variables`` are top-level keys written first; ``exp_cfg`` (a dict, may be empty) nests the groups
  under ``data_cfg:`` after those keys.
- ``Ref("<root>/idx2wav")``: a value written as ``!ref <root>/idx2wav``; ``entry(Ref("<root>"), ...)``
  names the corpus files through the variable ``root``; ``options(text) -> dict``
  reads options given as YAML text (a test parameter), ``!ref`` values as Refs.

The ``make_recipe`` fixture (tests/conftest.py) is ``write_recipe`` into ``tmp_path / name``.
"""
from __future__ import annotations

from pathlib import Path

import yaml

SPEECH_TEXT = "speech_text.SpeechTextDataset"
CORPUS_FILES = {"feat": "idx2wav", "text": "idx2text", "spk": "idx2spk"}
VALID = object()  # write_recipe's default valid group


class Ref(str):
    """A ``!ref <...>`` value."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # a value shared by two groups is written twice, no &anchor
        return True


_Dumper.add_representer(Ref, lambda dumper, value: dumper.represent_scalar("!ref", str(value)))
_Dumper.add_representer(tuple, lambda dumper, value: dumper.represent_list(list(value)))
_Dumper.add_multi_representer(Path, lambda dumper, value: dumper.represent_str(str(value)))


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!ref", lambda loader, node: Ref(loader.construct_scalar(node)))


def options(text) -> dict:
    return yaml.load(text, Loader=_Loader) or {}


def _file(corpus, name):
    path = f"{corpus}/{name}"
    return Ref(path) if isinstance(corpus, Ref) else path


def entry(corpus, type="block.BlockIterator", data=("feat",), dataset_type=SPEECH_TEXT, dataset_conf=None,
          data_len=True, **conf) -> dict:
    if isinstance(data, dict):
        main_data = dict(data)
    else:
        main_data = {key: _file(corpus, CORPUS_FILES[key]) for key in data}
    spec = {"dataset_type": dataset_type, "dataset_conf": {"main_data": main_data, **(dataset_conf or {})}}
    if data_len:
        spec["data_len"] = _file(corpus, "idx2wav_len") if data_len is True else data_len
    return {"type": type, "conf": {**spec, **conf}}


def write_recipe(path, corpus, type="block.BlockIterator", *, train=None, valid=VALID, test=None,
                 variables=None, exp_cfg=None, **options) -> Path:
    groups = {}
    if train is not False:
        groups["train"] = entry(corpus, type, **options) if train is None else train
    if valid is VALID:
        valid = entry(corpus, "abs.Iterator", data_len=False)
    if valid is not None:
        groups["valid"] = valid
    if test is not None:
        groups["test"] = test
    document = dict(variables or {})
    if exp_cfg is None:
        document.update(groups)
    else:
        document.update(exp_cfg, data_cfg=groups)
    path = Path(path)
    path.write_text(yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True))
    return path
