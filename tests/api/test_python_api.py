"""The Python API beside the YAML: a data_cfg as a dict (classes instead of "file.Class", relative paths
against a root), and iterators, groups and mixes built as objects, give the recipes' batches
(handbook.md, "Building in Python")."""
import itertools
import re
from pathlib import Path

import pytest

import speechiter
from speechiter.build import close_all
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.errors import ConfigError
from speechiter.group import IteratorGroup
from speechiter.iterator.block import BlockIterator
from speechiter.iterator.mix import MixIterator

RECIPES = speechiter.build.__file__.rsplit("/", 2)[0] + "/recipes/demo"


def corpus(split, **conf):
    """One demo split as a data_cfg entry, with classes and paths relative to demo/data."""
    return {"type": BlockIterator, "conf": {
        "dataset_type": SpeechTextDataset,
        "dataset_conf": {"main_data": {"feat": f"{split}/idx2wav", "text": f"{split}/idx2text"},
                         "sample_rate": 16000, **conf.pop("dataset_conf", {})},
        "data_len": f"{split}/idx2wav_len", "batch_len": 1.6e5, **conf}}


def mix_cfg():
    """recipes/demo/mix.yaml's train group, in Python."""
    return {"train": {"type": MixIterator, "conf": {
        "batches_per_epoch": 20, "weights": {"main": 0.7, "extra": 0.3},
        "iterators": {"main": corpus("train", dataset_conf={"use_speed_perturb": True}), "extra": corpus("valid")}}}}


def batches(iterator, epoch=1, count=6):
    """The first ``count`` batches of ``epoch`` (both corpora come within 6)."""
    return [(b.source, b.ids, checksum(b)) for b in itertools.islice(iterator.build_loader(epoch), count)]


def built(data_cfg, **options):
    """The train group of ``data_cfg`` (with a valid group: SpeeChain's train + valid rule)."""
    if "valid" not in data_cfg:
        data_cfg = {**data_cfg, "valid": corpus("valid")}
    return speechiter.build_iterators(data_cfg, num_workers=0, groups=("train",), **options)


@pytest.fixture
def recipe_mix(demo_root):
    iterators = built(speechiter.load_config(f"{RECIPES}/mix.yaml"))
    yield iterators["train"]
    close_all(iterators)


def test_a_dict_with_classes_and_a_root_gives_the_recipes_batches(demo_root, recipe_mix):
    iterators = built(mix_cfg(), root=demo_root)
    try:
        assert batches(iterators["train"]) == batches(recipe_mix)
    finally:
        close_all(iterators)


def test_a_dicts_relative_paths_are_the_current_folders_without_a_root(demo_root, recipe_mix, monkeypatch):
    monkeypatch.chdir(demo_root)
    iterators = built(mix_cfg())
    try:
        assert batches(iterators["train"]) == batches(recipe_mix)
    finally:
        close_all(iterators)


def test_iterators_and_a_mix_built_as_objects_give_the_recipes_batches(demo_root, recipe_mix):
    def block(split, name, **dataset_conf):
        return BlockIterator(SpeechTextDataset, {"main_data": {"feat": f"{demo_root}/{split}/idx2wav",
                                                               "text": f"{demo_root}/{split}/idx2text"},
                                                 "sample_rate": 16000, **dataset_conf},
                             data_len=f"{demo_root}/{split}/idx2wav_len", batch_len=1.6e5, num_workers=0, name=name)

    main, extra = block("train", "train/main", use_speed_perturb=True), block("valid", "train/extra")
    mix = MixIterator({"main": main, "extra": extra}, weights={"main": 0.7, "extra": 0.3}, batches_per_epoch=20,
                      num_workers=0, name="train")
    try:
        assert batches(mix) == batches(recipe_mix)
        assert batches(mix, 2) == batches(recipe_mix, 2)
    finally:
        for iterator in (mix, main, extra):
            iterator.close()


def test_a_group_built_as_objects_steps_as_the_recipes(demo_root):
    recipe = speechiter.build_iterators(speechiter.load_config(f"{RECIPES}/semi.yaml"), num_workers=0,
                                        groups=("train",))
    cfg = {"train": {
        "sup": corpus("train", dataset_conf={"data_selection": ["order", 0.5]}),
        "unsup": corpus("train", dataset_conf={"main_data": {"feat": "train/idx2wav"},
                                               "data_selection": ["rev_order", 0.5]})}}
    ours = built(cfg, root=demo_root)
    group = IteratorGroup(ours["train"], steps="longest")  # a group of Iterator objects, with its policy
    try:
        assert isinstance(ours["train"], IteratorGroup) and ours["train"].steps == "shortest"

        def steps(value, **options):
            return [{name: b.ids for name, b in step.items()} for step in speechiter.GroupLoader(value, **options)]
        assert steps(ours["train"]) == steps(recipe["train"])
        assert steps(group) == steps(recipe["train"], steps="longest")
    finally:
        close_all(recipe)
        close_all(ours)


@pytest.mark.parametrize("where, value, expected", [
    ("type", SpeechTextDataset, "data_cfg.train.type: speechiter.dataset.speech_text.SpeechTextDataset is not a subclass of "
                                "speechiter.iterator.abs.Iterator"),
    ("dataset_type", BlockIterator, "data_cfg.train.conf.dataset_type: speechiter.iterator.block.BlockIterator "
                                    "is not a subclass of speechiter.dataset.abs.Dataset"),
    ("dataset_type", 3, "data_cfg.train.conf.dataset_type: expected file.Class, got 3"),
])
def test_a_class_of_the_wrong_kind_is_named_at_its_path(demo_root, where, value, expected):
    entry = corpus("train")
    (entry if where == "type" else entry["conf"])[where] = value
    with pytest.raises(ConfigError) as error:
        built({"train": entry}, root=demo_root)
    assert str(error.value) == expected


def test_a_missing_file_under_a_root_names_where_it_was_looked_for(tmp_path):
    with pytest.raises(ConfigError) as error:
        built({"train": corpus("train")}, root=tmp_path)
    assert str(error.value).startswith("data_cfg.train.conf.dataset_conf.main_data.feat: file not found: "
                                       f"train/idx2wav (looked in the root folder {tmp_path} and the current folder")


@pytest.mark.slow  # process workers
def test_the_handbooks_examples_run_as_written(demo_root, monkeypatch, capsys):
    """handbook.md, "Building in Python": both blocks, from the repository's root (in process, no workers)."""
    repo = Path(speechiter.build.__file__).resolve().parents[1]
    section = (repo / "handbook.md").read_text().split("## Building in Python", 1)[1].split("\n## ", 1)[0]
    dicts, objects = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(repo)
    names = {}
    exec(dicts.replace("num_workers=2", "num_workers=0"), names)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 20 and {line.split()[0] for line in printed} == {"main", "extra"}
    exec(objects.replace("num_workers=2", "num_workers=0").replace("    ...", "    steps = step"), names)
    try:
        assert set(names["steps"]) == {"sup", "unsup"}
    finally:
        for iterator in (names["main"], names["extra"], names["mix"], *names["group"].values()):
            iterator.close()
