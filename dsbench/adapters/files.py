"""Per-sample files (layout `files`).

Read: any tree of files at or below the path. Names starting with '.' or '_' are ignored with
everything below them, and symbolic links to directories are not followed. Files are grouped by
key, which is their directory plus the basename up to its first dot: `a/b/0001.jpg` and
`a/b/0001.json` are sample `a/b/0001`. Samples are sorted by key; worker i of n reads
keys[i::n] and opens exactly one file per member. A sample without an image, with a zero-byte
member, or lacking a member that most samples of its directory have, is a bad sample.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from dsbench.adapters import base, member_kinds, members
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc

DETECT_KEYS = 64  # the samples whose members say a directory of no images is one of text
_OTHER_LAYOUTS = tuple(s for suffixes in base.SUFFIXES.values() for s in suffixes)


def _directory(key: str) -> str:
    return key.rpartition("/")[0] or "."


@dataclass
class FilesExport(base.ReadsUnits):
    path: Loc
    groups: dict[str, tuple[str, ...]]  # key -> member extensions, sorted by key
    images: dict[str, str] = field(default_factory=dict)
    expected: dict[str, frozenset[str]] = field(default_factory=dict)  # directory -> exts
    sizes: dict[tuple[str, str], int] = field(default_factory=dict)  # (key, ext) -> bytes
    layout: str = "files"
    ignored: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str | None:
        """Token ids or text where a member other than an image or clip carries the samples
        (an `.npy` of ids, a `.txt`); None where each sample's image or audio member tells."""
        return member_kinds.payload_kind(self.images)

    @property
    def payload_field(self) -> str | None:
        return next(iter(self.images)) if self.kind else None

    def units(self) -> list[str]:
        return list(self.groups)

    def file(self, key: str, ext: str | None = None) -> str:
        """The file of member `ext` of sample `key`; without ext, the image (or first) file."""
        if ext is None:
            exts = self.groups.get(key, ())
            ext = members.pick_image(exts, self.images) or (exts[0] if exts else "*")
        return str(self.path / f"{key}.{ext}")

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None,
                   ) -> Iterator[base.RawSample]:
        for key in units:
            try:
                yield self._read_one(key)
            except SampleError as err:
                base.report(err, skip)

    def unit_samples(self, unit: str) -> int:
        return 1  # a unit is one sample's key

    def read_at(self, unit: str, offset: int, skip: base.SkipHandler = None,
                ) -> base.RawSample | None:
        # A unit is one sample: its files are the sample's own, read whole.
        return next(iter(self.read_units([unit], skip)), None)

    def forget(self) -> None:
        pass  # nothing is kept open between samples

    def _read_one(self, key: str) -> base.RawSample:
        data: dict[str, bytes] = {}
        for ext in self.groups[key]:
            path = self.file(key, ext)
            try:
                with base.open_file(path) as f:
                    data[ext] = f.read()
            except OSError as exc:
                raise SampleError(f"cannot read: {exc.strerror or exc}", path=path,
                                  key=key) from None
            except DsbenchError as exc:  # an object store refused; its reason, this sample
                raise SampleError(str(exc).removeprefix(f"{path}: "), path=path,
                                  key=key) from None
        return members.to_raw(key, self.file(key), data, self.images,
                              self.expected.get(_directory(key), frozenset()), "directory",
                              {ext: self.file(key, ext) for ext in data})

    def survey(self) -> dict[str, Any]:
        by_dir: dict[str, dict[str, dict[str, int]]] = {}
        for key, exts in self.groups.items():
            # Sizes from the listing: no file is opened (nor an object requested) for them.
            by_dir.setdefault(_directory(key), {})[key] = {e: self.sizes[key, e] for e in exts}
        acc = members.MemberSurvey("files", self.images, len(by_dir), "directory")

        def open_member(key: str, ext: str) -> IO[bytes]:
            f = base.open_file(self.file(key, ext))
            if f.seekable():
                return f
            # Image headers are probed with seeks; a remote object is small: one GET, held.
            with f:
                return io.BytesIO(f.read())

        for directory, groups in by_dir.items():
            acc.add(directory, groups, [sum(g.values()) for g in groups.values()],
                    self.file, open_member)
        s = acc.finish()
        s["units"] = len(self.groups)
        s["files"] = sum(len(e) for e in self.groups.values())
        s["bytes"] = sum(s["sample_bytes"])
        s["files_per_sample"] = s["files"] / s["samples"] if s["samples"] else 0.0
        return s


class FilesAdapter:
    name = "files"

    def detect(self, path: Loc) -> bool:
        if not store.is_dir(path):
            return False
        images = members.image_exts(path)
        others: dict[str, bool] = {}  # key -> whether a member could carry ids or text
        for rel, _ in base.walk(path):
            parsed = members.split_name(rel)
            if parsed and members.pick_image([parsed[1]], images):
                return True
            if parsed and len(others) < DETECT_KEYS:
                others[parsed[0]] = others.get(parsed[0], False) or \
                    member_kinds.is_other_payload(parsed[1])
        # No image or clip: token ids or text (open says which) where every sample seen has a
        # member that could carry them; a stray notes.txt beside another layout's index.json
        # does not make a directory an export.
        return bool(others) and all(others.values())

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> FilesExport:
        if not store.is_dir(path):
            raise DsbenchError("not a directory of per-sample files", path=path)
        groups: dict[str, list[str]] = {}
        sizes: dict[tuple[str, str], int] = {}
        for rel, n in base.walk(path):
            parsed = members.split_name(rel)
            # Another layout's data file is not a sample member: open_export lists it as unread.
            if parsed is not None and not rel.lower().endswith(_OTHER_LAYOUTS):
                groups.setdefault(parsed[0], []).append(parsed[1])
                sizes[parsed] = n
        if not groups:
            raise DsbenchError("no sample files here (empty directory?)", path=path)
        ordered = {k: tuple(sorted(groups[k])) for k in sorted(groups)}
        by_dir: dict[str, list[tuple[str, ...]]] = {}
        for key, exts in ordered.items():
            by_dir.setdefault(_directory(key), []).append(exts)
        expected = {d: members.expected_exts(g) for d, g in by_dir.items()}
        images = member_kinds.payload(
            path, image_field, lambda wanted, n: _first_samples(path, ordered, wanted, n), path)
        return FilesExport(path, ordered, images, expected, sizes)


def _first_samples(path: Loc, groups: dict[str, tuple[str, ...]], wanted: str | None, n: int
                   ) -> list[dict[str, bytes | None]]:
    """The first `n` samples' members (member_kinds.Samples), with the head of their `.npy`
    files (only `wanted`'s where given)."""
    out: list[dict[str, bytes | None]] = []
    for key in list(groups)[:n]:
        heads: dict[str, bytes | None] = {}
        for ext in groups[key]:
            heads[ext] = None
            if ext == wanted or (wanted is None and ext.endswith("npy")):
                try:
                    with base.open_file(path / f"{key}.{ext}") as f:
                        heads[ext] = f.read(member_kinds.NPY_HEAD)
                except (OSError, DsbenchError):
                    pass  # reading the sample says why
        out.append(heads)
    return out


ADAPTER = FilesAdapter()
