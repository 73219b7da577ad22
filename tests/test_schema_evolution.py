"""Schema evolution: shards written before and after a field was added are read with one schema.

pyarrow's dataset API takes the schema from the first file and silently drops a field that only
later shards have; dsbench unifies all shards' schemas and reads the field from every shard
(None where an old shard lacks it). Columns whose types disagree are an error naming both shards.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from layouts import jpegs, write_columnar

from dsbench import adapters
from dsbench.adapters import base
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample

IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
LABEL = FieldSpec("label", "int", classes=10)
NEW = (FieldSpec("caption", "string", words=(2, 5)),
       FieldSpec("embedding", "embedding", dim=4, encoding="list"))
FORMAT = {"arrow": "arrow", "parquet": "parquet"}  # pyarrow.dataset's format names
EXT = {"arrow": "arrow", "parquet": "parquet"}


def spec(layout: str, fields: tuple[FieldSpec, ...]) -> ExportSpec:
    return ExportSpec(name="evolving", layout=layout, shard_samples=3, image=IMAGE, fields=fields)


def evolved_export(tmp_path: Path, layout: str) -> tuple[Path, ExportSpec, ExportSpec]:
    """Shards 0-1 (samples 0-5) from the old definition, shard 2 (samples 6-8) from the new."""
    old, new = spec(layout, (LABEL,)), spec(layout, (LABEL, *NEW))
    generate(old, tmp_path / "old", samples=6, jobs=1)
    generate(new, tmp_path / "new", samples=9, jobs=1)
    out = tmp_path / "mixed"
    out.mkdir()
    for p in sorted((tmp_path / "old").glob(f"shard-*.{EXT[layout]}")):
        shutil.copy(p, out / p.name)
    name = f"shard-000002.{EXT[layout]}"
    shutil.copy(tmp_path / "new" / name, out / name)
    return out, old, new


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
def test_pyarrow_dataset_drops_the_new_field_and_dsbench_does_not(tmp_path: Path,
                                                                  layout: str) -> None:
    out, old, new = evolved_export(tmp_path, layout)
    # The bug: the first file's schema wins, and the new fields vanish from every row.
    dropped = ds.dataset(out, format=FORMAT[layout]).to_table()
    assert dropped.num_rows == 9
    assert "caption" not in dropped.column_names and "embedding" not in dropped.column_names

    ex = adapters.open_export(out)
    rows = list(ex.read())
    assert [r.key for r in rows] == [f"{i:08d}" for i in range(9)]
    for r in rows[:6]:  # old shards: the new fields are there, as None
        want = make_sample(old, 0, int(r.key))
        assert r.image == want["image"] and r.fields["label"] == want["label"]
        assert r.fields["caption"] is None and r.fields["embedding"] is None
        assert r.encodings["caption"] == r.encodings["embedding"] == base.ENC_VALUE
    for r in rows[6:]:  # the new shard: the new fields' values
        want = make_sample(new, 0, int(r.key))
        assert r.image == want["image"] and r.fields["caption"] == want["caption"]
        assert np.array_equal(r.fields["embedding"], want["embedding"])

    # The fix in pyarrow's own terms: the unified schema keeps the field.
    kept = ds.dataset(out, format=FORMAT[layout], schema=ex.schema).to_table()
    assert kept.column("caption").null_count == 6


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
def test_survey_names_the_shards_that_lack_a_field(tmp_path: Path, layout: str) -> None:
    out, _, _ = evolved_export(tmp_path, layout)
    s = adapters.open_export(out).survey()
    old_shards = [f"shard-000000.{EXT[layout]}", f"shard-000001.{EXT[layout]}"]
    assert s["fields"]["caption"]["missing_in"] == old_shards
    assert s["fields"]["embedding"]["missing_in"] == old_shards
    assert s["fields"]["label"]["missing_in"] == []
    assert s["samples"] == 9


def _by_key(rows: list[base.RawSample]) -> dict[str, tuple[bytes, dict[str, Any]]]:
    # Arrays compare by their values, as lists.
    return {r.key: (r.image, {k: v.tolist() if isinstance(v, np.ndarray) else v
                              for k, v in r.fields.items()}) for r in rows}


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
def test_new_shard_first_in_order_reads_the_same(tmp_path: Path, layout: str) -> None:
    out, _, new = evolved_export(tmp_path, layout)
    in_order = _by_key(list(adapters.open_export(out).read()))
    # The old shards now sort after the new one: unification does not depend on order.
    for p in sorted(out.glob(f"shard-00000[01].{EXT[layout]}")):
        p.rename(out / f"z-{p.name}")
    rows = list(adapters.open_export(out).read())
    assert [r.key for r in rows] == [f"{i:08d}" for i in (6, 7, 8, 0, 1, 2, 3, 4, 5)]
    assert rows[0].fields["caption"] == make_sample(new, 0, 6)["caption"]
    assert [r.fields["caption"] for r in rows[3:]] == [None] * 6
    assert _by_key(rows) == in_order  # every key, image and field as read in the first order


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
def test_mistyped_column_is_an_error_naming_both_shards_and_the_column(
        tmp_path: Path, layout: str, capsys: pytest.CaptureFixture[str]) -> None:
    a = pa.table({"image": jpegs(2), "label": pa.array([1, 2], pa.int64())})
    b = pa.table({"image": jpegs(2), "label": pa.array(["cat", "dog"], pa.string())})
    for name, table in (("a", a), ("b", b)):
        write_columnar(tmp_path / f"{name}.{EXT[layout]}", table)
    pattern = fr"column 'label' is int64 in a\.{EXT[layout]} but string in b\.{EXT[layout]}"
    with pytest.raises(DsbenchError, match=pattern):
        adapters.open_export(tmp_path)
    assert main(["inspect", str(tmp_path)]) == 2
    assert "column 'label'" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
def test_widening_types_are_promoted_not_refused(tmp_path: Path, layout: str) -> None:
    write_columnar(tmp_path / f"a.{EXT[layout]}",
                   pa.table({"image": jpegs(1), "n": pa.array([1], pa.int32())}))
    write_columnar(tmp_path / f"b.{EXT[layout]}",
                   pa.table({"image": jpegs(1), "n": pa.array([2**40])}))
    ex = adapters.open_export(tmp_path)
    assert ex.schema.field("n").type == pa.int64()
    assert [r.fields["n"] for r in ex.read()] == [1, 2**40]
