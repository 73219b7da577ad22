"""dsbench advise: the candidates it makes of an export's own samples, the level its intervals
hold over many candidates, and the advice end to end on a per-sample JSON export."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_spec

from dsbench import adapters, stats
from dsbench.advise import definition, grid, kinds
from dsbench.advise.fields import found_fields
from dsbench.advise.search import FIRST_SECONDS, MIN_FIRST_SECONDS, first_seconds, level_for
from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.reexport import first_samples, reencoded, reexport
from dsbench.export.spec import load_spec
from dsbench.results import schema

EMBEDDING = {"type": "embedding", "dim": 768, "encoding": "json"}
AFTER_FIELDS = {"caption": {"type": "string", "words": [8, 30]}, "embedding": EMBEDDING,
                "boxes": {"type": "boxes", "max_boxes": 8}}


@pytest.fixture(scope="module")
def after_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The incident's after export in small: a JPEG and a JSON document per sample (label,
    caption, a 768-d embedding as a JSON list, boxes), small images."""
    out = tmp_path_factory.mktemp("advise") / "after"
    generate(tiny_spec("files", fields=AFTER_FIELDS), out, samples=240, jobs=1)
    return out


@pytest.fixture(scope="module")
def small_after(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """after_like's first 24 samples, for the tests that upload an export to the local S3
    server: an upload of after_like's 480 objects takes a second, and the staging tests upload
    several (nothing they check depends on how many samples the export holds)."""
    out = tmp_path_factory.mktemp("advise-small") / "after"
    generate(tiny_spec("files", fields=AFTER_FIELDS), out, samples=24, jobs=1)
    return out


def _found(path: Path) -> tuple[object, list]:
    export = adapters.open_export(str(path))
    raws = first_samples(export, 20, str(path))
    return found_fields(raws[0], export.layout), raws


def test_the_fields_of_a_json_document_are_typed_as_stored(after_like: Path) -> None:
    found, _ = _found(after_like)
    types = {f.name: (f.type, f.dim) for f in found.fields}  # type: ignore[attr-defined]
    assert types == {"label": ("int", 0), "caption": ("string", 0),
                     "embedding": ("embedding", 768), "boxes": ("boxes", 0)}
    assert found.embedding_encoding == "json" and found.in_document  # type: ignore[attr-defined]


def test_the_grid_carries_every_field_and_folds_shard_sizes_past_the_sample(
        after_like: Path) -> None:
    found, raws = _found(after_like)
    cands, skipped = kinds.candidates(found, raws, "files", 240, ("wds", "arrow", "litdata"),
                                     (20_000, 64_000_000, 1_000_000_000))
    names = [c.name for c in cands]
    # 64 MB and 1 GB shards both hold the whole 240-sample sample: one candidate, the larger.
    assert names == ["files-binary", "files-json", "wds-1GB", "wds-20kB", "wds-json-1GB",
                     "wds-json-20kB", "arrow-1GB", "arrow-20kB"]
    assert [s.layout for s in skipped] == ["litdata"] and "boxes" in skipped[0].why
    for c in cands:
        assert [f.name for f in c.spec.fields] == ["label", "caption", "embedding", "boxes"]
    wds = next(c for c in cands if c.name == "wds-20kB")
    # 20 kB shards of samples of a few kB (a small JPEG, 768 float32, a caption, boxes)
    per_sample = grid.sample_bytes(wds.spec, raws, "files")
    assert wds.spec.shard_samples == round(20_000 / per_sample) > 1
    assert wds.spec.field("embedding").encoding == "binary"
    assert next(c for c in cands if c.name == "arrow-1GB").spec.field(
        "embedding").encoding == "list"


def test_compressed_candidates_are_tried_where_the_layout_compresses_its_shards(
        after_like: Path) -> None:
    found, raws = _found(after_like)
    both, _ = kinds.candidates(found, raws, "files", 240, ("arrow", "mds", "parquet"),
                              (64_000_000,), ("none", "zstd"))
    by_name = {c.name: c.spec.compression for c in both}
    assert by_name == {"files-binary": None, "files-json": None, "arrow-64MB": None,
                       "arrow-zstd-64MB": "zstd", "mds-64MB": None, "mds-zstd-64MB": "zstd",
                       "parquet-64MB": None}
    zstd_only, _ = kinds.candidates(found, raws, "files", 240, ("arrow",), (64_000_000,),
                                   ("zstd",))
    assert [c.name for c in zstd_only] == ["files-binary", "files-json", "arrow-zstd-64MB"]
    assert "zstd-compressed buffers" in zstd_only[-1].spec.description


def test_an_arrow_candidate_with_zstd_buffers_holds_the_same_samples(
        after_like: Path, tmp_path: Path) -> None:
    found, raws = _found(after_like)
    cands, _ = kinds.candidates(found, raws, "files", 240, ("arrow",), (64_000_000,),
                               ("none", "zstd"))
    read = {}
    for c in cands[-2:]:
        out = tmp_path / c.name
        reexport(c.spec, out, str(after_like), samples=240)
        read[c.spec.compression] = first_samples(adapters.open_export(str(out)), 1000,
                                                 str(out))
    plain, packed = read[None], read["zstd"]
    assert len(plain) == len(packed) == 240
    assert [s.key for s in plain] == [s.key for s in packed]
    assert all(a.image == b.image and repr(a.fields) == repr(b.fields)
               for a, b in zip(plain, packed, strict=True))
    # The captions and labels compress: the zstd shard is the smaller.
    size = {n: next((tmp_path / n).glob("*.arrow")).stat().st_size
            for n in ("arrow-64MB", "arrow-zstd-64MB")}
    assert size["arrow-zstd-64MB"] < size["arrow-64MB"]


def test_reencoded_candidates_are_tried_only_when_asked_and_sized_by_their_images(
        after_like: Path) -> None:
    found, raws = _found(after_like)
    plain, _ = kinds.candidates(found, raws, "files", 240, ("wds",), (20_000,))
    assert not any(c.spec.image.reencode for c in plain)
    asked, _ = kinds.candidates(found, raws, "files", 240, ("wds",), (20_000,),
                               reencode=(10,))
    names = [c.name for c in asked]
    # Per-sample files are not re-encoded: only the sharded candidates, again.
    assert names == [*(c.name for c in plain), "wds-20kB-q10", "wds-json-20kB-q10"]
    q10 = next(c for c in asked if c.name == "wds-20kB-q10")
    assert q10.spec.image == dataclasses.replace(q10.spec.image, codec="jpeg", quality=10,
                                                 reencode=True)
    assert "changes the data" in q10.spec.description
    # Quality 10 images are smaller: the same 20 kB shard holds more of them.
    same = next(c for c in plain if c.name == "wds-20kB")
    assert q10.spec.shard_samples > same.spec.shard_samples


def test_a_reencoded_export_is_the_same_bytes_every_run_and_its_images_decode(
        after_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    found, raws = _found(after_like)
    cands, _ = kinds.candidates(found, raws, "files", 240, ("wds",), (20_000,),
                               reencode=(60,))
    spec = next(c.spec for c in cands if c.name == "wds-20kB-q60")
    one, two = tmp_path / "one", tmp_path / "two"
    reexport(spec, one, str(after_like), samples=30)
    reexport(spec, two, str(after_like), samples=30, jobs=2)
    shards = sorted(p.name for p in one.glob("*.tar"))
    assert len(shards) > 2  # several units, written by two processes the second time
    assert shards == sorted(p.name for p in two.glob("*.tar"))
    assert all((one / n).read_bytes() == (two / n).read_bytes() for n in shards)
    shard = shards[0]
    got = first_samples(adapters.open_export(str(one)), 30, str(one))
    for new, old in zip(got, raws, strict=False):
        assert new.image != old.image
        with Image.open(io.BytesIO(new.image)) as a, Image.open(io.BytesIO(old.image)) as b:
            assert a.format == "JPEG" and a.size == b.size
    assert json.loads((one / "_dsbench.json").read_text())["source"]["images"]["copied"] == \
        "re-encoded, quality 60"
    # Its definition re-encodes the same way through the command, and says so.
    toml = tmp_path / "q60.toml"
    toml.write_text(definition.to_toml(spec, "a test"))
    assert main(["generate", str(toml), str(tmp_path / "three"), "--from", str(after_like),
                 "--samples", "30"]) == 0
    assert (tmp_path / "three" / shard).read_bytes() == (one / shard).read_bytes()
    assert "jpeg decoded and re-encoded as jpeg quality 60 (the definition's reencode = " \
        "true: this changes the data)" in capsys.readouterr().out


@pytest.mark.parametrize("codec", ["jpeg", "png"])
def test_a_cmyk_image_is_reencoded_as_rgb_and_a_broken_one_is_one_sample_error(
        codec: str) -> None:
    from PIL import Image

    from dsbench.errors import SampleError
    from dsbench.export.spec import ImageSpec

    cmyk = io.BytesIO()
    Image.new("CMYK", (16, 8), (0, 255, 0, 0)).save(cmyk, format="JPEG")
    image = ImageSpec(codec=codec, quality=80, reencode=True)
    with Image.open(io.BytesIO(reencoded(cmyk.getvalue(), image, "src", "k"))) as out:
        assert out.mode == "RGB" and out.size == (16, 8)
    with pytest.raises(SampleError, match="cannot re-encode the image") as info:
        reencoded(cmyk.getvalue()[:40], image, "src/000001.jpg", "000001")
    assert "src/000001.jpg" in str(info.value) and "000001" in str(info.value)


def test_the_model_sees_a_sharded_candidate_at_its_full_shard_size(after_like: Path) -> None:
    from dsbench.advise import advice

    found, raws = _found(after_like)
    cands, _ = kinds.candidates(found, raws, "files", 240, ("wds",), (64_000_000,))
    wds = next(c for c in cands if c.name == "wds-64MB")
    files = next(c for c in cands if c.name == "files-binary")
    # The 240 samples written, read in one shard: 2 requests (a GET and its retry, say) and
    # one file.
    doc: Any = {"export": {"samples": 240, "files_per_sample": 1 / 240},
                "runs": [{"files_per_sample": 1 / 240}],
                "requests": {"requests_per_sample": 2 / 240}}
    full = advice.full_size(doc, wds)
    per_shard = wds.spec.shard_samples
    assert per_shard > 240
    assert full["runs"][0]["files_per_sample"] == pytest.approx(1 / per_shard)
    assert full["export"]["files_per_sample"] == pytest.approx(1 / per_shard)
    assert full["requests"]["requests_per_sample"] == pytest.approx(2 / per_shard)
    assert doc["requests"]["requests_per_sample"] == 2 / 240  # the measurement is untouched
    assert advice.full_size(doc, files) is doc  # per-sample files have no shards to scale


def test_a_definition_written_loads_back_as_the_same_layout(after_like: Path,
                                                             tmp_path: Path) -> None:
    found, raws = _found(after_like)
    cands, _ = kinds.candidates(found, raws, "files", 240, ("wds", "parquet", "arrow", "mds"),
                               (64_000_000,), ("none", "zstd"), reencode=(85,))
    assert any(c.spec.compression for c in cands)
    assert any(c.spec.image.reencode for c in cands)
    for c in cands:
        path = tmp_path / f"{c.name}.toml"
        path.write_text(definition.to_toml(c.spec, "a test\nof two lines"))
        assert definition.same_writer(c.spec, load_spec(path)), c.name


def _shard(root: Path, members: dict[str, bytes], n: int = 3) -> Path:
    """A WebDataset shard as webdataset's own writer makes it: a JPEG and `members` a sample."""
    import webdataset as wds
    from PIL import Image

    root.mkdir()
    img = io.BytesIO()
    Image.new("RGB", (8, 8)).save(img, format="JPEG")
    with wds.TarWriter(str(root / "shard-000000.tar")) as sink:
        for i in range(n):
            sink.write({"__key__": f"s{i}", "jpg": img.getvalue(), **members})
    return root


@pytest.mark.parametrize(("members", "says"), [
    ({"tags.json": json.dumps(["a", "b"]).encode()}, "'tags'"),  # a list of strings
    ({"json": json.dumps({"bbox area": 3}).encode()}, "'bbox area'"),  # not an identifier
])
def test_a_field_no_definition_can_hold_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], members: dict[str, bytes],
        says: str) -> None:
    src = _shard(tmp_path / "src", {"cls": b"1", **members})
    assert main(["advise", str(src), "--write-definition", str(tmp_path / "d.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shard-000000.tar" in err[0] and says in err[0], err
    assert not (tmp_path / "d.toml").exists()


def test_digits_stored_as_text_stay_text(tmp_path: Path) -> None:
    # "000123" as an int would lose its zeros, and a later "a cat" would be refused.
    src = _shard(tmp_path / "src", {"json": json.dumps({"id": "000123", "n": 7}).encode()})
    found, _ = _found(src)
    assert {f.name: f.type for f in found.fields} == {"id": "string", "n": "int"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--shard-sizes", "inf", "finite"), ("--shard-sizes", "10", "1kB or more"),
    ("--budget", "soon", "a duration"), ("--layouts", "zip", "not one of"),
    ("--samples", "1", "at least 2"), ("--work-dir", "FILE", "cannot make it a directory"),
    ("--compressions", "lz5", "one or both of none, zstd"),
    ("--reencode", "quality=0", "JPEG qualities from 1 to 100"),
    ("--reencode", "webp", "JPEG qualities from 1 to 100"),
])
def test_bad_options_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  after_like: Path, option: str, value: str, says: str) -> None:
    if value == "FILE":
        value = str(tmp_path / "file")
        Path(value).write_text("x")
    assert main(["advise", str(after_like), option, value, "--budget" if option != "--budget"
                 else "--samples", "1s" if option != "--budget" else "10",
                 "--write-definition", str(tmp_path / "d.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_a_job_reading_by_index_is_advised_among_layouts_read_by_index(
        after_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "advice.json"
    assert main(["advise", str(after_like), "--order", "random", "--samples", "60",
                 "--layouts", "wds,arrow", "--shard-sizes", "50kB", "--compressions", "none",
                 "--budget", "4s", "--batch-size", "8", "--json", str(out),
                 "--write-definition", str(tmp_path / "advised.toml")]) == 0
    doc = json.loads(out.read_text())
    schema.validate(doc, "advice")
    assert doc["settings"]["order"] == "random"
    # WebDataset has no way to read one sample where it lies: not tried, and said why.
    assert [n["layout"] for n in doc["not_tried"]] == ["wds"]
    assert "--order random" in doc["not_tried"][0]["why"]
    tried = [r["name"] for r in doc["table"]]
    assert any(n.startswith("arrow-") for n in tried) and not any("wds" in n for n in tried)
    for r in doc["table"][1:]:  # each candidate measured in the job's order
        assert r["name"].startswith(("arrow-", "files-"))
    # An export the job could not be reading by index is refused, in one line.
    shards = tmp_path / "shards"
    assert main(["generate", str(Path(__file__).parents[1] / "formats" / "before.toml"),
                 str(shards), "--samples", "20"]) == 0
    capsys.readouterr()
    assert main(["advise", str(shards), "--order", "random", "--budget", "4s",
                 "--write-definition", str(tmp_path / "refused.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(shards) in err[0] and "--order shuffle" in err[0], err


@pytest.mark.slow  # tens of seconds: `python -m pytest -m slow` (CI runs it)
def test_an_export_in_an_object_store_is_advised_from_the_same_store(
        small_after: Path, tmp_path: Path, s3_env: Any, capsys: pytest.CaptureFixture[str]
        ) -> None:
    # Candidates on local disk against an export read through a store's client would win by
    # where they are read from: they are uploaded beside the export and read from the store.
    url = s3_env.create_bucket("advise") + "/team/after"
    s3_env.upload_tree(small_after, url)
    keys_before = _keys(s3_env, "advise")
    out = tmp_path / "advice.json"
    # Batches of 8: a warm-up batch of 64 would read the 24 samples again, two GETs each.
    assert main(["advise", url, "--samples", "24", "--layouts", "wds", "--shard-sizes", "64MB",
                 "--budget", "1s", "--batch-size", "8",
                 "--write-definition", str(tmp_path / "d.toml"),
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    staged = doc["staged_in"]
    assert staged.startswith(url + ".dsbench-advise-")
    # Every side was read from the store: one GET per file for the baseline, and the
    # candidates' own requests counted (a local read makes none).
    for row in doc["table"]:
        assert row["measured"]["requests_per_sample"] > 0, row["name"]
        assert row["measured"]["disk_bytes_per_sample"] > 0, row["name"]
    # No --storage: an export in S3 is read by the cluster with S3's published figures.
    assert doc["cluster"]["storage"] == "s3"
    text = capsys.readouterr().out
    assert f"candidates measured from the export's store, under {staged}" in text
    # S3's limit per prefix, and each side's load on it at the cluster's scale.
    assert "requests/s per prefix (limit 5,500 requests/s)" in text
    assert all(r["predicted"]["requests_per_s_per_prefix"] > 0 for r in doc["table"])
    # Nothing of the candidates is left in the bucket; the export is untouched.
    assert _keys(s3_env, "advise") == keys_before


def test_a_killed_runs_candidates_in_the_store_are_removed_by_the_next_run(
        small_after: Path, tmp_path: Path, s3_env: Any) -> None:
    from dsbench.advise import staging
    from dsbench.loader import orphans
    from dsbench.storage.remote import RemotePath

    url = s3_env.create_bucket("killed") + "/after"
    s3_env.upload_tree(small_after, url)
    keys_before = _keys(s3_env, "killed")
    here, ns = staging._machine(), orphans.namespace()
    # A prefix of this machine's process that is gone (this pid, another start time); one of
    # a live process here (the parent, its real start); one of another machine.
    dead = f"{url}{staging.TAG}{here}-{os.getpid()}-1-{ns}"
    live = f"{url}{staging.TAG}{here}-{os.getppid()}-{orphans.start_ticks(os.getppid())}-{ns}"
    other = f"{url}{staging.TAG}elsewhere-0123456789-{os.getpid()}-1-{ns}"
    for prefix in (dead, live, other):
        s3_env.upload_tree(small_after / "000000", prefix + "/wds-64MB")
    said: list[str] = []
    with staging.stage(RemotePath(url), None, said.append) as prefix:
        assert prefix is not None and str(prefix) not in (dead, live)
    assert said == [f"removed {dead}: the candidates of an advise run that was killed"]
    left = {k.split("/")[0] for k in set(_keys(s3_env, "killed")) - set(keys_before)}
    assert left == {live.split("/")[-1], other.split("/")[-1]}


def test_a_stage_url_keeps_what_was_there(small_after: Path, s3_env: Any) -> None:
    from dsbench.advise import staging
    from dsbench.storage.remote import RemotePath

    url = s3_env.create_bucket("stage") + "/after"
    s3_env.upload_tree(small_after, url)
    s3_env.upload_tree(small_after / "000000", "s3://stage/scratch/theirs")
    keys_before = _keys(s3_env, "stage")
    # The bucket's root as the stage: the run's own prefix under it, and only that, goes.
    with staging.stage(RemotePath(url), "s3://stage", lambda _m: None) as prefix:
        assert prefix is not None and str(prefix).startswith("s3://stage/.dsbench-advise-")
        staging.put_candidate(small_after / "000000", prefix)
        assert len(_keys(s3_env, "stage")) > len(keys_before)
    assert _keys(s3_env, "stage") == keys_before


@pytest.mark.parametrize(("args", "says"), [
    (["s3://no-such-bucket/after"], "no such bucket"),
    (["URL", "--stage-url", "URL/inside"], "inside the export"),
    (["URL", "--stage-url", "s3://another-bucket/x"], "not in the export's bucket"),
    (["BUCKET"], "a bucket's whole root"),
    (["LOCAL", "--stage-url", "s3://b/x"], "for an export in an object store"),
])
def test_bad_object_store_settings_are_one_line(
        after_like: Path, tmp_path: Path, s3_env: Any, capsys: pytest.CaptureFixture[str],
        args: list[str], says: str) -> None:
    url = s3_env.create_bucket("refusals") + "/after"
    subst = {"URL": url, "URL/inside": url + "/inside", "BUCKET": "s3://refusals",
             "LOCAL": str(after_like)}
    argv = [subst.get(a, a) for a in args]
    assert main(["advise", *argv, "--write-definition", str(tmp_path / "d.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "d.toml").exists()


def _keys(server: Any, bucket: str) -> list[str]:
    import obstore

    from dsbench.storage import remote
    from dsbench.storage.remote import RemotePath

    store = remote.store_of(RemotePath(f"s3://{bucket}/x"))
    return sorted(str(m["path"]) for page in obstore.list(store) for m in page)


@pytest.mark.parametrize(("df", "p", "known"), [(10, 0.99, 2.7638), (5, 0.999, 5.8934),
                                                (20, 0.9975, 3.1534), (1, 0.99, 31.8205),
                                                (2, 0.999, 22.3271)])
def test_t_quantiles_at_other_levels_match_the_published_tables(df: int, p: float,
                                                                known: float) -> None:
    assert math.isclose(stats.t_quantile(df, p), known, rel_tol=1e-3)


@pytest.mark.parametrize("k", [3, 8])
def test_intervals_over_k_candidates_hold_their_family_level(k: int) -> None:
    """K candidates no different from the baseline, measured in paired rounds with a shared
    machine drift and per-round noise: the chance that any interval of the K excludes 1 stays
    at most 5%; at 95% each it would not (which is why the correction is there)."""
    rng = np.random.default_rng(1)
    trials, rounds = 4000, 6
    hits_corrected = hits_plain = 0
    for _ in range(trials):
        drift = rng.normal(0, 0.05, rounds)
        base = np.exp(-6 + drift + rng.normal(0, 0.04, rounds))
        cands = np.exp(-6 + drift + rng.normal(0, 0.04, (k, rounds)))
        ivs = [stats.paired_ratio(base, c, level_for(k)) for c in cands]
        plain = [stats.paired_ratio(base, c) for c in cands]
        hits_corrected += any(iv is not None and iv.excludes_null for iv in ivs)
        hits_plain += any(iv is not None and iv.excludes_null for iv in plain)
    # Binomial sd at 5% over 4000 trials is 0.34%: 6% is three of them above the level.
    assert hits_corrected / trials <= 0.06
    assert hits_plain / trials > 0.10


def test_the_first_pass_is_shortened_to_fit_a_small_budget_only() -> None:
    # The default budget (10 minutes) and the demo's (25 s over 4 sides) keep 0.5 s rounds.
    assert first_seconds(600.0, 18) == first_seconds(25.0, 4) == FIRST_SECONDS
    # Half of a 20 s budget over 3 rounds of 4 sides is 0.83 s a round; less 0.5 s of start,
    # 0.33 s of window.
    assert first_seconds(20.0, 4) == pytest.approx(20 / 2 / 12 - 0.5)
    assert MIN_FIRST_SECONDS < first_seconds(20.0, 4) < FIRST_SECONDS
    # Never below the floor, however small: a window must hold a batch.
    assert first_seconds(1.0, 4) == first_seconds(0.0, 40) == MIN_FIRST_SECONDS


@pytest.mark.slow  # tens of seconds: `python -m pytest -m slow` (CI runs it)
def test_advise_recommends_shards_with_a_float32_embedding_and_its_definition_remakes_it(
        after_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work, toml, out = tmp_path / "work", tmp_path / "advised.toml", tmp_path / "advice.json"
    # A step of 20 ms makes the export's loader the job's bottleneck (8 workers per GPU at
    # about 0.8 ms a sample feed 10,000 samples/s against 12,800 asked), so that a cheaper
    # layout shows in the predicted utilization too; 10 million samples give every loader
    # worker shards of 100 kB. Uncompressed only: Arrow shards with zstd buffers tie with them
    # (within the intervals, the pick between the two was seen to flip beside a busy neighbour),
    # and what is tested here is shards against the per-sample variants. A budget of 40 s
    # leaves a second pass of longer rounds: with the first pass's three alone, one disturbed
    # round beside a busy neighbour widened arrow's interval past 1x in two full suite runs.
    assert main(["advise", str(after_like), "--samples", "200", "--layouts", "arrow",
                 "--shard-sizes", "100kB", "--compressions", "none", "--budget", "40s",
                 "--batch-size", "16",
                 "--work-dir", str(work), "--write-definition", str(toml), "--json", str(out),
                 "--export-samples", "10000000", "--compute", "0.02"]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    schema.validate(doc, "advice")
    rec = doc["recommendation"]
    assert rec["winner"] == "arrow-100kB", text
    assert rec["text"] in text and rec["text"].startswith(f"roll out {rec['winner']}")
    row = next(r for r in doc["table"] if r["name"] == rec["winner"])
    assert row["encoding"] in ("binary", "list")
    assert row["measured"]["files_per_sample"] < 0.5  # shards, not a file per member
    util = row["vs_baseline"]["gpu_util"]
    assert util["change"] == "better" and util["interval"][0] > 1, util
    # The written definition remakes the measured candidate from the same samples.
    remade = tmp_path / "remade"
    assert main(["generate", str(toml), str(remade), "--from", str(after_like),
                 "--samples", "200"]) == 0
    measured = work / rec["winner"]
    files = sorted(p.relative_to(measured) for p in measured.rglob("*")
                   if p.is_file() and p.name != "_dsbench.json")
    assert files and files == sorted(p.relative_to(remade) for p in remade.rglob("*")
                                     if p.is_file() and p.name != "_dsbench.json")
    for f in files:
        assert (measured / f).read_bytes() == (remade / f).read_bytes(), f


def test_counted_instructions_stand_beside_the_timed_cpu_and_lead_the_advice() -> None:
    """advise's table and recommendation where the exact pass counted the last pass's sides:
    the candidate's instructions per sample with their ratio to the export's (no interval),
    and the count said first; a side without a count shows none."""
    import resultdocs as rd

    from dsbench.advise import advice
    from dsbench.report import advise as report
    from dsbench.report.demo import DEMO_CLUSTER

    counter = {"name": "valgrind cachegrind", "version": "3.19.0", "kind": "simulated",
               "event": "instructions", "options": "--tool=cachegrind"}

    def side(cpu: float, files: float, instructions: float | None) -> dict[str, Any]:
        doc = rd.document([rd.run(cpu=[cpu * f for f in (0.99, 1.0, 1.01)],
                                  files_per_sample=files)], run_id="one")
        if instructions is not None:
            stages = dict.fromkeys(("read", "decode", "fields", "transform", "collate"), 0.0)
            stages["decode"] = instructions
            doc["exact"] = {"counted": True, "why_not": None, "counter": counter,
                            "samples": 64, "instructions_per_sample": instructions,
                            "stages": stages}
        return doc

    spec = tiny_spec("arrow")
    cand = grid.Candidate("arrow-64MB", spec, 64 << 20, "list", "Arrow shards")
    plain = grid.Candidate("arrow-plain", spec, 64 << 20, "list", "Arrow shards, uncounted")
    docs = [side(0.0025, 2.0, 25.0e6), side(0.0020, 0.002, 21.8e6), side(0.0020, 0.002, None)]
    rows = advice.rows([cand, plain], docs, [1e5, 1e5, 1e5], DEMO_CLUSTER, 10_000_000)
    x = rows[1]["vs_baseline"]["instructions_per_sample"]
    assert x == {"ratio": pytest.approx(21.8 / 25.0), "change": "better", "exact": True}
    assert rows[1]["measured"]["instructions_per_sample"] == 21.8e6
    assert rows[2]["vs_baseline"]["instructions_per_sample"] is None
    assert rows[2]["measured"]["instructions_per_sample"] is None
    said = advice.reason(rows[0], rows[1])
    assert said.startswith("roll out arrow-64MB: 12.8% fewer CPU instructions per sample "
                           "(exact), "), said
    doc = {"table": rows, "recommendation": {"winner": "arrow-64MB"}, "settings": {"pack": False}}
    cells = [dict(zip(report.headers(doc), r, strict=True)) for r in report.table_rows(doc)]
    column = "instructions/sample (exact)"
    assert [c[column] for c in cells] == ["25.0 M instructions/sample",
                                          "21.8 M instructions/sample (0.872x)", "-"]
