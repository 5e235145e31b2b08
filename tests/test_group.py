"""Groups of iterators: steps shortest/longest, GroupLoader state, skipped counts in summary and report."""
import json
import textwrap

import pytest

import speechiter
from speechiter.errors import ConfigError
from speechiter.group import GroupLoader, IteratorGroup, build_group_loader
from speechiter.iterator.abs import Iterator
from tests.test_loop import handbook_code, run_example
from tests.test_run import read_dump, run_cli


def write_semi(tmp_path, corpus, steps=None):
    policy = f"  steps: {steps}\n" if steps else ""
    cfg = tmp_path / "semi.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        root: {corpus}
        train:
          sup:
            type: abs.Iterator
            conf:
              dataset_type: speech_text.SpeechTextDataset
              dataset_conf:
                main_data: {{feat: !ref <root>/idx2wav, text: !ref <root>/idx2text}}
                data_selection: [order, 0.25]
              batch_size: 2
          unsup:
            type: abs.Iterator
            conf:
              dataset_type: speech_text.SpeechTextDataset
              dataset_conf: {{main_data: {{feat: !ref <root>/idx2wav}}}}
              batch_size: 2
        valid:
          type: abs.Iterator
          conf:
            dataset_type: speech_text.SpeechTextDataset
            dataset_conf: {{main_data: {{feat: !ref <root>/idx2wav}}}}
        """).replace("train:\n", "train:\n" + policy))
    return cfg


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
        cases = [(dict(state, extra=1), "unknown keys: extra"), ({"epoch": 1}, "missing: version"),
                 (dict(state, version=7), "state version 7"), (dict(state, steps="longest"), "saved with steps"),
                 (dict(state, iterators={"sup": state["iterators"]["sup"]}), "saved for iterators"),
                 (dict(state, step=-1), "state.step"), ([], "expected a group state dict, got list"),
                 (dict(state, iterators=dict(state["iterators"], sup=state["iterators"]["unsup"])),
                  "different setup")]
        for bad, message in cases:
            with pytest.raises(ConfigError, match=message):
                loader.load_state_dict(bad)
        with pytest.raises(ConfigError, match="has 2 steps, got start_step=3"):
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


@pytest.mark.timeout(300)
def test_handbook_semi_supervised_example(tmp_path, demo_root):
    result = run_example(handbook_code("## Groups: semi-supervised steps"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # the demo's halves make 4 block batches each: 2 steps were done before the resume, nothing is skipped
    assert result.stdout.strip() == "2 steps left; shortest would skip {}", result.stdout
