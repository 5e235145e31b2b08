"""The command line's state files, launch and output, where a run could go silently wrong (issue 31):
a rank's state file resumed without --distributed, torchrun without --distributed, a resumed run's dump,
state files of a killed or mixed job, and the lines a run prints."""
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from speechiter import build_iterators, load_config
from speechiter.build import close_all
from speechiter.dump import rank_path
from speechiter.errors import ConfigError
from speechiter.group import GroupLoader
from speechiter.run import main
from speechiter.state_files import StateFiles, earliest, saved_states
from tests.recipes import entry, write_recipe


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """A 12-utterance recipe: abs.Iterator, 2 utterances a batch, 6 steps an epoch."""
    from tests.conftest import _make_corpus
    root = tmp_path_factory.mktemp("reliability")
    corpus = _make_corpus(root / "corpus", num=12, max_sec=0.5)
    return write_recipe(root / "recipe.yaml", corpus, "abs.Iterator", batch_size=2)


def run_main(capsys, recipe, *args):
    """``python -m speechiter.run`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    returncode = main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", *map(str, args)])
    out = capsys.readouterr()
    return returncode, out.out, out.err


def train_steps(dump: Path) -> dict:
    return {(r["epoch"], r["step"]): r["ids"] for r in map(json.loads, dump.read_text().splitlines())
            if r["group"] == "train"}


def write_rank_states(recipe, path: Path, steps, epoch=1, seed=0):
    """The state files a ``len(steps)``-rank run leaves: rank r's at step ``steps[r]`` of ``epoch``."""
    for rank, step in enumerate(steps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ngpu 1 on several ranks
            iterators = build_iterators(load_config(str(recipe)), num_workers=0, groups=("train", "valid"),
                                        rank=rank, world_size=len(steps))
        try:
            state = StateFiles(iterators, seed, None, False, rank, len(steps)).state(
                GroupLoader(iterators["train"]).state_at(epoch, step))
            Path(rank_path(str(path), rank)).write_text(json.dumps(state.to_dict()))
        finally:
            close_all(iterators)


# --- a rank's state file without --distributed (items 1, 10) -------------------------------------------


def test_a_rank_file_resumed_alone_continues_from_the_earliest_rank(tmp_path, capsys, recipe):
    write_rank_states(recipe, tmp_path / "state.json", [5, 2, 4, 5])
    code, _, err = run_main(capsys, recipe, "--dump_batches", tmp_path / "all.jsonl")
    assert code == 0, err
    reference = train_steps(tmp_path / "all.jsonl")
    code, _, err = run_main(capsys, recipe, "--resume", tmp_path / "state.rank0.json",
                            "--dump_batches", tmp_path / "resumed.jsonl")
    assert code == 0, err
    assert train_steps(tmp_path / "resumed.jsonl") == {key: ids for key, ids in reference.items() if key[1] > 2}
    assert err == (f"speechiter: --resume {tmp_path / 'state.rank0.json'}: continuing from "
                   f"{tmp_path / 'state.rank1.json'} (epoch 1 step 2), the earliest rank of the run that saved it\n")


@pytest.mark.parametrize("case, message", [
    ("renamed", "mine.json holds one rank's state of a run of 4 ranks, and its name has no .rank<r> to find the "
                "other ranks' files by"),
    ("missing", "state.rank2.json is missing: the run that wrote {tmp}/state.rank0.json had 4 ranks"),
    ("no-such-rank", "state.rank7.json was saved by a run of 4 ranks, which has no rank 7"),
    ("other-run", "state.rank3.json was saved by a different run (seed: saved 5, now 0)"),
    ("truncated", "cannot read state file {tmp}/state.rank1.json: it ends early (truncated?)"),
    ("old-version", "state.rank2.json is a state of version 3, {tmp}/state.rank0.json of version 5: not the files "
                    "of one run"),
])
def test_state_files_that_are_not_one_run_are_one_error_line(tmp_path, capsys, recipe, case, message):
    path = tmp_path / "state.json"
    write_rank_states(recipe, path, [3, 3, 3, 3])
    given = tmp_path / "state.rank0.json"
    if case == "renamed":
        given = given.rename(tmp_path / "mine.json")
    elif case == "missing":
        (tmp_path / "state.rank2.json").unlink()
    elif case == "no-such-rank":
        given = (tmp_path / "state.rank0.json").rename(tmp_path / "state.rank7.json")
    elif case == "other-run":
        write_rank_states(recipe, tmp_path / "other.json", [3, 3, 3, 1], seed=5)
        (tmp_path / "other.rank3.json").rename(tmp_path / "state.rank3.json")
    elif case == "old-version":
        state = json.loads((tmp_path / "state.rank2.json").read_text())
        del state["world_size"]
        (tmp_path / "state.rank2.json").write_text(json.dumps(dict(state, version=3)))
    else:
        text = (tmp_path / "state.rank1.json").read_text()
        (tmp_path / "state.rank1.json").write_text(text[:len(text) // 2])
    code, out, err = run_main(capsys, recipe, "--resume", given)
    assert code == 2 and out == "", err
    assert err.startswith("speechiter: error: --resume") and len(err.splitlines()) == 1, err
    assert message.format(tmp=tmp_path) in err


def test_the_name_given_to_save_state_without_distributed_names_the_rank_files_found(tmp_path, capsys, recipe):
    write_rank_states(recipe, tmp_path / "state.json", [3, 3])
    code, _, err = run_main(capsys, recipe, "--resume", tmp_path / "state.json")
    assert code == 2
    assert err == (f"speechiter: error: --resume: no such state file: {tmp_path / 'state.json'}; a --distributed run "
                   f"saved {tmp_path / 'state.rank0.json'}, {tmp_path / 'state.rank1.json'}: resume from them with "
                   f"--resume {tmp_path / 'state.rank0.json'} (its run's other rank files are read too), or under "
                   f"torchrun with --distributed --resume {tmp_path / 'state.json'}\n")


def test_under_distributed_a_state_saved_alone_or_a_rank_file_named_is_read(tmp_path, recipe):
    write_rank_states(recipe, tmp_path / "alone.json", [4])
    (tmp_path / "alone.rank0.json").rename(tmp_path / "alone.json")  # as a run without --distributed names it
    assert [name for name, _ in saved_states(str(tmp_path / "alone.json"), 1, True)] == [str(tmp_path / "alone.json")]
    write_rank_states(recipe, tmp_path / "state.json", [4, 2, 3])
    source, state = earliest(saved_states(str(tmp_path / "state.rank2.json"), 0, True))
    assert source == str(tmp_path / "state.rank1.json") and state.step == 2
    (tmp_path / "alone.json").rename(tmp_path / "state.json")  # which run is meant, state.json's or the ranks'?
    with pytest.raises(ConfigError, match=r"^--resume: both .*/state.json \(a run without --distributed\) and "
                                          r".*/state.rank0.json \(a --distributed run\) exist: resume from one by "
                                          r"its own name"):
        saved_states(str(tmp_path / "state.json"), 0, True)


# --- the first state files of a run, temporaries (NOTE [ First state files ]) --------------------------


def test_rank_0_writes_every_ranks_first_state_rank_0_last(tmp_path, recipe, monkeypatch):
    """Killed while rank 0 writes the first states: rank 0's file is still the run before's, whose files
    all stand at or after the new run's start, so a resume never goes back past it."""
    import speechiter.state_files as state_files
    write_rank_states(recipe, tmp_path / "state.json", [2, 5, 5])  # a run before, of 3 ranks
    write_rank_states(recipe, tmp_path / "older.json", [2, 2, 2, 1])
    (tmp_path / "older.rank3.json").rename(tmp_path / "state.rank3.json")  # and one before that, of 4
    iterators = build_iterators(load_config(str(recipe)), num_workers=0, groups=("train", "valid"), world_size=4)
    written = []

    def killed_after_two(path, value):
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(os.path.basename(path))
        Path(path).write_text(json.dumps(value))

    monkeypatch.setattr(state_files, "write_json_atomic", killed_after_two)
    files = StateFiles(iterators, 0, str(tmp_path / "state.json"), True, 0, 4)
    files._barrier = lambda: None
    try:
        with pytest.raises(KeyboardInterrupt):
            files.save(GroupLoader(iterators["train"]).state_at(1, 2), first=True)
    finally:
        close_all(iterators)
    assert written == ["state.rank3.json", "state.rank2.json"]
    source, state = earliest(saved_states(str(tmp_path / "state.json"), 0, True))
    assert state.step == 2  # not the older run's step 1 that rank 3's file held


def test_temporaries_of_killed_writers_are_removed_at_the_next_save_and_resume(tmp_path, capsys, recipe):
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = tmp_path / "state.json"
    left = [tmp_path / f"state.json.tmp{dead.pid}", tmp_path / f"state.rank0.json.tmp{dead.pid}",
            tmp_path / f"state.rank1.json.tmp{dead.pid}"]
    alive = tmp_path / f"state.json.tmp{os.getppid()}"  # a live writer's
    for path in left + [alive]:
        path.write_text("{")
    assert run_main(capsys, recipe, "--save_state", state, "--epochs", 1)[0] == 0
    assert not left[0].exists() and alive.exists()
    write_rank_states(recipe, state, [3, 3])
    assert run_main(capsys, recipe, "--resume", tmp_path / "state.rank0.json")[0] == 0
    assert not any(path.exists() for path in left) and alive.exists()


# --- a resumed run's dump (item 12) ---------------------------------------------------------------------


def test_a_resumed_run_does_not_write_over_a_dump_with_records(tmp_path, capsys, recipe):
    state, dump = tmp_path / "state.json", tmp_path / "dump.jsonl"
    assert run_main(capsys, recipe, "--save_state", state, "--dump_batches", dump)[0] == 0
    before = dump.read_text()
    code, out, err = run_main(capsys, recipe, "--resume", state, "--epochs", 2, "--dump_batches", dump)
    assert code == 2 and out == "" and dump.read_text() == before
    assert err == (f"speechiter: error: --dump_batches: {dump} already holds batches, of the run being resumed or "
                   f"another: a resumed run writes its dump into a file of its own (--dump_batches with a new name), "
                   f"or remove the old one first\n")
    code, _, err = run_main(capsys, recipe, "--resume", state, "--epochs", 2, "--dump_batches", tmp_path / "new.jsonl")
    assert code == 0, err
    assert {epoch for epoch, _ in train_steps(tmp_path / "new.jsonl")} == {2}


def test_under_distributed_every_rank_file_of_the_dump_counts(tmp_path):
    from speechiter.dump import earlier_dumps
    for name, text in (("dump.rank0.jsonl", "{}\n"), ("dump.rank3.jsonl", "{}\n"), ("dump.rank1.jsonl", ""),
                       ("dump.rankx.jsonl", "{}\n"), ("dump.jsonl", "{}\n")):
        (tmp_path / name).write_text(text)
    path = str(tmp_path / "dump.jsonl")
    assert earlier_dumps(path, True) == [str(tmp_path / "dump.rank0.jsonl"), str(tmp_path / "dump.rank3.jsonl")]
    assert earlier_dumps(path, False) == [path]


# --- torchrun without --distributed (item 2) ------------------------------------------------------------


def test_torchrun_variables_without_distributed_are_one_error_before_anything_is_written(tmp_path, capsys, recipe,
                                                                                           monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    code, out, err = run_main(capsys, recipe, "--dump_batches", tmp_path / "dump.jsonl", "--report",
                              tmp_path / "report.json")
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert err == ("speechiter: error: torchrun: RANK=1 and WORLD_SIZE=4 are set, but --distributed is not given: "
                   "each of the 4 processes would load every batch and write the same --dump_batches, --report and "
                   "--save_state files; add --distributed, or unset RANK and WORLD_SIZE to run one process alone\n")
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun --nproc_per_node 1: one process, nothing to share
    assert run_main(capsys, recipe)[0] == 0


# --- what a run prints (items 11, 7) --------------------------------------------------------------------


def test_a_warning_raised_in_a_run_is_one_line_without_its_source_line(tmp_path, capsys, recipe):
    corpus = Path(str(recipe)).parent / "corpus"
    lengths = (corpus / "idx2wav_len").read_text().splitlines()
    (tmp_path / "idx2wav_len").write_text("\n".join(lengths[:-3]) + "\n")  # 3 utterances without a length
    train = entry(corpus, "abs.Iterator", data_len=str(tmp_path / "idx2wav_len"), batch_size=2)
    code, _, err = run_main(capsys, write_recipe(tmp_path / "recipe.yaml", corpus, train=train))
    assert code == 0, err
    assert err.startswith("speechiter: warning: 3 of 12 utterances have no length in ") and len(err.splitlines()) == 1


def test_a_long_error_is_one_bounded_line():
    from speechiter.messages import MAX_LINE, one_line
    line = one_line("command failed: " + "x" * 100000 + "\nsecond line\n\ntraceback")
    assert "\n" not in line and len(line) < MAX_LINE + 100
    assert line.endswith(f" ... ({100000 + 16 + 12 - MAX_LINE} more characters; --debug shows them)")


class Writes(io.StringIO):
    """A stderr that keeps its writes apart, as an unbuffered one (PYTHONUNBUFFERED=1) hands each to the file."""

    def __init__(self):
        super().__init__()
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return super().write(text)


def test_each_line_on_stderr_is_one_write(tmp_path, monkeypatch, recipe):
    # torchrun's ranks share one log file: a line written as text, then newline, ran into another rank's line
    stderr = Writes()
    monkeypatch.setattr(sys, "stderr", stderr)
    state = tmp_path / "state.json"
    assert main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", "--save_state", str(state)]) == 0
    assert main(["--data_cfg", str(recipe), "--quiet", "--num_workers", "0", "--resume", str(state),
                 "--epochs", "1"]) == 0
    assert main(["--data_cfg", str(tmp_path / "missing.yaml")]) == 2
    assert len(stderr.writes) == 2 and all(w.endswith("\n") and w.count("\n") == 1 for w in stderr.writes)
    assert stderr.writes[0].startswith(f"speechiter: {state} is at epoch 2")
    assert stderr.writes[1].startswith("speechiter: error: ") and "missing.yaml" in stderr.writes[1]


def test_a_resume_past_the_last_epoch_prints_no_empty_table(tmp_path, capsys, recipe):
    state = tmp_path / "state.json"
    assert run_main(capsys, recipe, "--save_state", state)[0] == 0
    code, out, err = run_main(capsys, recipe, "--resume", state, "--epochs", 1)
    assert code == 0 and out == ""
    assert err == f"speechiter: {state} is at epoch 2, past --epochs 1: nothing to run\n"


# --- a mix's report and plot (item 7) ------------------------------------------------------------------


def mix_recipe(tmp_path, make_corpus, weights, feat_conf=True):
    """Two corpora in folders of their own mixed by ``weights``; log-mel features with ``feat_conf``."""
    corpora = {"a": make_corpus(tmp_path / "a", num=8, max_sec=0.5), "b": make_corpus(tmp_path / "b", num=6, seed=1,
                                                                                       max_sec=0.5)}
    dataset_conf = {"feat_conf": {"n_mels": 40}} if feat_conf else {}
    budget = 100 if feat_conf else 16000
    train = {"type": "mix.MixIterator", "conf": {"batches_per_epoch": 6, "weights": weights, "iterators": {
        name: entry(corpus, dataset_conf=dataset_conf, batch_len=budget) for name, corpus in corpora.items()}}}
    return write_recipe(tmp_path / "mix.yaml", corpora["a"], train=train), corpora


def test_a_mix_with_features_reports_its_audio_seconds(tmp_path, capsys, make_corpus):
    cfg, corpora = mix_recipe(tmp_path, make_corpus, {"a": 0.5, "b": 0.5})
    code, _, err = run_main(capsys, cfg, "--report", tmp_path / "report.json", "--dump_batches", tmp_path / "d.jsonl")
    assert code == 0, err
    lengths = {name: dict(line.split() for line in (corpus / "idx2wav_len").read_text().splitlines())
               for name, corpus in corpora.items()}
    records = [r for r in map(json.loads, (tmp_path / "d.jsonl").read_text().splitlines()) if r["group"] == "train"]
    seconds = sum(int(lengths[r["source"]][uid]) / 16000 for r in records for uid in r["ids"])
    train = json.loads((tmp_path / "report.json").read_text())["iterators"]["train"]
    assert {r["source"] for r in records} == {"a", "b"}
    assert train["audio_seconds"] == pytest.approx(seconds, abs=0.025 * train["utterances"])


def test_a_weight_0_corpus_is_not_listed_under_the_train_data(tmp_path, capsys, make_corpus):
    cfg, corpora = mix_recipe(tmp_path, make_corpus, {"a": 1, "b": 0}, feat_conf=False)
    code, out, err = run_main(capsys, cfg)
    assert code == 0, err
    assert f"train data: {corpora['a']}\n" in out and str(corpora["b"]) not in out


def test_a_mix_is_plotted_with_its_corpora_lengths_unit_and_budget(tmp_path, make_corpus, monkeypatch):
    pytest.importorskip("matplotlib")
    import speechiter.plot as plot
    cfg, _ = mix_recipe(tmp_path, make_corpus, {"a": 0.5, "b": 0.5})
    drawn = []
    real_draw = plot.draw
    monkeypatch.setattr(plot, "draw", lambda batches, stats, title, unit, budget: drawn.append((unit, budget)) or
                        real_draw(batches, stats, title, unit, budget))
    iterators = build_iterators(load_config(str(cfg)), num_workers=0, groups=("train",))
    try:
        line = plot.plot_iterator(iterators["train"], tmp_path / "mix.png")
    finally:
        close_all(iterators)
    assert line.startswith("6 batches, ") and "padding efficiency n/a" not in line
    assert drawn == [("frames", 100)]  # feat_conf: the lengths count frames, not the samples of idx2wav_len


def test_batch_sizes_without_lengths_are_drawn_with_the_axes_they_show():
    pytest.importorskip("matplotlib")
    from speechiter.plot import draw, summarize
    batches = [["a", "b"], ["c"], ["d", "e", "f"]]
    left, right = draw(batches, summarize(batches, None), "t").axes
    assert (left.get_xlabel(), left.get_ylabel()) == ("utterances per batch", "batches")
    assert (right.get_xlabel(), right.get_ylabel()) == ("batch (plan order)", "utterances")


def test_out_of_file_descriptors_anywhere_in_a_run_is_the_one_open_files_line(capsys, recipe, monkeypatch):
    """Where the engine does not translate EMFILE itself (mmap dups a segment's descriptor), the command line
    does (NOTE [ Machine limits ] in speechiter/sequence/limits.py)."""
    import errno
    import speechiter.run as run

    def out_of_files(self):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(run.CommandLineRun, "train", out_of_files)
    code, _, err = run_main(capsys, recipe)
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith("speechiter: error: too many open files: a file could not be opened under the "
                          "open-files limit of ") and "ulimit -n" in err and "OSError" not in err


WARNING_DATASET = '''
import warnings

from speechiter.dataset.speech_text import SpeechTextDataset


class Warns(SpeechTextDataset):
    def extract_main_data_fn(self, main_data):
        warnings.warn("a worker's own warning")
        return super().extract_main_data_fn(main_data)
'''


@pytest.mark.slow  # process workers, in a run of its own (a fork server of this process writes to its stderr)
@pytest.mark.timeout(120)
def test_a_warning_in_a_loading_worker_process_is_one_line_too(tmp_path, recipe):
    import sys
    corpus = Path(str(recipe)).parent / "corpus"
    (tmp_path / "warner.py").write_text(WARNING_DATASET)
    train = entry(corpus, "abs.Iterator", dataset_type="warner.Warns", batch_size=12)
    cfg = write_recipe(tmp_path / "recipe.yaml", corpus, train=train)
    done = subprocess.run([sys.executable, "-m", "speechiter.run", "--data_cfg", str(cfg), "--quiet", "--num_workers",
                           "1", "--epochs", "1"], capture_output=True, text=True, timeout=100,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert done.returncode == 0, done.stderr
    assert "speechiter: warning: a worker's own warning\n" in done.stderr
    assert "warnings.warn" not in done.stderr and "UserWarning" not in done.stderr, done.stderr
