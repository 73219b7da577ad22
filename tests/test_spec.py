"""Export definitions: the shipped ones load, and every bad value is a one-line error naming file
and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dsbench.errors import DsbenchError
from dsbench.export.spec import load_spec, member_ext

FORMATS = Path(__file__).resolve().parents[1] / "formats"


@pytest.mark.parametrize("name,layout", [("before", "wds"), ("after", "files"),
                                         ("arrow", "arrow"), ("parquet", "parquet")])
def test_shipped_definitions_load(name: str, layout: str) -> None:
    spec = load_spec(FORMATS / f"{name}.toml")
    assert spec.name == name
    assert spec.layout == layout
    assert spec.image.codec == "jpeg"
    assert spec.field("label").type == "int"


def test_after_adds_the_new_fields_that_before_lacks() -> None:
    before = {f.name for f in load_spec(FORMATS / "before.toml").fields}
    after = load_spec(FORMATS / "after.toml")
    assert before == {"label"}
    assert {f.name for f in after.fields} - before == {"caption", "embedding", "boxes"}
    assert after.field("embedding").dim == 768
    assert after.field("embedding").encoding == "json"
    assert after.fields_as == "json"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "def.toml"
    p.write_text(text)
    return p


BASE = 'name = "x"\nlayout = "wds"\n'


@pytest.mark.parametrize("text,key", [
    (BASE + "colour = 3\n", "colour"),
    ('name = "x"\n', "layout"),
    ('name = "x"\nlayout = "zip"\n', "layout"),
    (BASE + "samples = 0\n", "samples"),
    (BASE + "samples = 'many'\n", "samples"),
    (BASE + "[image]\ncodec = 'gif'\n", "image.codec"),
    (BASE + "[image]\nquality = 101\n", "image.quality"),
    (BASE + "[image]\nsize = 3\n", "image.size"),
    (BASE + "[fields.label]\ntype = 'float'\n", "fields.label.type"),
    (BASE + "[fields.label]\ntype = 'int'\ndim = 3\n", "fields.label.dim"),
    (BASE + "[fields.e]\ntype = 'embedding'\n", "fields.e.dim"),
    (BASE + "[fields.e]\ntype = 'embedding'\ndim = 8\nencoding = 'list'\n", "fields.e.encoding"),
    (BASE + "[fields.c]\ntype = 'string'\nwords = [9, 3]\n", "fields.c.words"),
    (BASE + "[fields.a]\ntype = 'int'\n[fields.b]\ntype = 'int'\n", "fields.b.ext"),
    (BASE + "[fields.image]\ntype = 'int'\n", "fields.image"),
    (BASE + "compression = 'zstd'\n", "compression"),  # WebDataset shards are plain tar
    ('name = "x"\nlayout = "arrow"\ncompression = "gz"\n', "compression"),
    (BASE + "[image]\nreencode = 'yes'\n", "image.reencode"),
    (BASE + "[image]\ncodec = 'raw'\nreencode = true\n", "image.reencode"),
    (BASE + "[image]\nprogressive = 1\n", "image.progressive"),
    (BASE + "[image]\ncodec = 'png'\nprogressive = true\n", "image.progressive"),
])
def test_bad_definition_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(DsbenchError) as info:
        load_spec(path)
    message = str(info.value)
    assert str(path) in message
    assert key in message
    assert "\n" not in message


def test_a_progressive_jpeg_definition_writes_progressive_jpegs(tmp_path: Path) -> None:
    import io

    from PIL import Image

    from dsbench.export.images import make_image

    spec = load_spec(_write(tmp_path, BASE + "[image]\nprogressive = true\n"))
    assert spec.image.progressive and spec.to_dict()["image"]["progressive"] is True
    rng = np.random.default_rng(0)
    assert Image.open(io.BytesIO(make_image(spec.image, rng))).info.get("progressive")
    plain = load_spec(_write(tmp_path, BASE))
    # Not set, not written: a manifest from before the key existed describes the same export.
    assert "progressive" not in plain.to_dict()["image"]
    assert not Image.open(io.BytesIO(make_image(plain.image, rng))).info.get("progressive")


def test_arrow_buffers_may_be_compressed(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, 'name = "x"\nlayout = "arrow"\ncompression = "zstd"\n'))
    assert spec.compression == "zstd"


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DsbenchError, match="not valid TOML"):
        load_spec(_write(tmp_path, "name = \n"))
    with pytest.raises(DsbenchError, match="no such definition"):
        load_spec(tmp_path / "absent.toml")


def test_member_extensions_follow_webdataset_conventions() -> None:
    spec = load_spec(FORMATS / "parquet.toml")
    assert member_ext(spec, spec.field("label")) == "cls"
    assert member_ext(spec, spec.field("caption")) == "txt"
    assert member_ext(spec, spec.field("embedding")) == "embedding.f32"
    assert member_ext(spec, spec.field("boxes")) == "boxes.json"


def test_a_shipped_definition_is_found_by_name_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from dsbench.cli import main
    from dsbench.export.spec import FORMATS_DIR, find_definition, shipped

    monkeypatch.chdir(tmp_path)  # outside the checkout
    assert shipped() == sorted(p.stem for p in FORMATS_DIR.glob("*.toml"))
    assert {"before", "after", "arrow", "thumbnails"} <= set(shipped())
    assert load_spec("before") == load_spec(FORMATS_DIR / "before.toml")
    assert find_definition("after.toml") == FORMATS_DIR / "after.toml"
    # An export directory called `before` does not hide the definition; a file does.
    (tmp_path / "before").mkdir()
    assert find_definition("before") == FORMATS_DIR / "before.toml"
    (tmp_path / "mine.toml").write_text((FORMATS / "thumbnails.toml").read_text())
    assert find_definition("mine.toml") == Path("mine.toml")
    with pytest.raises(DsbenchError, match=r"nope: no such definition file, nor a shipped "
                                           r"definition of that name \(shipped: after, "):
        load_spec("nope")
    # generate --list: a line per shipped definition, with its description.
    assert main(["generate", "--list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    for name in shipped():
        line = next(ln for ln in listing if ln.startswith(f"{name} "))
        assert load_spec(name).description in line
    # --show prints the file, to start one's own from; the shipped name writes an export.
    assert main(["generate", "--show", "thumbnails"]) == 0
    assert capsys.readouterr().out == (FORMATS / "thumbnails.toml").read_text()
    assert main(["generate", "thumbnails", "out", "--samples", "4"]) == 0
    assert load_spec("thumbnails").layout == "wds" and list(Path("out").glob("*.tar"))
