"""Generation at scale: `--part I/N` processes writing one export together, byte for byte a
single run's; generator 2's images against generator 1's; an export's generator is kept."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_generate import make_spec, tree

from dsbench.errors import DsbenchError
from dsbench.export import synth
from dsbench.export.generate import generate
from dsbench.export.parts import LOCK, Part, finishing, parse_part
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec

DEFINITION = """
name = "parts"
layout = "{layout}"
samples = 11
shard_samples = 3
files_per_dir = 3
fields_as = "{fields_as}"
[image]
sizes = "fixed"
width = 64
height = 48
[fields.label]
type = "int"
[fields.vec]
type = "embedding"
dim = 4
encoding = "binary"
"""
# Shards and directories of files (arrow and parquet units are shards as wds's are), layouts
# with a step once every unit is whole (litdata and hf join their units; mds, which merges its
# indexes, takes 20 s of imports per process here and is run as a single process in
# tests/test_formats.py), and tfrecord (its library orders a record's features by hash).
LAYOUTS = ["wds", "files", "litdata", "hf", "tfrecord"]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dsbench", "generate", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


@pytest.mark.parametrize("layout", LAYOUTS)
def test_parts_written_at_once_equal_a_single_run_byte_for_byte(tmp_path: Path,
                                                                layout: str) -> None:
    definition = tmp_path / "d.toml"
    definition.write_text(DEFINITION.format(
        layout=layout, fields_as="json" if layout == "files" else "members"))
    single = _cli(str(definition), str(tmp_path / "single"), "--jobs", "1")
    # Two processes started together, as an array job's tasks are, each with its own hash
    # seed (a library that orders by hash must not make the parts differ).
    procs = [_cli(str(definition), str(tmp_path / "parts"), "--jobs", "1", "--part", f"{i}/2",
                  env={"PYTHONHASHSEED": str(i + 1)}) for i in range(2)]
    results = [p.communicate(timeout=300) for p in [single, *procs]]
    assert [p.returncode for p in [single, *procs]] == [0] * 3, results
    said = [out for out, _ in results[1:]]
    assert sum("the export is complete" in s for s in said) >= 1
    assert all(" part " in s and "samples/s per core" in s for s in said)
    assert tree(tmp_path / "parts") == tree(tmp_path / "single")
    assert json.loads((tmp_path / "parts" / "_dsbench.json").read_text())["complete"] is True


@pytest.mark.parametrize("layout", ["wds", "mds"])
def test_a_part_finishes_only_when_every_unit_is_whole(tmp_path: Path, layout: str) -> None:
    spec = make_spec(layout)  # 7 samples in 3 units; MDS merges their indexes at the end
    first = generate(spec, tmp_path / "out", jobs=1, part=Part(0, 2))
    assert (first.units_written, first.complete) == (2, False)
    manifest = json.loads((tmp_path / "out" / "_dsbench.json").read_text())
    assert manifest["complete"] is False
    last = generate(spec, tmp_path / "out", jobs=1, part=Part(1, 2))
    assert (last.units_written, last.complete) == (1, True)
    generate(spec, tmp_path / "ref", jobs=1)
    assert tree(tmp_path / "out") == tree(tmp_path / "ref")


def test_a_part_removes_its_own_temporaries_and_leaves_the_others(tmp_path: Path) -> None:
    spec = make_spec("wds")
    out = tmp_path / "out"
    generate(spec, out, jobs=1, part=Part(0, 2))  # shards 0 and 2
    (out / "shard-000002.tar").unlink()
    mine = out / ".shard-000002.tar.tmp4242"
    theirs = out / ".shard-000001.tar.tmp4343"  # part 1's, in flight
    mine.write_bytes(b"half")
    theirs.write_bytes(b"half")
    generate(spec, out, jobs=1, part=Part(0, 2))
    assert not mine.exists() and theirs.exists()
    # A plain run completes the export and sweeps every temporary.
    generate(spec, out, jobs=1)
    assert not theirs.exists()
    generate(spec, tmp_path / "ref", jobs=1)
    assert tree(out) == tree(tmp_path / "ref")


def test_only_one_process_finishes_and_a_plain_run_voids_a_dead_lock(tmp_path: Path) -> None:
    with finishing(tmp_path) as first, finishing(tmp_path) as second:
        assert (first, second) == (True, False)
    assert not (tmp_path / LOCK).exists()
    spec = make_spec("wds")
    out = tmp_path / "out"
    generate(spec, out, jobs=1, part=Part(0, 2))
    (out / LOCK).write_text("12345\n")  # a part finishing the export, or killed doing it
    with pytest.raises(DsbenchError, match="another part is finishing the export"):
        generate(spec, out, jobs=1, part=Part(1, 2))
    assert generate(spec, out, jobs=1).complete is True
    assert not (out / LOCK).exists()


@pytest.mark.parametrize(("text", "env", "want"), [
    ("2/4", {}, Part(2, 4)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5",
              "SLURM_ARRAY_TASK_COUNT": "3"}, Part(2, 3)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "1",
              "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "8"}, Part(4, 8)),
    ("auto", {"RANK": "1", "WORLD_SIZE": "2"}, Part(1, 2)),
])
def test_part_is_stated_or_taken_from_slurm_or_torchrun(text: str, env: dict[str, str],
                                                         want: Part) -> None:
    assert parse_part(text, env) == want


@pytest.mark.parametrize(("text", "env"), [
    ("4/4", {}), ("-1/2", {}), ("1", {}), ("a/b", {}), ("1/0", {}), ("auto", {}),
    # --array=1,5,9: ids that are no range's
    ("auto", {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "1",
              "SLURM_ARRAY_TASK_COUNT": "3"}),
])
def test_a_bad_part_is_refused(text: str, env: dict[str, str]) -> None:
    with pytest.raises(DsbenchError, match="--part"):
        parse_part(text, env)


def test_a_lance_export_is_not_split(tmp_path: Path) -> None:
    with pytest.raises(DsbenchError, match="one after another"):
        generate(make_spec("lance"), tmp_path / "l", jobs=1, part=Part(0, 2))
    assert not (tmp_path / "l").exists()


def test_an_export_is_completed_only_by_its_own_generator(tmp_path: Path) -> None:
    spec = make_spec("wds")
    out = tmp_path / "out"
    generate(spec, out, jobs=1, generator=1)
    (out / "shard-000001.tar").unlink()
    with pytest.raises(DsbenchError, match="generator 1; add --generator 1"):
        generate(spec, out, jobs=1)
    # A manifest from before generators were recorded is generator 1's.
    manifest = json.loads((out / "_dsbench.json").read_text())
    del manifest["generator"]
    (out / "_dsbench.json").write_text(json.dumps(manifest))
    with pytest.raises(DsbenchError, match="generator 1"):
        generate(spec, out, jobs=1)
    assert generate(spec, out, jobs=1, generator=1).units_written == 1
    generate(spec, tmp_path / "ref", jobs=1, generator=1)
    ref = tree(tmp_path / "ref")
    got = tree(out)
    assert {k: v for k, v in got.items() if k != "_dsbench.json"} == \
        {k: v for k, v in ref.items() if k != "_dsbench.json"}
    generate(spec, tmp_path / "two", jobs=1)
    assert tree(tmp_path / "two")["shard-000000.tar"] != ref["shard-000000.tar"]


def _jpeg_figures(generator: int, n: int) -> tuple[float, float]:
    """(bits per pixel, mean long side) of n ImageNet-sized JPEGs of a generator."""
    spec = ExportSpec(name="g", layout="wds", samples=n, shard_samples=n,
                      image=ImageSpec(sizes="imagenet"), fields=(FieldSpec("label", "int"),))
    bits = pixels = 0
    sides = []
    for i in range(n):
        data = synth.make_sample(spec, 0, i, generator)["image"]
        with Image.open(io.BytesIO(data)) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            w, h = im.size
        bits += 8 * len(data)
        pixels += w * h
        sides.append(max(w, h))
    return bits / pixels, float(np.mean(sides))


def test_generator_2_images_are_as_large_as_generator_1s() -> None:
    # What the JPEG costs to store and read follows its bits per pixel; sizes are drawn alike.
    bpp_1, side_1 = _jpeg_figures(1, 40)
    bpp_2, side_2 = _jpeg_figures(2, 40)
    assert bpp_2 == pytest.approx(bpp_1, rel=0.10)
    assert side_2 == pytest.approx(side_1, rel=0.15)


def test_generator_2_never_repeats_a_picture_and_is_deterministic() -> None:
    spec = ExportSpec(name="g", layout="wds", samples=50, shard_samples=50,
                      image=ImageSpec(sizes="fixed", width=96, height=64), fields=())
    first = [synth.make_sample(spec, 3, i)["image"] for i in range(50)]
    assert len(set(first)) == 50
    assert first == [synth.make_sample(spec, 3, i)["image"] for i in range(50)]


def test_generator_2_tiles_its_fields_for_images_larger_than_them() -> None:
    spec = ExportSpec(name="g", layout="wds", samples=1, shard_samples=1,
                      image=ImageSpec(sizes="fixed", width=1500, height=1100, codec="png"),
                      fields=())
    data = synth.make_sample(spec, 0, 0)["image"]
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (1500, 1100) and im.mode == "RGB"
