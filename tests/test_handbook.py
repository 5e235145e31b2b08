"""The handbook's custom-Iterator example runs as written."""
import re
from pathlib import Path

import speechiter

HANDBOOK = Path(__file__).resolve().parents[1] / "handbook.md"


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
