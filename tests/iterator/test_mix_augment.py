"""The handbook's complete recipe: two corpora mixed 70/30, each with noise, reverb and SpecAugment;
the same batches for any workers and after a resume."""
import json
import re
from pathlib import Path

import pytest

import speechiter
from speechiter.dump import checksum

from tests.dataset.augment_corpora import noise_waves, rir_waves, write_list

REPO = Path(__file__).resolve().parents[2]


def recipe(tmp_path, make_corpus) -> Path:
    section = (REPO / "handbook.md").read_text().split("\n### A complete recipe: augmented, mixed training\n")[1]
    yaml_text = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    places = {"/path/to/librispeech/train": make_corpus(tmp_path / "libri", num=16, seed=1),
              "/path/to/commonvoice/train": make_corpus(tmp_path / "cv", num=10, seed=2),
              "/path/to/musan/idx2wav": write_list(tmp_path, "noise", noise_waves()),
              "/path/to/rirs/idx2wav": write_list(tmp_path, "rir", rir_waves())}
    for placeholder, path in places.items():
        yaml_text = yaml_text.replace(placeholder, str(path))
    yaml_text = yaml_text.replace("batches_per_epoch: 1000", "batches_per_epoch: 10")
    (tmp_path / "recipe.yaml").write_text(yaml_text)
    return tmp_path / "recipe.yaml"


def run(cfg, num_workers, start_step=0, state=None):
    iterators = speechiter.build_iterators(speechiter.load_config(cfg), seed=5, num_workers=num_workers,
                                           out_type="null")
    try:
        loader = iterators["train"].build_loader(epoch=2, start_step=start_step)
        if state is not None:
            loader.load_state_dict(state)
        out, saved = [], None
        for batch in loader:
            out.append((batch.source, list(batch.ids), json.dumps(batch.meta["augment"], sort_keys=True),
                        checksum(batch)))
            if loader.step == 4 and saved is None:
                saved = json.loads(json.dumps(loader.state_dict()))
        return out, saved
    finally:
        speechiter.build.close_all(iterators)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_complete_recipe_is_the_same_for_any_workers_and_after_a_resume(tmp_path, make_corpus, monkeypatch):
    cfg = recipe(tmp_path, make_corpus)
    monkeypatch.chdir(REPO)  # the feat_conf preset path is relative to the repository, as in the handbook
    inline, state = run(cfg, 0)
    assert [source for source, *_ in inline].count("libri") == 7  # 70/30 of 10 batches
    assert all(record != "[]" for *_, record, _ in inline)
    assert run(cfg, 2)[0] == inline
    assert run(cfg, 2, state=state)[0] == inline[4:]
