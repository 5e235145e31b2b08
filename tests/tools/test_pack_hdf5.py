"""tools/pack_hdf5.py: packed chunks read back exactly like the individual files."""
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import soundfile as sf

from speechiter.dataset.speech_text import SpeechTextDataset
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]
PRESET = "config/feat/log_mel/80bin_25ms_10ms.yaml"


@pytest.fixture
def pack_tool(load_tool):
    return load_tool("pack_hdf5")


def batch_of(idx2, **conf):
    dataset = SpeechTextDataset(main_data={"feat": str(idx2)}, **conf)
    return dataset.get_batch(dataset.get_data_index())


def read_pairs(path):
    return [tuple(line.split()) for line in Path(path).read_text().splitlines()]


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_int16_pack_gives_identical_tensors(tmp_path, make_corpus, pack_tool, fmt):
    corpus = make_corpus(tmp_path / "corpus", num=7, fmt=fmt)
    idx2 = pack_tool.pack(corpus / "idx2wav", tmp_path / "h5", chunk_size=3)
    assert idx2 == tmp_path / "h5" / "idx2wav"
    assert sorted(p.name for p in (tmp_path / "h5").glob("*.hdf5")) == ["chunk_000.hdf5", "chunk_001.hdf5",
                                                                        "chunk_002.hdf5"]
    entries = read_pairs(idx2)
    assert entries[0][1] == f"chunk_000.hdf5:{entries[0][0]}" and entries[3][1].startswith("chunk_001.hdf5:")
    assert read_pairs(tmp_path / "h5" / "idx2wav_len") == read_pairs(corpus / "idx2wav_len")
    with h5py.File(tmp_path / "h5" / "chunk_000.hdf5", "r") as h5:
        first = h5[entries[0][0]]
        assert first.dtype == np.int16 and first.ndim == 1 and first.attrs["sample_rate"] == 16000
    a, b = batch_of(corpus / "idx2wav"), batch_of(idx2)
    assert np.array_equal(a["feat"], b["feat"]) and np.array_equal(a["feat_len"], b["feat_len"])


def test_float32_pack_with_resampling(tmp_path, make_corpus, pack_tool):
    corpus = make_corpus(tmp_path / "corpus", num=4, sample_rate=22050)
    idx2 = pack_tool.pack(corpus / "idx2wav", tmp_path / "h5", dtype="float32", sample_rate=16000)
    with h5py.File(tmp_path / "h5" / "chunk_000.hdf5", "r") as h5:
        assert {h5[k].dtype for k in h5} == {np.dtype(np.float32)}
        assert {int(h5[k].attrs["sample_rate"]) for k in h5} == {16000}
    a, b = batch_of(corpus / "idx2wav", sample_rate=16000), batch_of(idx2, sample_rate=16000)
    assert np.array_equal(a["feat"], b["feat"])
    lengths = dict(read_pairs(tmp_path / "h5" / "idx2wav_len"))
    assert [int(lengths[uid]) for uid in sorted(lengths)] == a["feat_len"].tolist()


@pytest.mark.slow
def test_feature_pack_equals_on_the_fly_features(tmp_path, make_corpus, pack_tool, monkeypatch):
    corpus = make_corpus(tmp_path / "corpus", num=5)
    monkeypatch.chdir(tmp_path)  # the preset path resolves against the repo from anywhere
    idx2 = pack_tool.pack(corpus / "idx2wav", tmp_path / "feats", features=PRESET, sample_rate=16000)
    assert idx2.name == "idx2feat" and (tmp_path / "feats" / "idx2feat_len").is_file()
    on_the_fly = batch_of(corpus / "idx2wav", sample_rate=16000, feat_conf=PRESET)
    packed = batch_of(idx2)
    assert np.array_equal(on_the_fly["feat"], packed["feat"])
    lengths = dict(read_pairs(tmp_path / "feats" / "idx2feat_len"))
    assert [int(lengths[uid]) for uid in sorted(lengths)] == packed["feat_len"].tolist()


def test_cli_and_errors(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=3)

    def run(*args):
        return run_cli(*args, script=REPO / "tools" / "pack_hdf5.py", cwd=Path.cwd())

    ok = run(corpus / "idx2wav", tmp_path / "out", "--chunk_size", 2)
    assert ok.returncode == 0 and "wrote" in ok.stdout
    assert len(list((tmp_path / "out").glob("chunk_*.hdf5"))) == 2
    (tmp_path / "dither.yaml").write_text("dither: 1.0\n")
    (tmp_path / "bad_id").write_text(f"a/b {corpus / 'wav'}\n")
    (tmp_path / "missing").write_text("u1 nothere.wav\n")
    sf.write(tmp_path / "short.wav", np.zeros(10, np.int16), 16000)
    (tmp_path / "short").write_text("u1 short.wav\n")
    for args, match in [
        ((corpus / "idx2wav", tmp_path / "x", "--chunk_size", 0), "chunk_size should be a positive integer"),
        ((corpus / "idx2wav", tmp_path / "x", "--sample_rate", -1), "sample_rate should be a positive integer"),
        ((corpus / "idx2wav", tmp_path / "x", "--features", tmp_path / "dither.yaml", "--sample_rate", 16000),
         "dither must be 0"),
        ((corpus / "idx2wav", tmp_path / "x", "--features", tmp_path / "nothere.yaml"), "no such YAML file"),
        ((corpus / "idx2wav", tmp_path / "x", "--features", PRESET), r"feat_conf\.sample_rate: unknown"),
        ((tmp_path / "bad_id", tmp_path / "x"), "contains '/'"),
        ((tmp_path / "missing", tmp_path / "x"), r"utterance 'u1': .*nothere\.wav: no such file"),
        ((tmp_path / "short", tmp_path / "x", "--features", PRESET, "--sample_rate", 16000),
         r"utterance 'u1': expected mono audio of at least 400 samples"),
        ((corpus / "idx2wav", tmp_path / "x", "--dtype", "int8"), "invalid choice"),
    ]:
        result = run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert re.search(match, result.stderr), (match, result.stderr)
