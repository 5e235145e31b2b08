"""mix.MixIterator: the schedule's shares in every window, each corpus in its own exact epochs, one engine,
the same batches for any workers / engine / resume point, states that nest each corpus's position."""
import json

import numpy as np
import pytest

import speechiter
from speechiter.batch import Batch
from speechiter.dump import checksum
from speechiter.errors import ConfigError
from speechiter.iterator.mix import MixIterator
from speechiter.plan.schedule import MixSchedule
from speechiter.plan.steps import stream_position
from speechiter.state import MixState
from speechiter.state_versions import read_loader_state
from tests.cli.test_run import read_dump, run_cli
from tests.iterator.test_loop import handbook_code, run_example
from tests.recipes import entry, write_recipe

WINDOW = 1000


def window_deviation(sources: np.ndarray, weights, window: int = WINDOW) -> list:
    """The largest |share - weight| of each corpus over every window of ``window`` consecutive batches."""
    shares = np.asarray(weights, dtype=float) / sum(weights)
    result = []
    for corpus, share in enumerate(shares):
        counts = np.concatenate([[0], np.cumsum(sources == corpus)])
        result.append(float(np.abs((counts[window:] - counts[:-window]) / window - share).max()))
    return result


@pytest.mark.parametrize("weights", [[0.7, 0.3], [0.5, 0.3, 0.2], [1, 2, 3, 4, 5], [0.123, 0.877],
                                     [0.6, 0.25, 0.1, 0.05], [3, 0, 1]])
def test_every_window_of_1000_holds_each_weight_within_a_point(weights):
    schedule = MixSchedule(weights)
    sources = np.array([schedule.source(g) for g in range(30_000)])
    assert max(window_deviation(sources, weights)) <= 0.01
    for g in (0, 1, 7, 999, 12_345, 29_999):  # the counts at any step, without walking the steps
        assert schedule.counts(g) == [int((sources[:g] == corpus).sum()) for corpus in range(len(weights))]
        assert schedule.locate(g) == (sources[g], schedule.counts(g)[sources[g]])


def test_the_schedule_is_exact_for_decimal_weights_and_far_steps():
    schedule = MixSchedule([0.7, 0.3])
    assert [schedule.source(g) for g in range(10)] == [0, 1, 0, 0, 0, 1, 0, 0, 1, 0]  # period 10: 7/10 exactly
    far = 10 ** 15
    assert schedule.counts(far) == [7 * far // 10, 3 * far // 10]
    assert MixSchedule([0, 1]).counts(50) == [0, 50]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    from tests.conftest import _make_corpus
    root = tmp_path_factory.mktemp("mix")
    return (_make_corpus(root / "a", num=14, seed=1, min_sec=0.1, max_sec=0.5),
            _make_corpus(root / "b", num=7, seed=2, min_sec=0.1, max_sec=0.5), root)


def mix_entry(a, b, batches_per_epoch=9, weights=None, **conf):
    """libri: a, 5 batches of up to 3 (speed perturbation); cv: b, 4 batches of up to 2."""
    perturb = {"use_speed_perturb": True}
    return {"type": "mix.MixIterator", "conf": {
        "batches_per_epoch": batches_per_epoch, "weights": weights or {"libri": 0.7, "cv": 0.3},
        "iterators": {"libri": entry(a, "abs.Iterator", batch_size=3, dataset_conf=perturb),
                      "cv": entry(b, "abs.Iterator", batch_size=2, dataset_conf=perturb)}, **conf}}


def build(corpora, name="mix.yaml", num_workers=0, train=None, **settings):
    a, b, root = corpora
    cfg = write_recipe(root / name, a, train=train or mix_entry(a, b))
    return speechiter.build_iterators(speechiter.load_config(cfg), seed=5, num_workers=num_workers,
                                      groups=("train",), out_type="null", **settings)["train"]


def signature(batch):
    return batch.source, batch.ids, checksum(batch)


def run_epochs(mix, epochs=3):
    return [[signature(batch) for batch in mix.build_loader(epoch)] for epoch in range(1, epochs + 1)]


def test_each_batch_is_its_corpus_own_batch_at_its_own_position(corpora):
    mix = build(corpora)
    try:
        assert isinstance(mix, MixIterator) and len(mix) == 9 and mix.planner.sizes == [5, 4]
        assert [it.name for it in mix.iterators.values()] == ["train/libri", "train/cv"]
        mixed = run_epochs(mix, 4)
        own = {name: {} for name in mix.names}  # corpus -> {(own epoch, step): signature} from its own loader
        for name, iterator in mix.iterators.items():
            for epoch in range(1, 8):
                for step, batch in enumerate(iterator.build_loader(epoch), 1):
                    own[name][epoch, step] = (name, batch.ids, checksum(batch))
        counts = {name: 0 for name in mix.names}
        for epoch, batches in enumerate(mixed, 1):
            for step, (source, ids, digest) in enumerate(batches, 1):
                assert mix.planner.corpus_of(epoch, step) == source
                own_epoch, own_step = stream_position(counts[source], mix.planner.sizes[mix.names.index(source)])
                assert own[source][own_epoch, own_step + 1] == (source, ids, digest)
                counts[source] += 1
        assert counts == {"libri": 25, "cv": 11}  # 36 steps at 7/10 and 3/10, rounded within one batch
        assert mix.planner.own_positions(5, 0) == {"libri": (6, 0), "cv": (3, 3)}
        # each corpus in its own exact epochs: every own epoch that ended used each batch once
        libri_epoch_2 = [own["libri"][2, step][1] for step in range(1, 6)]
        assert sorted(sum(libri_epoch_2, [])) == sorted(sum(mix.iterators["libri"].batches, []))
    finally:
        mix.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine, num_workers, thread_type", [
    ("inline", 0, "proc"), pytest.param("msequence", 2, "proc", marks=pytest.mark.slow), ("msequence", 2, "thread"),
    pytest.param("torch", 2, "proc", marks=pytest.mark.slow)])  # process workers: slow
def test_the_same_batches_for_any_workers_and_engine(corpora, engine, num_workers, thread_type):
    reference = build(corpora)
    mix = build(corpora, num_workers=num_workers, engine=engine, thread_type=thread_type)
    try:
        assert run_epochs(mix, 2) == run_epochs(reference, 2)
        assert all(it._engine is None for it in mix.iterators.values())  # one engine: the mix's
    finally:
        mix.close()
        reference.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("num_workers, thread_type", [(0, "proc"), pytest.param(2, "proc", marks=pytest.mark.slow),
                                                      (2, "thread")])  # process workers: slow
def test_a_resume_at_any_step_gives_the_same_batches(corpora, num_workers, thread_type):
    reference = build(corpora)
    mix = build(corpora, num_workers=num_workers, thread_type=thread_type)
    try:
        full = run_epochs(reference, 3)
        for epoch, k in ((1, 0), (1, 4), (2, 1), (2, 8), (3, 9)):
            loader = reference.build_loader(epoch)
            for _ in zip(range(k), loader):
                pass
            state = json.loads(json.dumps(loader.state_dict()))
            assert state["sources"]["libri"]["epoch"] >= 1 and set(state["sources"]) == {"libri", "cv"}
            resumed = mix.build_loader(epoch)
            resumed.load_state_dict(state)
            assert [signature(batch) for batch in resumed] == full[epoch - 1][k:]
    finally:
        mix.close()
        reference.close()


def test_the_state_nests_each_corpus_at_its_own_position_and_is_checked(corpora):
    mix = build(corpora)
    try:
        state = mix.state_at(2, 3)
        positions = mix.planner.own_positions(2, 3)  # 12 steps: libri 8 batches (epoch 2, 3 done), cv 4 (2, 0 done)
        assert positions == {"libri": (2, 3), "cv": (2, 0)} and isinstance(state, MixState)
        assert {name: (s.epoch, s.step) for name, s in state.corpora.items()} == positions
        assert state.schedule == {"version": 1, "batches_per_epoch": 9, "weights": {"libri": "7/10", "cv": "3/10"}}
        assert read_loader_state(json.loads(json.dumps(state.to_dict()))) == state
        assert "sources" not in mix.iterators["cv"].state_at(1, 0).to_dict()  # other states unchanged
        saved = state.to_dict()
        saved["sources"]["cv"]["step"] = 1
        with pytest.raises(ConfigError, match=r"state.sources.cv: at epoch 2 step 1, but the mix's epoch 2 step 3 "
                                              r"puts it at epoch 2 step 0"):
            read_loader_state(saved).check_setup(mix)
        saved = state.to_dict()
        del saved["sources"]["cv"]
        with pytest.raises(ConfigError, match=r"state.sources: saved for corpora \['libri'\], this mix has"):
            read_loader_state(saved).check_setup(mix)
        saved = state.to_dict()
        del saved["sources"]
        with pytest.raises(ConfigError, match="state.sources: missing"):
            read_loader_state(saved).check_setup(mix)
        other = build(corpora, name="other.yaml", train=mix_entry(*corpora[:2], weights={"libri": 0.6, "cv": 0.4}))
        with pytest.raises(ConfigError, match=r"weights.cv: saved \"3/10\", now \"2/5\""):
            read_loader_state(state.to_dict()).check_setup(other)
        other.close()
    finally:
        mix.close()


def test_batch_source_is_an_attribute_and_survives_pickling(corpora):
    import pickle
    mix = build(corpora)
    try:
        batch = next(iter(mix.build_loader(1)))
        assert isinstance(batch, Batch) and batch.source == "libri" and "source" not in batch
        assert pickle.loads(pickle.dumps(batch)).source == "libri"
        assert Batch({"x": 1}, ["a"]).source is None
        assert len(mix.epoch_batches(1)) == 9 and mix.batches[5] == mix.iterators["cv"].batches[0]
        assert "MixIterator(batches_per_epoch=9, weights=(libri=0.7, cv=0.3)" in repr(mix)
    finally:
        mix.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_mix_is_a_group_member_and_resumes_from_the_cli(corpora, tmp_path):
    a, b, _ = corpora
    train = {"steps": "longest", "sup": mix_entry(a, b, batches_per_epoch=6),
             "unsup": entry(b, "abs.Iterator", batch_size=1)}
    cfg = write_recipe(tmp_path / "group.yaml", a, train=train)
    full, part, rest = (tmp_path / f"{name}.jsonl" for name in ("full", "part", "rest"))
    state = tmp_path / "state.json"
    for args in (("--epochs", "2", "--dump_batches", full, "--num_workers", "0"),
                 ("--epochs", "1", "--dump_batches", part, "--save_state", state, "--num_workers", "2"),
                 ("--epochs", "2", "--resume", state, "--dump_batches", rest, "--num_workers", "2",
                  "--thread_type", "thread")):
        done = run_cli("--data_cfg", cfg, "--quiet", *args)
        assert done.returncode == 0, done.stderr
        if args[1] == "1":
            saved = json.loads(state.read_text())["train"]["iterators"]["sup"]
            assert saved["epoch"] == 2 and set(saved["sources"]) == {"libri", "cv"}
    records = [r for r in read_dump(full) if r["group"] == "train"]
    assert [r for r in read_dump(part) + read_dump(rest) if r["group"] == "train"] == records
    assert {r.get("source") for r in records if r["iterator"] == "sup"} == {"libri", "cv"}
    assert all("source" not in r for r in records if r["iterator"] == "unsup")  # the format is unchanged there


def test_group_info_values_come_from_the_batch_corpus(corpora, tmp_path):
    a, b, _ = corpora
    train = mix_entry(a, b)
    train["conf"]["iterators"]["cv"]["conf"]["group_info"] = {"speaker": str(b / "idx2spk")}
    mix = build(corpora, name="info.yaml", train=train)
    try:
        for batch in mix.build_loader(1):
            assert (batch.source, set(batch.meta)) in (("libri", set()), ("cv", {"speaker"}))
    finally:
        mix.close()


@pytest.mark.slow  # the handbook's example run as a script
@pytest.mark.timeout(300)
def test_handbook_mixing_example(tmp_path, demo_root):
    result = run_example(handbook_code("## Mixing corpora"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "Counter({'main': 7, 'extra': 3})"


@pytest.mark.slow
@pytest.mark.nightly  # a benchmark, at a tiny size
@pytest.mark.timeout(300)
def test_bench_mix_runs_at_a_tiny_size(load_tool, capsys):
    best, planning = load_tool("bench_mix").main(["--workers", "0", "--utterances", "30", "--repeats", "1",
                                                  "--steps", "3000", "--batch_seconds", "5"])
    assert set(best) == set(planning) == {"alone", "mix of one", "mix 0.7/0.3"}
    out = capsys.readouterr().out
    assert "weights [0.7, 0.3]: 0.7: 0.00, 0.3: 0.00" in out and "ratio to alone" in out
