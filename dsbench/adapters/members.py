"""Samples stored as groups of members (tar members or files), shared by `wds` and `files`.

WebDataset's convention: a member's key is its path up to the first dot of its basename, the
rest its extension (`./train/000001.jpg`: key `train/000001`, extension `jpg`;
`00000007.embedding.f32`: extension `embedding.f32`). A key's members form one sample: its
payload member (an image or an audio clip; token ids or text where member_kinds.py says so)
and its fields, named by their extensions, encoded as `base.EXT_ENCODINGS` says (longest
suffix match). MemberSurvey surveys such samples for `inspect`.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import IO, Any

from dsbench.adapters import base
from dsbench.adapters.survey import CHECK_LIMIT, add_stored, finish_image, new_survey, problem
from dsbench.errors import DsbenchError, Missing, SampleError
from dsbench.storage.files import Loc

# Encodings whose members may legitimately be empty (an empty caption); any other empty member
# is a broken sample.
_MAY_BE_EMPTY = (base.ENC_TEXT, base.ENC_BYTES)
_UNSAFE = re.compile(r"(^|[\\/])\.\.([\\/]|$)|^[\\/]|^[A-Za-z]:")


# --- names --------------------------------------------------------------------------------

def split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member path; None for a name with no `key.ext` basename."""
    while name.startswith("./"):
        name = name[2:]
    dirname, _, basename = name.rpartition("/")
    stem, dot, ext = basename.partition(".")
    if not dot or not stem or not ext:
        return None  # hidden files (".x"), names without an extension: not sample members
    return (f"{dirname}/{stem}" if dirname else stem), ext


def is_unsafe(name: str) -> bool:
    """True for an absolute name or one with a '..' component: it would point outside."""
    return bool(_UNSAFE.search(name))


# --- images and encodings -----------------------------------------------------------------

def image_exts(root: Loc, image_field: str | None = None) -> dict[str, str]:
    """Payload extensions and their codecs: images, and audio (`.flac`, `.wav`, ...); `.npy`
    counts as an image in dsbench's raw exports. `image_field` (--image-field) names the one
    extension that holds the payload."""
    exts = base.IMAGE_EXTS | base.AUDIO_EXTS
    manifest = base.read_manifest(root) or {}
    definition = manifest.get("definition")
    image = definition.get("image") if isinstance(definition, dict) else None
    if isinstance(image, dict) and image.get("codec") == "raw":
        exts["npy"] = "raw"
    if image_field is None:
        return exts
    last = image_field.rsplit(".", 1)[-1].lower()
    codec = exts.get(last) or ("raw" if last == "npy" else None)
    if codec is None:
        raise DsbenchError(f"--image-field {image_field}: not an image or audio member extension "
                           f"({', '.join(sorted(exts))}, or one ending in them)", path=root)
    return {image_field: codec}


def pick_image(exts: Iterable[str], images: Mapping[str, str]) -> str | None:
    """The member extension holding the payload: an image's before an audio clip's (a sample
    may carry a clip and a picture of it), an exact payload extension before one ending in one
    (`0.jpg`), then by name; None when the sample has neither."""
    found = [(images.get(e) or images.get(e.rsplit(".", 1)[-1]), e) for e in exts]
    ranked = sorted((c in base.AUDIO_CODECS, e not in images, e) for c, e in found if c)
    return ranked[0][2] if ranked else None


def _carried(images: Mapping[str, str]) -> str:  # kinds: member_kinds.wds_payload's
    kind = next(iter(set(images.values()) & {base.TOKENS, base.TEXT}), "image or audio")
    return {base.TOKENS: "token ids (.npy)", base.TEXT: "text"}.get(kind, kind)


def image_codec(ext: str, images: Mapping[str, str]) -> str:
    return images.get(ext) or images[ext.rsplit(".", 1)[-1]]


@lru_cache(maxsize=4096)
def ext_encoding(ext: str) -> str:
    """Encoding of a member by its extension: longest matching suffix, else opaque bytes."""
    parts = ext.split(".")
    for i in range(len(parts)):
        enc = base.EXT_ENCODINGS.get(".".join(parts[i:]))
        if enc is not None:
            return enc
    return base.ENC_BYTES


@lru_cache(maxsize=1024)
def _encodings(exts: tuple[str, ...]) -> Mapping[str, str]:
    # One shared mapping per set of extensions: a shard's samples all get the same object.
    return {e: ext_encoding(e) for e in exts}


def expected_exts(groups: Iterable[Iterable[str]]) -> frozenset[str]:
    """Extensions that more than half of the groups have: a group lacking one is incomplete."""
    counts: Counter[str] = Counter()
    n = 0
    for exts in groups:
        n += 1
        counts.update(set(exts))
    return frozenset(e for e, c in counts.items() if 2 * c > n)


def to_raw(key: str, source: str, members: dict[str, bytes], images: Mapping[str, str],
           expected: frozenset[str] = frozenset(), container: str = "unit",
           paths: Mapping[str, str] | None = None) -> base.RawSample:
    """A RawSample from one key's members; SampleError when the group is incomplete.

    Errors name `source` (the shard, or the sample's image file), or for an empty member its
    own file when `paths` maps extensions to files.
    """
    img = pick_image(members, images)
    if img is None:
        have = ", ".join("." + e for e in sorted(members)) or "none"
        raise SampleError(f"no {_carried(images)} member (.{', .'.join(sorted(set(images)))}); "
                          f"members: {have}", path=source, key=key)
    missing = sorted(expected - members.keys())
    if missing:
        raise SampleError(f"no .{missing[0]} member, which other samples in this {container} "
                          "have", path=source, key=key)
    for ext, data in members.items():
        if not data and (ext == img or ext_encoding(ext) not in _MAY_BE_EMPTY):
            raise SampleError(f"zero-byte member {key}.{ext}",
                              path=(paths or {}).get(ext, source), key=key)
    fields = {e: d for e, d in members.items() if e != img}
    codec = image_codec(img, images)
    payload: Any = base.StoredIds(base.npy_array, members[img]) if codec == base.TOKENS \
        else members[img]
    return base.RawSample(key=key, source=source, image=payload, codec=codec, fields=fields,
                          encodings=_encodings(tuple(sorted(fields))),
                          sources={e: paths[e] for e in fields} if paths else None)


# --- survey helpers -----------------------------------------------------------------------

def json_type(value: Any) -> str:
    """A short type name for a parsed JSON value, as `inspect` prints it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "struct{" + ", ".join(value) + "}"
    if not value:
        return "list"
    kinds = {json_type(v) for v in value}
    if kinds <= {"int", "float"}:
        return f"list<{'float' if 'float' in kinds else 'int'}>[{len(value)}]"
    if len(kinds) == 1:
        return f"list<{kinds.pop()}>"
    return "list<mixed>"


def merge_type(old: str | None, new: str) -> str:
    """Combine the types seen for one field in several samples (lists of any length agree)."""
    if old is None or old == new:
        return new
    for suffix in (" (json)", " (raw)"):
        if old.endswith(suffix) and new.endswith(suffix):
            return merge_type(old.removesuffix(suffix), new.removesuffix(suffix)) + suffix
    o, n = old.split("[")[0], new.split("[")[0]  # list lengths dropped: they may vary
    if o == n:
        return o
    if "null" in (o, n):  # a value left out (null) agrees with any type
        return old if n == "null" else new
    # JSON writes a whole float as an integer (0 for 0.0): numbers agree with numbers.
    for ints, floats in (("int", "float"), ("list<int>", "list<float>")):
        if {o, n} == {ints, floats}:
            return floats
    if o == "list" and n.startswith("list"):
        return new  # an empty list agrees with any list
    if n == "list" and o.startswith("list"):
        return old
    parts = sorted(set(old.removeprefix("mixed(").removesuffix(")").split("|")) | {new})
    return "mixed(" + "|".join(parts) + ")"


def check_member(ext: str, data: bytes) -> tuple[str, Any]:
    """(type name, parsed JSON or None) of a field member; ValueError when it is malformed."""
    enc = ext_encoding(ext)
    if enc == base.ENC_INT_TEXT:
        try:
            int(data.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f".{ext} is not an ASCII integer: {data[:20]!r}") from None
        return "int (ascii)", None
    if enc == base.ENC_TEXT:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f".{ext} is not UTF-8 text: {exc}") from None
        return "string (utf-8)", None
    if enc == base.ENC_F32:
        if len(data) % 4:
            raise ValueError(f".{ext} holds {len(data)} bytes, not a whole number of float32")
        return f"float32[{len(data) // 4}] (raw)", None
    if enc == base.ENC_JSON:
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"invalid JSON in .{ext}: {exc}") from None
        except RecursionError:
            raise ValueError(f"invalid JSON in .{ext}: nested too deep") from None
        return ("json object" if isinstance(value, dict) else json_type(value) + " (json)"), value
    if enc == base.ENC_NPY:
        return "npy array", None
    return "bytes", None



_TYPE_BY_ENCODING = {
    base.ENC_INT_TEXT: "int (ascii)", base.ENC_TEXT: "string (utf-8)", base.ENC_JSON: "json",
    base.ENC_F32: "float32 (raw)", base.ENC_NPY: "npy array", base.ENC_BYTES: "bytes",
}


_PLURAL = {"shard": "shards", "directory": "directories"}


def _lengths_differ(old: str, new: str) -> bool:
    """Float vectors (embeddings: list<float>[768], float32[768] (raw)) of different lengths;
    integer lists (token ids, several labels) may vary in length."""
    o, n = old.partition("["), new.partition("[")
    return bool(o[1] and n[1]) and o[0] == n[0] and "float" in o[0] and o[2] != n[2]


class MemberSurvey:
    """The survey of a member-based export, built one container (shard or directory) at a time.

    Structure comes from sizes alone (tar headers, directory listings); the first few samples of
    each container, CHECK_LIMIT in all, are opened to read image headers and parse field members.
    A field member holding a JSON object also reports its keys, as fields `<ext>.<key>`.
    `missing_in` of a field lists the containers in which some sample lacks it.
    """

    def __init__(self, layout: str, images: Mapping[str, str], containers: int,
                 label: str) -> None:
        self.survey = new_survey(layout)
        self.label = label  # what a container is called: "shard", "directory"
        self.images = images
        self.check_per = max(1, CHECK_LIMIT // max(1, containers))
        self.containers: list[str] = []
        self.exts: set[str] = set()  # every field extension seen
        self.full: dict[str, set[str]] = {}  # container -> field exts that all its samples have
        self.inner_full: dict[str, dict[str, set[str]]] = {}  # container -> ext -> JSON keys
        self.types: dict[str, str] = {}
        self.inner_types: dict[tuple[str, str], str] = {}
        self.inner_keys: dict[str, set[str]] = {}  # ext -> JSON keys of the first sample checked
        self._bad: set[tuple[str, str]] = set()

    def problem(self, container: str, file: str, key: str | None, error: str) -> None:
        self.survey["problems"].append(problem(file, key, error))
        if key is not None:
            self._bad.add((container, key))

    def add(self, container: str, groups: Mapping[str, Mapping[str, int]],
            sample_bytes: list[int], file_of: Callable[[str, str | None], str],
            open_member: Callable[[str, str], IO[bytes] | None]) -> None:
        """One container's key groups ({key: {ext: size}}), in order, with their bytes."""
        s = self.survey
        s["samples"] += len(groups)
        s["sample_bytes"].extend(sample_bytes)
        self.containers.append(container)
        expected = expected_exts(groups.values())
        full: set[str] | None = None
        inner: dict[str, set[str]] = {}
        checked = 0
        earlier, here = set(self.exts), set()
        for key, members in groups.items():
            img = pick_image(members, self.images)
            exts = set(members) - {img}
            here |= exts
            full = exts if full is None else full & exts
            ok = (container, key) not in self._bad
            if img is None:
                self.problem(container, file_of(key, None), key,
                             f"no {_carried(self.images)} member")
                ok = False
            for ext in sorted(expected - members.keys()):
                self.problem(container, file_of(key, None), key,
                             f"no .{ext} member, which other samples in this {self.label} have")
                ok = False
            for ext, size in members.items():
                if size == 0 and (ext == img or ext_encoding(ext) not in _MAY_BE_EMPTY):
                    self.problem(container, file_of(key, ext), key, f"zero-byte member .{ext}")
                    ok = False
            if (ok and img is not None and checked < self.check_per
                    and s["image"]["count_checked"] + sum(
                        s.get(k, {}).get("count_checked", 0) for k in ("audio", "tokens", "text"))
                    < CHECK_LIMIT):
                checked += 1
                self._check(container, key, img, sorted(exts), file_of, open_member, inner)
        self.full[container] = full or set()
        self.inner_full[container] = inner
        self.exts |= here
        first = next(iter(groups), None)
        if first is None or len(self.containers) == 1:
            return
        # A field that a whole container lacks, or has alone: the per-container check above
        # cannot see it, and it is what a re-export that changed its fields midway looks like.
        plural = _PLURAL.get(self.label, self.label)
        for ext in sorted(earlier - here):
            self.problem(container, file_of(first, None), first, f"field {ext!r}: no sample of "
                         f"this {self.label} has a .{ext} member, which earlier {plural} have")
        for ext in sorted(here - earlier):
            self.problem(container, file_of(first, None), first, f"field {ext!r}: this "
                         f"{self.label} has .{ext} members, which no earlier {self.label} has")

    def _check(self, container: str, key: str, img: str, exts: list[str],
               file_of: Callable[[str, str | None], str],
               open_member: Callable[[str, str], IO[bytes] | None],
               inner: dict[str, set[str]]) -> None:
        """Check one sample's image header and fields. `open_member` gives None for a member
        it did not keep (a streamed shard keeps only its first samples): not checked."""
        try:
            opened = open_member(key, img)
            if opened is None:
                return
            with opened as f:
                add_stored(self.survey, image_codec(img, self.images), f)
        except Missing:
            raise  # the run's, not this sample's
        except (ValueError, OSError, DsbenchError) as exc:
            self.problem(container, file_of(key, img), key, str(exc))
        for ext in exts:
            try:
                member = open_member(key, ext)
                if member is None:
                    continue
                with member as f:
                    kind, value = check_member(ext, f.read())
            except (ValueError, OSError, DsbenchError) as exc:
                self.problem(container, file_of(key, ext), key, str(exc))
                continue
            self._typed(container, file_of(key, ext), key, ext, self.types, ext, kind)
            if isinstance(value, dict):
                inner[ext] = inner[ext] & set(value) if ext in inner else set(value)
                keys = self.inner_keys.setdefault(ext, set(value))
                for k in sorted(keys ^ set(value))[:1]:
                    where = "missing here but present" if k in keys else "here but not"
                    self.problem(container, file_of(key, ext), key,
                                 f"field {ext + '.' + k!r} is {where} in earlier samples")
                for k, v in value.items():
                    if isinstance(v, float) and not math.isfinite(v):
                        self.problem(container, file_of(key, ext), key,
                                     f"field {ext + '.' + k!r} is {v}, not a finite number")
                    self._typed(container, file_of(key, ext), key, f"{ext}.{k}",
                                self.inner_types, (ext, k), json_type(v))

    def _typed(self, container: str, file: str, key: str, name: str, types: dict[Any, str],
               slot: Any, kind: str) -> None:
        """Record a field's type; the first sample whose type differs from the earlier ones'
        is a problem: a type that changes between samples is what a re-export bug looks like."""
        old = types.get(slot)
        if old is not None and old != kind and _lengths_differ(old, kind):
            self.problem(container, file, key, f"field {name!r} is {kind} here but {old} in "
                                               "earlier samples")
        types[slot] = merge_type(old, kind)
        if old is not None and types[slot].startswith("mixed(") and not old.startswith("mixed("):
            self.problem(container, file, key, f"field {name!r} is {kind} here but {old} in "
                                               "earlier samples")

    def finish(self) -> dict[str, Any]:
        """The survey dict; the adapter adds units, files, bytes and per-sample figures."""
        s = self.survey
        fields: dict[str, Any] = {}
        for ext in sorted(self.exts):
            fields[ext] = {"type": self.types.get(ext, _TYPE_BY_ENCODING[ext_encoding(ext)]),
                           "missing_in": [c for c in self.containers if ext not in self.full[c]]}
        for (ext, k), kind in sorted(self.inner_types.items()):
            fields[f"{ext}.{k}"] = {"type": kind, "missing_in": [
                c for c in self.containers if k not in self.inner_full[c].get(ext, set())]}
        s["fields"] = fields
        plural = _PLURAL.get(self.label, self.label)
        s["containers"] = {"name": plural, "count": len(self.containers)}
        s["bad_samples"] = len(self._bad)
        finish_image(s)
        return s
