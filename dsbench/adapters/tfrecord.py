"""TFRecord files of `tf.train.Example` records (layout `tfrecord`), read without TensorFlow.

An export is a file or a tree of files named `*.tfrecord`, `*.tfrecords` or `*.tfrec` (gzip
compressed with a further `.gz`), or of files with any name that start like one: every record
is a uint64 length, the masked CRC32C of those 8 bytes, the record's bytes and their masked
CRC32C. The length's CRC is always checked (it tells a TFRecord file, and a framing broken by
corruption); the record's when the `crc32c` module is installed (the `tfrecord` extra brings
it), as TensorFlow's reader does. A record is a serialized `tf.train.Example` protobuf, parsed
here from the wire format: a map from feature names to a list of bytes, floats or int64s.

Features: the payload is the one named by --image-field, else the image: `image/encoded` (the
ImageNet convention), else a bytes feature named image/jpg/jpeg/png/img, else the first bytes
feature whose value starts like a JPEG or PNG; with no image, a bytes feature holding an audio
clip, else an int64 list named input_ids/tokens/token_ids/ids (token ids), else a bytes feature
named text/content/document (UTF-8 text). Every other feature is a field named by its key: a list
of one value is that value, longer ones arrays (int64, float32); bytes stay bytes. The key is
the `__key__` or `key` feature's text, else the file and the record's number in it
(`train-00000-of-00004:17`): numbering records across files would mean reading the files before
(a GET each in an object store). A file is a unit;
it is counted by reading its framing (seeking over the records locally).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dsbench.adapters import base
from dsbench.adapters.columns import IMAGE_NAMES, sniff_audio, sniff_codec
from dsbench.adapters.survey import CHECK_LIMIT, add_payload, finish_image, new_survey, problem
from dsbench.adapters.tfexample import (
    fast_crc,
    looks_like,
    open_records,
    parse_example,
    record_sizes,
    records,
    value_of,
)
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc, location

EXTS = (*base.SUFFIXES["tfrecord"], *(s + ".gz" for s in base.SUFFIXES["tfrecord"]))
IMAGE_KEYS = ("image/encoded",)


class TfrecordExport(base.ReadsUnits):
    layout = "tfrecord"

    def __init__(self, path: Loc, found: dict[Loc, int], image_field: str | None) -> None:
        self.path, self.image_field = path, image_field
        self.root = store.directory_of(path)
        self.files = [str(p) for p in found]
        self.sizes = {str(p): n for p, n in found.items()}
        self.ignored: list[str] = []
        self.crc = fast_crc()
        self._counts: dict[str, int] = {}
        self._payload: tuple[str, str] | None = None  # (feature, kind), from the first sample

    def units(self) -> list[str]:
        return list(self.files)

    def unit_samples(self, unit: str) -> int:
        if unit not in self._counts:
            with open_records(location(unit)) as f:
                self._counts[unit] = sum(1 for _ in record_sizes(f, unit))
        return self._counts[unit]

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None,
                   ) -> Iterator[base.RawSample]:
        for unit in units:
            name = store.relative(location(unit), self.root)
            try:
                with open_records(location(unit)) as f:
                    for i, record in records(f, unit, self.crc):
                        try:
                            yield self._sample(record, f"{name}:{i}", unit)
                        except SampleError as err:
                            base.report(err, skip)
            except SampleError as err:
                base.report(err, skip)
            except OSError as exc:  # gzip's own errors on a damaged stream
                base.report(SampleError(f"cannot read: {exc}", path=unit), skip)

    def _first(self) -> tuple[str, str] | None:
        """The payload's feature and kind, from the first record (read for it where no sample
        has been); None where the first file holds none or does not read (reading says why)."""
        if self._payload is None and self.files:
            unit = self.files[0]
            name = store.relative(location(unit), self.root)
            try:
                with open_records(location(unit)) as f:
                    for _, record in records(f, unit, self.crc):
                        self._sample(record, f"{name}:0", unit)
                        break
            except (SampleError, OSError):
                return None
        return self._payload

    @property
    def kind(self) -> str:
        return (self._first() or ("", "image"))[1]

    @property
    def payload_field(self) -> str | None:
        first = self._first()
        return first[0] if first and first[1] != "image" else None

    image = payload_field  # the feature the native reader hands over (an image's: its own)

    def _pick(self, features: dict[str, tuple[int, list[Any]]], where: str) -> tuple[str, str]:
        """The feature the samples carry and its kind: an image (see the module docstring),
        else an audio clip's bytes, token ids (an int64 list), or text, by name or content."""
        def kind_of(k: str) -> str | None:
            kind, values = features[k]
            if kind == 3:
                return base.TOKENS
            codec = sniff_audio(values[0]) if kind == 1 and values else None
            return (base.AUDIO if codec in base.AUDIO_CODECS else "image" if codec else
                    base.TEXT if kind == 1 else None)
        if self.image_field is not None:
            if self.image_field not in features or kind_of(self.image_field) is None:
                raise DsbenchError(f"--image-field {self.image_field}: no bytes or int64 "
                                   f"feature of that name (features: "
                                   f"{', '.join(sorted(features))})", path=where)
            return self.image_field, str(kind_of(self.image_field))
        named = [k for k in features if features[k][0] == 1 and (
            k in IMAGE_KEYS or k.lower() in IMAGE_NAMES)]
        sniffed = [k for k in features if kind_of(k) == "image"]
        if named or sniffed:
            return (named or sniffed)[0], "image"
        for kind, names in ((base.AUDIO, base.AUDIO_NAMES), (base.TOKENS, base.TOKEN_NAMES),
                            (base.TEXT, base.TEXT_NAMES)):
            found = [k for k in features if kind_of(k) == kind and
                     (k.lower() in names or kind == base.AUDIO)]
            if found:
                return found[0], kind
        raise DsbenchError("no image feature: none is named image/encoded or "
                           f"{'/'.join(IMAGE_NAMES)}, nor holds JPEG or PNG bytes, nor a "
                           f"clip, token ids or text by name (features: "
                           f"{', '.join(sorted(features))}); name one with --image-field",
                           path=where)

    def _sample(self, record: bytes, key: str, where: str) -> base.RawSample:
        try:
            features = parse_example(record)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SampleError(f"not a tf.train.Example: {exc}", path=where, key=key) from None
        if self._payload is None:
            self._payload = self._pick(features, where)
        name, want = self._payload
        kind, values = features.get(name, (0, []))
        for k in ("__key__", "key"):
            if k in features and features[k][0] == 1 and features[k][1]:
                key = features[k][1][0].decode("utf-8", "replace")
        fields = {k: value_of(kind, v) for k, (kind, v) in features.items()
                  if k not in (name, "__key__", "key")}
        encodings = {k: (base.ENC_BYTES if features[k][0] == 1 else base.ENC_VALUE)
                     for k in fields}
        if want == base.TOKENS:
            if kind != 3:
                raise SampleError(f"feature {name!r} holds no int64 token ids", path=where,
                                  key=key)
            return base.RawSample(key, where, np.asarray(values, np.int64), base.TOKENS,
                                  fields, encodings)
        if kind != 1 or len(values) != 1:
            raise SampleError(f"feature {name!r} does not hold one {want} value (it has "
                              f"{len(values)} values)", path=where, key=key)
        payload = values[0]
        codec = base.TEXT if want == base.TEXT else sniff_audio(payload) \
            if want == base.AUDIO else sniff_codec(payload)
        if codec is None or (codec in base.AUDIO_CODECS) != (want == base.AUDIO):
            raise SampleError(f"feature {name!r} holds bytes that are not "
                              f"{'audio' if want == base.AUDIO else 'an image'} (they start "
                              f"{payload[:8]!r})", path=where, key=key)
        return base.RawSample(key, where, payload, codec, fields, encodings)

    def survey(self) -> dict[str, Any]:
        survey = new_survey(self.layout)
        problems = survey["problems"]
        sample_bytes: list[int] = survey["sample_bytes"]
        types: dict[str, str] = {}
        for unit in self.files:
            try:
                with open_records(location(unit)) as f:
                    sizes = list(record_sizes(f, unit))
                self._counts[unit] = len(sizes)
                sample_bytes += sizes
            except SampleError as err:
                problems.append(problem(unit, err.key, str(err)))
                continue
            want = CHECK_LIMIT - sum(survey.get(k, {}).get("count_checked", 0)
                                     for k in ("image", "audio", "tokens", "text"))
            if want > 0:
                self._survey_images(unit, want, survey, types)
        finish_image(survey)
        samples = len(sample_bytes)
        survey.update({
            "samples": samples, "units": len(self.files), "files": len(self.files),
            "bytes": sum(self.sizes.values()),
            "files_per_sample": len(self.files) / samples if samples else 0.0,
            "fields": {n: {"type": t, "missing_in": []} for n, t in sorted(types.items())},
            "bad_samples": sum(1 for p in problems if p["key"] is not None),
        })
        return survey

    def _survey_images(self, unit: str, want: int, survey: dict[str, Any],
                       types: dict[str, str]) -> None:
        name = store.relative(location(unit), self.root)
        try:
            with open_records(location(unit)) as f:
                for i, record in records(f, unit, self.crc):
                    if i >= want:
                        break
                    try:
                        raw = self._sample(record, f"{name}:{i}", unit)
                        for field, value in raw.fields.items():
                            types.setdefault(field, _type(value))
                        add_payload(survey, raw.codec, raw.image)
                    except (SampleError, ValueError) as exc:
                        survey["problems"].append(problem(unit, f"{name}:{i}", str(exc)))
        except SampleError as err:
            survey["problems"].append(problem(unit, err.key, str(err)))


def _type(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} list"
    if isinstance(value, list):
        return "bytes list"
    return {bytes: "bytes", int: "int64", float: "float"}.get(type(value), type(value).__name__)


def _files(path: Loc) -> dict[Loc, int]:
    if not store.is_dir(path):
        size = store.size(path)
        if size is None:
            raise DsbenchError("no such file or directory", path=path)
        return {path: size}
    named = {path / rel: n for rel, n in base.walk(path) if rel.lower().endswith(EXTS)}
    if named:
        return named
    found = {path / rel: n for rel, n in base.walk(path) if _starts_like(path / rel)}
    if not found:
        raise DsbenchError(f"no TFRecord files ({', '.join(EXTS)}, or starting like one) here",
                           path=path)
    return found


def _starts_like(p: Loc) -> bool:
    try:
        with base.open_file(p) as f:
            head = f.read(12)
        if str(p).endswith(".gz"):
            with gzip.open(p if isinstance(p, Path) else store.open_stream(p)) as g:
                head = g.read(12)
    except (OSError, DsbenchError, EOFError):
        return False
    return looks_like(head)


class TfrecordAdapter:
    name = "tfrecord"

    def detect(self, path: Loc) -> bool:
        try:
            if store.is_dir(path):
                return any(_starts_like(path / rel) for rel, _ in list(base.walk(path))[:8])
            return store.is_file(path) and (path.name.lower().endswith(EXTS)
                                            or _starts_like(path))
        except (OSError, DsbenchError):
            return False

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> TfrecordExport:
        return TfrecordExport(path, _files(path), image_field)


ADAPTER = TfrecordAdapter()
