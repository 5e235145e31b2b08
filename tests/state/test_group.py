"""Groups of iterators: steps shortest/longest, GroupLoader state, skipped counts in summary and report."""
import json

import pytest

import speechiter
from speechiter.errors import ConfigError
from speechiter.group import GroupLoader, IteratorGroup, build_group_loader
from speechiter.iterator.abs import Iterator
from tests.iterator.test_loop import handbook_code, run_example
from tests.cli.test_run import read_dump, run_cli
from tests.state.old_forms import loader_state
from tests.recipes import entry, write_recipe


def write_semi(tmp_path, corpus, steps=None, batch_size=2, unsup_type="speech_text.SpeechTextDataset"):
    """sup: 3 of the corpus's 12 utterances, unsup: all 12; ``batch_size`` 1 makes a 3-step + 12-step group."""
    train = {"steps": steps} if steps else {}
    train["sup"] = entry(corpus, "abs.Iterator", data=("feat", "text"), data_len=False, batch_size=batch_size,
                         dataset_conf={"data_selection": ["order", 0.25]})
    train["unsup"] = entry(corpus, "abs.Iterator", dataset_type=unsup_type, data_len=False, batch_size=batch_size)
    return write_recipe(tmp_path / "semi.yaml", corpus, train=train)



@pytest.fixture
def semi(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=12)
    return tmp_path, corpus


def build(cfg, num_workers=0, **settings):
    return speechiter.build_iterators(speechiter.load_config(cfg), num_workers=num_workers, groups=("train",), **settings)


def ids_per_step(loader):
    return [{name: batch.ids for name, batch in step.items()} for step in loader]


def test_steps_policy_lives_beside_the_named_iterators(semi):
    tmp_path, corpus = semi
    train = build(write_semi(tmp_path, corpus, "longest"))["train"]
    try:
        assert isinstance(train, IteratorGroup) and train.steps == "longest" and set(train) == {"sup", "unsup"}
        assert len(train["sup"]) == 2 and len(train["unsup"]) == 6  # 3 and 12 utterances
    finally:
        for it in train.values():
            it.close()
    default = build(write_semi(tmp_path, corpus))["train"]
    assert default.steps == "shortest"
    for it in default.values():
        it.close()


@pytest.mark.parametrize("text, message", [
    ("  steps: longst\n", r"data_cfg.train.steps: expected one of shortest, longest, got 'longst'; "
                          r"did you mean 'longest'\?"),
    ("  step: longest\n", r"data_cfg.train.step: expected an iterator .*did you mean 'steps'\?"),
])
def test_bad_steps_keys_are_rejected_with_did_you_mean(semi, text, message):
    tmp_path, corpus = semi
    cfg = write_semi(tmp_path, corpus)
    cfg.write_text(cfg.read_text().replace("train:\n", "train:\n" + text))
    with pytest.raises(ConfigError, match=message):
        build(cfg)


def test_steps_without_iterators_is_rejected(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("train:\n  steps: longest\nvalid:\n  steps: shortest\n")
    with pytest.raises(ConfigError, match="data_cfg.train: holds steps but no iterators"):
        speechiter.build_iterators(speechiter.load_config(cfg))


def test_shortest_skips_and_longest_walks_on_through_the_shorter_ones_epochs(semi):
    tmp_path, corpus = semi
    train = build(write_semi(tmp_path, corpus))["train"]
    try:
        short = GroupLoader(train, epoch=1)
        steps = ids_per_step(short)
        assert len(steps) == 2 and short.skipped() == {"unsup": (4, 8)}
        longest = build_group_loader(train, epoch=2, steps="longest")
        assert len(longest) == 6 and longest.skipped() == {}
        sup = [s["sup"] for s in ids_per_step(longest)]
        # group epoch 2 = batches 6..11 of sup's stream: its epochs 4, 5, 6, each shuffled as usual
        expected = [ids for epoch in (4, 5, 6) for ids in train["sup"].build_loader(epoch).plan]
        assert sup == expected
        unsup = [s["unsup"] for s in ids_per_step(GroupLoader(train, 1, steps="longest"))]
        assert sorted(u for ids in unsup for u in ids) == sorted(train["unsup"].dataset.get_data_index())
    finally:
        for it in train.values():
            it.close()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["shortest", "longest"])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.timeout(120)
def test_group_state_resumes_exactly(semi, policy, num_workers):
    tmp_path, corpus = semi
    train = build(write_semi(tmp_path, corpus), num_workers=num_workers)["train"]
    try:
        full = GroupLoader(train, epoch=3, steps=policy)
        reference = [{n: (b.ids, b["feat"].numpy().tobytes()) for n, b in step.items()} for step in full]
        partial = GroupLoader(train, epoch=3, steps=policy)
        for k, _ in enumerate(partial):
            if k == 0:
                break
        state = json.loads(json.dumps(partial.state_dict()))
        fresh = GroupLoader(train, epoch=1, steps=policy)
        fresh.load_state_dict(state)
        rest = [{n: (b.ids, b["feat"].numpy().tobytes()) for n, b in step.items()} for step in fresh]
        assert rest == reference[1:]
        assert isinstance(fresh, speechiter.state.Stateful)
    finally:
        for it in train.values():
            it.close()


def test_group_state_errors_name_the_problem(semi):
    tmp_path, corpus = semi
    train = build(write_semi(tmp_path, corpus))["train"]
    try:
        loader = GroupLoader(train)
        state = loader.state_dict()
        cases = [(dict(state, extra=1), "^state: unknown keys extra; a group state has version, epoch, step, "
                                        "steps, iterators$"),
                 ({"epoch": 1}, "^state: missing keys version, step, steps, iterators$"),
                 (dict(state, version=7), "^state.version: state version 7 is not supported"),
                 (dict(state, steps="longest"), "^state.steps: saved with steps: longest, this group has shortest$"),
                 (dict(state, iterators={"sup": state["iterators"]["sup"]}), "saved for iterators"),
                 (dict(state, step=-1), "^state.step: expected a non-negative integer, got -1$"),
                 (dict(state, step=3), "^state.step: epoch 1 has 2 steps, got step 3$"),
                 ([], "^state: expected a state dict, got list$"),
                 (dict(state, iterators=dict(state["iterators"], sup=state["iterators"]["unsup"])),
                  "^state.iterators.sup: the state was saved with a different setup"),
                 (dict(state, step=1), "^state.iterators.sup: at epoch 1 step 0, but the group's epoch 1 step 1 "
                                       "puts it at epoch 1 step 1$")]
        for bad, message in cases:
            with pytest.raises(ConfigError, match=message):
                loader.load_state_dict(bad)
        with pytest.raises(ConfigError, match="^start_step: epoch 1 has 2 steps, got step 3$"):
            GroupLoader(train, start_step=3)
        with pytest.raises(ConfigError, match="steps: expected one of shortest, longest"):
            GroupLoader(train, steps="all")
        with pytest.raises(ConfigError, match="expected an Iterator or a non-empty"):
            GroupLoader({})
        with pytest.raises(ConfigError, match="iterators.x: expected an Iterator, got int"):
            GroupLoader({"x": 1})
        single = [step[None].ids for step in GroupLoader(train["sup"])]
        assert single == train["sup"].build_loader().plan
    finally:
        for it in train.values():
            it.close()


@pytest.mark.timeout(180)
def test_cli_reports_what_shortest_skipped_even_when_quiet(semi):
    tmp_path, corpus = semi
    report = tmp_path / "report.json"
    result = run_cli("--data_cfg", write_semi(tmp_path, corpus), "--epochs", 2, "--num_workers", 0, "--quiet",
                     "--report", report)
    assert result.returncode == 0, result.stderr
    assert json.loads(report.read_text())["skipped"] == {"train/unsup": {"batches": 8, "utterances": 16}}
    assert "train/unsup: skipped 8 batches (16 utterances)" in result.stdout


@pytest.mark.timeout(180)
def test_cli_longest_loads_every_utterance_and_resumes(semi):
    tmp_path, corpus = semi
    cfg = write_semi(tmp_path, corpus, "longest")
    dump, state = tmp_path / "dump.jsonl", tmp_path / "state.json"
    result = run_cli("--data_cfg", cfg, "--epochs", 2, "--num_workers", 0, "--quiet", "--dump_batches", dump,
                     "--report", tmp_path / "r.json", "--save_state", state)
    assert result.returncode == 0, result.stderr
    train = [r for r in read_dump(dump) if r["group"] == "train"]
    unsup = [u for r in train if r["iterator"] == "unsup" and r["epoch"] == 1 for u in r["ids"]]
    assert len(unsup) == len(set(unsup)) == 12
    assert [r["step"] for r in train if r["iterator"] == "sup" and r["epoch"] == 2] == list(range(1, 7))
    assert json.loads((tmp_path / "r.json").read_text())["skipped"] == {}
    tail = tmp_path / "tail.jsonl"
    again = run_cli("--data_cfg", cfg, "--epochs", 2, "--start_epoch", 2, "--start_step", 3, "--num_workers", 0,
                    "--quiet", "--dump_batches", tail)
    assert again.returncode == 0, again.stderr
    records = read_dump(dump)
    first = next(i for i, r in enumerate(records) if (r["epoch"], r["group"], r["step"]) == (2, "train", 4))
    assert read_dump(tail) == records[first:]
    shortest = write_semi(tmp_path, corpus)
    resumed = run_cli("--data_cfg", shortest, "--epochs", 2, "--num_workers", 0, "--quiet", "--resume", state)
    assert resumed.returncode == 2 and "saved by a different run" in resumed.stderr


@pytest.mark.slow  # the handbook's example run as a script
@pytest.mark.timeout(300)
def test_handbook_semi_supervised_example(tmp_path, demo_root):
    result = run_example(handbook_code("## Groups: semi-supervised steps"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # the demo's halves make 4 block batches each: 2 steps were done before the resume, nothing is skipped
    assert result.stdout.strip() == "2 steps left; shortest would skip {}", result.stdout


@pytest.mark.parametrize("policy", ["longest", "shortest"])
@pytest.mark.timeout(120)
def test_a_3_and_12_step_group_resumes_from_every_save_point(semi, policy):
    tmp_path, corpus = semi
    train = build(write_semi(tmp_path, corpus, batch_size=1))["train"]
    try:
        assert (len(train["sup"]), len(train["unsup"])) == (3, 12)
        reference = ids_per_step(GroupLoader(train, epoch=2, steps=policy))
        assert len(reference) == (12 if policy == "longest" else 3)
        for k in range(len(reference) + 1):
            loader = GroupLoader(train, epoch=2, steps=policy)
            for _ in zip(range(k), loader):
                pass
            state = json.loads(json.dumps(loader.state_dict()))
            fresh = GroupLoader(train, steps=policy)
            fresh.load_state_dict(state)
            assert ids_per_step(fresh) == reference[k:], k
            # each iterator's state holds its own position: sup has done 12 + k batches of its 3-batch epochs
            sup = state["iterators"]["sup"]
            assert (sup["epoch"], sup["step"]) == ((12 + k) // 3 + 1, (12 + k) % 3) if policy == "longest" else (2, k)
    finally:
        for it in train.values():
            it.close()


def test_a_version_2_group_state_still_loads(semi):
    """Version 2 saved the group's (epoch, step) in every iterator's state (which the longest policy then
    refused for the shorter iterator); it still resumes the group."""
    tmp_path, corpus = semi
    train = build(write_semi(tmp_path, corpus, batch_size=1))["train"]
    try:
        state = GroupLoader(train, epoch=2, start_step=5, steps="longest").state_dict()
        state["version"] = 2
        for name, saved in state["iterators"].items():
            state["iterators"][name] = loader_state(train[name], 2, 5, version=2)
        fresh = GroupLoader(train, steps="longest")
        fresh.load_state_dict(state)
        assert ids_per_step(fresh) == ids_per_step(GroupLoader(train, 2, 5, steps="longest"))
        state["iterators"]["sup"]["step"] = 4
        with pytest.raises(ConfigError, match=r"^state.iterators.sup: at epoch 2 step 4, but the group's epoch 2 "
                                              r"step 5 puts it at epoch 2 step 5$"):
            fresh.load_state_dict(state)
    finally:
        for it in train.values():
            it.close()


STOPPER_MODULE = '''
import os

from speechiter.dataset.speech_text import SpeechTextDataset

LOADED = [0]


class StopAfter(SpeechTextDataset):
    """Fails on its $STOP_AFTER-th utterance of the process: the run dies there, as if killed."""

    def extract_main_data_fn(self, main_data):
        LOADED[0] += 1
        if LOADED[0] == int(os.environ.get("STOP_AFTER", "0")):
            raise RuntimeError("stopped here")
        return super().extract_main_data_fn(main_data)
'''


@pytest.mark.timeout(300)
def test_cli_run_that_dies_mid_epoch_of_a_longest_group_resumes(semi):
    tmp_path, corpus = semi
    (tmp_path / "stopper.py").write_text(STOPPER_MODULE)
    cfg = write_semi(tmp_path, corpus, "longest", batch_size=1, unsup_type="stopper.StopAfter")
    full, tail, state = tmp_path / "full.jsonl", tmp_path / "tail.jsonl", tmp_path / "state.json"
    common = ("--data_cfg", cfg, "--epochs", 2, "--num_workers", 0, "--quiet")
    done = run_cli(*common, "--dump_batches", full)
    assert done.returncode == 0, done.stderr
    died = run_cli(*common, "--save_state", state, env={"STOP_AFTER": "19"})  # unsup's 7th utterance of epoch 2
    assert died.returncode == 1 and "stopped here" in died.stderr, died.stderr
    saved = json.loads(state.read_text())["train"]
    assert saved["epoch"] == 2 and 3 < saved["step"] < 12, saved  # mid-epoch, past the end of sup's epoch
    resumed = run_cli(*common, "--resume", state, "--dump_batches", tail)
    assert resumed.returncode == 0, resumed.stderr
    records = read_dump(full)
    first = next(i for i, r in enumerate(records) if (r["epoch"], r["group"], r["step"]) == (2, "train",
                                                                                            saved["step"] + 1))
    assert read_dump(tail) == records[first:]
