"""An S3-compatible endpoint on 127.0.0.1 for the object-storage tests (fixtures of tests/conftest.py:
one server per test session, per xdist worker under ``-n``, whichever module asks first).

- ``s3_server`` (session): moto's server mode (``moto.server.ThreadedMotoServer``)
  on 127.0.0.1 with a free port. Yields its endpoint URL; for the session,
  os.environ holds fake credentials and that endpoint (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``), the
  user's AWS config files and profile are hidden and the instance-metadata
  lookup is off; everything is restored and the server stopped at the end.
- ``s3_corpus``: a fresh bucket holding a small generated corpus (20 wav
  utterances from tools/make_corpus.py, idx2 files included) under
  ``corpus/``; yields ``S3Corpus(bucket, prefix, url, local)`` and deletes
  the bucket afterwards.
- ``localhost_only``: any socket connection to an address other than
  127.0.0.1 / ::1 (or a unix socket) fails the test (autouse in tests/storage;
  a module elsewhere that uses the server says
  ``pytestmark = pytest.mark.usefixtures("localhost_only")``).
- ``fresh_storage``: speechiter.io.storage with no filesystem made yet.
- ``s3_proxy``: a counting :class:`Proxy` in front of the server, as AWS_ENDPOINT_URL.

Skipped cleanly when moto (server mode), boto3 or s3fs is not installed
(``pip install 'speechiter[test,s3]'``).
"""
from __future__ import annotations

import dataclasses
import functools
import socket
import uuid
from pathlib import Path

import pytest

from tests.inprocess import environment


def _require_packages():
    """Skip (not fail) the calling test when a package it needs is missing."""
    pytest.importorskip("moto.server", reason="needs moto's server mode: pip install 'moto[server]'")
    pytest.importorskip("boto3", reason="needs boto3: pip install boto3")
    pytest.importorskip("s3fs", reason="needs s3fs: pip install s3fs")

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing-key-id",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
# Unset for the session: real credentials, profiles and proxies must not leak in.
HIDDEN_ENV = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN",
              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
              "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
              "https_proxy", "all_proxy")
_LOCAL = ("127.0.0.1", "::1", "localhost")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """Endpoint URL of a moto S3 server on 127.0.0.1 (see the module docstring)."""
    _require_packages()
    from tests.conftest import load_tool

    server, endpoint = load_tool("local_s3").start_local_s3()  # the benchmarks' server (tools/local_s3.py)
    no_config = tmp_path_factory.mktemp("aws") / "absent"
    env = dict(FAKE_ENV, AWS_ENDPOINT_URL=endpoint, AWS_CONFIG_FILE=str(no_config),
               AWS_SHARED_CREDENTIALS_FILE=str(no_config))
    try:
        with environment({**dict.fromkeys(HIDDEN_ENV), **env}):
            yield endpoint
    finally:
        server.stop()


@dataclasses.dataclass(frozen=True)
class S3Corpus:
    bucket: str
    prefix: str  # "corpus"
    url: str  # "s3://<bucket>/corpus"
    local: Path  # the same files on the local disk


@pytest.fixture
def s3_client(s3_server):
    import boto3

    return boto3.client("s3", endpoint_url=s3_server)


@pytest.fixture
def s3_corpus(s3_client, tmp_path, make_corpus):
    """A new bucket with a 20-utterance wav corpus under ``corpus/``."""
    import s3fs

    local = make_corpus(tmp_path / "corpus")
    bucket = f"speechiter-test-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        s3_client.upload_file(str(path), bucket, f"corpus/{path.relative_to(local).as_posix()}")
    try:
        yield S3Corpus(bucket, "corpus", f"s3://{bucket}/corpus", local)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        listed = s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
        for start in range(0, len(listed), 1000):
            s3_client.delete_objects(Bucket=bucket, Delete={
                "Objects": [{"Key": o["Key"]} for o in listed[start:start + 1000]]})
        s3_client.delete_bucket(Bucket=bucket)


@pytest.fixture
def localhost_only(monkeypatch):
    """Fail any connection to an address other than 127.0.0.1 / ::1."""
    original = socket.socket.connect, socket.socket.connect_ex

    def check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOCAL:
            raise OSError(f"tests/storage: blocked a connection to {address[0]}:{address[1]} "
                          f"(only 127.0.0.1 may be reached)")

    def connect(sock, address):
        check(sock, address)
        return original[0](sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return original[1](sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


# ------------------------------------------------------------ a counting proxy


@functools.lru_cache(maxsize=None)
def _bench_large():
    """tools/bench_large.py, loaded once: its ``forward`` relays the proxy's requests."""
    from tests.conftest import load_tool

    return load_tool("bench_large")


class Proxy:
    """A forwarding HTTP proxy on 127.0.0.1 in front of ``target``: it counts
    requests (``requests``: ``[(method, path, Range header)]``) and, per
    ``mode``, forwards ("ok"), drops the connection without an answer
    ("drop"), stalls until closed ("stall"), or answers 503 to the next
    ``fail_next`` requests first. ``hold``, if set, is called before each
    request is handled. :meth:`stall_some` makes chosen requests wait before
    they are forwarded (a slow tail)."""

    def __init__(self, target):
        import http.server
        import itertools
        import threading

        self.target, self.mode, self.fail_next, self.requests = target, "ok", 0, []
        self.hold = None
        self.stall, self.stall_s, self.numbers = None, 0.0, itertools.count(1)
        self.released = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                proxy.requests.append((self.command, self.path, self.headers.get("Range")))
                number = next(proxy.numbers)
                if proxy.hold is not None:
                    proxy.hold()
                if proxy.stall is not None and proxy.stall(number):
                    proxy.released.wait(proxy.stall_s)  # then forwarded as usual (close() ends the wait)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.mode == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if proxy.mode == "stall":
                    proxy.released.wait(30)
                    self.close_connection = True
                    return
                if proxy.fail_next > 0:
                    proxy.fail_next -= 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                _bench_large().forward(self, proxy.target, body)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def gets(self):
        return [r for r in self.requests if r[0] == "GET"]

    def stall_some(self, which, seconds: float):
        """From now on, request number n (counted from 1 now) waits ``seconds`` when ``which(n)``;
        ``which`` None stalls none."""
        import itertools

        self.stall, self.stall_s, self.numbers = which, seconds, itertools.count(1)

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fresh_storage():
    """speechiter.io.storage with no filesystem made yet (so a changed
    environment applies), and none kept afterwards."""
    from speechiter.io import remote, storage

    storage._forget_inherited()
    remote.clear_headers()
    yield storage
    storage._forget_inherited()
    remote.clear_headers()


@pytest.fixture
def s3_proxy(s3_server, monkeypatch, fresh_storage):
    """A :class:`Proxy` in front of the moto server, as AWS_ENDPOINT_URL. Its tests count requests, so this
    process sends none twice, however slow the busy machine's server: hedged requests (NOTE [ Hedged
    requests ]) wait an hour here; their own tests set the delay again. Process workers hedge as configured:
    a test that counts their requests builds with ``hedge=False``."""
    from speechiter.io import hedged_requests

    monkeypatch.setattr(hedged_requests, "FLOOR_S", 3600.0)
    monkeypatch.setattr(hedged_requests, "CEILING_S", 3600.0)
    monkeypatch.setattr(hedged_requests, "_latencies", {})  # no delay of an earlier test's
    proxy = Proxy(s3_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    try:
        yield proxy
    finally:
        proxy.close()
