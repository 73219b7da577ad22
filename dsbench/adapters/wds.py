"""WebDataset tar shards (layout `wds`).

A sample is consecutive members `<key>.<ext>` (members.py has the naming convention).

Read: every `*.tar` file at or below the path, and `*.tar.gz` / `*.tgz` shards, which are
decompressed as they stream (that work is in the loader's read stage), as written by
webdataset's TarWriter/ShardWriter, GNU tar or Python's tarfile; names starting with '.' or '_'
are ignored. A shard is streamed once, front to back; consecutive members with the same key
form one sample. Directories are skipped; links, devices and names that are absolute or
contain '..' are reported as bad samples and never followed: nothing is ever extracted to
disk. A shard that ends early (no end-of-archive block) or breaks off inside a member is
reported with the last complete sample before the break. A sample lacking a member that the
shard's first sample has is bad (a stream cannot look ahead; `inspect` reads the headers first
and goes by what most samples of the shard have).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from tarfile import EOFHeaderError, InvalidHeaderError  # type: ignore[attr-defined]  # not in typeshed
from typing import IO, Any

from dsbench.adapters import base, member_kinds, members
from dsbench.adapters.survey import apportion
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc, location

_BLOCK = tarfile.BLOCKSIZE
# Shards, plain or gzip-compressed as webdataset reads them too.
SHARD_EXTS = base.SUFFIXES["wds"]
_CLEAN_END = "dsbench_clean_end"
_BAD_HEADER = "dsbench_bad_header"


def _member_problem(m: tarfile.TarInfo) -> str | None:
    """Why a member must not be read as part of a sample, or None."""
    if members.is_unsafe(m.name):
        return f"unsafe member name {m.name!r} (absolute or with '..'): not read"
    if m.issym() or m.islnk():
        return f"link member {m.name!r} -> {m.linkname!r}: links are not followed"
    if not (m.isfile() or m.isdir()):
        return f"special member {m.name!r} (device or fifo): not read"
    return None


def _sample_name(m: tarfile.TarInfo) -> tuple[str, str] | None:
    """(key, ext) of a regular member that belongs to a sample; None for others."""
    if not m.isfile() or base.is_ignored(m.name.rpartition("/")[2]):
        return None
    return members.split_name(m.name)


def is_shard(name: str) -> bool:
    return name.lower().endswith(SHARD_EXTS) and not base.is_ignored(name.rpartition("/")[2])


class _Member(tarfile.TarInfo):
    """A TarInfo that marks its archive when reading stopped at an all-zero block, the
    end-of-archive marker, rather than at data that ran out (a truncated shard); it works on
    a compressed stream too, where the raw file's offsets say nothing."""

    @classmethod
    def fromtarfile(cls, tarfile: tarfile.TarFile) -> _Member:
        try:
            return super().fromtarfile(tarfile)
        except EOFHeaderError:
            setattr(tarfile, _CLEAN_END, True)
            raise
        except InvalidHeaderError as exc:
            # tarfile ends the listing here as if the archive ended: a corrupt header (a bad
            # checksum) is not a truncation, and the members before it were read whole.
            setattr(tarfile, _BAD_HEADER, (str(exc), getattr(exc, _BAD_HEADER, "")))
            raise

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> _Member:
        try:
            return super().frombuf(buf, encoding, errors)
        except InvalidHeaderError as exc:
            # The name field of a header whose checksum is wrong is often intact: say it.
            setattr(exc, _BAD_HEADER, buf[:100].split(b"\0", 1)[0].decode("utf-8", "replace"))
            raise


def _ended_cleanly(tf: tarfile.TarFile) -> bool:
    return bool(getattr(tf, _CLEAN_END, False))


def _bad_header(tf: tarfile.TarFile) -> tuple[str, str | None] | None:
    """(message, key of the member it names, if any) when reading stopped at a corrupt
    header; None when it did not."""
    bad = getattr(tf, _BAD_HEADER, None)
    if bad is None:
        return None
    text, name = bad
    parsed = members.split_name(name) if name else None
    shown = f" of member {name!r}" if name else ""
    return f"corrupt tar header{shown} ({text}): the shard is not read past it", (
        parsed[0] if parsed else None)


def _not_tar(exc: BaseException) -> str:
    """One line for a shard tarfile cannot open (its message for `r:*` lists every method)."""
    text = str(exc)
    if "could not be opened successfully" in text:
        return "not a tar archive (plain, gzip, bzip2 or xz)"
    return f"not a tar archive ({text.splitlines()[0] if text else type(exc).__name__})"


def _span(m: tarfile.TarInfo) -> int:
    """Bytes a member takes in the shard: its header blocks (PAX, long names) and padded data."""
    return m.offset_data - m.offset + -(-m.size // _BLOCK) * _BLOCK


@dataclass
class WdsExport(base.ReadsUnits):
    path: Loc
    shards: list[Loc]
    images: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # shard -> bytes, from the listing
    root: Loc = field(default_factory=Path)  # what shard names are relative to
    layout: str = "wds"
    ignored: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str | None:
        """Token ids or text where a member other than an image or clip carries the samples;
        None where each sample's image or audio member tells (base.images_only)."""
        return member_kinds.payload_kind(self.images)

    @property
    def payload_field(self) -> str | None:
        return next(iter(self.images)) if self.kind else None

    image_field = payload_field  # what the native reader hands over as the payload

    def units(self) -> list[str]:
        return [str(p) for p in self.shards]

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None,
                   ) -> Iterator[base.RawSample]:
        for shard in units:
            yield from self._read_shard(location(shard), skip)

    def unit_samples(self, unit: str) -> int:
        """Samples in a shard from its member headers: a local shard's payloads are skipped by
        seeking (a remote one is streamed). A shard whose headers do not read to a clean end
        is counted by reading it, so that its problem is reported as reading reports it."""
        shard = location(unit)
        seekable = not store.is_remote(shard)
        try:
            with base.open_file(shard) as f, \
                    tarfile.open(fileobj=f, mode="r:*" if seekable else "r|*",
                                 tarinfo=_Member) as tf:
                count, last = 0, None
                for m in tf:
                    parsed = _sample_name(m)
                    if parsed is not None and parsed[0] != last:
                        count, last = count + 1, parsed[0]
                if _ended_cleanly(tf):
                    return count
        except (tarfile.TarError, OSError, EOFError, DsbenchError):
            pass
        return super().unit_samples(unit)

    def _read_shard(self, shard: Loc, skip: base.SkipHandler) -> Iterator[base.RawSample]:
        src = str(shard)
        try:
            f = base.open_file(shard)
        except OSError as exc:
            base.report(SampleError(f"cannot read: {exc.strerror or exc}", path=src), skip)
            return
        except DsbenchError as exc:  # an object store refused: its message names the object
            base.report(SampleError(str(exc)), skip)
            return
        with f:
            yield from self._read_open(f, src, skip)

    def _read_open(self, f: IO[bytes], src: str, skip: base.SkipHandler
                   ) -> Iterator[base.RawSample]:
        key: str | None = None  # the sample being collected
        group: dict[str, bytes] = {}
        done: set[str] = set()  # keys already yielded: a key seen again is not adjacent
        last_complete: str | None = None
        expected: frozenset[str] | None = None  # the first sample's members, for the rest

        def close_group() -> base.RawSample | None:
            nonlocal expected
            try:
                sample = members.to_raw(key or "", src, group, self.images,
                                        expected or frozenset(), "shard")
            except SampleError as err:
                base.report(err, skip)
                return None
            if expected is None:
                expected = frozenset(group)
            return sample

        try:
            # Closing a TarFile over a caller's file object would not close the file.
            tf = tarfile.open(fileobj=f, mode="r|*", tarinfo=_Member)  # noqa: SIM115
            for m in tf:
                why = _member_problem(m)
                if why is not None:
                    base.report(SampleError(why, path=src, key=None), skip)
                    continue
                parsed = _sample_name(m)
                if parsed is None:
                    continue
                k, ext = parsed
                if k != key:
                    if key is not None:
                        sample = close_group()
                        done.add(key)
                        last_complete = key
                        if sample is not None:
                            yield sample
                    if k in done:
                        base.report(SampleError(
                            "members of this sample are not adjacent in the shard (write "
                            "it with `tar --sort=name`)", path=src, key=k), skip)
                    key, group = k, {}
                if ext in group:
                    base.report(SampleError(f"duplicate member {m.name!r}", path=src,
                                            key=k), skip)
                    continue
                data = tf.extractfile(m)
                group[ext] = data.read() if data is not None else b""
            clean = _ended_cleanly(tf)
            broken = "no end-of-archive block after the last member"
            bad = _bad_header(tf)
            if bad is not None:
                # The open sample's members were all read whole before the bad header.
                if key is not None:
                    sample = close_group()
                    if sample is not None:
                        yield sample
                base.report(SampleError(bad[0], path=src, key=bad[1]), skip)
                return
        except SampleError:
            raise  # a sample's own error, already reported
        except (tarfile.TarError, OSError, EOFError, DsbenchError) as exc:  # the shard broke
            remote_or_io = isinstance(exc, OSError | DsbenchError)
            if key is None and last_complete is None and not remote_or_io:
                msg = "empty file" if self.sizes.get(src) == 0 else _not_tar(exc)
                base.report(SampleError(msg, path=src), skip)
                return
            clean, broken = False, f"{exc}"
        if clean:
            if key is not None:
                sample = close_group()
                if sample is not None:
                    yield sample
            return
        if key is not None and expected is not None and expected <= group.keys():
            # Cut at a sample boundary: the last sample has all its members.
            sample = close_group()
            last_complete, key = key, None
            if sample is not None:
                yield sample
        # Otherwise the last sample may have lost members to the cut: it is not yielded.
        after = (f"the last complete sample is {last_complete}" if last_complete
                 else "no sample before it is complete")
        base.report(SampleError(f"truncated shard: {broken}; {after}", path=src, key=key), skip)

    def survey(self) -> dict[str, Any]:
        acc = members.MemberSurvey("wds", self.images, len(self.shards), "shard")
        n_members = 0
        for shard in self.shards:
            n_members += self._survey_shard(shard, acc)
        s = acc.finish()
        s["units"] = s["files"] = len(self.shards)
        s["bytes"] = sum(self.sizes.values())
        s["files_per_sample"] = len(self.shards) / s["samples"] if s["samples"] else 0.0
        s["members_per_sample"] = n_members / s["samples"] if s["samples"] else 0.0
        return s

    def _survey_shard(self, shard: Loc, acc: members.MemberSurvey) -> int:
        """Read one shard's headers into the survey. A local shard's payloads are skipped by
        seeking; a remote one is streamed once (a range request per member header would cost
        thousands of requests), keeping the few members the survey checks."""
        src = str(shard)
        name = self._unit_name(shard)
        seekable = not store.is_remote(shard)
        groups: dict[str, dict[str, int]] = {}
        infos: dict[tuple[str, str], tarfile.TarInfo] = {}
        kept: dict[tuple[str, str], bytes] = {}
        spans: dict[str, int] = {}
        n_members = 0
        size = self.sizes.get(src, 0)
        try:
            opened = base.open_file(shard)
        except (OSError, DsbenchError) as exc:
            acc.problem(name, src, None, f"cannot read: {getattr(exc, 'strerror', None) or exc}")
            return 0
        with opened as f:
            try:
                tf = tarfile.open(fileobj=f, mode="r:*" if seekable else "r|*",  # noqa: SIM115
                                  tarinfo=_Member)
            except (tarfile.TarError, OSError, EOFError) as exc:
                acc.problem(name, src, None, "empty file" if size == 0 else _not_tar(exc))
                return 0
            broken: str | None = None
            broken_inside = False  # the cut is inside a member, not between two
            last: str | None = None
            try:
                for m in tf:
                    why = _member_problem(m)
                    if why is not None:
                        acc.problem(name, src, None, why)
                        continue
                    parsed = _sample_name(m)
                    if parsed is None:
                        continue
                    k, ext = parsed
                    n_members += 1
                    if k != last and k in groups:
                        acc.problem(name, src, k, "members of this sample are not adjacent in "
                                    "the shard")
                    if ext in groups.setdefault(k, {}):
                        acc.problem(name, src, k, f"duplicate member {m.name!r}")
                    groups[k][ext] = m.size
                    infos[k, ext] = m
                    if not seekable and len(groups) <= 2 * acc.check_per:
                        data = tf.extractfile(m)  # now or never: the stream moves on
                        kept[k, ext] = data.read() if data is not None else b""
                    spans[k] = spans.get(k, 0) + _span(m)
                    last = k
                bad = _bad_header(tf)
                if bad is not None:
                    acc.problem(name, src, bad[1], bad[0])
                elif not _ended_cleanly(tf):
                    broken = "no end-of-archive block after the last member"
            except (tarfile.TarError, OSError, EOFError) as exc:
                broken, broken_inside = str(exc), True
            if broken is not None:
                complete = [k for k in groups if k != last]
                if (last is not None and not broken_inside
                        and members.expected_exts(groups.values()) <= groups[last].keys()):
                    complete, last = list(groups), None  # cut at a sample boundary
                after = (f"the last complete sample is {complete[-1]}" if complete
                         else "no sample before it is complete")
                acc.problem(name, src, last, f"truncated shard: {broken}; {after}")

            def open_member(key: str, ext: str) -> IO[bytes] | None:
                if not seekable:
                    held = kept.get((key, ext))
                    return None if held is None else io.BytesIO(held)
                data = tf.extractfile(infos[key, ext])
                if data is None:  # only regular members are recorded, so this cannot happen
                    raise OSError(f"member {key}.{ext} has no data")
                return data

            acc.add(name, groups, apportion(size, [spans[k] for k in groups]),
                    lambda _k, _e: src, open_member)
        return n_members

    def _unit_name(self, shard: Loc) -> str:
        return store.relative(shard, self.root)


class WdsAdapter:
    name = "wds"

    def detect(self, path: Loc) -> bool:
        if store.is_dir(path):
            return any(is_shard(rel) for rel, _ in base.walk(path))
        return is_shard(path.name) and store.is_file(path)

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> WdsExport:
        if store.is_dir(path):
            found = [(path / rel, n) for rel, n in base.walk(path) if is_shard(rel)]
            root = path
        elif (n := store.size(path)) is not None:
            found, root = [(path, n)], path.parent
        else:
            raise DsbenchError("no such file or directory", path=path)
        if not found:
            raise DsbenchError(f"no {', '.join(SHARD_EXTS)} shards here", path=path)
        found.sort(key=lambda item: str(item[0]))
        images = member_kinds.wds_payload(root, found[0][0], image_field,
                                            _sample_name)
        return WdsExport(path, [p for p, _ in found], images,
                         sizes={str(p): n for p, n in found}, root=root)


ADAPTER = WdsAdapter()
