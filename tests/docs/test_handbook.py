"""The handbook's custom-Iterator and custom-Dataset examples run as written."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import speechiter
from speechiter.dump import checksum
from speechiter.errors import ConfigError

HANDBOOK = Path(__file__).resolve().parents[2] / "handbook.md"


def example_blocks():
    section = HANDBOOK.read_text().split("## Writing your own Iterator", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    yaml_text = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return code, yaml_text


def test_handbook_custom_iterator_example(tmp_path, corpus):
    code, yaml_text = example_blocks()
    (tmp_path / "my_lab").mkdir()
    (tmp_path / "my_lab" / "__init__.py").write_text("")
    (tmp_path / "my_lab" / "iterators.py").write_text(code)
    yaml_text = yaml_text.replace("/path/to/idx2wav_len", str(corpus / "idx2wav_len"))
    yaml_text = yaml_text.replace("/path/to/idx2wav", str(corpus / "idx2wav"))
    (tmp_path / "recipe.yaml").write_text(yaml_text)

    data_cfg = speechiter.load_config(tmp_path / "recipe.yaml")
    iterators = speechiter.build_iterators(data_cfg, num_workers=0)
    iterator = iterators["test"]["demo"]
    try:
        lengths = dict(line.split() for line in (corpus / "idx2wav_len").read_text().splitlines())
        longest = max(lengths, key=lambda uid: int(lengths[uid]))
        assert iterator.get_batch_indices()[0] == [longest]
        assert all(len(b) <= 3 for b in iterator.get_batch_indices())
        batches = list(iterator.build_loader(epoch=1))
        assert len(batches) == len(iterator) and batches[0]["feat"].shape[0] == 1
    finally:
        iterator.close()


def dataset_blocks():
    section = HANDBOOK.read_text().split("## Writing your own Dataset", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    yaml_text = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return code, yaml_text


def write_dataset_example(tmp_path, corpus, yaml_edit=lambda text: text):
    # forget another test's my_lab/ (the custom-Iterator example's): the registry put its folder on sys.path
    for name in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not (Path(p) / "my_lab").is_dir()]
    code, yaml_text = dataset_blocks()
    (tmp_path / "my_lab").mkdir(exist_ok=True)
    (tmp_path / "my_lab" / "__init__.py").write_text("")
    (tmp_path / "my_lab" / "datasets.py").write_text(code)
    yaml_text = yaml_text.replace("/path/to/idx2wav_len", str(corpus / "idx2wav_len"))
    yaml_text = yaml_text.replace("/path/to/idx2wav", str(corpus / "idx2wav"))
    (tmp_path / "recipe.yaml").write_text(yaml_edit(yaml_text))
    return tmp_path / "recipe.yaml"


def batches_of(recipe, num_workers):
    iterators = speechiter.build_iterators(speechiter.load_config(recipe), num_workers=num_workers, out_type="null")
    iterator = iterators["test"]["noisy"]
    try:
        return [dict(batch) for batch in iterator.build_loader(epoch=1)]
    finally:
        iterator.close()


@pytest.mark.slow  # process workers
@pytest.mark.timeout(120)
def test_handbook_custom_dataset_example(tmp_path, corpus):
    recipe = write_dataset_example(tmp_path, corpus)
    inline, workers = batches_of(recipe, 0), batches_of(recipe, 2)
    assert len(inline) == len(workers) > 1
    for a, b in zip(inline, workers):  # the same noise, whoever builds the batch
        assert checksum(a) == checksum(b)
        assert isinstance(a["snr"], np.ndarray) and a["snr"].dtype == np.float32
        assert len(a["snr"]) == len(a["feat"]) and ((10 <= a["snr"]) & (a["snr"] <= 20)).all()


def test_a_typo_in_an_option_passed_on_with_kwargs_names_its_yaml_path(tmp_path, corpus):
    recipe = write_dataset_example(tmp_path, corpus, lambda text: text.replace("sample_rate:", "sample_rat:"))
    with pytest.raises(ConfigError, match=r"^data_cfg\.test\.noisy\.conf\.dataset_conf\.sample_rat: unknown option of "
                                          r"NoisySpeech; did you mean 'sample_rate'\? accepted: .*min_snr"):
        speechiter.build_iterators(speechiter.load_config(recipe), num_workers=0)


def test_the_contents_list_every_section_in_order():
    text = HANDBOOK.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    listed = re.findall(r"^\d+\. \[([^\]]+)\]\(#([^)]+)\)$", text.split("\n## ", 1)[0], re.M)
    assert [title.split(":")[0] for title, _ in listed] == [title.split(":")[0] for title in sections]
    anchors = {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in sections}
    assert {anchor for _, anchor in listed} <= anchors


def test_every_design_note_the_architecture_section_names_is_in_the_code():
    text = HANDBOOK.read_text()
    section = text.split("## Architecture\n", 1)[1].split("\n## ", 1)[0]
    source = " ".join(" ".join(path.read_text().split())
                      for path in (HANDBOOK.parent / "speechiter").rglob("*.py"))
    names = {" ".join(name.split()) for name in re.findall(r"`\[ ([^\]]+?) \]`", section)}
    assert names and not {name for name in names if f"NOTE [ {name} ]" not in source}
