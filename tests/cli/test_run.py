"""The CLI end to end, in this process (tests/inprocess.py): demo recipes, dump and report contracts, errors.
Runs with process workers are marked slow."""
import json
from pathlib import Path

import pytest

from tests.inprocess import run_cli
from tests.processes import children
from tests.recipes import Ref, entry, write_recipe

REPO = Path(__file__).resolve().parents[2]


def read_dump(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def write_cfg(tmp_path, corpus, name="cfg.yaml"):
    """Every kind of group: train sup + unsup, valid, test sets clean and other/{asr, tts}; the corpus and the
    sup iterator's batch_len come from the variables ``root`` and ``batch_len``."""
    root = Ref("<root>")
    train = {"sup": entry(root, data=("feat", "text"), dataset_conf={"sample_rate": 16000},
                          batch_len=Ref("<batch_len>")),
             "unsup": entry(root, "piece.PieceIterator", batch_size=3)}
    text_only = dict(type="abs.Iterator", data=("text",), data_len=False)
    test = {"clean": entry(root, "piece.PieceIterator", data=("feat", "text"), data_len=False, batch_size=4,
                           group_info={"speaker": Ref("<root>/idx2spk")}),
            "other": {"asr": entry(root, **text_only), "tts": entry(root, **text_only)}}
    valid = entry(root, "abs.Iterator", data_len=False, shuffle=False)
    return write_recipe(tmp_path / name, root, train=train, valid=valid, test=test,
                        variables={"root": str(corpus), "batch_len": 40000})


@pytest.mark.slow  # process workers
@pytest.mark.timeout(180)
def test_demo_recipe_runs_and_writes_contract_formats(tmp_path, demo_root):
    dump, report = tmp_path / "dump.jsonl", tmp_path / "report.json"
    result = run_cli("--data_cfg", "recipes/demo/asr.yaml", "--epochs", 2, "--num_workers", 2, "--quiet",
                     "--dump_batches", dump, "--report", report)
    assert result.returncode == 0, result.stderr
    records = read_dump(dump)
    assert set(records[0]) == {"group", "set", "iterator", "epoch", "step", "rank", "ids", "checksum"}
    train = [r for r in records if r["group"] == "train"]
    train_ids = [l.split()[0] for l in (demo_root / "train" / "idx2wav").read_text().splitlines()]
    for epoch in (1, 2):
        ids = [u for r in train if r["epoch"] == epoch for u in r["ids"]]
        assert sorted(ids) == sorted(train_ids)  # every utterance exactly once per epoch
        steps = [r["step"] for r in train if r["epoch"] == epoch]
        assert steps == list(range(1, len(steps) + 1))
    assert {r["iterator"] for r in records} == {None}
    assert {r["group"] for r in records} == {"train", "valid"}
    summary = json.loads(report.read_text())
    assert summary["engine"]["engine"] == "msequence" and summary["wall_time_s"] > 0
    stats = summary["iterators"]["train"]
    for key in ("total_batches", "batches_per_epoch", "steps", "utterances", "real_frames", "padded_frames",
                "padding_efficiency", "batches_per_s", "audio_seconds_per_s", "time_to_first_batch_s", "wait_s"):
        assert key in stats
    assert stats["utterances"] == 2 * len(train_ids) and 0 < stats["padding_efficiency"] <= 1
    assert "pad eff" in result.stdout and "train" in result.stdout


@pytest.mark.timeout(180)
def test_test_mode_runs_every_set_and_iterator(tmp_path, corpus):
    cfg = write_cfg(tmp_path, corpus)
    dump = tmp_path / "dump.jsonl"
    result = run_cli("--data_cfg", cfg, "--mode", "test", "--num_workers", 0, "--quiet", "--dump_batches", dump)
    assert result.returncode == 0, result.stderr
    records = read_dump(dump)
    assert {(r["set"], r["iterator"]) for r in records} == {("clean", None), ("other", "asr"), ("other", "tts")}
    assert sum(len(r["ids"]) for r in records if r["set"] == "clean") == 20


@pytest.mark.timeout(180)
def test_several_train_iterators_step_together_for_the_shortest(tmp_path, corpus):
    cfg = write_cfg(tmp_path, corpus)
    dump = tmp_path / "dump.jsonl"
    result = run_cli("--data_cfg", cfg, "--epochs", 1, "--num_workers", 0, "--dump_batches", dump, "--quiet")
    assert result.returncode == 0, result.stderr
    train = [r for r in read_dump(dump) if r["group"] == "train"]
    sup = [r for r in train if r["iterator"] == "sup"]
    unsup = [r for r in train if r["iterator"] == "unsup"]
    assert len(sup) == len(unsup) == min(len(sup), 7)  # 20 utterances / 3 per piece batch = 7 batches
    assert [r["step"] for r in sup] == [r["step"] for r in unsup] == list(range(1, len(sup) + 1))


@pytest.mark.slow  # process workers (forkserver, spawn, torch's)
@pytest.mark.timeout(240)
def test_engines_and_worker_counts_give_identical_dumps(tmp_path, corpus):
    cfg = write_cfg(tmp_path, corpus)
    dumps = []
    for args in (["--engine", "inline"], ["--num_workers", 0], ["--num_workers", 2],
                 ["--num_workers", 2, "--thread_type", "thread"], ["--engine", "torch", "--num_workers", 2],
                 ["--num_workers", 2, "--start_method", "spawn"]):
        dump = tmp_path / f"dump{len(dumps)}.jsonl"
        result = run_cli("--data_cfg", cfg, "--epochs", 2, "--quiet", "--dump_batches", dump, *args)
        assert result.returncode == 0, result.stderr
        dumps.append(read_dump(dump))
    assert all(d == dumps[0] for d in dumps[1:])


@pytest.mark.slow  # a process worker
@pytest.mark.timeout(180)
def test_start_step_reproduces_the_tail(tmp_path, corpus):
    cfg = write_cfg(tmp_path, corpus)
    full, tail = tmp_path / "full.jsonl", tmp_path / "tail.jsonl"
    assert run_cli("--data_cfg", cfg, "--epochs", 3, "--quiet", "--dump_batches", full).returncode == 0
    result = run_cli("--data_cfg", cfg, "--epochs", 3, "--start_epoch", 2, "--start_step", 2, "--quiet",
                     "--dump_batches", tail)
    assert result.returncode == 0, result.stderr
    records = read_dump(full)
    first = next(i for i, r in enumerate(records) if r["epoch"] == 2 and r["group"] == "train" and r["step"] == 3)
    assert read_dump(tail) == records[first:]


@pytest.mark.timeout(120)
def test_set_override_and_exp_cfg_layout(tmp_path, corpus):
    body = write_cfg(tmp_path, corpus).read_text()
    lines = body.splitlines()
    variables = [l for l in lines[:2]]
    groups = "\n".join("  " + l for l in lines[2:])
    exp = tmp_path / "exp.yaml"
    exp.write_text("\n".join(variables) + "\nseed: 3\ntrain_cfg: {lr: 0.1}\ndata_cfg:\n" + groups + "\n")
    dump = tmp_path / "dump.jsonl"
    result = run_cli("--data_cfg", exp, "--set", "batch_len=1e9", "--quiet", "--num_workers", 0, "--dump_batches", dump)
    assert result.returncode == 0, result.stderr
    sup = [r for r in read_dump(dump) if r["iterator"] == "sup"]
    assert len(sup[0]["ids"]) == 20  # one block holds everything


ERROR_CASES = [
    ("--set", "train.sup.conf.batch_len=-3", "data_cfg.train.sup.conf.batch_len: expected a positive number, got -3"),
    ("--set", "train.sup.conf.batch_lenn=3", "did you mean 'batch_len'"),
    ("--set", "train.sup.conf.dataset_conf.sample_rat=8000", "did you mean 'sample_rate'"),
    ("--set", "train.sup.type=blok.BlockIterator", "did you mean 'block.BlockIterator'"),
    ("--set", "train.sup.type=block.Nope", "data_cfg.train.sup.type"),
    ("--set", "root=/nonexistent", "file not found: /nonexistent/idx2wav"),
    ("--set", "batch_len=!ref <nope>", "no top-level key 'nope'"),
    ("--set", "train.sup.conf.dataset_conf.main_data.feat=!ref <root>/idx2gen", "utterance"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flag, value, message", ERROR_CASES)
def test_config_and_input_errors_exit_2_with_one_line(tmp_path, corpus, flag, value, message):
    cfg = write_cfg(tmp_path, corpus)
    result = run_cli("--data_cfg", cfg, flag, value, "--quiet", "--num_workers", 0)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(60)
def test_missing_config_file_and_bad_group_combination(tmp_path):
    result = run_cli("--data_cfg", tmp_path / "nope.yaml")
    assert result.returncode == 2 and "no such file" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  type: block.BlockIterator\n  conf: {}\n")
    result = run_cli("--data_cfg", bad)
    assert result.returncode == 2 and "allowed group combinations" in result.stderr


@pytest.mark.timeout(60)
def test_debug_shows_the_traceback(tmp_path):
    result = run_cli("--data_cfg", tmp_path / "nope.yaml", "--debug")
    assert result.returncode == 2 and "Traceback" in result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("settings", [
    pytest.param(dict(num_workers=2), marks=pytest.mark.slow),  # process workers
    dict(num_workers=2, thread_type="thread"), dict(num_workers=0),
    pytest.param(dict(engine="torch", num_workers=2), marks=pytest.mark.slow)])  # process workers
def test_leaving_an_epoch_early_then_continuing(tmp_path, corpus, settings):
    import speechiter
    from speechiter.dump import checksum
    cfg = write_cfg(tmp_path, corpus)
    iterators = speechiter.build_iterators(speechiter.load_config(cfg), groups=("test",), **settings)
    iterator = iterators["test"]["clean"]
    try:
        expected = [checksum(b) for b in iterator.build_loader(epoch=2)]
        for batch in iterator.build_loader(epoch=1):
            break
        assert [checksum(b) for b in iterator.build_loader(epoch=2)] == expected
    finally:
        speechiter.build.close_all(iterators)
    assert children() == []  # Python's resource tracker is not a worker (tests/processes.py)


VALID_GROUP = """
valid:
  type: abs.Iterator
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {main_data: {feat: ROOT/idx2wav}}
"""
BAD_FILES = [
    ("train:\n  conf: {dataset_type: speech_text.SpeechTextDataset}\n" + VALID_GROUP,
     "data_cfg.train.type: missing"),
    ("a: !ref <b>\nb: !ref <a>\ntrain:\n  type: !ref <a>\n  conf: {}\n" + VALID_GROUP, "reference cycle"),
    ("x: !!python/object/apply:os.system ['echo hacked']\n" + VALID_GROUP, "YAML object tags are not allowed"),
    ("train:\n  type: block.BlockIterator\n  conf:\n    dataset_type: speech_text.SpeechTextDataset\n"
     "    dataset_conf: {main_data: {feat: ROOT/idx2wav}}\n    data_len: ROOT/idx2wav_len\n    batch_len: abc\n"
     + VALID_GROUP, "data_cfg.train.conf.batch_len: expected a positive number, got 'abc'"),
    ("train:\n  type: abs.Iterator\n  conf:\n    dataset_type: speech_text.SpeechTextDataset\n"
     "    dataset_conf: {main_data: {feat: ROOT/idx2wav}}\n    shuffle: [1]\n" + VALID_GROUP,
     "data_cfg.train.conf.shuffle: expected true or false"),
    ("train: [1, 2]\n" + VALID_GROUP, "data_cfg.train"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text, message", BAD_FILES)
def test_bad_files_exit_2_with_one_line(tmp_path, corpus, text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text.replace("ROOT", str(corpus)))
    result = run_cli("--data_cfg", cfg, "--quiet", "--num_workers", 0)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])  # 2: process workers
def test_empty_audio_file_names_the_utterance_and_exits_2(tmp_path, corpus, workers):
    import numpy as np
    import soundfile as sf
    first = (corpus / "idx2wav").read_text().splitlines()[0].split()
    sf.write(corpus / first[1], np.zeros(0, dtype=np.int16), 16000)
    cfg = write_cfg(tmp_path, corpus)
    result = run_cli("--data_cfg", cfg, "--quiet", "--num_workers", workers)
    assert result.returncode == 2, result.stderr
    assert f"utterance {first[0]}" in result.stderr and "idx2wav" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(120)
def test_plot_prints_a_summary_per_iterator(tmp_path, corpus):
    import importlib.util
    cfg = write_cfg(tmp_path, corpus)
    result = run_cli("--data_cfg", cfg, "--quiet", "--num_workers", 0, "--plot", tmp_path / "plan.png")
    assert result.returncode == 0, result.stderr
    if importlib.util.find_spec("matplotlib") is None:  # one line saying what to install (test_plot.py)
        assert "--plot needs matplotlib" in result.stderr
        return
    for name in ("train/sup", "train/unsup", "valid"):
        assert f"{name}: " in result.stdout and "padding efficiency" in result.stdout
    assert (tmp_path / "plan.train-sup.png").stat().st_size > 0
