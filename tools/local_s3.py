"""A moto S3 server on 127.0.0.1 for the storage benchmarks (bench_large, bench_pack, bench_tail) and tests/s3.py.

    server, endpoint = start_local_s3()   # server.stop() when done
    os.environ.update(fake_aws(endpoint)) # or a child's env: dict(os.environ, **fake_aws(endpoint))

Needs the ``s3`` and ``test`` extras (moto).
"""
import logging
from typing import Dict, Tuple

#: credentials and settings that keep boto and s3fs on the local server (never AWS's metadata service)
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def start_local_s3() -> Tuple[object, str]:
    """A started moto server on a free port of 127.0.0.1, and its endpoint URL; its request log is quiet."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def fake_aws(endpoint: str) -> Dict[str, str]:
    """The environment that sends S3 requests to ``endpoint`` with the fake credentials."""
    return {**FAKE_AWS, "AWS_ENDPOINT_URL": endpoint}
