"""moto's S3 server (``moto[server]``, an S3 test double on 127.0.0.1, not S3 itself) for the object-storage tests.

A process of its own, not moto's ThreadedMotoServer: deltalake's reads hold the test process's GIL while
they wait on the server, so a server thread in there would never answer them. Its log has one line per
request (``"GET /bucket/key HTTP/1.1" 206``), which the tests count.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

KEYS = {"access_key": "testing", "secret_key": "testing"}  # moto accepts any


def s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=KEYS["access_key"], aws_secret_access_key=KEYS["secret_key"])  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def moto_server(log_path: Path, bucket: str) -> Iterator[str]:
    """moto's S3 server on a free 127.0.0.1 port with one empty ``bucket``; yields its endpoint, stopped on exit."""
    from botocore.exceptions import EndpointConnectionError

    port = free_port()
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            endpoint = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    s3_client(endpoint).create_bucket(Bucket=bucket)
                    break
                except EndpointConnectionError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"moto's server did not start on {endpoint} (see {log_path})") from None
                    time.sleep(0.2)
            yield endpoint
        finally:
            server.terminate()
            server.wait(timeout=30)
