"""Issue 32: ``on_bad_audio: skip`` leaves unreadable utterances out of their batch, the same for any workers,
engine and resume point (NOTE [ Skipped utterances ] in speechiter/dataset/bad_audio.py, NOTE [ Empty steps ]
and NOTE [ Too many skipped ] in speechiter/skips.py)."""
import json
import re

import numpy as np
import pytest

import speechiter
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.errors import ConfigError, DataError
from speechiter.group import GroupLoader
from speechiter.iterator.abs import Iterator
from speechiter.iterator.mix import MixIterator
from speechiter.run import main
from speechiter.skips import SkippedAudioWarning
from tests import recipes

# corpus row -> how its audio is broken; rows 0 and 1 are the first batch (id order, batch_size 2): all bad
BROKEN = {0: "empty", 1: "truncated", 4: "corrupt", 7: "missing", 8: "pipe"}
REASONS = {"empty": "cannot read audio", "truncated": "truncated WAV", "corrupt": "cannot read audio",
           "missing": "no such file", "pipe": "not a valid FLAC file"}
SKIP = {"on_bad_audio": "skip", "max_bad_fraction": 0.5}


@pytest.fixture
def bad_corpus(tmp_path, make_corpus):
    """12 utterances (3 speakers), five of them broken as BROKEN says; returns (root, {id: kind})."""
    root = make_corpus(tmp_path / "corpus", num=12, min_sec=0.2, max_sec=0.5)
    lines = (root / "idx2wav").read_text().splitlines()
    broken = {}
    for row, kind in BROKEN.items():
        uid, path = lines[row].split(maxsplit=1)
        wav = root / path
        broken[uid] = kind
        if kind == "empty":
            wav.write_bytes(b"")
        elif kind == "truncated":
            wav.write_bytes(wav.read_bytes()[:200])
        elif kind == "corrupt":
            wav.write_bytes(b"RIFF" + bytes(range(256)) * 4)
        elif kind == "missing":
            wav.unlink()
        else:
            lines[row] = f"{uid} flac -c -d -s {root}/missing.flac |"
    (root / "idx2wav").write_text("\n".join(lines) + "\n")
    (root / "idx2wav_good").write_text("\n".join(lines[2:4]) + "\n")  # two readable utterances
    return root, broken


def iterator(root, conf=SKIP, feat="idx2wav", **options):
    options = {"engine": "inline", "out_type": "null", "batch_size": 2, "is_descending": None, "shuffle": True,
               "seed": 3, **options}
    dataset_conf = {"main_data": {"feat": str(root / feat)}, "use_speed_perturb": True, **conf}
    return Iterator(dataset_type=SpeechTextDataset, dataset_conf=dataset_conf, **options)


def records(it, epoch=1, start_step=0):
    """``(step, ids, skipped ids, checksum)`` of every step from ``start_step`` on, empty ones included."""
    loader = it.build_loader(epoch, start_step)
    loader.keep_empty = True
    return [(loader.step, list(b.ids), [uid for uid, _ in b.skipped], checksum(b)) for b in loader]


def test_bad_rows_are_left_out_and_the_batch_is_built_from_the_rest(bad_corpus):
    root, broken = bad_corpus
    lengths = dict(line.split() for line in (root / "idx2wav_len").read_text().splitlines())
    it = iterator(root, {**SKIP, "use_speed_perturb": False, "views": 2, "augment": [{"type": "gain"}]},
                  group_info={"speaker": str(root / "idx2spk")}, shuffle=False)
    speakers = dict(line.split() for line in (root / "idx2spk").read_text().splitlines())
    seen, skipped = [], {}
    with it, pytest.warns(SkippedAudioWarning, match=r"epoch 1: skipped 5 utterance\(s\) .*1 step\(s\) left"):
        for batch in it.build_loader(1):
            ids = batch.ids[:len(batch.ids) // 2]
            assert batch.ids == ids * 2  # two views of each remaining utterance
            assert batch.meta["view"] == [0] * len(ids) + [1] * len(ids)
            assert batch.meta["speaker"] == [speakers[uid] for uid in batch.ids]
            assert len(batch.meta["augment"]) == len(batch.ids) == batch["feat"].shape[0]
            expected = np.array([int(lengths[uid]) for uid in batch.ids])
            np.testing.assert_array_equal(batch["feat_len"], expected)  # recomputed from the rows left
            assert batch["feat"].shape[1] == expected.max()
            seen += ids
            skipped.update(batch.skipped)
    assert sorted(seen) == sorted(set(lengths) - set(broken))
    assert set(skipped) == set(broken) - {uid for uid, kind in broken.items() if kind in ("empty", "truncated")}
    for uid, reason in skipped.items():
        assert reason.startswith(f"utterance {uid} (feat from ") and REASONS[broken[uid]] in reason


def test_the_default_stops_at_the_first_bad_utterance(bad_corpus):
    root, broken = bad_corpus
    first = sorted(broken)[0]
    with iterator(root, {}, shuffle=False) as it, pytest.raises(DataError, match=f"utterance {first} "):
        records(it)


def test_a_step_that_loses_every_row_is_counted_not_yielded(bad_corpus):
    root, broken = bad_corpus
    with iterator(root) as it, pytest.warns(SkippedAudioWarning):
        every = records(it)
        empty = [step for step, ids, _, _ in every if not ids]
        assert len(empty) == 1 and len(every) == len(it) == 6
        loader = it.build_loader(1)
        yielded = []
        for batch in loader:
            yielded.append((loader.step, list(batch.ids)))
            state = loader.state_dict()
            assert state["step"] == loader.step
        assert [step for step, _ in yielded] == [step for step, ids, _, _ in every if ids]
        assert loader.step == 6


def test_resume_at_any_step_gives_the_same_batches(bad_corpus):
    root, _ = bad_corpus
    with iterator(root) as it, pytest.warns(SkippedAudioWarning):
        full = records(it, epoch=2)
        for start in range(len(full)):
            assert records(it, 2, start) == full[start:]
    # a run stopped by a bad file (on_bad_audio: error) resumes with skip: the option is not in the plan
    with iterator(root, {}) as stopped, iterator(root) as skipping, pytest.warns(SkippedAudioWarning):
        assert stopped.config_fingerprint == skipping.config_fingerprint
        state = stopped.build_loader(2, 3).state_dict()
        loader = skipping.build_loader(2)
        loader.load_state_dict(state)
        loader.keep_empty = True
        assert [(loader.step, list(b.ids)) for b in loader] == [(s, ids) for s, ids, _, _ in full[3:]]


def test_a_flood_is_an_error_naming_the_count_and_the_first_ids(bad_corpus):
    root, broken = bad_corpus
    with iterator(root, {"on_bad_audio": "skip", "max_bad_fraction": 0.1}, shuffle=False) as it:
        with pytest.raises(DataError, match=r"epoch 1: 3 utterances could not be read, more than max_bad_fraction "
                                            r"0.1 of the epoch's 12 allows \(2\); first: utterance .*\.wav: "
                                            r"truncated WAV: .*\. Fix or remove them"):
            records(it)
    with iterator(root, {"on_bad_audio": "skip", "max_bad_fraction": 5 / 12}, shuffle=False) as it:
        with pytest.warns(SkippedAudioWarning):
            assert sum(len(skipped) for _, _, skipped, _ in records(it)) == 5  # 5 of 12 is allowed


@pytest.mark.parametrize("option, value, message", [
    ("on_bad_audio", "ignore", "expected one of error, skip"),
    ("max_bad_fraction", 1.5, r"expected a fraction of an epoch's utterances in \[0, 1\], got 1.5"),
    ("max_bad_fraction", -0.1, "expected a non-negative number, got -0.1"),
    ("max_bad_fraction", "1%", "expected a number, got '1%'"),
])
def test_option_errors_name_the_yaml_path(corpus, make_recipe, option, value, message):
    recipe = make_recipe(corpus, dataset_conf={option: value}, batch_len=40000)
    with pytest.raises(ConfigError, match=rf"^data_cfg\.train\.conf\.dataset_conf\.{option}: {message}"):
        speechiter.build_iterators(speechiter.load_config(recipe), num_workers=0)


def test_command_line_dump_report_and_one_warning_line_per_epoch(bad_corpus, tmp_path, capsys):
    root, broken = bad_corpus
    def recipe(name, **dataset_conf):
        train = recipes.entry(root, "abs.Iterator", dataset_conf=dataset_conf, data_len=False, batch_size=2,
                              is_descending=None)
        valid = recipes.entry(root, "abs.Iterator", data={"feat": str(root / "idx2wav_good")}, data_len=False)
        return recipes.write_recipe(tmp_path / name, root, train=train, valid=valid)

    dump, report = tmp_path / "dump.jsonl", tmp_path / "report.json"
    assert main(["--data_cfg", str(recipe("skip.yaml", **SKIP)), "--epochs", "2", "--num_workers", "0", "--quiet",
                 "--out_type", "null", "--dump_batches", str(dump), "--report", str(report)]) == 0
    err = capsys.readouterr().err
    warning_lines = [line for line in err.splitlines() if "warning" in line]
    assert len(warning_lines) == 2 and all(line.startswith(f"speechiter: warning: train epoch {e}: skipped 5 ")
                                           for e, line in zip((1, 2), warning_lines))
    lines = [json.loads(line) for line in dump.read_text().splitlines() if '"train"' in line]
    assert [line["step"] for line in lines] == list(range(1, 7)) * 2  # every step, the empty one too
    keys = {"group", "set", "iterator", "epoch", "step", "rank", "ids", "checksum"}
    assert all(set(line) == keys for line in lines if "skipped" not in line)
    empty = [line for line in lines if not line["ids"]]
    assert len(empty) == 2 and all(len(line["skipped"]) == 2 for line in empty)
    assert {s["id"] for line in lines for s in line.get("skipped", ())} == set(broken)
    bad = json.loads(report.read_text())["iterators"]["train"]["bad_audio"]
    assert bad["skipped"] == 10 and bad["empty_steps"] == 2 and set(bad["ids"]) == set(broken)
    assert f"{sorted(broken)[2]} (feat from" in bad["ids"][sorted(broken)[2]]
    # the same corpus under the default: exit 2, one line naming the utterance
    assert main(["--data_cfg", str(recipe("error.yaml")), "--num_workers", "0", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(rf"speechiter: error: utterance ({'|'.join(broken)}) \(feat from ", err)


def test_a_group_step_leaves_out_the_iterator_whose_batch_is_empty(bad_corpus):
    root, _ = bad_corpus
    with iterator(root, shuffle=False) as bad, iterator(root, {}, "idx2wav_good", batch_size=1) as good:
        group = GroupLoader({"bad": bad, "good": good})
        with pytest.warns(SkippedAudioWarning):
            steps = list(group)
        assert [sorted(step) for step in steps] == [["good"], ["bad", "good"]]
        assert group.step == 2


def test_a_collate_that_is_not_a_dict_cannot_skip(bad_corpus):
    class Tuples(SpeechTextDataset):
        def collate_fn(self, batch):
            return tuple(item["feat"] for item in batch)

    root, _ = bad_corpus
    dataset = Tuples(main_data={"feat": str(root / "idx2wav")}, on_bad_audio="skip")
    ids = list(dataset.get_data_index())
    assert isinstance(dataset.get_batch(ids[2:4]), tuple)  # nothing skipped: as before
    with pytest.raises(DataError, match="on_bad_audio: skip needs a collate that returns a dict"):
        dataset.get_batch(ids[3:5])


def test_a_mix_keeps_each_batch_source_after_an_empty_step(bad_corpus, tmp_path):
    root, _ = bad_corpus
    with iterator(root, shuffle=False) as a, iterator(root, {}, "idx2wav_good") as b:
        mix = MixIterator({"a": a, "b": b}, weights={"a": 1, "b": 1}, batches_per_epoch=6, engine="inline",
                          out_type="null")
        with mix, pytest.warns(SkippedAudioWarning):
            loader = mix.build_loader(1)
            loader.keep_empty = True
            for batch in loader:
                expected = mix.source_of(1, loader.step)
                assert batch.source == expected
                assert set(batch.ids) <= set((a if expected == "a" else b).dataset.get_data_index())


@pytest.mark.slow  # worker processes and threads, the torch engine
@pytest.mark.parametrize("engine, workers, kind", [("msequence", 2, "proc"), ("msequence", 4, "proc"),
                                                   ("msequence", 2, "thread"), ("msequence", 4, "thread"),
                                                   ("torch", 2, "proc")])
def test_the_same_utterances_are_skipped_for_any_workers_and_engine(bad_corpus, engine, workers, kind):
    root, _ = bad_corpus
    with iterator(root) as inline, pytest.warns(SkippedAudioWarning):
        expected = records(inline, 1) + records(inline, 2, 3)
    with iterator(root, engine=engine, num_workers=workers, thread_type=kind) as it, pytest.warns(SkippedAudioWarning):
        assert records(it, 1) + records(it, 2, 3) == expected
