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


def test_dataset_order_is_id_order_whatever_the_file_order(corpus, tmp_path):
    # SpeeChain sorts every idx2 file by id (Python str order = UTF-8 byte order) when it reads it
    lines = (corpus / "idx2wav").read_text().splitlines()
    ids = [line.split()[0] for line in lines]
    scrambled = [f"{uid} {corpus / path}" for uid, path in (line.split() for line in lines[::-1])]
    wav = write_idx2(tmp_path / "idx2wav", [line.split(" ", 1) for line in scrambled])
    text = write_idx2(tmp_path / "idx2text", [(uid, "t") for uid in ids[3:] + ids[:3]])
    dataset = SpeechTextDataset(main_data={"text": text, "feat": wav})
    assert dataset.get_data_index() == sorted(ids)
    assert dataset.main_data["feat"][ids[0]] == str(corpus / lines[0].split()[1])
    odd = write_idx2(tmp_path / "odd", [("u2", "x"), ("é1", "x"), ("_x", "x"), ("Z", "x"), ("u10", "x"),
                                        ("B3", "x"), ("a1", "x")])
    assert SpeechTextDataset(main_data={"text": odd}).get_data_index() == ["B3", "Z", "_x", "a1", "u10", "u2",
                                                                            "é1"]


def test_duplicate_id_across_merged_files_later_file_wins(corpus, tmp_path):
    # SpeeChain merges the files into one dict in order: the later file's value wins
    a = write_idx2(tmp_path / "a", [("x", "from a"), ("y", "only in a")])
    b = write_idx2(tmp_path / "b", [("x", "from b"), ("w", "only in b")])
    dataset = SpeechTextDataset(main_data={"text": [a, b]})
    assert dataset.get_data_index() == ["w", "x", "y"]
    assert dataset.get_batch(["w", "x", "y"])["text"] == ["only in b", "from b", "only in a"]
    assert dataset.origin("text", "x") == b
    assert SpeechTextDataset(main_data={"text": [b, a]}).main_data["text"]["x"] == "from a"


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


def test_spk_feat_is_stacked_as_stored(tmp_path):
    # SpeeChain's extractor saves (1, D) rows: the batch is (B, 1, D); a (D,) file gives (B, D)
    text = write_idx2(tmp_path / "idx2text", [("a", "x"), ("b", "y"), ("c", "z")])
    np.save(tmp_path / "a.npy", np.full((1, 3), 1, dtype=np.float32))
    np.save(tmp_path / "b.npy", np.full((1, 3), 2, dtype=np.float64))
    np.save(tmp_path / "c.npy", np.full(3, 3, dtype=np.float32))
    spk = write_idx2(tmp_path / "idx2spk_feat", [("a", "a.npy"), ("b", "b.npy"), ("c", "c.npy")])
    dataset = SpeechTextDataset(main_data={"text": text, "spk_feat": spk})
    batch = dataset.get_batch(["a", "b"])
    assert batch["spk_feat"].shape == (2, 1, 3) and batch["spk_feat"].dtype == np.float32
    np.testing.assert_array_equal(batch["spk_feat"][:, 0, 0], [1, 2])
    assert dataset.get_batch(["c"])["spk_feat"].shape == (1, 3)
    with pytest.raises(DataError, match=r"utterance a \(spk_feat from .*a\.npy has shape"):
        dataset.get_batch(["a", "c"])
    (tmp_path / "d.wav").write_bytes(b"")
    (tmp_path / "s.npy").write_bytes(b"")
    np.save(tmp_path / "t.npy", np.array(["x"]))
    bad = write_idx2(tmp_path / "idx2bad", [("a", "d.wav"), ("b", "t.npy"), ("c", "nowhere.npy")])
    dataset = SpeechTextDataset(main_data={"text": text, "spk_feat": bad})
    for uid, match in [("a", "expected a .npy, .npz or .hdf5:key entry"), ("b", "numeric array"),
                       ("c", "no such file")]:
        with pytest.raises(DataError, match=rf"utterance {uid} \(spk_feat from .*idx2bad\): .*{match}"):
            dataset[uid]


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


def test_duration_in_speechain_list_form(tmp_path):
    text = write_idx2(tmp_path / "idx2text", [("a", "['HH', 'AH0', 'L']"), ("b", "['OW1']")])
    duration = write_idx2(tmp_path / "idx2duration", [("a", "[0.1, 0.25, '0.5']"), ("b", "[1.0]")])
    batch = SpeechTextDataset(main_data={"text": text, "duration": duration}).get_batch(["a", "b"])
    np.testing.assert_allclose(batch["duration"], [[0.1, 0.25, 0.5], [1.0, 0, 0]])
    assert batch["duration"].dtype == np.float32 and batch["duration_len"].tolist() == [3, 1]
    assert batch["text"] == [["HH", "AH0", "L"], ["OW1"]]


def test_bad_duration_value_names_the_utterance(tmp_path):
    text = write_idx2(tmp_path / "idx2text", [("a", "x"), ("b", "y")])
    duration = write_idx2(tmp_path / "idx2duration", [("a", "one two"), ("b", "[0.1, x]")])
    for uid in "ab":
        with pytest.raises(DataError, match=rf"utterance {uid} .*idx2duration.*expected a list of numbers"):
            SpeechTextDataset(main_data={"duration": duration, "text": text}).get_batch([uid])


def test_resampling_to_sample_rate(tmp_path):
    sf.write(tmp_path / "a.wav", np.zeros(22050, dtype=np.int16), 22050)
    idx2 = write_idx2(tmp_path / "idx2wav", [("a", "a.wav")])
    batch = SpeechTextDataset(main_data={"feat": idx2}, sample_rate=16000).get_batch(["a"])
    assert abs(int(batch["feat_len"][0]) - 16000) <= 1


def test_sample_rate_defaults_to_16000_and_null_keeps_the_file_rate(tmp_path):
    sf.write(tmp_path / "a.wav", np.zeros(22050, dtype=np.int16), 22050)
    sf.write(tmp_path / "b.wav", np.zeros(8000, dtype=np.int16), 8000)
    idx2 = write_idx2(tmp_path / "idx2wav", [("a", "a.wav"), ("b", "b.wav")])
    default = SpeechTextDataset(main_data={"feat": idx2})
    assert default.sample_rate == 16000 and default.get_batch(["a", "b"])["feat_len"].tolist() == [16000, 16000]
    kept = SpeechTextDataset(main_data={"feat": idx2}, sample_rate=None)
    assert kept.sample_rate is None and kept.get_batch(["a", "b"])["feat_len"].tolist() == [22050, 8000]


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


def test_selection_keeps_ids_the_metadata_file_does_not_list(numbered, tmp_path):
    # SpeeChain removes only listed ids (np.setdiff1d): unlisted ones always stay, in id order
    ids, text, _, _ = numbered
    partial = write_idx2(tmp_path / "partial", [(uid, 10 - i) for i, uid in enumerate(ids) if i % 3][::-1])
    listed = [uid for i, uid in enumerate(ids) if i % 3]      # u01 u02 u04 u05 u07 u08, values 9 8 6 5 3 2
    assert selected(text, ["min", -2, partial]) == ["u00", "u03", "u06", "u07", "u08", "u09"]
    assert selected(text, ["max", 0.5, partial]) == ["u00", "u01", "u02", "u03", "u04", "u06", "u09"]
    assert selected(text, ["min", "5", partial]) == ["u00", "u03", "u05", "u06", "u07", "u08", "u09"]
    gender = write_idx2(tmp_path / "gen", [("u01", "f"), ("u02", "m")])
    assert selected(text, ["group", "f", gender]) == [uid for uid in ids if uid != "u02"]
    assert len(listed) == 6


def test_selection_middle_and_zero_counts_follow_speechain_slices(numbered):
    # NOTE [ SpeeChain's selection arithmetic ] in speechiter/dataset/selection.py
    ids, text, meta, _ = numbered       # by value (ascending): u09 u08 ... u00
    assert selected(text, ["middle", -5, meta]) == ids[2:8]          # int((10 - 5) / 2) = 2 off each end: 6 stay
    assert selected(text, ["middle", 0.3, meta]) == ids[3:7]         # k = 3, c = int(3.5) = 3: keeps 4
    with pytest.warns(UserWarning, match="removing every utterance listed"), \
            pytest.raises(ConfigError, match="leaves no utterance"):
        selected(text, ["middle", 0.95, meta])                       # k = 9, c = 0: [-0:] is everything
    with pytest.warns(UserWarning, match="keeping all"):
        assert selected(text, ["max", 0.05, meta]) == ids             # k = 0: [:-0] removes nothing
    with pytest.warns(UserWarning, match="keeping all"):
        assert selected(text, ["rev_order", 0.05]) == ids             # k = 0: ids[-0:]
    with pytest.raises(ConfigError, match="leaves no utterance"):   # k = 0: nothing, which is an error
        selected(text, ["order", 0.05])


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


def test_numbers_collate_to_one_array_type():

    assert collate_values("n", [1, 2.5])[0][1].tolist() == [1.0, 2.5]  # never truncated to int64
    assert collate_values("n", [1, 2])[0][1].dtype == np.int64
    assert collate_values("b", [True, False])[0][1].dtype == bool
    with pytest.raises(DataError, match=r"cannot collate n: .* \(NoneType, int\)"):
        collate_values("n", [1, None])
