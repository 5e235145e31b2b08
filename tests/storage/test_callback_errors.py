"""A store that fails in the middle of a decode: one redacted error line, nothing printed from a C callback."""
import http.server
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import soundfile

from ..conftest import REPO_ROOT

SIGNATURE, CREDENTIAL = "s3cr3tSIGvalue", "AKIDcred%2F20240101"
_READ = r"""
import sys
from speechiter.errors import DataError
from speechiter.io.read import read_feat
try:
    read_feat(sys.argv[1])
except DataError as e:
    print("DataError:", e, file=sys.stderr)
else:
    print("read without an error", file=sys.stderr)
"""


class FailingStore:
    """An HTTP server on 127.0.0.1 serving one file: HEAD and the ranged GET
    of its first bytes answer; any later range answers 503 (a store that
    fails in the middle of a read)."""

    def __init__(self, data: bytes):
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _head(self, status, length):
                self.send_response(status)
                self.send_header("Content-Length", str(length))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()

            def do_HEAD(self):
                self._head(200, len(data))

            def do_GET(self):
                ranged = self.headers.get("Range", "bytes=0-").split("=", 1)[1]
                first, _, last = ranged.partition("-")
                first, last = int(first), min(int(last or len(data) - 1), len(data) - 1)
                if first > 0:
                    self._head(503, 0)
                    return
                body = data[first:last + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.mark.slow  # a process of its own: what it prints at exit ("Exception ignored") is the point
@pytest.mark.timeout(120)
def test_a_503_inside_a_flac_decode_prints_one_redacted_line(tmp_path):
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    x = (np.random.default_rng(0).standard_normal((16000 * 8, 1)) * 8000).astype(np.int16)
    soundfile.write(tmp_path / "a.flac", x, 16000, subtype="PCM_16")  # ~250 KB: several 64 KB blocks
    store = FailingStore((tmp_path / "a.flac").read_bytes())
    try:
        url = f"{store.url}/a.flac?X-Amz-Signature={SIGNATURE}&X-Amz-Credential={CREDENTIAL}&v=1"
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), SPEECHITER_STORAGE_ATTEMPTS="2")
        done = subprocess.run([sys.executable, "-c", _READ, url], env=env, capture_output=True, text=True,
                              timeout=100)
    finally:
        store.close()
    err = done.stderr
    assert SIGNATURE not in err and "AKIDcred" not in err, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.startswith("DataError: ") and err.count("\n") == 1, err
    assert "X-Amz-Signature=***" in err and "server error 503 after 2 tries" in err, err
