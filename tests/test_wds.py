"""WebDataset shards: round trip, shards written by webdataset and GNU tar, and broken shards."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dsbench import adapters
from dsbench.adapters import base, wds
from dsbench.errors import DsbenchError, SampleError
from dsbench.export.generate import generate
from dsbench.export.spec import ExportSpec, FieldSpec, ImageSpec
from dsbench.export.synth import make_sample

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


def jpeg() -> bytes:
    return make_sample(ExportSpec(name="j", layout="wds", image=IMAGE), 0, 0)["image"]


def write_tar(path: Path, entries: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def read_all(path: Path, **kw: Any) -> list[base.RawSample]:
    return list(adapters.open_export(path).read(**kw))


def test_round_trip_members_gives_back_the_generated_bytes_and_values(tmp_path: Path) -> None:
    spec = make_spec("members")
    generate(spec, tmp_path, seed=3, jobs=1)
    export = adapters.open_export(tmp_path)
    assert export.layout == "wds"
    assert [Path(u).name for u in export.units()] == [f"shard-{i:06d}.tar" for i in range(3)]
    got = list(export.read())
    assert [s.key for s in got] == [f"{i:08d}" for i in range(7)]
    for i, s in enumerate(got):
        want = make_sample(spec, 3, i)
        assert s.image == want["image"] and s.codec == "jpeg"
        assert s.fields["cls"] == str(want["label"]).encode()
        assert s.fields["txt"].decode() == want["caption"]
        np.testing.assert_array_equal(np.frombuffer(s.fields["vec.f32"], "<f4"), want["vec"])
        np.testing.assert_array_equal(np.float32(json.loads(s.fields["emb.json"])), want["emb"])
        assert json.loads(s.fields["boxes.json"]) == want["boxes"]
        assert dict(s.encodings) == {"cls": base.ENC_INT_TEXT, "txt": base.ENC_TEXT,
                                     "vec.f32": base.ENC_F32, "emb.json": base.ENC_JSON,
                                     "boxes.json": base.ENC_JSON}


def test_round_trip_json_document_keeps_binary_embedding_as_member(tmp_path: Path) -> None:
    spec = make_spec("json", samples=4)
    generate(spec, tmp_path, jobs=1)
    got = read_all(tmp_path)
    assert len(got) == 4
    for i, s in enumerate(got):
        want = make_sample(spec, 0, i)
        assert sorted(s.fields) == ["json", "vec.f32"]
        doc = json.loads(s.fields["json"])
        assert doc["label"] == want["label"] and doc["caption"] == want["caption"]
        assert doc["boxes"] == want["boxes"]
        np.testing.assert_array_equal(np.float32(doc["emb"]), want["emb"])
        np.testing.assert_array_equal(np.frombuffer(s.fields["vec.f32"], "<f4"), want["vec"])


def test_workers_read_disjoint_shards_that_cover_the_export(tmp_path: Path) -> None:
    generate(make_spec(), tmp_path, jobs=1)
    export = adapters.open_export(tmp_path)
    parts = [[s.key for s in export.read(w, 2)] for w in range(2)]
    assert parts[0] == [f"{i:08d}" for i in (0, 1, 2, 6)]  # shards 0 and 2
    assert parts[1] == [f"{i:08d}" for i in (3, 4, 5)]
    with pytest.raises(DsbenchError):
        list(export.read(2, 2))


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


@pytest.mark.parametrize("cut", ["mid_member", "member_boundary"])
def test_truncated_shard_names_the_shard_and_the_last_complete_sample(
        tmp_path: Path, cut: str) -> None:
    generate(make_spec("json"), tmp_path, jobs=1)
    shard = tmp_path / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        third = next(m for m in tf.getmembers() if m.name.startswith("00000002"))
    data = shard.read_bytes()
    end = third.offset_data + 100 if cut == "mid_member" else third.offset
    shard.write_bytes(data[:end])
    with pytest.raises(SampleError) as exc:
        read_all(tmp_path)
    msg = str(exc.value)
    assert str(shard) in msg and "truncated shard" in msg
    assert "the last complete sample is 00000001" in msg
    errors: list[SampleError] = []
    got = read_all(tmp_path, skip=errors.append)
    assert [s.key for s in got] == [f"{i:08d}" for i in (0, 1, 3, 4, 5, 6)]
    assert len(errors) == 1


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
    ([("a.jpg", b"x"), ("a.json", b"{}"), ("b.json", b"{}")], "b", "no image member"),
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


def test_not_a_tar_and_empty_shard_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(b"this is not a tar archive" * 40)
    (tmp_path / "b.tar").write_bytes(b"")
    errors: list[SampleError] = []
    assert read_all(tmp_path, skip=errors.append) == []
    assert [(Path(str(e.path)).name, "empty file" in str(e)) for e in errors] == [
        ("a.tar", False), ("b.tar", True)]
    assert "not a tar archive" in str(errors[0])
