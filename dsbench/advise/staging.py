"""Candidates of an export in an object store, measured from the same store.

Written on local disk and measured against an export read through a store's client, a candidate
would win by where it is read from, not by its layout (seen: the export's own layout copied to
disk read 54% less CPU per sample). So the candidates of an export in a store are uploaded to
that store and bucket, into one prefix named for this run, beside the export
(`<export>.dsbench-advise-<machine>-<owner>/<candidate>/`) or under `--stage-url URL`
(`URL/.dsbench-advise-<machine>-<owner>/`), read from there as the export is, and that prefix
alone is deleted however the run ends. A run killed outright cannot delete it: the next run that
stages in the same place from the same machine (its host name and boot) deletes the prefixes
whose process is gone; a prefix of another machine is never touched. A bucket lifecycle rule on
`*.dsbench-advise-*` is the backstop for the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.errors import DsbenchError
from dsbench.loader import orphans
from dsbench.storage import remote
from dsbench.storage.remote import RemotePath

TAG = ".dsbench-advise-"
UPLOAD_THREADS = 8


def _machine() -> str | None:
    """This machine in a key: its host name and a hash of its boot, since the host name alone
    repeats across containers and a process id is only this boot's; None without a boot id."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"
    return f"{host}-{hashlib.sha256(boot.encode()).hexdigest()[:10]}"


def _run_name(stem: str) -> str:
    return f"{stem}{TAG}{_machine() or 'nohost'}-{orphans.owner()}"


def _keys(prefix: RemotePath) -> list[str]:
    import obstore

    return [str(meta["path"]) for page in obstore.list(remote.store_of(prefix), prefix.key + "/")
            for meta in page]


def remove(prefix: RemotePath) -> None:
    """Delete every object under `prefix` (a directory of candidates)."""
    import obstore

    if not prefix.key:  # a bucket's root: never this module's to empty
        raise DsbenchError("refusing to delete a bucket's whole content", path=str(prefix))
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

    pool = ThreadPoolExecutor(UPLOAD_THREADS)
    try:
        return sum(pool.map(put, files))
    finally:
        # On an error or Ctrl-C the uploads not started are dropped, not waited for.
        pool.shutdown(cancel_futures=True)


def _clear_orphans(where: RemotePath, stem: str, progress: Callable[[str], None]) -> None:
    """Delete the run prefixes in `where` named `stem` + this machine whose process is gone."""
    import obstore

    machine = _machine()
    if machine is None:  # no boot id: no process here can be judged gone
        return
    pattern = re.compile(re.escape(stem + TAG + machine) + r"-(\d+)-(\d+)-(\d+)$")
    listed: Any = obstore.list_with_delimiter(remote.store_of(where), where.key or None)
    for common in listed["common_prefixes"]:
        name = str(common).rstrip("/").rsplit("/", 1)[-1]
        m = pattern.match(name)
        if m and orphans.gone(int(m[1]), int(m[2]), int(m[3])):
            remove(where / name)
            progress(f"removed {where / name}: the candidates of an advise run that was "
                     "killed")


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
                               "beside it; give --stage-url s3://BUCKET/PREFIX",
                               path=str(source))
        return
    prefix = RemotePath(given)
    if (prefix.scheme, prefix.authority) != (source.scheme, source.authority):
        raise DsbenchError(f"--stage-url {given} is not in the export's bucket: candidates "
                           "read from elsewhere would win or lose by where they are read from",
                           path=str(source))
    if (prefix.url + "/").startswith(source.url + "/"):
        raise DsbenchError(f"--stage-url {given} is inside the export: the export would be "
                           "read with its candidates in it", path=str(source))


@contextlib.contextmanager
def stage(source: RemotePath | None, given: str | None,
          progress: Callable[[str], None] = fmt.progress) -> Iterator[RemotePath | None]:
    """The prefix the candidates go to, named for this run (beside `source`, or under
    `given`), deleted when the block ends; None for an export on local disk."""
    if source is None:
        yield None
        return
    where, stem = (RemotePath(given), "") if given is not None else (source.parent, source.name)
    try:
        _clear_orphans(where, stem, progress)
    except Exception as exc:  # a listing the credentials do not allow: the run goes on
        progress(f"could not look for killed runs' candidates in {where}: "
                 f"{remote.describe(exc)}")
    prefix = where / _run_name(stem)
    try:
        yield prefix
    finally:
        # Not held against a second Ctrl-C: a delete cut short is the next run's to finish.
        try:
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
