"""Data values that are URLs: identical batches to the local corpus, ranged reads, clear failures."""
import socket
import threading
import time

import h5py
import numpy as np
import pytest
import soundfile

import speechiter
from speechiter.io.read import data_num_frames, read_feat
from speechiter.dump import checksum
from speechiter.errors import DataError
from speechiter.io.storage import redact

from ..conftest import load_tool
from ..recipes import entry, write_recipe

pytestmark = pytest.mark.slow  # an S3 server (moto) and retries with timeouts

def write_data_cfg(cfg, feat, text, data_len):
    """A test set ``set1`` (shuffled, speed-perturbed blocks) over the given files."""
    iterator = entry(None, data={"feat": str(feat), "text": str(text)}, data_len=str(data_len), shuffle=True,
                     dataset_conf={"sample_rate": 16000, "use_speed_perturb": True}, batch_len=40000)
    return write_recipe(cfg, None, train=False, valid=None, test={"set1": iterator})


def batches(tmp_path, name, folder, workers=0, **settings):
    cfg = tmp_path / f"{name}.yaml"
    write_data_cfg(cfg, folder / "idx2wav", folder / "idx2text", folder / "idx2wav_len")
    iterator = speechiter.build_iterators(speechiter.load_config(cfg), seed=5, num_workers=workers,
                                          **settings)["test"]["set1"]
    return [(list(b["text"]), checksum(b)) for epoch in (1, 2) for b in iterator.build_loader(epoch=epoch)]


def url_corpus(s3_corpus, folder, segments=False):
    """idx2 files of the store's corpus whose idx2wav holds s3:// URLs (or,
    with ``segments``, two halves of each recording)."""
    folder.mkdir()
    lines = (s3_corpus.local / "idx2wav").read_text().splitlines()
    if segments:
        rows = [(f"{i}-{h}", f"{s3_corpus.url}/{p}#t={'0,0.1' if h == 'a' else '0.1'}") for i, p in
                (line.split(" ", 1) for line in lines) for h in "ab"]
        (folder / "idx2wav").write_text("".join(f"{i} {v}\n" for i, v in rows))
        (folder / "idx2text").write_text("".join(f"{i} text {i}\n" for i, _ in rows))
        load_tool("data_len").data_len(folder / "idx2wav")
        return folder
    (folder / "idx2wav").write_text("".join(f"{i} {s3_corpus.url}/{p}\n" for i, p in (l.split(" ", 1) for l in lines)))
    for name in ("idx2text", "idx2wav_len"):
        (folder / name).write_bytes((s3_corpus.local / name).read_bytes())
    return folder


@pytest.mark.timeout(180)
def test_store_and_local_folder_give_identical_batches(s3_corpus, tmp_path, fresh_storage):
    local = batches(tmp_path, "local", s3_corpus.local)
    remote = url_corpus(s3_corpus, tmp_path / "remote")
    assert batches(tmp_path, "remote", remote) == local and len(local) > 3
    assert batches(tmp_path, "threads", remote, 4, thread_type="thread") == local
    # the main process has live s3fs objects now; forked workers make their own
    assert batches(tmp_path, "procs", remote, 2, thread_type="proc") == local


def test_segments_of_stored_recordings_read_like_local_ones(s3_corpus, tmp_path, fresh_storage):
    remote = url_corpus(s3_corpus, tmp_path / "remote", segments=True)
    local = tmp_path / "local"
    local.mkdir()
    prefix = f"{s3_corpus.url}/"
    for name in ("idx2wav", "idx2text", "idx2wav_len"):
        text = (remote / name).read_text().replace(prefix, f"{s3_corpus.local}/")
        (local / name).write_text(text)
    assert (local / "idx2wav_len").read_text() == (remote / "idx2wav_len").read_text()
    assert batches(tmp_path, "remote", remote, 2, thread_type="thread") == batches(tmp_path, "local", local)


def long_wav(path, seconds=60, sr=16000):
    x = (np.random.RandomState(0).randn(seconds * sr, 1) * 3000).astype(np.int16)
    soundfile.write(str(path), x, sr, subtype="PCM_16")
    return soundfile.read(str(path), dtype="float32", always_2d=True)[0]


def test_a_segment_costs_one_small_request(s3_corpus, s3_client, s3_proxy, tmp_path):
    full = long_wav(tmp_path / "long.wav")  # 1.9 MB
    s3_client.upload_file(str(tmp_path / "long.wav"), s3_corpus.bucket, "long.wav")
    url = f"s3://{s3_corpus.bucket}/long.wav"
    np.testing.assert_array_equal(read_feat(f"{url}#t=30,31"), full[480000:496000])
    assert [r[2] for r in s3_proxy.requests] == ["bytes=0-65535", f"bytes={44 + 960000}-{44 + 992000 - 1}"]
    s3_proxy.requests.clear()
    np.testing.assert_array_equal(read_feat(f"{url}#t=50.5"), full[808000:])
    assert data_num_frames(f"{url}#t=2,3.5") == (24000, 16000)
    assert len(s3_proxy.requests) == 1  # the header is known now


def test_a_whole_wav_costs_one_request(s3_corpus, s3_client, s3_proxy, tmp_path):
    full = long_wav(tmp_path / "long.wav", seconds=5)
    x24 = long_wav(tmp_path / "long24.wav", seconds=2)
    soundfile.write(str(tmp_path / "long24.wav"), x24, 16000, subtype="PCM_24")  # a layout libsndfile reads
    for name in ("long.wav", "long24.wav"):
        s3_client.upload_file(str(tmp_path / name), s3_corpus.bucket, name)
    url = f"s3://{s3_corpus.bucket}/long.wav"
    np.testing.assert_array_equal(read_feat(url), full)
    assert [r[2] for r in s3_proxy.requests] == ["bytes=0-"]  # one GET of all of it, the header parsed from it
    s3_proxy.requests.clear()
    np.testing.assert_array_equal(read_feat(url), full)
    assert [r[2] for r in s3_proxy.requests] == [f"bytes=44-{44 + 2 * len(full) - 1}"]  # header known: the samples
    s3_proxy.requests.clear()
    np.testing.assert_array_equal(read_feat(f"s3://{s3_corpus.bucket}/long24.wav"),
                                  soundfile.read(str(tmp_path / "long24.wav"), dtype="float32", always_2d=True)[0])
    assert [r[2] for r in s3_proxy.requests] == ["bytes=0-"]


@pytest.mark.timeout(120)
def test_many_threads_read_at_once(s3_corpus, s3_proxy):
    """24 reads in 24 threads are in flight together (botocore's default pool
    of 10 connections would hold 14 back: the barrier would break). Held at the barrier, no request is sent
    twice: s3_proxy's hedge delay is an hour."""
    from concurrent.futures import ThreadPoolExecutor

    from speechiter.io import storage

    assert storage.MAX_CONNECTIONS >= 24
    paths = [line.split(" ", 1)[1] for line in (s3_corpus.local / "idx2wav").read_text().splitlines()]
    storage.read_range(f"{s3_corpus.url}/{paths[0]}", 0, 4)  # the filesystem is made
    barrier = threading.Barrier(24, timeout=20)
    s3_proxy.hold = barrier.wait
    with ThreadPoolExecutor(24) as pool:
        heads = list(pool.map(lambda i: storage.read_range(f"{s3_corpus.url}/{paths[i % len(paths)]}", 0, 4),
                              range(24)))
    assert heads == [b"RIFF"] * 24 and not barrier.broken


def test_flac_and_hdf5_ranges_read_a_small_part(s3_corpus, s3_client, s3_proxy, tmp_path):
    full = long_wav(tmp_path / "long.wav")
    soundfile.write(str(tmp_path / "long.flac"), full, 16000, subtype="PCM_16")
    pcm = soundfile.read(str(tmp_path / "long.wav"), dtype="int16", always_2d=True)[0]
    with h5py.File(tmp_path / "pack.hdf5", "w") as f:
        for key in ("a", "b"):
            f.create_dataset(key, data=pcm, chunks=(16000, 1)).attrs["sample_rate"] = 16000
    sizes = {}
    for name in ("long.flac", "pack.hdf5"):
        s3_client.upload_file(str(tmp_path / name), s3_corpus.bucket, name)
        sizes[name] = (tmp_path / name).stat().st_size
    for value, name in ((f"s3://{s3_corpus.bucket}/long.flac#t=40,41", "long.flac"),
                        (f"s3://{s3_corpus.bucket}/pack.hdf5:b#t=40,41", "pack.hdf5")):
        s3_proxy.requests.clear()
        np.testing.assert_array_equal(read_feat(value), full[640000:656000])
        ranges = [r[2] for r in s3_proxy.gets()]
        assert all(ranges), ranges  # no whole-object GET
        fetched = sum(int(b) - int(a) + 1 for a, b in (r.split("=")[1].split("-") for r in ranges))
        assert fetched < sizes[name] / 4, (name, fetched, sizes[name])
    assert data_num_frames(f"s3://{s3_corpus.bucket}/pack.hdf5:a#t=1") == (len(full) - 16000, 16000)


def test_local_block_cache(s3_corpus, s3_client, s3_proxy, tmp_path, monkeypatch):
    full = long_wav(tmp_path / "long.wav", seconds=10)
    s3_client.upload_file(str(tmp_path / "long.wav"), s3_corpus.bucket, "long.wav")
    monkeypatch.setenv("SPEECHITER_STORAGE_CACHE", str(tmp_path / "cache"))
    for _ in range(2):
        np.testing.assert_array_equal(read_feat(f"s3://{s3_corpus.bucket}/long.wav#t=3,4"), full[48000:64000])
    assert len(s3_proxy.gets()) <= 3 and any((tmp_path / "cache").iterdir())
    s3_proxy.requests.clear()
    from speechiter.io import remote

    remote.clear_headers()
    np.testing.assert_array_equal(read_feat(f"s3://{s3_corpus.bucket}/long.wav#t=3,4"), full[48000:64000])
    assert s3_proxy.gets() == []  # the blocks come from the cache


# ------------------------------------------------------------------ failures


def one_line_error(value, *forbidden):
    with pytest.raises(DataError) as e:
        read_feat(value)
    message = str(e.value)
    assert "\n" not in message and all(secret not in message for secret in forbidden)
    return message


def test_missing_object_fails_at_once_naming_the_url(s3_corpus, s3_proxy):
    url = f"s3://{s3_corpus.bucket}/corpus/nothing.wav"
    message = one_line_error(url, "testing-secret-key")
    assert message.startswith(f"{url}: cannot read: no such object")
    assert len(s3_proxy.requests) == 1


def test_missing_object_error_names_the_utterance(s3_corpus, tmp_path, fresh_storage):
    remote = url_corpus(s3_corpus, tmp_path / "remote")
    first = (remote / "idx2wav").read_text().split("\n", 1)[0].split()
    (remote / "idx2wav").write_text((remote / "idx2wav").read_text().replace(first[1], first[1] + ".gone"))
    with pytest.raises(DataError, match=rf"utterance {first[0]} \(feat from .*idx2wav\): s3://.*\.gone: "
                                        rf"cannot open: no such object"):
        batches(tmp_path, "remote", remote)


def test_refused_credentials_fail_at_once(s3_server, s3_corpus, s3_proxy, monkeypatch):
    import requests

    # moto checks access keys from now on (its server's reset-auth API); ours is not one it knows
    previous = requests.post(f"{s3_server}/moto-api/reset-auth", data=b"0").json()
    try:
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
        message = one_line_error(f"{s3_corpus.url}/idx2wav.wav", "wrong-secret-value", "testing-key-id")
    finally:
        requests.post(f"{s3_server}/moto-api/reset-auth",
                      data=str(previous["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]).encode())
    assert "access denied (check the credentials in the environment)" in message
    assert len(s3_proxy.requests) == 1


def test_transient_errors_are_retried_a_bounded_number_of_times(s3_corpus, s3_proxy, monkeypatch):
    path = (s3_corpus.local / "idx2wav").read_text().split("\n", 1)[0].split()[1]
    url = f"{s3_corpus.url}/{path}"
    s3_proxy.fail_next = 2  # two 503s, then the answer
    np.testing.assert_array_equal(read_feat(url), read_feat(str(s3_corpus.local / path)))
    assert len(s3_proxy.gets()) == 3  # the whole object: 503, 503, 200
    s3_proxy.requests.clear()
    s3_proxy.fail_next = 10
    assert "server error 503 after 3 tries" in one_line_error(f"{url}#t=0.1,0.2")
    assert len(s3_proxy.requests) == 3


@pytest.mark.timeout(60)
def test_a_dropped_connection_is_retried_then_reported(s3_corpus, s3_proxy):
    s3_proxy.mode = "drop"
    start = time.monotonic()
    message = one_line_error(f"{s3_corpus.url}/corpus/a.wav")
    # 3 tries of ours; aiohttp itself may send a request once more on a dropped connection
    assert "connection failed or timed out after 3 tries" in message and 3 <= len(s3_proxy.requests) <= 6
    assert time.monotonic() - start < 20


@pytest.mark.timeout(60)
def test_a_stalled_server_times_out(s3_corpus, s3_proxy, monkeypatch):
    monkeypatch.setenv("SPEECHITER_STORAGE_TIMEOUT", "1")
    monkeypatch.setenv("SPEECHITER_STORAGE_ATTEMPTS", "2")
    s3_proxy.mode = "stall"
    start = time.monotonic()
    message = one_line_error(f"{s3_corpus.url}/corpus/a.wav")
    assert "after 2 tries" in message and time.monotonic() - start < 15


@pytest.mark.timeout(60)
def test_a_stopped_server_is_a_connection_error(s3_server, monkeypatch, fresh_storage):
    server, endpoint = load_tool("local_s3").start_local_s3()
    server.stop()
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    assert "connection failed or timed out after 3 tries" in one_line_error("s3://bucket/a.wav#t=1,2")


@pytest.mark.timeout(60)
def test_http_urls_with_tokens_are_redacted(fresh_storage):
    """A tiny local server that accepts, then closes: the signed URL's token never shows."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        for _ in range(3):
            try:
                conn, _ = listener.accept()
            except OSError:  # closed by the test: the client tried fewer times
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://user:hunter2@127.0.0.1:{port}/a.wav?X-Amz-Signature=s3cr3tsig&X-Amz-Security-Token=tok3n&v=1"
    message = one_line_error(url, "hunter2", "s3cr3tsig", "tok3n")
    assert f"http://***@127.0.0.1:{port}/a.wav?X-Amz-Signature=***&X-Amz-Security-Token=***&v=1" in message
    try:
        listener.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept() (close() alone does not, on Linux)
    except OSError:
        pass
    listener.close()
    thread.join(10)


def test_redact():
    assert redact("s3://b/k https://u:p@h/x?sig=abc&token=t&a=1 gs://b/o?X-Goog-Credential=c") == (
        "s3://b/k https://***@h/x?sig=***&token=***&a=1 gs://b/o?X-Goog-Credential=***")


def test_without_fsspec_a_url_says_what_to_install(monkeypatch, fresh_storage):
    import sys

    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(DataError, match=r"s3://b/a.wav: reading URLs needs fsspec: "
                                        r"pip install 'speechiter\[s3\]'") as e:
        read_feat("s3://b/a.wav")
    assert e.value.exit_code == 2


@pytest.mark.parametrize("name, value, message", [
    ("SPEECHITER_STORAGE_TIMEOUT", "soon", "SPEECHITER_STORAGE_TIMEOUT should be a positive float"),
    ("SPEECHITER_STORAGE_ATTEMPTS", "0", "SPEECHITER_STORAGE_ATTEMPTS should be a positive int"),
    ("SPEECHITER_STORAGE_CACHE_TYPE", "disk", "SPEECHITER_STORAGE_CACHE_TYPE should be blockcache or filecache"),
])
def test_bad_storage_settings(s3_server, monkeypatch, fresh_storage, tmp_path, name, value, message):
    monkeypatch.setenv("SPEECHITER_STORAGE_CACHE", str(tmp_path))
    monkeypatch.setenv(name, value)
    with pytest.raises(DataError, match=message):
        read_feat("s3://b/a.wav")
