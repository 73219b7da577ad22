"""JSON Lines files of text documents (layout `jsonl`), as pretraining corpora are shipped.

An export is a file or a tree of files named `*.jsonl`, `*.ndjson` or `*.jsonl.gz`; each line
is one JSON object, a sample. The payload is its text: the key named by --image-field, else
`text` (or content/document/raw_content), else the object's only string value; every other key
is a field, already a value once the line is parsed (so the read stage holds the line's JSON
parse, which a reader of JSON Lines cannot avoid). The key is the `id`, `key` or `__key__`
value, else the file and the line's number in it. A file is a unit; it is counted by its lines.
A line that is not a JSON object, or lacks the text, is a bad sample naming the file and line.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from typing import Any

from dsbench.adapters import base
from dsbench.adapters.survey import CHECK_LIMIT, add_text, apportion, new_survey, problem
from dsbench.errors import DsbenchError, SampleError
from dsbench.storage import files as store
from dsbench.storage.files import Loc, location

EXTS = base.SUFFIXES["jsonl"]
ID_KEYS = ("id", "key", "__key__")


def _lines(unit: str) -> Iterator[bytes]:
    with base.open_file(location(unit)) as f:
        stream: Any = gzip.GzipFile(fileobj=f) if unit.endswith(".gz") else f
        yield from iter(stream.readline, b"")


class JsonlExport(base.ReadsUnits):
    layout = "jsonl"
    kind = base.TEXT

    def __init__(self, path: Loc, found: dict[Loc, int], text_field: str | None) -> None:
        self.path = path
        self.root = store.directory_of(path)
        self.files = [str(p) for p in found]
        self.sizes = {str(p): n for p, n in found.items()}
        self.ignored: list[str] = []
        self._counts: dict[str, int] = {}
        first = next((line for unit in self.files[:1] for line in _lines(unit) if line.strip()),
                     None)
        if first is None:
            raise DsbenchError("no JSON lines: the first file is empty", path=self.files[0])
        try:
            obj = json.loads(first)
        except ValueError as exc:
            raise DsbenchError(f"the first line is not JSON: {exc}", path=self.files[0]) from None
        if not isinstance(obj, dict):
            raise DsbenchError(f"the first line is a JSON {type(obj).__name__}, not an object",
                               path=self.files[0])
        self.payload_field = self._text_key(obj, text_field)

    def _text_key(self, obj: dict[str, Any], named: str | None) -> str:
        if named is not None:
            if not isinstance(obj.get(named), str):
                raise DsbenchError(f"--image-field {named}: the first line's {named!r} is "
                                   f"{type(obj.get(named)).__name__}, not text (keys: "
                                   f"{', '.join(obj)})", path=self.files[0])
            return named
        strings = [k for k, v in obj.items() if isinstance(v, str) and k not in ID_KEYS]
        named_keys = [k for k in strings if k.lower() in base.TEXT_NAMES]
        if named_keys or len(strings) == 1:
            return (named_keys or strings)[0]
        raise DsbenchError(f"no text: the first line has {len(strings)} string values "
                           f"({', '.join(strings)}), none named {'/'.join(base.TEXT_NAMES)}: "
                           "name one with --image-field", path=self.files[0])

    def units(self) -> list[str]:
        return list(self.files)

    def unit_samples(self, unit: str) -> int:
        if unit not in self._counts:
            self._counts[unit] = sum(1 for line in _lines(unit) if line.strip())
        return self._counts[unit]

    def fields(self) -> dict[str, str]:
        return {}

    def read_units(self, units: Sequence[str], skip: base.SkipHandler = None,
                   ) -> Iterator[base.RawSample]:
        text = self.payload_field
        for unit in units:
            name = store.relative(location(unit), self.root)
            try:
                for i, line in enumerate(line for line in _lines(unit) if line.strip()):
                    try:
                        yield self._sample(line, text, f"{name}:{i}", unit)
                    except SampleError as err:
                        base.report(err, skip)
            except (OSError, EOFError) as exc:  # gzip's own errors on a damaged stream
                base.report(SampleError(f"cannot read: {exc}", path=unit), skip)

    def _sample(self, line: bytes, text: str | None, key: str, where: str) -> base.RawSample:
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise SampleError(f"not a JSON line: {exc}", path=where, key=key) from None
        if not isinstance(obj, dict) or not isinstance(obj.get(text), str):
            raise SampleError(f"no text in {text!r}", path=where, key=key)
        payload = obj.pop(text)  # what is left of the object is the sample's fields
        ident = next((obj[k] for k in ID_KEYS if k in obj), None)
        return base.RawSample(key if ident is None else str(ident), where, payload, base.TEXT,
                              obj, dict.fromkeys(obj, base.ENC_VALUE))

    def survey(self) -> dict[str, Any]:
        survey = new_survey(self.layout)
        fields: dict[str, dict[str, Any]] = {}
        samples = 0
        for unit in self.files:
            n = 0
            try:
                for raw in self.read_units([unit]):
                    if survey.get("text", {}).get("count_checked", 0) < CHECK_LIMIT:
                        add_text(survey, len(raw.image))
                    for k, v in raw.fields.items():
                        fields.setdefault(k, {"type": type(v).__name__, "missing_in": []})
                    n += 1
                self._counts[unit] = n  # a file read whole: its count is known
            except SampleError as err:
                survey["problems"].append(problem(unit, err.key, str(err)))
            samples += n
            survey["sample_bytes"] += apportion(self.sizes[unit], [1] * n)
        survey.update({"samples": samples, "units": len(self.files), "files": len(self.files),
                       "bytes": sum(self.sizes.values()),
                       "files_per_sample": len(self.files) / samples if samples else 0.0,
                       "fields": fields,
                       "bad_samples": sum(1 for p in survey["problems"] if p["key"])})
        return survey


class JsonlAdapter:
    name = "jsonl"

    def detect(self, path: Loc) -> bool:
        try:
            return store.is_file(path) and path.name.lower().endswith(EXTS)
        except (OSError, DsbenchError):
            return False

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> JsonlExport:
        return JsonlExport(path, base.data_files(path, EXTS, "JSON Lines"), image_field)


ADAPTER = JsonlAdapter()
