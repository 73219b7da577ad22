"""A store that pushes back: an HTTP proxy in front of an S3-compatible server that throttles,
fails, resets, cuts short and delays reads, for the tests, the demo and users' rehearsals.

A loopback server never says no; a cloud store does. S3 answers 503 SlowDown to a prefix asked
for more reads per second than it is scaled for, 500 InternalError now and then, and a busy
network resets connections and ends bodies early. The proxy does each of these to the reads
that pass through it (GET and HEAD of an object; bucket requests such as LIST and every write
pass untouched, so an export can be uploaded through it), with the S3 error body a client
parses, so a client's retries and accounting see what they would see in a cloud:

* `throttle_per_s`: reads per second per prefix (an object's key up to its last '/') beyond
  which a read gets 503 SlowDown; a token bucket holding one second of reads, so a short
  burst passes and a sustained rate above the limit does not;
* `error_rate`: the fraction of reads answered 500 InternalError;
* `reset_rate`: the fraction whose connection is reset before any answer;
* `cut_rate`: the fraction whose body stops half-way (the headers promise all of it);
* `latency`: seconds added before each read is answered, `MEAN` or `MEAN,SD` (lognormal);
* `bucket`: only this bucket's reads (default: every bucket's), so that one run can read the
  same export from a bucket that pushes back and from one that does not, interleaved.

The faults are drawn from one seeded generator, so a rehearsal can be repeated. The proxy runs
as its own process (`FaultProxy`, started on a free port and stopped like the local server), so
its CPU is never charged to the reader it serves. `dsbench proxy` runs one from the command line.
"""

from __future__ import annotations

import argparse
import http.client
import math
import random
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

from dsbench.errors import DsbenchError
from dsbench.storage.server import start_on_free_port, stop_process, wait_listening

_ERROR_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
               "<Message>{message}</Message><RequestId>dsbench-proxy</RequestId></Error>")
# Hop-by-hop headers (RFC 9110, 7.6.1) are the proxy's own business on each side.
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
        "upgrade"}


@dataclass(frozen=True)
class Faults:
    """What the proxy does to reads; the defaults do nothing."""

    throttle_per_s: float = math.inf
    error_rate: float = 0.0
    reset_rate: float = 0.0
    cut_rate: float = 0.0
    latency_s: float = 0.0
    latency_sd_s: float = 0.0
    bucket: str = ""
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.throttle_per_s > 0:
            raise DsbenchError(f"--throttle must be a number of reads per second > 0, not "
                               f"{self.throttle_per_s}")
        for name in ("error_rate", "reset_rate", "cut_rate"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise DsbenchError(f"--{name.removesuffix('_rate')}s must be a fraction between "
                                   f"0 and 1, not {value}")
        if self.error_rate + self.reset_rate + self.cut_rate > 1:
            raise DsbenchError("--errors, --resets and --cuts add up to more than 1")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0
                and math.isfinite(self.latency_sd_s) and self.latency_sd_s >= 0):
            raise DsbenchError("--latency must be MEAN or MEAN,SD in seconds >= 0")

    @staticmethod
    def parse_latency(text: str) -> tuple[float, float]:
        """`MEAN` or `MEAN,SD` in seconds."""
        try:
            parts = [float(p) for p in text.split(",")]
        except ValueError:
            parts = []
        if len(parts) not in (1, 2):
            raise DsbenchError(f"--latency {text!r}: expected MEAN or MEAN,SD in seconds, "
                               "e.g. 0.02,0.01")
        return parts[0], parts[1] if len(parts) == 2 else 0.0

    def to_argv(self) -> list[str]:
        return [f"--{f.name}={getattr(self, f.name)}" for f in fields(self)]

    def describe(self) -> str:
        parts = []
        if math.isfinite(self.throttle_per_s):
            parts.append(f"503 SlowDown beyond {self.throttle_per_s:g} reads/s per prefix")
        for name, what in (("error_rate", "500 InternalError"), ("reset_rate", "resets"),
                           ("cut_rate", "bodies cut short")):
            if getattr(self, name):
                parts.append(f"{getattr(self, name):.1%} {what}")
        if self.latency_s:
            sd = f" (sd {self.latency_sd_s * 1e3:g} ms)" if self.latency_sd_s else ""
            parts.append(f"{self.latency_s * 1e3:g} ms added{sd}")
        where = f" (bucket {self.bucket} only)" if self.bucket else ""
        return (", ".join(parts) or "no faults") + where


class _Buckets:
    """A token bucket per prefix: `rate` reads per second, holding one second's."""

    def __init__(self, rate: float) -> None:
        self.rate, self.size = rate, max(1.0, rate)
        self.tokens: dict[str, tuple[float, float]] = {}  # prefix -> (tokens, when)
        self.lock = threading.Lock()

    def take(self, prefix: str) -> bool:
        if math.isinf(self.rate):
            return True
        now = time.monotonic()
        with self.lock:
            tokens, then = self.tokens.get(prefix, (self.size, now))
            tokens = min(self.size, tokens + (now - then) * self.rate)
            ok = tokens >= 1
            self.tokens[prefix] = (tokens - 1 if ok else tokens, now)
            return ok


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that resets its connection is not the proxy's error to print

    def __init__(self, port: int, upstream: str, faults: Faults) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        split = urlsplit(upstream)
        self.upstream = (split.hostname or "127.0.0.1", split.port or 80)
        self.faults = faults
        self.buckets = _Buckets(faults.throttle_per_s)
        self.rng = random.Random(faults.seed)
        self.rng_lock = threading.Lock()

    def draw(self) -> tuple[str | None, float]:
        """This read's fault (None, 'error', 'reset' or 'cut') and its added latency."""
        f = self.faults
        with self.rng_lock:
            u = self.rng.random()
            delay = 0.0
            if f.latency_s:
                if f.latency_sd_s:
                    sigma2 = math.log1p((f.latency_sd_s / f.latency_s) ** 2)
                    delay = self.rng.lognormvariate(math.log(f.latency_s) - sigma2 / 2,
                                                    math.sqrt(sigma2))
                else:
                    delay = f.latency_s
        for kind, rate in (("error", f.error_rate), ("reset", f.reset_rate),
                           ("cut", f.cut_rate)):
            if u < rate:
                return kind, delay
            u -= rate
        return None, delay


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a client's connection pool expects
    # Headers and body go out in separate writes: with Nagle's algorithm on, the body waits
    # for the client's delayed ACK (40 ms on Linux) on every kept-alive request.
    disable_nagle_algorithm = True
    server: _Proxy
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass  # a line per request would be the proxy's main cost

    def parse_request(self) -> bool:
        self._body = None  # each request on a kept-alive connection brings its own body
        return super().parse_request()

    def do_GET(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._forward()

    do_HEAD = do_GET
    do_POST = do_DELETE = do_PUT

    def _serve(self) -> None:
        path = self.path.split("?", 1)[0].lstrip("/")
        bucket, _, key = path.partition("/")
        if not key or (self.server.faults.bucket and bucket != self.server.faults.bucket):
            self._forward()  # a bucket request (LIST), or another bucket's: untouched
            return
        fault, delay = self.server.draw()
        if delay:
            time.sleep(delay)  # the store's latency (a refusal takes a round trip too)
        if not self.server.buckets.take(f"{bucket}/{key.rpartition('/')[0]}"):
            self._error(503, "SlowDown", "Please reduce your request rate.")
            return
        if fault == "reset":
            # SO_LINGER with a zero timeout: close() sends a RST instead of a FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if fault == "error":
            self._error(500, "InternalError", "We encountered an internal error. Please try "
                                              "again.")
            return
        self._forward(cut=fault == "cut")

    def _error(self, status: int, code: str, message: str) -> None:
        body = _ERROR_BODY.format(code=code, message=message).encode()
        self._request_body()  # read, so that the connection stays in step
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    _body: bytes | None = None

    def _request_body(self) -> bytes:
        """The request's body, read once (sent with a length, or in chunks)."""
        if self._body is None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self._body = self._chunks()
            else:
                length = int(self.headers.get("Content-Length") or 0)
                self._body = self.rfile.read(length) if length else b""
        return self._body

    def _chunks(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline().strip():  # trailers, up to the blank line
                    pass
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk

    def _forward(self, cut: bool = False) -> None:
        body = self._request_body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        headers["Content-Length"] = str(len(body))
        try:
            response = self._request(body, headers)
        except (OSError, http.client.HTTPException):
            self._drop_upstream()
            self._error(502, "BadGateway", "The proxy could not reach the store.")
            return
        self.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP:
                self.send_header(name, value)
        length = response.getheader("Content-Length")
        if length is None:  # no length to promise (a chunked answer): read whole, then sent
            data = response.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return
        self.end_headers()
        if self.command == "HEAD":
            response.read()  # nothing, but it frees the upstream connection for the next
            return
        # The body streams through, so a first byte arrives when the store sends it; a cut
        # one stops half-way and closes the connection, as a broken network does.
        left = int(length) // 2 if cut and int(length) > 1 else int(length)
        try:
            while left > 0:
                piece = response.read(min(left, 1 << 16))
                if not piece:
                    break
                self.wfile.write(piece)
                left -= len(piece)
        except (OSError, http.client.HTTPException):
            self._drop_upstream()
            self.close_connection = True
            return
        if cut:
            self.wfile.flush()
            self._drop_upstream()  # the rest of the upstream body is never read
            self.close_connection = True

    def _drop_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def _request(self, body: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
        """The same request sent upstream, on this connection's own upstream connection
        (opened again once if the server closed an idle one)."""
        for attempt in (0, 1):
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
                self._upstream.connect()
                self._upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._upstream.request(self.command, self.path, body=body or None,
                                       headers=headers)
                return self._upstream.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop_upstream()
                if attempt:
                    raise
        raise AssertionError("unreachable")


def serve(port: int, upstream: str, faults: Faults) -> None:
    """Run the proxy until this process is stopped."""
    with _Proxy(port, upstream, faults) as proxy:
        proxy.serve_forever(poll_interval=0.2)


# --- as a process, for the tests, the demo and `dsbench proxy` ---------------------------

_LAUNCH = ("import sys; from dsbench.procs import die_with_parent; die_with_parent(); "
           "from dsbench.storage.faults import main; main(sys.argv[1:])")


class FaultProxy:
    """The proxy in its own process on a free port, for the duration of a `with` block."""

    def __init__(self, upstream: str, faults: Faults) -> None:
        self.upstream, self.faults = upstream, faults
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self.port, self.proc = start_on_free_port(
            lambda port: [_LAUNCH, "--port", str(port), "--upstream", self.upstream,
                          *self.faults.to_argv()],
            wait_listening, "the fault-injecting proxy")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="dsbench.storage.faults")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    for f in fields(Faults):
        kind = {"seed": int, "bucket": str}.get(f.name, float)
        p.add_argument(f"--{f.name}", type=kind)
    args = p.parse_args(argv)
    given = {f.name: getattr(args, f.name) for f in fields(Faults)
             if getattr(args, f.name) is not None}
    serve(args.port, args.upstream, Faults(**given))
