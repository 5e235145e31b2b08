"""The reading layer against what an adversary puts between it and the data: a proxy that ignores ranged
reads (200 and the whole object) or cuts them short, presigned URLs whose folder cannot be read unsigned, a
password in a URL quoted back by the storage library, byte and time ranges past any file. Never silent wrong
bytes, never a secret printed, never a traceback."""
import http.client
import http.server
import re
import threading

import pytest

import speechiter.run
from speechiter.errors import DataError, WorkerError
from speechiter.io import shards
from speechiter.io.read import read_feat
from tests.io.test_pack import batches, pack, packed_in_a_bucket, write_recipe

pytestmark = pytest.mark.usefixtures("localhost_only")  # only 127.0.0.1 (tests/s3.py)

_HOP = ("content-length", "transfer-encoding", "connection", "server", "date")


class BadProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``target`` that misbehaves per ``mode``: "whole" drops the Range
    header (the store answers 200 and the whole object), "short" answers a ranged GET with its first half
    (Content-Range and Content-Length to match), "short-lying" with its first half under the original
    Content-Range, "signed" refuses (403) a GET with no signature in its query, "deny" refuses (403) every
    write (PUT, POST), "stall" never answers a write (until closed); "ok" forwards."""

    def __init__(self, target: str):
        self.mode = "ok"
        self.released = threading.Event()
        host, port = target.split("//", 1)[1].split(":")
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.mode == "signed" and self.command == "GET" and "X-Amz-Signature=" not in self.path:
                    return self._answer(403, {}, b"")
                if proxy.mode in ("deny", "stall") and self.command in ("PUT", "POST"):
                    if proxy.mode == "stall":
                        proxy.released.wait(60)
                        self.close_connection = True
                        return None
                    return self._answer(403, {}, b"<Error><Code>AccessDenied</Code></Error>")
                headers = dict(self.headers)
                ranged = any(k.lower() == "range" for k in headers)
                if proxy.mode == "whole":
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                data, status = response.read(), response.status
                conn.close()
                out = {k: v for k, v in response.getheaders() if k.lower() not in _HOP}
                if proxy.mode.startswith("short") and ranged and status == 206 and len(data) > 1:
                    data = data[:len(data) // 2]
                    if proxy.mode == "short":
                        key = next(k for k in out if k.lower() == "content-range")
                        first, total = re.match(r"bytes (\d+)-\d+/(\S+)", out[key]).groups()
                        out[key] = f"bytes {first}-{int(first) + len(data) - 1}/{total}"
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self._answer(status, out, data, length)

            def _answer(self, status, headers, data, length=None):
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *args: None  # a client that hangs up on a refused answer: no noise
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def bad_proxy(s3_server, monkeypatch, fresh_storage):
    proxy = BadProxy(s3_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    fresh_storage._forget_inherited()  # filesystems made before (writing a pack) go to the server itself
    shards.clear_shards()
    try:
        yield proxy
    finally:
        shards.clear_shards()
        proxy.close()


@pytest.fixture
def s3_pack(s3_client, tmp_path, make_corpus, fresh_storage):
    """A corpus packed into a fresh bucket: ``(original recipe, packed recipe, pack URL, bucket)``."""
    corpus = make_corpus(tmp_path / "c", num=12, min_sec=0.2, max_sec=0.5)
    with packed_in_a_bucket(s3_client, tmp_path, corpus, 64 << 10, "speechiter-adv") as packed:
        yield packed


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode, answer", [("whole", r"with status 200 and \d+ bytes, not the range \(206\)"),
                                          ("short", r"with bytes \d+-\d+, not bytes \d+-\d+"),
                                          ("short-lying", r"with \d+ bytes for bytes \d+-\d+ \(\d+ bytes\)")])
def test_a_store_that_ignores_or_cuts_ranges_is_never_silent(s3_pack, bad_proxy, s3_client, mode, answer):
    original, packed, url, bucket = s3_pack
    want = batches(original, num_workers=0)
    assert batches(packed, num_workers=0) == want  # through the proxy, behaving
    bad_proxy.mode = mode
    with pytest.raises(DataError, match=rf"{url}/shard-\d+.pack: the store answered a ranged read \(bytes \d+-\d+\) "
                                        rf"{answer}; those would be the wrong bytes, so they are refused"):
        batches(packed, num_workers=0)
    with pytest.raises(DataError, match=r"the store answered a ranged read"):  # a WAV's range: its header, read
        read_feat(f"s3://{bucket}/pack/shard-00000.pack#bytes=0-1000")  # whole, then the frames


def presign(index, bucket: str, endpoint: str) -> None:
    """Rewrite the ``s3://bucket/...`` values of an idx2 file as presigned http URLs through ``endpoint``."""
    import boto3
    from botocore.config import Config

    signer = boto3.client("s3", endpoint_url=endpoint, config=Config(signature_version="s3v4"))

    def signed(match):
        return signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": match.group(1)},
                                             ExpiresIn=600) + match.group(2)
    index.write_text(re.sub(rf"s3://{bucket}/(\S+?)(#bytes=\S+)", signed, index.read_text()))
    assert "X-Amz-Signature=" in index.read_text()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_presigned_urls_with_byte_ranges_read_without_their_folder(s3_pack, bad_proxy):
    original, packed, url, bucket = s3_pack
    presign(packed.parent / "index" / "idx2wav", bucket, bad_proxy.url)
    bad_proxy.mode = "signed"  # an unsigned GET (shards.json beside a shard) is refused, as by a real store
    assert batches(packed, num_workers=0) == batches(original, num_workers=0)
    bad_proxy.mode = "whole"  # and a range answered whole is refused over http as over s3://
    value = next(v for v in (packed.parent / "index" / "idx2wav").read_text().split() if "#bytes=0-" not in v
                 and "#bytes=" in v)  # a range that is not the whole shard (a batch's may be)
    with pytest.raises(DataError, match=rf"{bad_proxy.url}/{bucket}/pack/shard-\d+.pack\?\S*X-Amz-Signature=\*\*\*"
                                        r"\S*: the store answered a ranged read \(bytes \d+-\d+\) with \d+ bytes, "
                                        r"more than the \d+ asked"):
        read_feat(value)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("debug", [False, True])
def test_a_password_in_a_url_is_never_printed(tmp_path, make_corpus, s3_server, fresh_storage, capsys,
                                              debug):
    corpus = make_corpus(tmp_path / "c", num=2)
    rows = [line.split() for line in (corpus / "idx2wav").read_text().splitlines()]
    (corpus / "idx2wav").write_text("".join(f"{u} s3://reader:Hunter2-secret@bucket/{v}\n" for u, v in rows))
    recipe = write_recipe(tmp_path / "r.yaml", corpus)
    argv = ["--data_cfg", str(recipe), "--num_workers", "0", "--quiet"] + (["--debug"] if debug else [])
    assert speechiter.run.main(argv) == 2
    captured = capsys.readouterr()
    assert "Hunter2" not in captured.err + captured.out
    assert "s3://***@bucket/" in captured.err


def test_byte_and_time_ranges_past_any_file_are_named(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=1)
    wav = corpus / (corpus / "idx2wav").read_text().split()[1]
    size = wav.stat().st_size
    for value, message in (
            (f"{wav}#bytes=0-{'9' * 25}", f"the byte range ends at byte {'9' * 25}, past what a file offset can be"),
            (f"{wav}#bytes=0-{2 ** 63 - 2}", f"the byte range 0-{2 ** 63 - 2} runs past the end of the object "
                                             f"\\({size} bytes\\)"),
            (f"{wav}#bytes=100-{2 ** 62}", "runs past the end of the object"),
            (f"{wav}#bytes={size + 5}-{size + 9}", "runs past the end of the object"),
            (f"{wav}#t={'9' * 30}", "the time range starts at 1e\\+30 s, at or past the end of the file"),
            (f"{wav}#t=0,{'9' * 400}", "the time range ends at inf s, more than 0.5 s past the end of the file")):
        with pytest.raises(DataError, match=message):
            read_feat(value)


def test_a_byte_range_past_64_bits_in_a_batch_names_the_utterance(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=6)
    original, packed = pack(tmp_path, corpus)
    index = tmp_path / "pack" / "idx2wav"
    lines = index.read_text().splitlines()
    uid = lines[2].split()[0]
    lines[2] = f"{uid} shard-00000.pack#bytes=12-{2 ** 64}"
    index.write_text("\n".join(lines) + "\n")
    with pytest.raises((DataError, WorkerError), match=rf"utterance {uid} .*past what a file offset can be"):
        batches(packed, num_workers=0)


def test_a_local_shard_replaced_mid_run_is_caught_at_its_next_read(tmp_path, make_corpus):
    from speechiter.io.shards import read_bytes

    _, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=4))
    shard = tmp_path / "pack" / "shard-00000.pack"
    assert read_bytes(str(shard), 0, 99)  # checked and read once: this process knows the shard
    data = shard.read_bytes()
    for label, replaced in (("same size", data[::-1]), ("truncated", data[:len(data) // 2])):
        shard.write_bytes(replaced)
        with pytest.raises(DataError, match=rf"{shard}: the pack shard changed after it was written"):
            read_bytes(str(shard), 0, 99)
        shard.write_bytes(data)
