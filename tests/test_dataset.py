"""Dataset base class and SpeechTextDataset on small real corpora."""
import os

import h5py
import numpy as np
import pytest
import soundfile as sf

from speechiter.dataset.abs import Dataset
from speechiter.dataset.collate import collate_values
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError, DataError


def write_idx2(path, pairs):
    path.write_text("".join(f"{k} {v}\n" for k, v in pairs))
    return str(path)


def ids_of(corpus):
    return [line.split()[0] for line in (corpus / "idx2wav").read_text().splitlines()]


def test_main_data_intersection_warns_with_count(corpus, tmp_path):
    ids = ids_of(corpus)
    text = write_idx2(tmp_path / "idx2text", [(uid, "hello world") for uid in ids[:-3]])
    with pytest.warns(UserWarning, match=r"3 of \d+ utterances"):
        dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav"), "text": text})
    assert dataset.get_data_index() == ids[:-3]


def test_several_files_for_one_key_are_merged(corpus, tmp_path):
    lines = (corpus / "idx2wav").read_text().splitlines()
    (tmp_path / "a").write_text("\n".join(lines[:5]) + "\n")
    (tmp_path / "b").write_text("\n".join(lines[5:]) + "\n")
    # Paths inside resolve against each idx2 file's folder: make them absolute copies here.
    for name in "ab":
        fixed = [f"{l.split()[0]} {corpus / l.split()[1]}" for l in (tmp_path / name).read_text().splitlines()]
        (tmp_path / name).write_text("\n".join(fixed) + "\n")
    dataset = SpeechTextDataset(main_data={"feat": [str(tmp_path / "a"), str(tmp_path / "b")]})
    assert dataset.get_data_index() == ids_of(corpus)


def test_duplicate_id_across_merged_files_is_an_error(corpus, tmp_path):
    line = (corpus / "idx2wav").read_text().splitlines()[0]
    a = write_idx2(tmp_path / "a", [tuple(line.split())])
    b = write_idx2(tmp_path / "b", [tuple(line.split())])
    with pytest.raises(DataError, match="also listed"):
        SpeechTextDataset(main_data={"feat": [a, b]})


def test_relative_paths_resolve_against_the_idx2_folder(corpus, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")})
    uid = dataset.get_data_index()[0]
    assert os.path.isabs(dataset.main_data["feat"][uid])
    assert dataset[uid]["feat"].shape[1] == 1


def test_batch_layout(corpus):
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav"), "text": str(corpus / "idx2text"),
                                           "spk_ids": str(corpus / "idx2spk")})
    ids = dataset.get_data_index()[:4]
    batch = dataset.get_batch(ids)
    assert batch["feat"].dtype == np.float32 and batch["feat"].ndim == 3 and batch["feat"].shape[2] == 1
    assert batch["feat_len"].dtype == np.int64 and batch["feat"].shape[1] == batch["feat_len"].max()
    for row, length, uid in zip(batch["feat"], batch["feat_len"], ids):
        audio, _ = sf.read(dataset.main_data["feat"][uid], dtype="float32", always_2d=True)
        np.testing.assert_array_equal(row[:length], audio)
        assert not row[length:].any()
    assert isinstance(batch["text"], list) and all(isinstance(t, str) for t in batch["text"])
    assert batch["spk_ids"] == [dataset.main_data["spk_ids"][uid] for uid in ids]


def test_spk_feat_from_npy_and_hdf5(corpus, tmp_path):
    ids = ids_of(corpus)
    for i, uid in enumerate(ids[:2]):
        np.save(tmp_path / f"{uid}.npy", np.full(4, i, dtype=np.float32))
    with h5py.File(tmp_path / "spk.hdf5", "w") as f:
        for i, uid in enumerate(ids[2:4]):
            f[uid] = np.full(4, 10 + i, dtype=np.float32)
    pairs = [(uid, f"{uid}.npy") for uid in ids[:2]] + [(uid, f"spk.hdf5:{uid}") for uid in ids[2:4]]
    with pytest.warns(UserWarning, match="16 missing from spk_feat"):
        dataset = SpeechTextDataset(main_data={"text": str(corpus / "idx2text"),
                                               "spk_feat": write_idx2(tmp_path / "idx2spk_feat", pairs)})
    batch = dataset.get_batch(ids[:4])
    assert batch["spk_feat"].shape == (4, 4)
    np.testing.assert_array_equal(batch["spk_feat"][:, 0], [0, 1, 10, 11])


def test_duration_is_padded_with_lengths(tmp_path):
    text = write_idx2(tmp_path / "idx2text", [("a", "x y"), ("b", "x")])
    duration = write_idx2(tmp_path / "idx2duration", [("a", "1 2 3"), ("b", "4")])
    batch = SpeechTextDataset(main_data={"text": text, "duration": duration}).get_batch(["a", "b"])
    np.testing.assert_array_equal(batch["duration"], [[1, 2, 3], [4, 0, 0]])
    np.testing.assert_array_equal(batch["duration_len"], [3, 1])


def test_missing_audio_names_file_utterance_and_idx2(tmp_path):
    idx2 = write_idx2(tmp_path / "idx2wav", [("utt1", "nowhere.wav")])
    dataset = SpeechTextDataset(main_data={"feat": idx2})
    with pytest.raises(DataError) as error:
        dataset.get_batch(["utt1"])
    message = str(error.value)
    assert "utt1" in message and idx2 in message and "nowhere.wav" in message


def test_empty_audio_is_an_error(tmp_path):
    sf.write(tmp_path / "empty.wav", np.zeros((0,), dtype=np.int16), 16000)
    dataset = SpeechTextDataset(main_data={"feat": write_idx2(tmp_path / "idx2wav", [("e", "empty.wav")])})
    with pytest.raises(DataError, match="e"):
        dataset.get_batch(["e"])


def test_bad_duration_value_names_the_utterance(tmp_path):
    text = write_idx2(tmp_path / "idx2text", [("a", "x")])
    duration = write_idx2(tmp_path / "idx2duration", [("a", "one two")])
    with pytest.raises(DataError, match=r"utterance a .*idx2duration"):
        SpeechTextDataset(main_data={"text": text, "duration": duration}).get_batch(["a"])


def test_resampling_to_sample_rate(tmp_path):
    sf.write(tmp_path / "a.wav", np.zeros(22050, dtype=np.int16), 22050)
    idx2 = write_idx2(tmp_path / "idx2wav", [("a", "a.wav")])
    batch = SpeechTextDataset(main_data={"feat": idx2}, sample_rate=16000).get_batch(["a"])
    assert abs(int(batch["feat_len"][0]) - 16000) <= 1


@pytest.mark.parametrize("conf, match", [
    ({"main_data": {"wav": "x"}}, "unknown data name 'wav'"),
    ({"main_data": {"spk_ids": "x"}}, "at least one of 'feat' and 'text'"),
    ({"sample_rate": -1}, "sample_rate: expected a positive integer"),
    ({"perturb_range": []}, "perturb_range"),
])
def test_speech_text_config_errors(tmp_path, conf, match):
    idx2 = write_idx2(tmp_path / "idx2", [("a", "x")])
    conf = dict(conf)
    conf["main_data"] = {k: idx2 for k in conf.get("main_data", {"text": idx2})}
    with pytest.raises(ConfigError, match=match):
        SpeechTextDataset(**conf)


def test_main_data_must_be_a_mapping():
    with pytest.raises(ConfigError, match="main_data"):
        Dataset(main_data=["a"])


# --- data_selection -----------------------------------------------------------------------------
@pytest.fixture
def numbered(tmp_path):
    ids = [f"u{i:02d}" for i in range(10)]
    text = write_idx2(tmp_path / "idx2text", [(uid, "t") for uid in ids])
    meta = write_idx2(tmp_path / "idx2len", [(uid, 10 - i) for i, uid in enumerate(ids)])
    gender = write_idx2(tmp_path / "idx2gen", [(uid, "f" if i % 2 else "m") for i, uid in enumerate(ids)])
    return ids, text, meta, gender


def selected(text, rule, seed=0):
    return SpeechTextDataset(main_data={"text": text}, data_selection=rule, seed=seed).get_data_index()


def test_selection_order_rev_order_fraction_and_count(numbered):
    ids, text, _, _ = numbered
    assert selected(text, ["order", 0.3]) == ids[:3]
    assert selected(text, ["rev_order", -2]) == ids[-2:]


def test_selection_random_is_seeded_without_replacement(numbered):
    ids, text, _, _ = numbered
    first = selected(text, ["random", -5], seed=3)
    assert first == selected(text, ["random", -5], seed=3)
    assert len(set(first)) == 5 and set(first) <= set(ids)
    assert first == [uid for uid in ids if uid in first]


def test_selection_min_max_middle_and_thresholds(numbered):
    ids, text, meta, _ = numbered  # meta value of ids[i] is 10 - i
    assert selected(text, ["min", -3, meta]) == ids[-3:]
    assert selected(text, ["max", -3, meta]) == ids[:3]
    assert selected(text, ["middle", -4, meta]) == ids[3:7]
    assert selected(text, ["min", "3", meta]) == ids[7:]
    assert selected(text, ["max", "8", meta]) == ids[:3]


def test_selection_group_and_chained_rules(numbered):
    ids, text, meta, gender = numbered
    assert selected(text, ["group", "f", gender]) == ids[1::2]
    assert selected(text, [["group", ["f"], gender], ["order", -2]]) == ids[1:4:2]


@pytest.mark.parametrize("rule, match", [
    (["sideways", 0.5], "unknown mode"),
    (["min", 0.5], "needs a metadata file"),
    (["order", 2], "fraction in"),
    (["order", -50], "only 10 are available"),
    (["middle", "3", "META"], "takes a count"),
    (["order", 0.5, "META"], "takes no metadata"),
    (["order"], r"\[mode, number\]"),
    ("order", "expected"),
])
def test_selection_errors(numbered, rule, match):
    _, text, meta, _ = numbered
    rule = [meta if x == "META" else x for x in rule] if isinstance(rule, list) else rule
    with pytest.raises(ConfigError, match=match):
        selected(text, rule)


def test_selection_numeric_mode_on_labels_is_a_data_error(numbered):
    _, text, _, gender = numbered
    with pytest.raises(DataError, match="numeric"):
        selected(text, ["min", -2, gender])


def test_collate_values_pads_and_keeps_strings():
    out = dict(collate_values("x", [np.ones((2, 3)), np.ones((1, 3))]))
    assert out["x"].shape == (2, 2, 3) and list(out["x_len"]) == [2, 1]
    assert dict(collate_values("n", [1, 2]))["n"].dtype == np.int64
    assert dict(collate_values("s", ["a", "b"]))["s"] == ["a", "b"]
    with pytest.raises(DataError, match="trailing shapes"):
        collate_values("x", [np.ones((2, 3)), np.ones((2, 4))])


@pytest.mark.parametrize("conf", [{"use_speed_perturb": True},
                                  {"feat_conf": {"n_mels": 40}, "sample_rate": 16000},
                                  {"use_speed_perturb": True, "feat_conf": {"n_mels": 40}, "sample_rate": 16000}])
def test_batch_length_fn_takes_arrays_like_numbers(corpus, conf):
    # Planning calls the hook once on all lengths (see iterator.lengths.batch_lengths); it must agree element-wise.
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")}, **conf)
    lengths = np.array([0, 1, 399, 400, 401, 16000, 160001, 12345.5, 99999], dtype=np.float64)
    one_by_one = [dataset.batch_length_fn(int(v) if float(v).is_integer() else v) for v in lengths.tolist()]
    np.testing.assert_array_equal(dataset.batch_length_fn(lengths), one_by_one)
