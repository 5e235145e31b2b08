"""tools/: make_corpus, data_len, make_demo, and the shared fixtures built on them."""
import filecmp

import numpy as np
import pytest
import soundfile

from speechiter.io.read import read_feat
from speechiter.errors import DataError
from speechiter.idx2 import read_idx2
from speechiter.paths import resolve_data_path

from tests.conftest import REPO_ROOT, TOOLS_DIR
from tests.inprocess import run_cli

IDX2_FILES = ("idx2wav", "idx2wav_len", "idx2text", "idx2spk", "idx2gen")


@pytest.fixture
def make_corpus_tool(load_tool):
    return load_tool("make_corpus")


@pytest.fixture
def data_len_tool(load_tool):
    return load_tool("data_len")


@pytest.fixture
def make_demo_tool(load_tool):
    return load_tool("make_demo")


def read(path, value_type=str):
    return read_idx2(path, value_type)


# ----------------------------------------------------------------- fixtures


def test_corpus_fixture_is_consistent(corpus):
    ids, paths = read(corpus / "idx2wav")
    assert len(ids) == 20 and ids == sorted(ids)
    for name in IDX2_FILES[1:]:
        assert read(corpus / name)[0] == ids, name
    _, lengths = read(corpus / "idx2wav_len", int)
    for path, length in zip(paths, lengths):
        info = soundfile.info(resolve_data_path(path, corpus / "idx2wav"))
        assert info.frames == length and info.samplerate == 16000
        assert 0.2 * 16000 <= length <= 1.5 * 16000
    speakers = dict(zip(*read(corpus / "idx2spk")))
    genders = dict(zip(*read(corpus / "idx2gen")))
    assert set(genders.values()) <= {"m", "f"}
    assert (corpus / "spk_list").read_text().split() == sorted(set(speakers.values()))
    by_speaker = {}
    for utt_id, spk in speakers.items():
        assert utt_id.startswith(spk + "-")
        by_speaker.setdefault(spk, set()).add(genders[utt_id])
    assert all(len(g) == 1 for g in by_speaker.values())  # one gender per speaker
    texts = read(corpus / "idx2text")[1]
    assert all(t and t == t.upper() for t in texts)


@pytest.mark.parametrize("fmt", ["flac", "hdf5"])
def test_make_corpus_formats_read_the_same(make_corpus, tmp_path, fmt):
    wav = make_corpus(tmp_path / "wav", num=8)
    other = make_corpus(tmp_path / fmt, num=8, fmt=fmt)
    ids, wav_paths = read(wav / "idx2wav")
    other_ids, other_paths = read(other / "idx2wav")
    assert ids == other_ids
    assert filecmp.cmp(wav / "idx2wav_len", other / "idx2wav_len", shallow=False)
    for a, b in zip(wav_paths, other_paths):
        np.testing.assert_array_equal(read_feat(resolve_data_path(a, wav / "idx2wav")),
                                      read_feat(resolve_data_path(b, other / "idx2wav"), sample_rate=16000))


def test_demo_root(demo_root):
    counts = {}
    for split in ("train", "valid", "test"):
        folder = demo_root / split
        ids, paths = read(folder / "idx2wav")
        _, lengths = read(folder / "idx2wav_len", int)
        for name in IDX2_FILES[2:]:
            assert read(folder / name)[0] == ids
        for path, length in zip(paths, lengths):
            assert path.endswith(".flac") and "/" not in path
            info = soundfile.info(str(folder / path))
            assert (info.frames, info.samplerate, info.channels, info.subtype) == (length, 16000, 1, "PCM_16")
        texts = read(folder / "idx2text")[1]
        assert all(t == t.upper() and "." not in t and "," not in t for t in texts)
        counts[split] = len(ids)
    assert counts == {"train": 24, "valid": 6, "test": 6}
    assert (demo_root / "spk_list").read_text().split() == ["spk001", "spk002", "spk003"]
    size = sum(p.stat().st_size for p in demo_root.rglob("*") if p.is_file())
    assert size < 5 * 2**20


# ----------------------------------------------------------------- make_corpus


@pytest.mark.parametrize("fmt", ["wav", "hdf5"])
def test_make_corpus_is_deterministic(make_corpus, tmp_path, fmt):
    a = make_corpus(tmp_path / "a", num=12, fmt=fmt, seed=3)
    b = make_corpus(tmp_path / "b", num=12, fmt=fmt, seed=3)
    c = make_corpus(tmp_path / "c", num=12, fmt=fmt, seed=4)
    for name in IDX2_FILES + ("spk_list",):
        assert filecmp.cmp(a / name, b / name, shallow=False), name
    assert not filecmp.cmp(a / "idx2wav_len", c / "idx2wav_len", shallow=False)
    _, paths = read(a / "idx2wav")
    for path in paths:
        np.testing.assert_array_equal(read_feat(resolve_data_path(path, a / "idx2wav")),
                                      read_feat(resolve_data_path(path, b / "idx2wav")))


def test_make_corpus_hdf5_chunks(make_corpus_tool, tmp_path):
    out = make_corpus_tool.make_corpus(tmp_path, 7, fmt="hdf5", min_sec=0.1, max_sec=0.2, chunk_size=3)
    _, paths = read(out / "idx2wav")
    assert [p.split(":")[0] for p in paths] == ["chunk_000.hdf5"] * 3 + ["chunk_001.hdf5"] * 3 + ["chunk_002.hdf5"]
    assert sorted(p.name for p in out.glob("*.hdf5")) == ["chunk_000.hdf5", "chunk_001.hdf5", "chunk_002.hdf5"]


def test_make_corpus_ids(make_corpus_tool, tmp_path):
    out = make_corpus_tool.make_corpus(tmp_path, 250, speakers=1, min_sec=0.01, max_sec=0.02)
    ids = read(out / "idx2wav")[0]
    assert ids[0] == "spk001-0001-0001" and ids[99] == "spk001-0001-0100" and ids[100] == "spk001-0002-0001"
    assert read(out / "idx2wav")[1][0] == "wav/spk001/spk001-0001-0001.wav"


def test_lengths_only_matches_the_full_corpus(make_corpus_tool, tmp_path):
    full = make_corpus_tool.make_corpus(tmp_path / "full", 30, fmt="flac", speakers=4, min_sec=0.1, max_sec=0.3)
    lengths_only = make_corpus_tool.make_corpus(tmp_path / "lo", 30, fmt="flac", speakers=4, min_sec=0.1,
                                                max_sec=0.3, lengths_only=True)
    for name in ("idx2wav", "idx2wav_len"):
        assert filecmp.cmp(full / name, lengths_only / name, shallow=False)
    assert sorted(p.name for p in lengths_only.iterdir()) == ["idx2wav", "idx2wav_len"]


def test_lengths_only_100k_follows_the_law(make_corpus_tool, tmp_path):
    make_corpus_tool.make_corpus(tmp_path, 100_000, lengths_only=True)
    ids, lengths = read(tmp_path / "idx2wav_len", int)
    assert len(ids) == 100_000 and len(set(ids)) == 100_000 and ids == sorted(ids)
    seconds = np.asarray(lengths) / 16000
    assert 1.0 <= seconds.min() and seconds.max() <= 35.0
    assert 12.0 < seconds.mean() < 12.6
    assert 0.65 < np.mean((seconds >= 10) & (seconds <= 17)) < 0.78


@pytest.mark.slow
def test_make_corpus_400_flac(make_corpus_tool, tmp_path):
    out = make_corpus_tool.make_corpus(tmp_path, 400, fmt="flac")
    assert len((out / "idx2wav").read_text().splitlines()) == 400


@pytest.mark.parametrize("kwargs, message", [
    ({"num": 0}, "num should be a positive integer"),
    ({"fmt": "mp3"}, "fmt should be one of"),
    ({"seed": -1}, "seed should be a non-negative integer"),
    ({"speakers": 0}, "speakers should be a positive integer"),
    ({"min_sec": 2.0, "max_sec": 1.0}, "need 0 < min_sec <= max_sec"),
    ({"min_sec": 1.0}, "need 0 < min_sec <= max_sec"),
    ({"chunk_size": 0}, "chunk_size should be a positive integer"),
])
def test_make_corpus_bad_arguments(make_corpus_tool, tmp_path, kwargs, message):
    args = {"num": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_corpus_tool.make_corpus(tmp_path, **args)


def test_make_corpus_main(make_corpus_tool, tmp_path, capsys):
    assert make_corpus_tool.main([str(tmp_path / "c"), "--num", "3", "--min_sec", "0.1", "--max_sec", "0.2"]) == 0
    assert len(read(tmp_path / "c" / "idx2wav")[0]) == 3
    assert make_corpus_tool.main([str(tmp_path / "d"), "--num", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num should be a positive integer" in err


# ----------------------------------------------------------------- data_len


@pytest.mark.parametrize("fmt", ["wav", "flac", "hdf5"])
def test_data_len_matches_headers(make_corpus, data_len_tool, tmp_path, fmt):
    corpus = make_corpus(tmp_path / "c", num=6, fmt=fmt)
    out = data_len_tool.data_len(corpus / "idx2wav", tmp_path / "lens")
    assert out == tmp_path / "lens"
    assert filecmp.cmp(out, corpus / "idx2wav_len", shallow=False)
    if fmt != "hdf5":
        ids, paths = read(corpus / "idx2wav")
        _, lengths = read(out, int)
        for path, length in zip(paths, lengths):
            assert soundfile.info(str(corpus / path)).frames == length


def test_data_len_default_output_and_resampled_lengths(data_len_tool, tmp_path):
    for i, rate in enumerate((22050, 44100, 8000)):
        soundfile.write(tmp_path / f"u{i}.wav", np.zeros(1234 + i, np.int16), rate, subtype="PCM_16")
    (tmp_path / "idx2wav").write_text("".join(f"u{i} u{i}.wav\n" for i in range(3)))
    assert data_len_tool.data_len(tmp_path / "idx2wav") == tmp_path / "idx2wav_len"
    assert read(tmp_path / "idx2wav_len", int)[1] == [1234, 1235, 1236]
    out = data_len_tool.data_len(tmp_path / "idx2wav", tmp_path / "len16k", sample_rate=16000)
    lengths = read(out, int)[1]
    for i, length in enumerate(lengths):
        assert length == read_feat(str(tmp_path / f"u{i}.wav"), sample_rate=16000).shape[0]
    assert lengths == [round(1234 * 16000 / 22050), round(1235 * 16000 / 44100), round(1236 * 16000 / 8000)]


def test_data_len_errors(data_len_tool, tmp_path, capsys):
    (tmp_path / "idx2wav").write_text("a missing.wav\n")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'idx2wav'}: utterance 'a': .*missing\.wav: no such file"):
        data_len_tool.data_len(tmp_path / "idx2wav")
    assert not (tmp_path / "idx2wav_len").exists()
    assert data_len_tool.main([str(tmp_path / "idx2wav")]) == 2
    assert data_len_tool.main([str(tmp_path / "nope")]) == 2
    assert data_len_tool.main([str(tmp_path / "idx2wav"), "--sample_rate", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "utterance 'a'" in err[0] and "no such idx2 file" in err[1]
    assert "sample_rate should be a positive integer" in err[2]


def test_data_len_unwritable_output(data_len_tool, corpus, tmp_path):
    with pytest.raises(DataError, match="cannot write"):
        data_len_tool.data_len(corpus / "idx2wav", tmp_path / "no" / "such" / "dir" / "lens")


# ----------------------------------------------------------------- make_demo


def test_normalise_text(make_demo_tool):
    assert make_demo_tool.normalise_text("It's easy, isn't it?  Yes.") == "IT'S EASY ISN'T IT YES"


def test_make_demo_without_espeak(make_demo_tool, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(make_demo_tool.shutil, "which", lambda name: None)
    with pytest.raises(make_demo_tool.DemoError, match="espeak-ng is not installed"):
        make_demo_tool.make_demo(tmp_path)
    assert make_demo_tool.main(["--out", str(tmp_path)]) == 2
    assert "espeak-ng is not installed" in capsys.readouterr().err


@pytest.mark.slow  # runs a command
def test_make_demo_espeak_failure(make_demo_tool, tmp_path):
    with pytest.raises(make_demo_tool.DemoError, match="espeak-ng failed"):
        make_demo_tool.make_demo(tmp_path, espeak="false")


# ----------------------------------------------------------------- CLIs


@pytest.mark.parametrize("tool", ["make_corpus", "data_len", "make_demo"])
def test_help(tool):
    result = run_cli("--help", script=TOOLS_DIR / f"{tool}.py", cwd=REPO_ROOT)
    assert result.returncode == 0 and "usage:" in result.stdout


def test_data_len_cli_bad_input_exit_2(tmp_path):
    result = run_cli(tmp_path / "nope", script=TOOLS_DIR / "data_len.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no such idx2 file" in result.stderr
