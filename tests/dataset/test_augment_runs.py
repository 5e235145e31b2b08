"""The augmentation chain through build_iterators and the engines: the record in batch.meta, composition with
speed perturbation, views, and bit-identical batches for 0, 1, 2, 4 workers, proc and thread, the torch engine,
and a resume at any step."""
import re
from pathlib import Path

import numpy as np
import pytest

import speechiter
from speechiter.batch import ROWS_KEY
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dataset.speed_perturb import perturbed_length
from tests.dataset.augment_corpora import PRESET, chain

REPO = Path(__file__).resolve().parents[2]


def recipe(make_recipe, tmp_path, corpus, name="recipe.yaml", spec_augment=True, batch_len=3000, **dataset_conf):
    conf = {"augment": chain(tmp_path, spec_augment=spec_augment), "sample_rate": 16000, **dataset_conf}
    if spec_augment:
        conf.setdefault("feat_conf", PRESET)
    return make_recipe(corpus, data=("feat", "text"), dataset_conf=conf, batch_len=batch_len, name=name)


def run(cfg, epochs=(1, 2), start_step=0, seed=5, **settings):
    """``[(ids, meta, arrays and lists)]`` of every batch of ``epochs``."""
    settings.setdefault("out_type", "null")
    iterator = speechiter.build_iterators(speechiter.load_config(cfg), seed=seed, groups=["train"],
                                          **settings)["train"]
    try:
        return [(b.ids, b.meta, plain(b)) for epoch in epochs
                for b in iterator.build_loader(epoch=epoch, start_step=start_step if epoch == epochs[0] else 0)]
    finally:
        iterator.close()


def plain(batch):
    """The batch's values, tensors as numpy arrays (the torch engine and out_type cpu give tensors)."""
    return {key: value.numpy() if hasattr(value, "numpy") else value for key, value in batch.items()}


def assert_same(a, b):
    assert len(a) == len(b)
    for (ids_a, meta_a, x), (ids_b, meta_b, y) in zip(a, b):
        assert ids_a == ids_b and meta_a == meta_b and sorted(x) == sorted(y)
        for key in x:
            if isinstance(x[key], np.ndarray):
                assert x[key].dtype == y[key].dtype and np.array_equal(x[key], y[key]), key
            else:
                assert x[key] == y[key], key


def test_batches_record_what_was_applied(tmp_path, make_recipe, corpus):
    batches = run(recipe(make_recipe, tmp_path, corpus), epochs=(1,), num_workers=0)
    plain = run(make_recipe(corpus, data=("feat", "text"), dataset_conf={"feat_conf": PRESET}, batch_len=3000,
                            name="plain.yaml"), epochs=(1,), num_workers=0)
    applied = [record for _, meta, _ in batches for record in meta["augment"]]
    assert len(applied) == 20 and set(batches[0][1]) == {"augment"}
    assert all(set(r) <= {"noise", "reverb", "gain", "spec_augment"} and "gain" in r for r in applied)
    assert 0 < sum("noise" in r for r in applied) < 20 and 0 < sum("reverb" in r for r in applied) < 20
    assert {r["noise"]["file"] for r in applied if "noise" in r} <= {"noise0", "noise1", "noise2"}
    assert all(5 <= r["noise"]["snr"] <= 20 for r in applied if "noise" in r)
    for (ids, meta, batch), (plain_ids, _, clean) in zip(batches, plain):
        assert ids == plain_ids and ROWS_KEY not in batch and sorted(batch) == ["feat", "feat_len", "text"]
        assert np.array_equal(batch["feat_len"], clean["feat_len"])  # the chain keeps every length
        assert not np.array_equal(batch["feat"], clean["feat"])


def test_waveform_chain_composes_with_speed_perturbation(tmp_path, make_recipe, corpus):
    cfg = recipe(make_recipe, tmp_path, corpus, spec_augment=False, use_speed_perturb=True,
                 perturb_range=[0.9, 1.1])
    lengths = dict(line.split() for line in (corpus / "idx2wav_len").read_text().splitlines())
    for ids, meta, batch in run(cfg, epochs=(1,), num_workers=0):
        for row, uid in enumerate(ids):
            assert batch["feat_len"][row] in {perturbed_length(int(lengths[uid]), f) for f in (0.9, 1.1)}
        assert len(meta["augment"]) == len(ids)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_views_give_view_major_rows_with_their_own_draws(tmp_path, make_recipe, corpus, monkeypatch):
    single = SpeechTextDataset({"feat": str(corpus / "idx2wav")}, feat_conf=PRESET)
    two = SpeechTextDataset({"feat": str(corpus / "idx2wav")}, feat_conf=PRESET, views=2)
    assert two.batch_length_fn(16000) == 2 * single.batch_length_fn(16000)  # each utterance budgeted twice
    reads = []
    original = SpeechTextDataset._read_speech
    monkeypatch.setattr(SpeechTextDataset, "_read_speech", lambda self, value: reads.append(value) or
                        original(self, value))
    cfg = recipe(make_recipe, tmp_path, corpus, views=2, batch_len=6000, use_speed_perturb=True)
    batches = run(cfg, epochs=(1,), num_workers=0)
    assert len(reads) == 20  # each file decoded once for its two views
    for ids, meta, batch in batches:
        half = len(ids) // 2
        assert ids[:half] == ids[half:] and meta["view"] == [0] * half + [1] * half
        assert len(meta["augment"]) == len(ids) == len(batch["feat"]) == len(batch["text"])
        assert batch["text"][:half] == batch["text"][half:]
        assert meta["augment"][:half] != meta["augment"][half:]  # each view its own draws
    assert sum(len(ids) for ids, _, _ in batches) == 40
    assert_same(batches, run(cfg, epochs=(1,), num_workers=2))


def test_views_without_steps_and_group_info(tmp_path, make_recipe, corpus):
    (corpus / "idx2gen2").write_text("".join(f"{line.split()[0]} g{i % 2}\n" for i, line in
                                             enumerate((corpus / "idx2wav").read_text().splitlines())))
    cfg = make_recipe(corpus, data=("feat",), dataset_conf={"views": 3}, batch_len=9000,
                      group_info={"gen": str(corpus / "idx2gen2")})
    for ids, meta, batch in run(cfg, epochs=(1,), num_workers=0):
        third = len(ids) // 3
        assert set(meta) == {"gen", "view"} and meta["gen"][:third] * 3 == meta["gen"]
        assert np.array_equal(batch["feat"][:third], batch["feat"][third:2 * third])  # nothing drawn: copies


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_identical_for_any_workers_engine_and_resume_point(tmp_path, make_recipe, make_corpus):
    small = make_corpus(tmp_path / "small", num=8, min_sec=0.2, max_sec=0.5)
    cfg = recipe(make_recipe, tmp_path, small, use_speed_perturb=True, views=2, batch_len=130,
                 feat_conf={"dither": 1.0})
    reference = run(cfg, num_workers=0)
    per_epoch = len(reference) // 2
    assert per_epoch >= 4
    for settings in [dict(num_workers=1), dict(num_workers=2), dict(num_workers=4),
                     dict(num_workers=2, thread_type="thread"), dict(num_workers=4, thread_type="thread"),
                     dict(num_workers=2, engine="torch"), dict(num_workers=2, out_type="cpu")]:
        assert_same(reference, run(cfg, **settings))
    for start_step in (1, per_epoch // 2, per_epoch - 1):  # the first, a middle and the last resumable step
        assert_same(reference[start_step:], run(cfg, start_step=start_step, num_workers=2))
    other_seed = run(cfg, seed=6, num_workers=0)
    assert other_seed[0][1]["augment"] != reference[0][1]["augment"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_handbook_augmentation_example(tmp_path, corpus, monkeypatch):
    section = (REPO / "handbook.md").read_text().split("\n## Augmentation\n", 1)[1].split("\n## ", 1)[0]
    yaml_text = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    chain(tmp_path)  # writes tmp_path/noise/idx2wav and tmp_path/rir/idx2wav
    for placeholder, path in (("/path/to/corpus", corpus), ("/path/to/musan", tmp_path / "noise"),
                              ("/path/to/rirs", tmp_path / "rir")):
        yaml_text = yaml_text.replace(placeholder, str(path))
    (tmp_path / "recipe.yaml").write_text(yaml_text)
    monkeypatch.chdir(REPO)
    iterators = speechiter.build_iterators(speechiter.load_config(tmp_path / "recipe.yaml"), num_workers=1,
                                           out_type="null")
    try:
        batches = list(iterators["train"].build_loader(epoch=1))
        assert sum(len(b.ids) for b in batches) == 20
        assert all(len(b.meta["augment"]) == len(b.ids) and b["feat"].shape[2] == 80 for b in batches)
        assert list(iterators["valid"].build_loader(epoch=1))[0].meta == {}
    finally:
        speechiter.build.close_all(iterators)
