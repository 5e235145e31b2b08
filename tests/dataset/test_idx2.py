"""speechiter.idx2: the line parser, its errors, and merging the idx2 files of one option."""
import numpy as np
import pytest

from speechiter.errors import DataError
from speechiter.idx2 import read_idx2, read_idx2_files


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------- idx2


def test_read_idx2_values_keep_inner_spaces_and_skip_blank_lines(tmp_path):
    p = write(tmp_path / "idx2text", "a HELLO  WORLD \n\n  \nb\tTAB SEPARATED\r\nc x\n")
    ids, values = read_idx2(p)
    assert ids == ["a", "b", "c"]
    assert values == ["HELLO  WORLD", "TAB SEPARATED", "x"]


def test_read_idx2_without_final_newline(tmp_path):
    assert read_idx2(write(tmp_path / "f", "a 1\nb 2"), int) == (["a", "b"], [1, 2])


def test_read_idx2_int_accepts_float_strings(tmp_path):
    p = write(tmp_path / "idx2wav_len", "a 16000\nb 123.0\nc 99.6\nd 1e3\n")
    assert read_idx2(p, int) == (["a", "b", "c", "d"], [16000, 123, 100, 1000])


def test_read_idx2_other_value_type(tmp_path):
    assert read_idx2(write(tmp_path / "f", "a 0.5\n"), float) == (["a"], [0.5])


def test_read_idx2_empty_file(tmp_path):
    assert read_idx2(write(tmp_path / "f", "\n\n"), int) == ([], [])


def test_read_idx2_line_without_value(tmp_path):
    p = write(tmp_path / "idx2wav", "a x.wav\n\nlonely   \nc y.wav\n")
    with pytest.raises(DataError, match=rf"^{p}:3: id 'lonely' has no value"):
        read_idx2(p)


def test_read_idx2_duplicate_id(tmp_path):
    p = write(tmp_path / "idx2wav", "a x.wav\nb y.wav\n\na z.wav\n")
    with pytest.raises(DataError, match=rf"^{p}:4: duplicate id 'a' \(first on line 1\)"):
        read_idx2(p)


@pytest.mark.parametrize("bad", ["12x", "nan", "inf", "-"])
def test_read_idx2_bad_int(tmp_path, bad):
    p = write(tmp_path / "idx2wav_len", f"a 1\nb 2\n\nc {bad}\n")
    with pytest.raises(DataError, match=rf"^{p}:4: value '{bad}' of id 'c' is not a valid int"):
        read_idx2(p, int)


def test_read_idx2_missing_file(tmp_path):
    with pytest.raises(DataError, match=rf"^{tmp_path / 'nope'}: no such idx2 file"):
        read_idx2(tmp_path / "nope")


def test_read_idx2_folder(tmp_path):
    with pytest.raises(DataError, match=rf"^{tmp_path}: is a folder"):
        read_idx2(tmp_path)


def test_read_idx2_not_utf8(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"a \xff\xfe\n")
    with pytest.raises(DataError, match=rf"^{p}: cannot read idx2 file"):
        read_idx2(p)


def test_read_idx2_large_file(tmp_path):
    # Speed is measured by tools/bench.py, not here.
    p = tmp_path / "idx2wav_len"
    p.write_text("".join(f"spk{i % 100:03d}-0001-{i:07d} {16000 + i}\n" for i in range(200_000)))
    ids, values = read_idx2(p, int)
    assert len(ids) == 200_000 and values[-1] == 16000 + 199_999


# --------------------------------------------------------------------- several files


def values_of(merged):
    return [merged.buffers[0 if merged.file_no is None else int(merged.file_no[i])]
            [merged.starts[i]:merged.ends[i]].tobytes().decode("utf-8") for i in range(len(merged))]


def test_read_idx2_files_one_file(tmp_path):
    merged = read_idx2_files([write(tmp_path / "a", "u2 x\nu1 y z\n")], "main_data.text")
    assert merged.ids.tolist() == [b"u2", b"u1"] and merged.file_no is None
    assert values_of(merged) == ["x", "y z"] and merged.files == [str(tmp_path / "a")]


def test_read_idx2_files_error_rule_keeps_every_row_in_file_order(tmp_path):
    a, b = write(tmp_path / "a", "u2 20\nu1 10\n"), write(tmp_path / "b", "u3 30.5\n")
    merged = read_idx2_files([a, b], "data_len")
    assert merged.ids.tolist() == [b"u2", b"u1", b"u3"] and merged.file_no.tolist() == [0, 0, 1]
    assert merged.numbers().tolist() == [20.0, 10.0, 30.5]
    assert merged.files == [str(a), str(b)] and values_of(merged.take([2, 0])) == ["30.5", "20"]


def test_read_idx2_files_error_rule_names_the_first_file_that_repeats_an_id(tmp_path):
    a, b, c = write(tmp_path / "a", "x 1\ny 2\n"), write(tmp_path / "b", "z 3\n"), write(tmp_path / "c", "w 4\ny 5\n")
    d = write(tmp_path / "d", "z 6\n")  # repeats z of b, but c comes first
    message = rf"^{c}: utterance y is also listed in another data_len file \({a}, {b}, {d}\)$"
    with pytest.raises(DataError, match=message):
        read_idx2_files([a, b, c, d], "data_len")


def test_read_idx2_files_last_rule_later_files_override(tmp_path):
    a = write(tmp_path / "a", "s1 f\ns2 m\ns3 f\n")
    b = write(tmp_path / "b", "s4 m\ns2 f\n")
    c = write(tmp_path / "c", "s3 m\n")
    merged = read_idx2_files([a, b, c], "group_info.gender", on_duplicate="last")
    assert merged.ids.tolist() == [b"s1", b"s2", b"s3", b"s4"]  # order of first appearance
    assert values_of(merged) == ["f", "f", "m", "m"] and merged.file_no.tolist() == [0, 1, 2, 1]
    assert values_of(merged.take(np.array([3, 1]))) == ["m", "f"]


def test_read_idx2_files_last_rule_numbers(tmp_path):
    merged = read_idx2_files([write(tmp_path / "a", "u1 1\nu2 2\n"), write(tmp_path / "b", "u1 3\n")], "data_len",
                             on_duplicate="last")
    assert merged.ids.tolist() == [b"u1", b"u2"] and merged.numbers().tolist() == [3.0, 2.0]
    assert merged.take(np.array([1])).numbers().tolist() == [2.0]


def test_read_idx2_files_errors_of_one_file_and_of_the_call(tmp_path):
    with pytest.raises(DataError, match="no such idx2 file"):
        read_idx2_files([write(tmp_path / "a", "u 1\n"), tmp_path / "nope"], "data_len")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'b'}:2: value 'x' of id 'v' is not a valid float"):
        read_idx2_files([write(tmp_path / "b", "u 1\nv x\n")], "data_len").numbers()
    with pytest.raises(ValueError, match="on_duplicate: expected one of error, last, got 'first'"):
        read_idx2_files([tmp_path / "a"], "data_len", on_duplicate="first")
    with pytest.raises(ValueError, match="at least one file"):
        read_idx2_files([], "data_len")


# --------------------------------------------------------------------- byte-order marks


BOM = "\ufeff"


def test_a_bom_at_the_start_is_not_part_of_the_first_id(tmp_path):
    from speechiter.idx2 import read_idx2_table
    p = write(tmp_path / "idx2text", BOM + "a HELLO\nb WORLD\n")
    assert read_idx2(p) == (["a", "b"], ["HELLO", "WORLD"])
    assert read_idx2_table(p).ids.tolist() == [b"a", b"b"]
    inside = write(tmp_path / "idx2inside", "a x\n" + BOM + "b y\n")  # only the file's start is a BOM
    assert read_idx2(inside)[0] == ["a", BOM + "b"]


def test_a_bom_at_the_start_of_a_length_file_keeps_the_first_utterance(tmp_path):
    import warnings

    from speechiter.dataset.speech_text import SpeechTextDataset
    from speechiter.idx2 import read_idx2_numbers
    from speechiter.iterator.piece import PieceIterator
    lengths = write(tmp_path / "idx2text_len", BOM + "a 3\nb 2\nc 1\n")
    ids, values = read_idx2_numbers(lengths)
    assert ids.tolist() == [b"a", b"b", b"c"] and values.tolist() == [3, 2, 1]
    text = write(tmp_path / "idx2text", BOM + "a xyz\nb xy\nc x\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not in every file" warning
        with PieceIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(text)}},
                           data_len=str(lengths), batch_size=2, shuffle=False, num_workers=0) as iterator:
            assert sorted(uid for batch in iterator.batches for uid in batch) == ["a", "b", "c"]


def test_a_bad_length_after_a_bom_names_its_line(tmp_path):
    from speechiter.idx2 import read_idx2_numbers
    with pytest.raises(DataError, match=r"idx2wav_len:1: length -3 of id 'a' is not positive"):
        read_idx2_numbers(write(tmp_path / "idx2wav_len", BOM + "a -3\nb 2\n"))
