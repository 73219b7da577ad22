"""Hugging Face `datasets` exports (layout `hf`): save_to_disk's Arrow files and the Hub's
Parquet layout, read as the Arrow and Parquet adapters read them, columns as `datasets` says.

Two forms, told by their own signatures:

* `Dataset.save_to_disk(DIR)`: `state.json` (its `_data_files` name the shards, Arrow IPC
  streams `data-0000K-of-0000N.arrow`) and `dataset_info.json` (the features). A
  `DatasetDict` adds `dataset_dict.json` ({"splits": [...]}) with one such directory per split.
* The Hub's Parquet layout (`push_to_hub`, `to_parquet`): Parquet files whose footer holds the
  features under the schema metadata key `huggingface`, usually `data/{split}-0000K-of-0000N
  .parquet`, a split per file-name prefix (or per directory).

Columns: the image is the feature of type Image (a struct<bytes, path>; --image-field when
there are several); the others are fields, a ClassLabel read as its integer. Of a dataset with
splits the `train` split is read (else the first); the others' files are listed as not read:
point dsbench at a split's directory (save_to_disk) or file (Parquet) to read another.
inspect's summary names the form, the features and the splits (`dataset`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from dsbench.adapters import base
from dsbench.adapters.arrow import ArrowExport
from dsbench.adapters.columnar import ColumnarExport, data_files, read_head
from dsbench.adapters.parquet import ParquetExport
from dsbench.errors import DsbenchError
from dsbench.storage import files as store
from dsbench.storage.files import Loc

STATE, INFO, DICT = "state.json", "dataset_info.json", "dataset_dict.json"
METADATA_KEY = b"huggingface"
_SPLIT = re.compile(r"^(?P<split>[A-Za-z0-9_.]+?)-\d+-of-\d+\.parquet$")


def _json(path: Loc) -> Any:
    try:
        return json.loads(store.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise DsbenchError(f"not readable JSON: {exc}", path=path) from None


def _has(root: Loc, name: str) -> bool:
    return store.size(root / name) is not None


def features_of(schema: pa.Schema) -> dict[str, Any] | None:
    """The `datasets` features a file's schema metadata holds, or None."""
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return None
    try:
        features = json.loads(raw).get("info", {}).get("features")
    except (ValueError, AttributeError):
        return None
    return features if isinstance(features, dict) else None


def _footer_features(path: Loc) -> dict[str, Any] | None:
    import pyarrow.parquet as pq

    try:
        with store.open_seekable(path) as f:
            return features_of(pq.read_schema(f))
    except (OSError, pa.ArrowException, DsbenchError):
        return None


def feature_type(feature: Any) -> str:
    """A feature as people read it: Value(string), ClassLabel (10 names), List(float32, 4)."""
    if not isinstance(feature, dict):
        return "List" if isinstance(feature, list) else str(feature)
    if "_type" not in feature:  # a struct: a dict of features
        return "{" + ", ".join(f"{k}: {feature_type(v)}" for k, v in feature.items()) + "}"
    kind = feature["_type"]
    if kind == "Value":
        return f"Value({feature.get('dtype')})"
    if kind == "ClassLabel":
        return f"ClassLabel ({len(feature.get('names') or [])} names)"
    if kind in ("List", "Sequence", "LargeList"):
        inner = feature_type(feature.get("feature"))
        length = feature.get("length", -1)
        return f"List({inner}{'' if length in (None, -1) else f', {length}'})"
    return str(kind)


def _image_features(features: dict[str, Any]) -> list[str]:
    return [n for n, f in features.items() if isinstance(f, dict)
            and f.get("_type") in ("Image", "Audio")]


class _Hf:
    """What both forms add to their columnar export: the features, the splits, the form."""

    layout = "hf"
    hf: dict[str, Any]

    def survey(self) -> dict[str, Any]:
        survey = super().survey()  # type: ignore[misc]
        survey["dataset"] = self.hf
        for name, info in survey["fields"].items():
            feature = self.hf["features"].get(name)
            if feature is not None:
                info["type"] = feature_type(feature)
        return survey


class HfArrowExport(_Hf, ArrowExport):
    pass


class HfParquetExport(_Hf, ParquetExport):
    pass


def _payload(features: dict[str, Any], image_field: str | None, where: Loc
             ) -> tuple[tuple[str, str | None] | None, str]:
    """The Image or Audio feature the samples carry (None where --image-field names the
    column: the columnar plan checks it), and its kind: audio for an Audio feature (a struct
    of the file's bytes and path, as an Image feature is)."""
    images = [] if image_field else _image_features(features)
    if len(images) > 1:
        raise DsbenchError(f"several Image or Audio features ({', '.join(images)}): name the "
                           "one to read with --image-field", path=where)
    name = image_field or (images[0] if images else None)
    feature = features.get(name) if name else None
    kind = base.AUDIO if isinstance(feature, dict) and feature.get("_type") == "Audio" \
        else "image"
    return (None if image_field or name is None else (name, "bytes")), kind


def _pick_split(splits: list[str]) -> str:
    return "train" if "train" in splits else splits[0]


def _open_saved(path: Loc, image_field: str | None) -> ColumnarExport:
    root, split, splits, skipped = path, None, None, []
    if _has(path, DICT):
        listed = _json(path / DICT).get("splits") if isinstance(_json(path / DICT), dict) else None
        if not isinstance(listed, list) or not listed:
            raise DsbenchError("lists no splits", path=path / DICT)
        splits = [str(s) for s in listed]
        split = _pick_split(splits)
        root = path / split
        skipped = [s for s in splits if s != split]
    state = _json(root / STATE)
    names = [str(f["filename"]) for f in (state.get("_data_files") or [])
             if isinstance(f, dict) and f.get("filename")] if isinstance(state, dict) else []
    if not names:
        raise DsbenchError("names no data files (_data_files)", path=root / STATE)
    listing = dict(base.walk(root))
    missing = [n for n in names if n not in listing]
    if missing:
        raise DsbenchError(f"{missing[0]} is named by {STATE} but missing", path=root)
    info = _json(root / INFO) if _has(root, INFO) else {}
    features = info.get("features") if isinstance(info, dict) else None
    features = features if isinstance(features, dict) else {}
    found = {root / n: listing[n] for n in names}
    export = HfArrowExport(path, found, image_field, *_payload(features, image_field, path))
    export.hf = {"form": "save_to_disk", "features": features,
                 "splits": splits or ([state.get("_split")] if state.get("_split") else []),
                 "split": split or state.get("_split")}
    read = {store.relative(p, path) for p in found}
    own = tuple(f"{prefix}{n}" for prefix in ("", f"{split}/" if split else "")
                for n in (STATE, INFO, DICT))
    export.ignored = [f"{rel} (split {rel.split('/')[0]!r}, not read)"
                      if rel.split("/")[0] in skipped else rel
                      for rel in base.unread(path, read, own)]
    return export


def _open_hub(path: Loc, image_field: str | None) -> ColumnarExport:
    every = data_files(path, (".parquet",), "Parquet")
    by_split: dict[str, dict[Loc, int]] = {}
    for p, n in every.items():
        m = _SPLIT.match(p.name)
        rel = store.relative(p, store.directory_of(path))
        split = m.group("split") if m else (rel.split("/")[-2] if "/" in rel and
                                            rel.split("/")[-2] != "data" else "train")
        by_split.setdefault(split, {})[p] = n
    splits = sorted(by_split)
    split = _pick_split(splits)
    found = by_split[split]
    features = next((f for f in map(_footer_features, found) if f is not None), {})
    export = HfParquetExport(path, found, image_field, *_payload(features, image_field, path))
    export.hf = {"form": "hub parquet", "features": features, "splits": splits,
                 "split": split}
    if store.is_dir(path):
        read = {store.relative(p, path) for p in found}
        export.ignored = [f"{rel} (split {s!r}, not read)" for s in splits if s != split
                          for rel in sorted(store.relative(p, path) for p in by_split[s])]
        export.ignored += [rel for rel in base.unread(path, read)
                           if not rel.endswith(".parquet") and rel != "README.md"]
    return export


def _is_hub(path: Loc) -> bool:
    if not store.is_dir(path):
        return path.suffix == ".parquet" and read_head(path, 4) == b"PAR1" and \
            _footer_features(path) is not None
    first = next((path / rel for rel, _ in base.walk(path) if rel.endswith(".parquet")), None)
    return first is not None and _footer_features(first) is not None


class HfAdapter:
    name = "hf"

    def detect(self, path: Loc) -> bool:
        try:
            if store.is_dir(path) and (_has(path, DICT) or (_has(path, STATE)
                                                           and _has(path, INFO))):
                return True
            return _is_hub(path)
        except (OSError, DsbenchError):
            return False

    def open(self, path: Loc, image_field: str | None = None,
             seq_len: int | None = None) -> ColumnarExport:
        if store.is_dir(path) and (_has(path, DICT) or _has(path, STATE)):
            return _open_saved(path, image_field)
        return _open_hub(path, image_field)


ADAPTER = HfAdapter()
