"""Object stores through one client: obstore (the Rust object_store crate's Python binding).

Chosen for its cost and reach: measured against a local S3 server, about 0.5-0.7 ms of client
CPU per GET, against 2-3 ms for boto3 and 7 ms for s3fs; exactly one HTTP request per read
(s3fs and pyarrow's S3 filesystem add a HEAD); one package for s3, gs, az and http(s), with no
dependencies of its own. What it costs per request depends on the client, so every result names
it (`client_info`).

Configuration is the standard environment: AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3),
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or AWS_DEFAULT_REGION;
GOOGLE_* and AZURE_* as obstore reads them for gs:// and az://. Keys are passed explicitly, so a
missing key never sends a request to a cloud's instance-metadata endpoint, and they never
appear in a message or a result. A plain-http endpoint (a local server) is allowed.
Requests fail fast: 2 s to connect, 10 s without a byte. The client's own retries are off:
dsbench retries, under a stated policy, and counts each retry (storage/retry.py).
"""

from __future__ import annotations

import functools
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any, TypeVar

from dsbench.errors import DsbenchError
from dsbench.storage import accounting, retry
from dsbench.storage.accounting import process_cpu

SCHEMES = ("s3", "gs", "az", "abfs", "http", "https")
LIST_PAGE = 1000  # S3's page of a LIST: obstore pages internally, so pages are counted from this
_CODE = re.compile(r"<Code>(\w+)</Code>")
T = TypeVar("T")


def is_url(text: str) -> bool:
    return text.split("://", 1)[0].lower() in SCHEMES and "://" in text


@dataclass(frozen=True, order=True)
class RemotePath:
    """An object or a prefix in a store, with the parts of pathlib's API the adapters use."""

    url: str

    def __post_init__(self) -> None:
        if not is_url(self.url):
            raise DsbenchError(f"not an object-store URL (schemes: {', '.join(SCHEMES)})",
                               path=self.url)
        object.__setattr__(self, "url", self.url.rstrip("/"))

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower()

    @property
    def authority(self) -> str:
        """The bucket (s3, gs), container (az) or host (http)."""
        return self.url.split("://", 1)[1].split("/", 1)[0]

    @property
    def key(self) -> str:
        """The path inside the store, without a leading '/' ('' for the store's root)."""
        rest = self.url.split("://", 1)[1]
        return rest.split("/", 1)[1] if "/" in rest else ""

    def __truediv__(self, rel: str) -> RemotePath:
        return RemotePath(f"{self.url}/{str(rel).lstrip('/')}")

    def __str__(self) -> str:
        return self.url

    @property
    def name(self) -> str:
        return PurePosixPath(self.key).name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.key).suffix

    @property
    def parent(self) -> RemotePath:
        parent = str(PurePosixPath(self.key).parent)
        return RemotePath(f"{self.url.split('://', 1)[0]}://{self.authority}"
                          + ("" if parent == "." else f"/{parent}"))

    def relative_to(self, other: RemotePath) -> PurePosixPath:
        return PurePosixPath(self.key).relative_to(other.key) if other.key else \
            PurePosixPath(self.key)

    def as_posix(self) -> str:
        return self.url


# --- the store of a bucket, made once per process ----------------------------------------

def s3_options(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    kwargs: dict[str, Any] = {}
    options: dict[str, str] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        kwargs["endpoint"] = endpoint
        if endpoint.startswith("http://"):
            options["allow_http"] = "true"
    for var, key in (("AWS_ACCESS_KEY_ID", "access_key_id"),
                     ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
                     ("AWS_SESSION_TOKEN", "token")):
        if env.get(var):
            kwargs[key] = env[var]
    if "access_key_id" not in kwargs:
        kwargs["skip_signature"] = True  # anonymous: a public bucket, not instance metadata
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    return kwargs, options


@functools.cache
def _store(scheme: str, authority: str) -> Any:
    from obstore.store import from_url

    kwargs: dict[str, Any] = {}
    options: dict[str, str] = {"connect_timeout": "2s", "timeout": "1h"}
    # Not a short overall timeout: it covers a whole body, so it would cut a long shard
    # stream; a read that stalls for 10 s fails instead.
    options["read_timeout"] = "10s"
    if scheme == "s3":
        kwargs, extra = s3_options(os.environ)
        options |= extra
    elif scheme == "http":
        options["allow_http"] = "true"
    none = {"max_retries": 0, "retry_timeout": timedelta(seconds=retry.policy().deadline_s),
            "backoff": {"init_backoff": timedelta(milliseconds=100),
                        "max_backoff": timedelta(seconds=1), "base": 2}}
    try:
        return from_url(f"{scheme}://{authority}", client_options=options,  # type: ignore[call-overload]
                        retry_config=none, **kwargs)
    except Exception as exc:  # obstore's configuration errors: bad URL, unknown account
        raise DsbenchError(f"cannot use this store: {first_line(exc)}",
                           path=f"{scheme}://{authority}") from None


INFLIGHT_ENV = "DSBENCH_STORE_INFLIGHT"


def inflight() -> int:
    """Requests a reader keeps in flight (bench --inflight), set for every process that reads,
    workers included, through the environment as the store's address is."""
    text = os.environ.get(INFLIGHT_ENV, "1")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def use_inflight(k: int) -> None:
    if k == 1:
        os.environ.pop(INFLIGHT_ENV, None)
    else:
        os.environ[INFLIGHT_ENV] = str(k)


def clear_caches() -> None:
    """Forget stores and listings (they are read once per process): for a changed environment."""
    _store.cache_clear()
    listing.cache_clear()


def store_of(path: RemotePath) -> Any:
    return _store(path.scheme, path.authority)


def client_info() -> dict[str, Any]:
    from importlib.metadata import version

    return {"client": "obstore", "client_version": version("obstore"),
            "retry_policy": retry.policy().to_json()}


# --- errors ------------------------------------------------------------------------------

def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(exc: BaseException) -> str:
    """One line for an obstore error: its S3 error code, or what failed, never the body dump."""
    text = str(exc)
    code = _CODE.search(text)
    if code:
        what = {"NoSuchBucket": "no such bucket", "NoSuchKey": "no such object",
                "InvalidAccessKeyId": "access denied (InvalidAccessKeyId): check "
                                      "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                "SignatureDoesNotMatch": "access denied (SignatureDoesNotMatch): check "
                                         "AWS_SECRET_ACCESS_KEY",
                "AccessDenied": "access denied (AccessDenied)"}
        return what.get(code.group(1), f"the store answered {code.group(1)}")
    if retry.cannot_connect(text):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return (f"cannot connect to the store{f' at {endpoint}' if endpoint else ''} (nothing "
                "listening, or blocked): check AWS_ENDPOINT_URL")
    if isinstance(exc, FileNotFoundError):
        return "no such object"
    if isinstance(exc, PermissionError) or "PermissionDenied" in type(exc).__name__:
        return "access denied: check the credentials"
    return first_line(exc)


_jitter = random.Random()


def retried(path: RemotePath, what: Callable[[], T]) -> T:
    """Run one request (`what`) under the retry policy, counting its retries; a failure that
    a retry cannot mend, or one that outlasts the policy, is a one-line DsbenchError naming
    `path` and the store's last answer."""
    policy = retry.policy()
    start = time.perf_counter()
    retries = throttled = 0
    while True:
        attempt = time.perf_counter()
        try:
            value = what()
        except DsbenchError:
            raise
        except Exception as exc:  # obstore's errors, FileNotFoundError, PermissionError
            why = retry.transient(exc)
            throttled += why == "throttled"
            wait = policy.wait_s(retries + 1, _jitter)
            if why is not None and retries < policy.retries and \
                    time.perf_counter() - start + wait < policy.deadline_s:
                retries += 1
                time.sleep(wait)  # the client's backoff: part of what a retry costs
                continue
            if retries or why is not None:  # a request that was retried, or could have been
                accounting.retried(retries, throttled, attempt - start, failed=True)
            if why is None:  # not for a retry to mend: no such object, access denied
                raise DsbenchError(describe(exc), path=path) from None
            said = describe(exc) if retry.cannot_connect(str(exc)) else retry.answer(exc)
            raise DsbenchError(
                f"{said} after {retries + 1} attempt"
                f"{'s' if retries else ''} in {time.perf_counter() - start:.1f} s "
                f"({policy.describe()}; --retries, --request-deadline)", path=path) from None
        if retries:
            accounting.retried(retries, throttled, attempt - start, failed=False)
        return value


# --- requests ----------------------------------------------------------------------------

def _body(result: Any, sent: float) -> tuple[bytes, float]:
    """The whole body of a GET result, and the seconds from `sent` to its first byte."""
    chunks: list[bytes] = []
    first: float | None = None
    for chunk in result.stream(min_chunk_size=0):
        if first is None:
            first = time.perf_counter()
        chunks.append(bytes(chunk))
    return b"".join(chunks), (first or time.perf_counter()) - sent


def attempt_get(path: RemotePath, options: dict[str, Any]) -> tuple[bytes, float, Any]:
    """One attempt, not retried nor counted: the body, the seconds to its first byte (of this
    attempt, so that retries are counted as retries and not as latency), and the result's
    metadata."""
    import obstore

    sent = time.perf_counter()
    result = obstore.get(store_of(path), path.key, options=options)  # type: ignore[arg-type]
    data, first = _body(result, sent)
    return data, first, result.meta


def get(path: RemotePath, start: int | None = None, end: int | None = None) -> bytes:
    """The object, or bytes [start, end) of it, in one request."""

    kind = "GET" if start is None else "RANGE"
    options: dict[str, Any] = {} if start is None else {"range": (start, end)}
    c0 = process_cpu()
    data, first, _ = retried(path, lambda: attempt_get(path, options))
    accounting.record(kind, len(data), first, process_cpu() - c0)
    return data


def get_tail(path: RemotePath, n: int) -> tuple[bytes, int]:
    """The last `n` bytes and the object's size, in one range request (no HEAD needed)."""

    c0 = process_cpu()
    data, first, meta = retried(path, lambda: attempt_get(path, {"range": {"suffix": n}}))
    accounting.record("RANGE", len(data), first, process_cpu() - c0)
    return data, int(meta["size"])


def stream(path: RemotePath, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The object's body in chunks, from one GET (counted when the stream ends or is closed).
    A body that breaks off is resumed where it stopped, by a range GET counted as a retry."""
    import obstore

    c0 = process_cpu()
    sent: float | None = None  # when the attempt that delivered the first byte was sent
    first: float | None = None
    received = 0
    chunks: Iterator[Any] | None = None
    etag: str | None = None

    def next_chunk() -> Any:
        nonlocal chunks, sent, etag
        if chunks is None:
            if first is None:
                sent = time.perf_counter()
            options: dict[str, Any] = {}
            if received:  # the rest of the same object: a replaced one fails, not mixes
                options = {"range": {"offset": received}}
                if etag:
                    options["if_match"] = etag
            result = obstore.get(store_of(path), path.key, options=options)  # type: ignore[arg-type]
            etag = etag or result.meta.get("e_tag")
            chunks = iter(result.stream(min_chunk_size=chunk_bytes))
        try:
            return next(chunks, None)
        except Exception:
            chunks = None  # the next attempt asks for the rest
            raise

    try:
        while True:
            chunk = retried(path, next_chunk)
            if chunk is None:
                return
            if first is None:
                first = time.perf_counter()
            received += len(chunk)
            yield bytes(chunk)
    finally:
        accounting.record("GET", received, (first - sent) if first and sent else 0.0,
                          process_cpu() - c0)


def head_size(path: RemotePath) -> int | None:
    """The object's size, or None when there is no object at `path` (one HEAD)."""
    import obstore

    c0 = process_cpu()

    def head() -> Any:
        try:
            return obstore.head(store_of(path), path.key)
        except FileNotFoundError:
            return None

    try:
        meta = retried(path, head)
    finally:
        accounting.record("HEAD", 0, None, process_cpu() - c0)
    return None if meta is None else int(meta["size"])


@functools.cache
def listing(path: RemotePath) -> tuple[tuple[str, int], ...]:
    """(key relative to `path`, size) of every object under the prefix `path`, sorted; listed
    once per process (an export does not change while it is measured)."""
    import obstore

    c0 = process_cpu()

    def everything() -> list[Any]:
        return [meta for page in obstore.list(store_of(path), path.key or None,
                                              chunk_size=LIST_PAGE) for meta in page]

    metas = retried(path, everything)
    accounting.record("LIST", 0, None, process_cpu() - c0, n=max(1, -(-len(metas) // LIST_PAGE)))
    cut = len(path.key) + 1 if path.key else 0
    return tuple(sorted((str(m["path"])[cut:], int(m["size"])) for m in metas))
