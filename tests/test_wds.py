"""WebDataset shards: tar headers, shards written by webdataset and GNU tar, and broken shards.

Round trip, worker slices, truncation and empty shards: tests/test_adapters_common.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from layouts import jpeg, write_tar

from dsbench import adapters
from dsbench.adapters import base, wds
from dsbench.errors import SampleError
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec

IMAGE = ImageSpec(sizes="fixed", width=64, height=48)
FIELDS = (
    FieldSpec("label", "int", classes=10),
    FieldSpec("caption", "string", words=(2, 6)),
    FieldSpec("vec", "embedding", dim=8, encoding="binary"),
    FieldSpec("emb", "embedding", dim=4, encoding="json"),
    FieldSpec("boxes", "boxes", max_boxes=3),
)


def make_spec(fields_as: str = "members", samples: int = 7) -> ExportSpec:
    return ExportSpec(name="t", layout="wds", samples=samples, shard_samples=3,
                      fields_as=fields_as, image=IMAGE, fields=FIELDS)


def read_all(path: Path, **kw: Any) -> list[base.RawSample]:
    return list(adapters.open_export(path).read(**kw))


def test_shards_have_plain_headers_integer_mtime_and_one_open_each(tmp_path: Path) -> None:
    generate(make_spec(), tmp_path, jobs=1)
    shard = tmp_path / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        infos = tf.getmembers()
    assert [m.name for m in infos[:6]] == ["00000000.jpg", "00000000.cls", "00000000.txt",
                                           "00000000.vec.f32", "00000000.emb.json",
                                           "00000000.boxes.json"]
    for m in infos:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.pax_headers) == (0, 0, 0, "", "", {})
        assert m.offset_data - m.offset == tarfile.BLOCKSIZE  # no PAX or long-name blocks
    export = adapters.open_export(shard)
    opens0, _ = base.io_counters()
    assert len(list(export.read())) == 3
    assert base.io_counters()[0] - opens0 == 1


def test_reads_webdataset_tarwriter_and_shardwriter(tmp_path: Path) -> None:
    import webdataset

    img = jpeg()
    with open(tmp_path / "single.tar", "wb") as f:
        w = webdataset.TarWriter(f)  # float mtime: every member gets a PAX header
        for i in range(3):
            w.write({"__key__": f"part/s{i:03d}", "jpg": img, "cls": i, "json": {"i": i}})
        w.close()
    got = read_all(tmp_path / "single.tar")
    assert [s.key for s in got] == ["part/s000", "part/s001", "part/s002"]
    assert [s.fields["cls"] for s in got] == [b"0", b"1", b"2"]
    assert [json.loads(s.fields["json"]) for s in got] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert all(s.image == img for s in got)

    out = tmp_path / "sharded"
    out.mkdir()
    with webdataset.ShardWriter(str(out / "train-%04d.tar"), maxcount=2, verbose=0) as sw:
        for i in range(5):
            sw.write({"__key__": f"k{i:02d}", "png": img, "txt": f"caption {i}"})
    export = adapters.open_export(out)
    assert export.layout == "wds" and len(export.units()) == 3
    got = list(export.read())
    assert [s.key for s in got] == [f"k{i:02d}" for i in range(5)]
    assert [s.fields["txt"].decode() for s in got] == [f"caption {i}" for i in range(5)]
    assert {s.codec for s in got} == {"png"}  # named by extension; decoding sorts out the rest


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
def test_reads_gnu_tar_of_a_directory_with_prefixes(tmp_path: Path) -> None:
    src = tmp_path / "src" / "train"
    src.mkdir(parents=True)
    img = jpeg()
    for i in (1, 2):
        (src / f"{i:06d}.jpg").write_bytes(img)
        (src / f"{i:06d}.json").write_text(json.dumps({"label": i}))
    shards = tmp_path / "shards" / "nested"
    shards.mkdir(parents=True)
    subprocess.run(["tar", "--sort=name", "-cf", str(shards / "a.tar"), "./train"],
                   cwd=tmp_path / "src", check=True)
    with tarfile.open(shards / "a.tar") as tf:
        assert tf.getnames()[:2] == ["./train", "./train/000001.jpg"]
    export = adapters.open_export(tmp_path / "shards")  # *.tar found in a subdirectory
    assert export.layout == "wds"
    got = list(export.read())
    assert [s.key for s in got] == ["train/000001", "train/000002"]
    assert [json.loads(s.fields["json"])["label"] for s in got] == [1, 2]


def test_detect_ignores_hidden_and_underscore_names(tmp_path: Path) -> None:
    write_tar(tmp_path / ".partial.tar", [("a.jpg", jpeg())])
    write_tar(tmp_path / "_old.tar", [("a.jpg", jpeg())])
    assert not wds.ADAPTER.detect(tmp_path)
    (tmp_path / "sub").mkdir()
    write_tar(tmp_path / "sub" / "x.tar", [("a.jpg", jpeg())])
    assert wds.ADAPTER.detect(tmp_path)
    assert [Path(u).name for u in wds.ADAPTER.open(tmp_path).units()] == ["x.tar"]


@pytest.mark.parametrize("name", ["../evil.jpg", "/abs/evil.jpg", "a/../../evil.jpg"])
def test_unsafe_member_name_is_a_bad_sample_and_never_written(tmp_path: Path, name: str) -> None:
    export_dir = tmp_path / "export"
    export_dir.mkdir()
    shard = write_tar(export_dir / "s.tar", [("ok.jpg", jpeg()), (name, jpeg()),
                                             ("ok2.jpg", jpeg())])
    with pytest.raises(SampleError) as exc:
        read_all(shard)
    assert str(shard) in str(exc.value) and repr(name) in str(exc.value)
    errors: list[SampleError] = []
    assert [s.key for s in read_all(shard, skip=errors.append)] == ["ok", "ok2"]
    assert len(errors) == 1
    assert not list(tmp_path.rglob("evil*")) and not Path("/abs").exists()


def test_link_members_are_not_followed(tmp_path: Path) -> None:
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tf:
        link = tarfile.TarInfo("k.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
    with pytest.raises(SampleError, match="links are not followed"):
        read_all(shard)


@pytest.mark.parametrize(("entries", "key", "message"), [
    ([("a.jpg", b"x"), ("a.json", b"{}"), ("b.json", b"{}")], "b", "no image or audio member"),
    ([("a.jpg", b"x"), ("a.json", b"{}"), ("b.jpg", b"x"), ("c.jpg", b"x"), ("c.json", b"{}")],
     "b", "no .json member"),
    ([("a.jpg", b"x"), ("a.cls", b"1"), ("b.jpg", b""), ("b.cls", b"2")], "b", "zero-byte"),
    ([("a.jpg", b"x"), ("b.jpg", b"x"), ("a.cls", b"1")], "a", "not adjacent"),
])
def test_incomplete_sample_names_shard_and_key(tmp_path: Path, entries: list[tuple[str, bytes]],
                                               key: str, message: str) -> None:
    shard = write_tar(tmp_path / "s.tar", entries)
    with pytest.raises(SampleError, match=message) as exc:
        read_all(shard)
    assert exc.value.path == str(shard) and exc.value.key == key


def test_not_a_tar_names_the_file_and_the_other_shards_still_read(tmp_path: Path) -> None:
    # (A zero-byte shard: tests/test_adapters_common.py, with the other layouts.)
    (tmp_path / "a.tar").write_bytes(b"this is not a tar archive" * 40)
    write_tar(tmp_path / "b.tar", [("k.jpg", jpeg()), ("k.cls", b"1")])
    errors: list[SampleError] = []
    assert [s.key for s in read_all(tmp_path, skip=errors.append)] == ["k"]
    assert [Path(str(e.path)).name for e in errors] == ["a.tar"]
    assert "not a tar archive" in str(errors[0]) and "empty file" not in str(errors[0])
