"""Batches carry their utterance ids: batch.ids, batch.meta and batch.is_padding as attributes, never keys."""
import json
import os
import pickle
import re
import subprocess
import sys
import timeit

import pytest

from speechiter.batch import Batch, attach
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.abs import Iterator
from speechiter.iterator.piece import PieceIterator
from tests.cli.test_run import REPO, read_dump, run_cli, write_cfg


class TupleDataset(SpeechTextDataset):
    """A collate that returns a tuple, not a dict (module level, so process workers can import it)."""

    def collate_main_data_fn(self, batch_dict):
        batch = super().collate_main_data_fn(batch_dict)
        return batch["feat"], batch["feat_len"]


def make(corpus, dataset_type=SpeechTextDataset, **conf):
    main_data = {"feat": str(corpus / "idx2wav"), "text": str(corpus / "idx2text")}
    return PieceIterator(dataset_type=dataset_type, dataset_conf={"main_data": main_data},
                         data_len=str(corpus / "idx2wav_len"), batch_size=3, **conf)


def speakers(corpus):
    return dict(line.split(maxsplit=1) for line in (corpus / "idx2spk").read_text().splitlines())


ENGINES = [dict(engine="inline"), dict(num_workers=0), dict(num_workers=2), dict(num_workers=2, thread_type="thread"),
           dict(engine="torch", num_workers=2), dict(num_workers=1, out_type="null"),
           dict(engine="torch", num_workers=0, out_type="null"),
           pytest.param(dict(num_workers=1, out_type="cuda"), marks=pytest.mark.skipif(
               not __import__("torch").cuda.is_available(), reason="needs a CUDA device"))]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("settings", ENGINES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_every_engine_and_out_type_gives_ids_and_meta_as_attributes(corpus, settings):
    with make(corpus, group_info={"speaker": str(corpus / "idx2spk")}, **settings) as iterator:
        loader = iterator.build_loader(epoch=2)
        batches = list(loader)
    spk = speakers(corpus)
    assert [b.ids for b in batches] == loader.plan
    for batch in batches:
        assert isinstance(batch, Batch) and isinstance(batch, dict)
        assert set(batch) == {"feat", "feat_len", "text"}  # no new keys
        assert batch.meta == {"speaker": [spk[uid] for uid in batch.ids]}
        assert batch.is_padding == [False] * len(batch.ids) and batch.real_rows() == list(range(len(batch.ids)))
        assert len(batch["feat"]) == len(batch.ids)


def test_model_call_and_key_iteration_are_unchanged(corpus):
    def model(feat, feat_len, text):
        return len(feat)

    with make(corpus, engine="inline") as iterator:
        batch = next(iter(iterator.build_loader()))
    assert model(**batch) == len(batch.ids)
    assert list(batch.keys()) == list(dict(batch).keys()) and "ids" not in batch and "meta" not in batch
    assert batch.meta == {}  # no group_info


def test_resumed_loader_keeps_the_ids_of_the_full_plan(corpus):
    with make(corpus, engine="inline") as iterator:
        full = [b.ids for b in iterator.build_loader(epoch=3)]
        tail = [b.ids for b in iterator.build_loader(epoch=3, start_step=4)]
    assert tail == full[4:]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("settings", [dict(engine="inline"), dict(num_workers=2)])
def test_a_collate_that_returns_no_dict_gets_its_batch_back_unchanged(corpus, settings):
    with make(corpus, dataset_type=TupleDataset, **settings) as iterator:
        loader = iterator.build_loader()
        batches = list(loader)
    assert all(type(b) is tuple and len(b) == 2 for b in batches)  # attributes need a dict
    assert [len(b[0]) for b in batches] == [len(ids) for ids in loader.plan]  # ids: loader.plan


def test_batch_pickles_with_its_attributes_and_attach_copies_once():
    batch = attach({"x": [1, 2]}, ["a", "b"], {"spk": {"a": "s1", "b": "s2"}}, [False, True])
    again = pickle.loads(pickle.dumps(batch))
    assert again == {"x": [1, 2]} and again.ids == ["a", "b"] and again.meta == {"spk": ["s1", "s2"]}
    assert again.is_padding == [False, True] and again.real_rows() == [0]
    assert "ids=['a', 'b']" in repr(again)
    with pytest.raises(AttributeError):
        batch.other = 1  # slots: a typo of an attribute fails loudly


@pytest.mark.nightly  # measures time: on a busy machine a figure, not a check
def test_attaching_costs_nothing_measurable():
    """Micro-benchmark: attaching is one shallow copy of a few keys, microseconds per batch, while loading
    one batch takes milliseconds."""
    data = {"feat": object(), "feat_len": object(), "text": object(), "text_len": object()}
    ids = [f"utt{i:04d}" for i in range(32)]
    per_batch = min(timeit.repeat(lambda: attach(data, ids, None, None), number=2000, repeat=5)) / 2000
    print(f"attach: {per_batch * 1e6:.2f} us per batch")
    assert per_batch < 50e-6


@pytest.mark.timeout(180)
def test_dump_ids_come_from_batch_ids(tmp_path, corpus):
    cfg = write_cfg(tmp_path, corpus)
    dump = tmp_path / "dump.jsonl"
    result = run_cli("--data_cfg", cfg, "--mode", "test", "--num_workers", 0, "--quiet", "--dump_batches", dump)
    assert result.returncode == 0, result.stderr
    clean = [r for r in read_dump(dump) if r["set"] == "clean"]
    from speechiter import build_iterators, load_config
    iterators = build_iterators(load_config(cfg), num_workers=0, groups=("test",))
    try:
        assert [r["ids"] for r in clean] == iterators["test"]["clean"].build_loader().plan
    finally:
        for value in iterators["test"].values():
            for it in ([value] if isinstance(value, Iterator) else value.values()):
                it.close()
    assert json.loads(json.dumps(clean[0]))["step"] == 1


# --- the handbook's examples, run as written ------------------------------------------------------
HANDBOOK = REPO / "handbook.md"


def handbook_code(heading: str) -> str:
    """The first python block of the handbook section ``heading``."""
    text = HANDBOOK.read_text()
    assert f"\n{heading}\n" in text, f"handbook.md has no section {heading!r}"
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_example(code: str, tmp_path, *launcher, timeout=240):
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([*(launcher or (sys.executable,)), str(script)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow  # the handbook's example run as a script
@pytest.mark.timeout(300)
def test_handbook_training_loop_example(tmp_path, demo_root):
    result = run_example(handbook_code("## Batches in a training loop: ids, meta, padding"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "['spk001', 'spk002', 'spk003']"
