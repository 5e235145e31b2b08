"""The moto endpoint works end to end: boto3 uploads, fsspec/s3fs reads back."""
import os
import socket

import pytest

from speechiter.importers import kaldi

from tests.importers.test_kaldi import read_idx2, read_segment, write_files

pytestmark = pytest.mark.slow  # an S3 server (moto)


def test_s3fs_reads_an_uploaded_object(s3_server, s3_corpus):
    import fsspec

    assert s3_server.startswith("http://127.0.0.1:") and os.environ["AWS_ENDPOINT_URL"] == s3_server
    local = s3_corpus.local / "idx2wav"
    with fsspec.open(f"{s3_corpus.url}/idx2wav", "rb") as f:
        assert f.read() == local.read_bytes()
    first_wav = local.read_text().split("\n", 1)[0].split(" ", 1)[1]
    fs = fsspec.filesystem("s3")
    with fs.open(f"{s3_corpus.url}/{first_wav}", "rb") as f:  # a ranged read
        f.seek(44)
        assert f.read(100) == (s3_corpus.local / first_wav).read_bytes()[44:144]
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(s3_corpus.url)) == sorted(
        p.name for p in s3_corpus.local.iterdir())


def test_other_addresses_are_blocked():
    with pytest.raises(OSError, match="only 127.0.0.1 may be reached"):
        socket.create_connection(("192.0.2.1", 80), timeout=0.5)  # TEST-NET-1, never routed


def test_import_kaldi_reads_headers_from_s3_urls(s3_corpus, tmp_path):
    """wav.scp may hold URLs: idx2wav keeps them, headers come through fsspec."""
    ids, paths = zip(*(line.split(" ", 1) for line in (s3_corpus.local / "idx2wav").read_text().splitlines()))
    data_dir = write_files(tmp_path / "d", **{
        "wav.scp": "".join(f"{i} {s3_corpus.url}/{p}\n" for i, p in zip(ids[:3], paths[:3])),
        "segments": f"seg1 {ids[0]} 0.05 0.15\n"})
    out = tmp_path / "out"
    assert kaldi.main([str(data_dir), str(out)]) == 0
    assert read_idx2(out / "idx2wav") == {"seg1": f"{s3_corpus.url}/{paths[0]}#t=0.05,0.15"}
    assert read_idx2(out / "idx2wav_len") == {"seg1": "1600"}
    import fsspec
    import soundfile

    local = read_segment(f"{s3_corpus.local / paths[0]}#t=0.05,0.15", 1600, out)
    with fsspec.open(f"{s3_corpus.url}/{paths[0]}", "rb") as f:
        remote = soundfile.read(f, start=800, frames=1600, dtype="float32", always_2d=True)[0]
    assert local.shape == (1600, 1) and (remote == local).all()
