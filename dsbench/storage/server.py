"""A local S3-compatible server (moto's server mode) on 127.0.0.1, for the demo and the tests.

It is a real HTTP server speaking the S3 API in another process, so an export read from it goes
through the same client, requests and accounting as one in a cloud bucket; only the network is
a loopback. It serves about 200 requests/s on one core (moto is Python), which is a property of
this server, not of S3: figures measured against it are for the client's costs per request,
not for what a cloud store would deliver.

`LocalS3()` starts the server on a free port and stops it on exit (or when this process dies:
it runs with a parent-death signal). `env` is the environment a client needs to reach it.
Requires the `moto[server]` package (the `s3` extra).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from dsbench.errors import DsbenchError

START_TIMEOUT_S = 30.0
# moto accepts any key while it does not enforce authentication; fixed ones keep it simple.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "dsbench", "AWS_SECRET_ACCESS_KEY": "dsbench-local",
               "AWS_REGION": "us-east-1"}
# The server's own process: die with the parent (even when it is SIGKILLed), then run moto.
_LAUNCH = ("import sys; from dsbench.procs import die_with_parent; die_with_parent(); "
           "import runpy; sys.argv = ['moto_server'] + sys.argv[1:]; "
           "runpy.run_module('moto.server', run_name='__main__')")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen[bytes], ready: Callable[[], bool]) -> bool:
    """Whether `proc` became `ready` within START_TIMEOUT_S (False as soon as it exits)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if ready():
            return True
        time.sleep(0.1)  # start-up, not a measurement
    return False


def wait_listening(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether `proc` accepts connections on 127.0.0.1:`port` within START_TIMEOUT_S."""
    def accepts() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False
    return wait_ready(proc, accepts)


def start_on_free_port(argv: Callable[[int], list[str]],
                       ready: Callable[[subprocess.Popen[bytes], int], bool],
                       what: str) -> tuple[int, subprocess.Popen[bytes]]:
    """A server process (`python -c` with `argv(port)`) on a free port of 127.0.0.1, once it is
    `ready`: its port and process. Another process may take the port between its choice and
    the server's bind, so it is tried three times."""
    for _attempt in range(3):
        port = free_port()
        # A server that logs every request into a pipe nobody reads would fill it and stop.
        proc = subprocess.Popen([sys.executable, "-c", *argv(port)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if ready(proc, port):
            return port, proc
        stop_process(proc)
    raise DsbenchError(f"{what} did not start")


def _answers(port: int) -> bool:
    """Whether moto's server on `port` answers its own API."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1):
            return True
    except (urllib.error.URLError, OSError):
        return False


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """Terminate `proc` (a server this process started), killing it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class LocalS3:
    """moto's S3 server on 127.0.0.1 for the duration of a `with` block."""

    def __init__(self) -> None:
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that point an S3 client at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, **CREDENTIALS}

    def __enter__(self) -> LocalS3:
        try:
            import moto.server  # noqa: F401  (only to say clearly what is missing)
        except ImportError:
            raise DsbenchError("the local S3 server needs moto: pip install 'dsbench[s3]'"
                               ) from None
        self.port, self.proc = start_on_free_port(
            lambda port: [_LAUNCH, "-H", "127.0.0.1", "-p", str(port)],
            lambda proc, port: wait_ready(proc, lambda: _answers(port)),
            "the local S3 server (moto)")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop()

    def _stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    # --- what the demo and the tests do with it ------------------------------------------

    def create_bucket(self, bucket: str) -> str:
        """Make a bucket; its URL (`s3://bucket`)."""
        req = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        try:
            with urllib.request.urlopen(req, timeout=10):
                pass
        except urllib.error.HTTPError as exc:  # e.g. a name S3 does not allow
            raise DsbenchError(f"cannot create the bucket: HTTP {exc.code} {exc.reason}",
                               path=f"s3://{bucket}") from None
        return f"s3://{bucket}"

    def enforce_auth(self, on: bool = True) -> None:
        """Have the server check credentials against its (empty) IAM, so that every key is
        unknown; off, as moto starts, it accepts any. The body is the number of requests still
        let through unchecked: 0, or `inf` (it must be sent as text/plain)."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth",
                                     data=b"0" if on else b"inf", method="POST",
                                     headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(req, timeout=10):
            pass

    def upload_tree(self, local: Path, url: str, threads: int = 8,
                    keep: Callable[[Path], bool] | None = None) -> int:
        """Copy every file under `local` (or those `keep` accepts) to the prefix `url`
        (s3://bucket/prefix); the bytes sent."""
        import obstore
        from obstore.store import S3Store

        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        store = S3Store(bucket, endpoint=self.endpoint, client_options={"allow_http": True},
                        access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                        region=CREDENTIALS["AWS_REGION"])
        files = [p for p in _files(local) if keep is None or keep(p)]

        def put(path: Path) -> int:
            rel = path.name if path == local else path.relative_to(local).as_posix()
            key = "/".join(p for p in (prefix.strip("/"), rel) if p)
            data = path.read_bytes()
            obstore.put(store, key, data)
            return len(data)

        with ThreadPoolExecutor(threads) as pool:
            return sum(pool.map(put, files))


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, _dirs, names in os.walk(root):
        for name in sorted(names):
            yield Path(dirpath) / name
