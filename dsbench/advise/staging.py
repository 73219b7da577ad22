"""Candidates of an export in an object store, measured from the same store.

Written on local disk and measured against an export read through a store's client, a candidate
would win by where it is read from, not by its layout (seen: the export's own layout copied to
disk read 54% less CPU per sample). So the candidates of an export in a store are uploaded to
that store, under one prefix beside the export named for this run
(`<export>.dsbench-advise-<host>-<owner>/<candidate>/`, or `--stage-url URL`), read from there as
the export is, and deleted however the run ends. A run killed outright cannot delete them: the
next advise run on this machine deletes the prefixes beside the same export whose process is gone
(a prefix of another machine is never touched), and says so once.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dsbench import fmt, procs
from dsbench.errors import DsbenchError
from dsbench.loader import orphans
from dsbench.storage import remote
from dsbench.storage.remote import RemotePath

TAG = ".dsbench-advise-"
UPLOAD_THREADS = 8


def _host() -> str:
    # Only characters every store takes in a key.
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"


def _pattern(source: RemotePath) -> re.Pattern[str]:
    return re.compile(re.escape(source.name + TAG + _host()) + r"-(\d+)-(\d+)-(\d+)$")


def _keys(prefix: RemotePath) -> list[str]:
    import obstore

    return [str(meta["path"]) for page in obstore.list(remote.store_of(prefix), prefix.key + "/")
            for meta in page]


def remove(prefix: RemotePath) -> None:
    """Delete every object under `prefix` (a directory of candidates)."""
    import obstore

    store = remote.store_of(prefix)
    keys = _keys(prefix)
    for start in range(0, len(keys), 1000):  # S3 deletes at most 1000 keys a request
        obstore.delete(store, keys[start:start + 1000])


def upload(local: Path, prefix: RemotePath) -> int:
    """Copy every file under `local` to `prefix`; the bytes sent."""
    from concurrent.futures import ThreadPoolExecutor

    import obstore

    store = remote.store_of(prefix)
    files = sorted(p for p in local.rglob("*") if p.is_file())

    def put(path: Path) -> int:
        data = path.read_bytes()
        obstore.put(store, f"{prefix.key}/{path.relative_to(local).as_posix()}", data)
        return len(data)

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        return sum(pool.map(put, files))


def _clear_orphans(source: RemotePath, progress: Callable[[str], None]) -> None:
    import obstore

    pattern = _pattern(source)
    listed: Any = obstore.list_with_delimiter(remote.store_of(source),
                                              source.parent.key or None)
    for common in listed["common_prefixes"]:
        m = pattern.match(str(common).rstrip("/").rsplit("/", 1)[-1])
        if m and orphans.gone(int(m[1]), int(m[2]), int(m[3])):
            gone = source.parent / str(common).rstrip("/").rsplit("/", 1)[-1]
            remove(gone)
            progress(f"removed {gone}: the candidates of an advise run that was killed")


def _said(exc: BaseException, what: str, where: RemotePath) -> DsbenchError:
    return DsbenchError(f"cannot {what}: {remote.describe(exc)}", path=str(where))


def check(source: RemotePath | None, given: str | None) -> None:
    """Refuse, before anything is read, a --stage-url that cannot hold the candidates apart."""
    if source is None:
        if given is not None:
            raise DsbenchError("--stage-url is for an export in an object store; a local "
                               "export's candidates go to --work-dir")
        return
    if given is None:
        if not source.key:
            raise DsbenchError("the export is a bucket's whole root: its candidates cannot go "
                               "beside it; give --stage-url s3://BUCKET/PREFIX elsewhere",
                               path=str(source))
        return
    prefix = RemotePath(given)
    if (prefix.url + "/").startswith(source.url + "/") or \
            (source.url + "/").startswith(prefix.url + "/"):
        raise DsbenchError(f"--stage-url {given} overlaps the export: the export would be "
                           "read with its candidates in it, or the candidates' removal would "
                           "delete it", path=str(source))


@contextlib.contextmanager
def stage(source: RemotePath | None, given: str | None,
          progress: Callable[[str], None] = fmt.progress) -> Iterator[RemotePath | None]:
    """The prefix the candidates go to (`given`, or one beside `source` named for this run),
    emptied when the block ends; None for an export on local disk."""
    if source is None:
        yield None
        return
    if given is not None:
        prefix = RemotePath(given)
    else:
        try:
            _clear_orphans(source, progress)
        except DsbenchError:
            raise
        except Exception as exc:
            raise _said(exc, "list the export's prefix", source.parent) from None
        prefix = source.parent / f"{source.name}{TAG}{_host()}-{orphans.owner()}"
    try:
        yield prefix
    finally:
        try:
            # A second Ctrl-C must not leave half of the candidates in the store.
            with procs.uninterrupted():
                remove(prefix)
        except Exception as exc:  # said, with what is left, instead of hiding the run's error
            progress(f"could not remove the candidates under {prefix}: "
                     f"{remote.describe(exc)}; remove them with your store's tools")


def put_candidate(local: Path, prefix: RemotePath) -> RemotePath:
    """One candidate's directory uploaded under `prefix`; its URL."""
    dest = prefix / local.name
    try:
        upload(local, dest)
    except Exception as exc:
        raise _said(exc, "write the candidates to the store", dest) from None
    return dest
