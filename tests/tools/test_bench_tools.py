"""The benchmark tools at tiny sizes, and tools/bench.py's segment corpus: the same audio as the files it was
cut from, sample for sample."""
import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.block import BlockIterator
from tests.conftest import load_tool


def batches(root):
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_len=16000 * 3, engine="inline", out_type="null")
    try:
        return [(list(b.ids), b["feat"], b["feat_len"]) for b in iterator.build_loader(1)]
    finally:
        iterator.close()


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_segments_read_exactly_the_files_samples(tmp_path, make_corpus, fmt):
    corpus = make_corpus(tmp_path / "files", num=9, fmt=fmt)
    segments = load_tool("bench").segment_corpus(corpus, tmp_path / "segments")
    assert "#t=" in (segments / "idx2wav").read_text()
    files, cut = batches(corpus), batches(segments)
    assert len(files) == len(cut) > 1
    for (ids_a, feat_a, len_a), (ids_b, feat_b, len_b) in zip(files, cut):
        assert ids_a == ids_b and np.array_equal(len_a, len_b) and np.array_equal(feat_a, feat_b)


@pytest.mark.slow  # an S3 server, timed runs
@pytest.mark.nightly  # a benchmark, at a tiny size
@pytest.mark.timeout(300)
def test_bench_large_runs_at_a_tiny_size(tmp_path, capsys):
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    bench = load_tool("bench_large")
    assert bench.main(["--num", "6", "--threads", "4", "--epochs", "1", "--batch_seconds", "3",
                       "--latency", "0.01", "--segments", "3000", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "with latency / without:" in out and "first batch with latency" in out
    assert "== Memory: an epoch of 3000 segments" in out and "end" in out


def test_segment_index_reads_its_ranges(tmp_path):
    root = load_tool("bench_large").segment_index(tmp_path / "seg", 50, recordings=2, seconds=2.0)
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_len=800 * 10, engine="inline", out_type="null")
    try:
        got = [b for b in iterator.build_loader(1)]
    finally:
        iterator.close()
    assert sum(len(b.ids) for b in got) == 50 and all((b["feat_len"] == 800).all() for b in got)


@pytest.mark.slow  # loading workers, timed runs
@pytest.mark.nightly  # a benchmark, at a tiny size
@pytest.mark.timeout(300)
def test_bench_resume_mix_part_runs_at_a_tiny_size(tmp_path, capsys):
    best = load_tool("bench_resume").main(["--parts", "3", "--num", "300", "--step", "200", "--repeats", "1",
                                           "--workdir", str(tmp_path)])
    assert set(best) == {"plain", "changed"}
    out = capsys.readouterr().out
    assert "changed weights 0.5/0.5" in out and "msequence (2 workers)" in out
