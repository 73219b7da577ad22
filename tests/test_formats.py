"""The formats teams train from, written by their own libraries (tests/formatlibs.py): MDS (plain
and zstd), litdata, Hugging Face (save_to_disk and the Hub's Parquet), Lance and TFRecord. Each
is detected by its signature, read whole as its library reads it, measured with dsbench's reader
and with its library (`--backend native`) at 1 and 2 workers, refused in one line when a shard
is cut short, read from an object store, and written by `generate` through its own writer."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import formatlibs
import numpy as np
import pytest
from formatlibs import FORMATS, LAYOUT, LIBRARY, SAMPLES
from layouts import assert_one_line_error

from dsbench import adapters, procs
from dsbench.adapters import base
from dsbench.cli import main
from dsbench.errors import DsbenchError
from dsbench.export.generate import generate
from dsbench.export.pool import worker_pool
from dsbench.export.spec import FORMATS_DIR, load_spec
from dsbench.loader import native
from dsbench.loader.decode import make_decoder
from dsbench.loader.native import options as native_options
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_bench, run_benches
from dsbench.results.document import write_result


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, private_tmp: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("formats")
    return {fmt: formatlibs.write(fmt, root) for fmt in FORMATS}


def _ours(path: Path) -> list[base.RawSample]:
    return list(adapters.open_export(path).read())


def _label(raw: base.RawSample) -> int:
    value = raw.fields.get("label", raw.fields.get("image/class/label"))
    return int(np.asarray(value).reshape(-1)[0])


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_is_detected_by_its_own_signature(fmt: str, exports: dict[str, Path]
                                                      ) -> None:
    assert adapters.detect(exports[fmt]).name == LAYOUT[fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_sample_reads_as_its_library_reads_it(fmt: str, exports: dict[str, Path]) -> None:
    """Labels equal, and pixels equal what the library decodes (MDS's jpeg column re-encoded
    the PIL images it was given; the others keep the JPEG bytes, compared byte for byte)."""
    ours = _ours(exports[fmt])
    theirs = formatlibs.library_samples(fmt, exports[fmt])
    assert len(ours) == len(theirs) == SAMPLES
    decode = make_decoder("pillow")
    assert [_label(r) for r in ours] == [lab for lab, _ in theirs]
    for raw, (_, pixels) in zip(ours, theirs, strict=True):
        assert np.array_equal(np.asarray(decode(raw)), pixels), (fmt, raw.key)
    if not fmt.startswith("mds"):
        assert [r.image for r in ours] == [formatlibs.jpeg(i) for i in range(SAMPLES)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_inspect_names_the_layout_its_units_and_fields(fmt: str, exports: dict[str, Path],
                                                       tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    assert main(["inspect", str(exports[fmt]), "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["layout"] == LAYOUT[fmt] and s["samples"] == SAMPLES and s["bad_samples"] == 0
    assert s["units"] == SAMPLES // formatlibs.PER_SHARD
    assert s["image"]["codec"] == "jpeg"
    assert {"caption", "embedding"} <= {n.rpartition("/")[2] for n in s["fields"]}
    if fmt == "hf":
        assert s["dataset"]["form"] == "save_to_disk" and s["dataset"]["split"] == "train"
        assert s["dataset"]["splits"] == ["train", "test"]
        assert s["fields"]["label"]["type"] == "ClassLabel (10 names)"
        # The other split is said, not read.
        assert any("split 'test'" in f for f in s["ignored_files"]["examples"])


# Three documented options of each library, as a job passes them; one misspelt.
NATIVE_OPTIONS = {
    "mds": (["predownload=8", "num_canonical_nodes=1", "partition_algo=relaxed"],
            "predownlaod=8", "predownload"),
    "litdata": (["max_cache_size='1GB'", "max_pre_download=1", "drop_last=false"],
                "max_cache_sise=1", "max_cache_size"),
    "hf": (["keep_in_memory=true", "output_all_columns=false", "columns=['image', 'label']"],
           "keep_in_memroy=true", "keep_in_memory"),
    # batch_size: a keyword load_dataset hands to the Parquet builder's config.
    "hf-hub": (["keep_in_memory=false", "verification_mode=no_checks", "batch_size=16"],
               "num_porc=1", "num_proc"),
    "lance": (["shard_granularity=batch", "batch_readahead=2", "with_row_id=false"],
              "batch_readahed=2", "batch_readahead"),
    "tfrecord": (["shard=none", "description=none"], "descripton=none", "description"),
    "wds": (["empty_check=false", "repeat=false", "seed=3"], "sead=3", "seed"),
}


# mds-zstd is read by the same readers as mds, after decompression (read whole above).
BOTH = [f for f in FORMATS if f != "mds-zstd"]


def _order(fmt: str) -> str:
    # The libraries whose shuffle dsbench drives read with it (--order shuffle).
    return "sequential" if fmt in ("lance", "tfrecord") else "shuffle"


# Read by both readers in the suite (13 s); the others (MDS, litdata, TFRecord: 21 s) with the
# slow tests, which CI runs too.
QUICK = ("hf", "hf-hub", "lance")


def _both_readers(exports: dict[str, Path], fmts: list[str]) -> dict[str, dict[str, Any]]:
    """Each format of `fmts` read by dsbench's reader and by its library, at 1 and 2 workers,
    all in one interleaved run (as `compare EXPORT EXPORT --cand-backend native` pairs two),
    the library configured by options a job passes it (--native-option); a shuffle buffer of
    16 where the library's shuffle is a buffer (one of 1000 on 120 samples fills with all of
    them before the first: seconds of a streaming Hugging Face dataset's warm-up)."""
    opts = BenchOptions(workers=(1, 2), batch_size=4, rounds=1, batches=4, warmup_batches=1)
    each = [side for fmt in fmts for side in (opts, dataclasses.replace(
        opts, backend="native", native_options=native_options.parse(NATIVE_OPTIONS[fmt][0]),
        order=_order(fmt), shuffle_buffer=16))]
    docs = run_benches([exports[fmt] for fmt in fmts for _ in (0, 1)], opts, each=each)
    return {fmt: {"dsbench": docs[2 * i], "native": docs[2 * i + 1]}
            for i, fmt in enumerate(fmts)}


@pytest.fixture(scope="module")
def both_quick(exports: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return _both_readers(exports, [f for f in BOTH if f in QUICK])


@pytest.fixture(scope="module")
def both_slow(exports: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return _both_readers(exports, [f for f in BOTH if f not in QUICK])


@pytest.mark.parametrize("fmt", [f if f in QUICK else pytest.param(f, marks=pytest.mark.slow)
                                 for f in BOTH])
def test_bench_measures_with_both_readers_at_1_and_2_workers(
        fmt: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    given = native_options.parse(NATIVE_OPTIONS[fmt][0])
    order = _order(fmt)
    docs = request.getfixturevalue("both_quick" if fmt in QUICK else "both_slow")[fmt]
    for backend, doc in docs.items():
        write_result(tmp_path / f"{backend}.json", doc)  # validates against the schema
        assert [r["workers"] for r in doc["runs"]] == [1, 2]
        assert all(r["samples"] == 16 and r["cpu_s_per_sample"] > 0 for r in doc["runs"])
        assert doc["counts"]["exact"] and doc["counts"]["samples"] == SAMPLES
    assert docs["native"]["reader"]["library"] == LIBRARY[LAYOUT[fmt]]
    assert docs["native"]["reader"]["version"] != "not installed"
    assert docs["native"]["reader"]["options"] == dict(given) and len(given) >= 2
    assert "reader" not in docs["dsbench"]
    # How random the library's batches were, beside their cost: from where its samples lie
    # (a streaming Hugging Face dataset's rows do not say: its labels alone).
    for run in docs["native"]["runs"]:
        q = run["order_figures"]
        # (tfrecord's label is image/class/label, not one of the names taken for a label)
        assert fmt == "tfrecord" or q["label_entropy_bits"] > 0
        if fmt == "hf-hub" or fmt == "lance":
            assert q["units_per_batch"] is None and q["source_distance"] is None
        elif order == "shuffle":  # read in order, consecutive samples lie 1 apart
            assert q["units_per_batch"] >= 1 and q["source_distance"] > 1.5
        else:
            assert q["units_per_batch"] >= 1 and q["source_distance"] >= 1
    if order == "shuffle":
        assert "shuffle" in docs["native"]["reader"] and docs["native"]["config"]["order"] == \
            "shuffle"
    if fmt == "hf-hub":
        # datasets' IterableDataset.shuffle reports one shard for the three files (datasets
        # 5.0): the second DataLoader worker is given nothing, and is reported so.
        two = docs["native"]["runs"][1]
        assert two["idle_workers"] == [1] and two["worker_samples"][1] == 0
        assert any("1 loader worker of 2 delivered no samples" in w
                   for w in docs["native"]["warnings"])
    # The counts are the export's, whichever reader measured the timings.
    assert docs["native"]["counts"] == docs["dsbench"]["counts"]
    assert docs["dsbench"]["counts"]["files_per_sample"] == pytest.approx(
        (SAMPLES // formatlibs.PER_SHARD) / SAMPLES)


def _first_shard(fmt: str, path: Path) -> Path:
    export = adapters.open_export(path)
    return Path(export.units()[1])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_truncated_shard_is_one_line_naming_it(fmt: str, exports: dict[str, Path],
                                                 tmp_path: Path) -> None:
    copy = tmp_path / fmt
    shutil.copytree(exports[fmt], copy)
    shard = _first_shard(fmt, copy)
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) * 2 // 3])
    proc = subprocess.run([sys.executable, "-m", "dsbench", "bench", str(copy), "--rounds", "1",
                           "--seconds", "0.2", "--batch-size", "4"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert_one_line_error(proc.stderr, "bench", shard.name)


@pytest.mark.parametrize("fmt", ["mds-zstd", "litdata", "hf", "hf-hub", "lance", "tfrecord"])
def test_each_format_reads_the_same_from_an_object_store(fmt: str, exports: dict[str, Path],
                                                         s3_env: Any) -> None:
    url = s3_env.create_bucket(f"fmt-{fmt}")
    s3_env.upload_tree(exports[fmt], f"{url}/export")
    local, remote = _ours(exports[fmt]), _ours(f"{url}/export")  # type: ignore[arg-type]
    assert [(r.key, r.image, _label(r)) for r in remote] == \
        [(r.key, r.image, _label(r)) for r in local]


def test_mds_is_read_by_its_library_from_an_object_store(exports: dict[str, Path],
                                                         s3_env: Any, tmp_path: Path) -> None:
    """StreamingDataset copies the shards from the bucket into the run's temporary directory,
    as a job's does into its local cache; the counts are dsbench's, over the bucket."""
    url = s3_env.create_bucket("native-mds")
    s3_env.upload_tree(exports["mds-zstd"], f"{url}/export")
    opts = BenchOptions(workers=(1,), batch_size=4, rounds=1, batches=2, backend="native")
    doc = run_bench(f"{url}/export", opts)
    assert doc["reader"]["library"] == "mosaicml-streaming"
    assert doc["runs"][0]["samples"] == 8 and doc["requests"]["requests_per_sample"] > 0


# The library-written definitions dsbench ships, and how each library reads its images back.
DEFINITIONS = ("mds", "litdata", "hf", "hf-hub", "lance", "tfrecord")


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("before") / "before"
    generate(load_spec(FORMATS_DIR / "before.toml"), out, samples=60, jobs=1)
    return out


@pytest.mark.parametrize("name", DEFINITIONS)
def test_generate_from_an_export_writes_what_the_library_reads_back_byte_for_byte(
        name: str, before: Path, tmp_path: Path, private_tmp: Path) -> None:
    out = tmp_path / name
    assert main(["generate", str(FORMATS_DIR / f"{name}.toml"), str(out), "--from",
                 str(before), "--jobs", "1"]) == 0
    source = _ours(before)
    fmt = "hf-hub" if name == "hf-hub" else name
    theirs = formatlibs.library_samples(fmt, out)
    decode = make_decoder("pillow")
    assert [lab for lab, _ in theirs] == [int(r.fields["cls"]) for r in source]
    for raw, (_, pixels) in zip(source, theirs, strict=True):
        assert np.array_equal(np.asarray(decode(raw)), pixels)
    # The library hands back the source's own bytes, where it hands back bytes at all, and
    # dsbench's reader sees them too.
    stored = formatlibs.library_bytes(fmt, out)
    assert stored is None or stored == [r.image for r in source]
    assert [r.image for r in _ours(out)] == [r.image for r in source]
    # A second run finds the export complete and writes nothing.
    assert main(["generate", str(FORMATS_DIR / f"{name}.toml"), str(out), "--from",
                 str(before), "--jobs", "1"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


def test_a_wrong_image_field_is_one_line(exports: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(exports["mds"]), "--image-field", "label"]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "--image-field label", "int")
    # A text column named is a payload too: the samples are then its text (docs/tokens.md).
    assert main(["inspect", str(exports["mds"]), "--image-field", "caption"]) == 0
    assert "samples carry:      text, tokenized by the loader (caption)" in \
        capsys.readouterr().out
    assert main(["inspect", str(exports["lance"]), "--image-field", "nope"]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "no such column")


@pytest.mark.parametrize("name", ["after", "arrow"])
def test_native_backend_without_a_library_reader_is_one_line(
        name: str, tiny_exports: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_exports[name]
    assert main(["bench", str(path), "--backend", "native", "--rounds", "1"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "no native reader")


def test_a_directory_no_format_claims_is_one_line_naming_what_it_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "index.json").write_text('{"version": 2, "files": []}')
    (tmp_path / "notes.txt").write_text("not data")
    assert main(["inspect", str(tmp_path)]) == 2
    assert_one_line_error(capsys.readouterr().err, "inspect", "unknown layout", "index.json",
                          "neither MDS shards nor litdata chunks", "mds", "tfrecord")


def _not_fork_safe_loaded(_: object) -> list[str]:
    """In a writing process: the libraries it holds that are not fork-safe."""
    return [name for name in procs.NOT_FORK_SAFE if name in sys.modules]


def test_no_writer_is_forked_from_a_process_that_loaded_lance(
        exports: dict[str, Path], tmp_path: Path) -> None:
    # Lance's forked writers crashed (signal 11) in 4 of 15 re-exports from a Lance export and
    # once hung: a pool asked to fork from a process that loaded it spawns instead, and its
    # writers start without it. (benchmarks/fork_safety.py re-exports 30 times in a row.)
    import lance  # noqa: F401  (the exports fixture loaded it; named here for the reader)

    with worker_pool(tmp_path / "pool", 2, "fork") as pool:
        assert list(pool.imap(_not_fork_safe_loaded, [0, 1])) == [[], []]
    # A re-export from the Lance export, twice with two writers each (shards of 25 samples:
    # five units): whole, byte for byte.
    for run in range(2):
        out = tmp_path / f"again-{run}"
        assert main(["generate", "thumbnails", str(out), "--from", str(exports["lance"]),
                     "--jobs", "2"]) == 0
        assert [r.image for r in _ours(out)] == formatlibs.library_bytes("lance",
                                                                         exports["lance"])


def _wds_export(root: Path) -> Path:
    """Shards written by webdataset's own ShardWriter."""
    import webdataset

    root.mkdir()
    with webdataset.ShardWriter(str(root / "train-%04d.tar"), maxcount=8, verbose=0) as sink:
        for i in range(16):
            sink.write({"__key__": f"s{i:04d}", "jpg": formatlibs.jpeg(i),
                        "cls": formatlibs.label(i), "txt": formatlibs.caption(i)})
    return root


def _caption(fields: dict[str, Any]) -> str:
    value = next(v for k, v in fields.items() if k.rpartition("/")[2] in ("caption", "txt"))
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.mark.parametrize("fmt", ["mds", "litdata", "hf", "hf-hub", "wds"])
def test_a_librarys_own_shuffle_reads_every_sample_once_and_places_each_where_it_lies(
        fmt: str, exports: dict[str, Path], tmp_path: Path) -> None:
    path = _wds_export(tmp_path / "wds") if fmt == "wds" else exports[fmt]
    export = adapters.open_export(path)
    ours = [_caption(r.fields) for r in export.read()]  # dsbench's read, front to back
    starts = [0]
    for unit in export.units():
        starts.append(starts[-1] + export.unit_samples(unit))
    # The library's dataset as a round builds it, read here as one loader worker reads it.
    reader = native.get(export.layout)
    prepared = reader.prepare(export, 4, tmp_path, {}, native.Shuffle(seed=5, buffer=8))
    try:
        theirs = native.NativeExport(path, export.layout, prepared, native.view_of(export), 4,
                                     [])
        got, placed = [], []
        for raw in theirs.read(0, 1):
            got.append(_caption(raw.fields))
            placed.append(theirs.position)
    finally:
        reader.close(prepared)
    # One epoch of the library's shuffle: every sample once, not in the export's order.
    assert sorted(got) == sorted(ours) and got != ours
    if fmt == "hf-hub":  # a streaming dataset's rows do not say where they lie
        assert placed == [None] * len(got)
        return
    # Where the library said each sample lies, dsbench's own read finds that sample.
    assert all(p is not None for p in placed)
    assert [ours[starts[u] + o] for u, o in placed] == got  # type: ignore[misc]


@pytest.mark.parametrize("fmt", sorted(NATIVE_OPTIONS))
def test_a_misspelt_native_option_is_one_line_before_anything_runs(
        fmt: str, exports: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The options that reach each library are measured with it above (and webdataset's below).
    _, misspelt, meant = NATIVE_OPTIONS[fmt]
    export = _wds_export(tmp_path / "wds") if fmt == "wds" else exports[fmt]
    assert main(["bench", str(export), "--backend", "native", "--native-option", misspelt]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", misspelt.split("=")[0],
                          f"did you mean {meant}?")


@pytest.mark.parametrize("fmt", ["lance", "tfrecord"])
def test_a_shuffle_dsbench_does_not_drive_is_one_line(fmt: str, exports: dict[str, Path],
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["bench", str(exports[fmt]), "--backend", "native", "--order", "shuffle"]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", "--order shuffle",
                          f"not for {LIBRARY[fmt]}")


def test_webdatasets_own_reader_takes_its_options_and_shuffles(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    given = NATIVE_OPTIONS["wds"][0]
    assert main(["bench", str(_wds_export(tmp_path / "wds")), "--backend", "native",
                 "--order", "shuffle", "--shuffle-buffer", "8",
                 "--workers", "1", "--rounds", "1", "--seconds", "0.2", "--batch-size", "4",
                 "--json", str(out), *(a for g in given for a in ("--native-option", g))]) == 0
    doc = json.loads(out.read_text())
    assert doc["reader"]["options"] == dict(native_options.parse(given))
    assert doc["reader"]["library"] == "webdataset" and doc["runs"][0]["samples"] > 0
    # Its own shuffle (shard shuffle and a buffer of 8), and how random its batches were.
    assert "shuffle(" in doc["reader"]["shuffle"]
    q = doc["runs"][0]["order_figures"]
    assert q["units_per_batch"] >= 1 and q["source_distance"] > 1 and q["label_entropy_bits"]
    assert "shuffle (the library's own)" in capsys.readouterr().out


def test_native_options_are_the_librarys_own_keywords_with_their_types(
        exports: dict[str, Path], tmp_path: Path) -> None:
    mds = adapters.open_export(exports["mds"])
    reader = native.get("mds")
    ds = reader.prepare(mds, 4, tmp_path, {"predownload": 8, "num_canonical_nodes": 1})
    try:
        assert (ds.predownload, ds.num_canonical_nodes) == (8, 1)  # the library holds them
    finally:
        reader.close(ds)
    for options, needle in (({"predownload": "many"}, "takes int or none for predownload"),
                            ({"local": "/elsewhere"}, "dsbench sets local"),
                            ({"shuffle": True}, "(--order)")):
        with pytest.raises(DsbenchError, match=re.escape(needle)):
            native.check_options(mds, options)
    with pytest.raises(DsbenchError, match="needs --backend native"):
        BenchOptions(native_options=(("predownload", 8),))


def test_native_options_go_to_the_side_read_natively() -> None:
    from dsbench.cli import build_parser
    from dsbench.commands.sides import side_options

    def sides(*extra: str) -> tuple[Any, Any]:
        argv = ["compare", "a", "b", "--native-option", "seed=3", *extra]
        return side_options(build_parser(argv).parse_args(argv))

    base, cand = sides("--backend", "native", "--cand-backend", "dsbench")
    assert base.native_options == (("seed", 3),) and cand.native_options == ()
    base, cand = sides("--cand-backend", "native")
    assert base.native_options == () and cand.native_options == (("seed", 3),)
    with pytest.raises(DsbenchError, match="needs --backend native or --cand-backend native"):
        sides()
    # --native-option only where a --backend can name native: not the demo's.
    with pytest.raises(SystemExit):
        build_parser(["demo"]).parse_args(["demo", "--native-option", "seed=3"])


def test_native_mds_reads_on_past_an_epoch_s_end_with_two_workers(exports: dict[str, Path]
                                                                  ) -> None:
    # MosaicML Streaming meets a node's loader workers at each epoch's start: its workers must
    # begin their epochs together (one DataLoader pass per epoch), or the first to finish
    # waits there for the others forever. 120 samples in batches of 8 over two workers: 15
    # batches an epoch; 40 measured batches cross two epoch ends.
    opts = BenchOptions(workers=(2,), batch_size=8, rounds=1, batches=40, warmup_batches=1,
                        backend="native", stall_s=20.0)
    (run,) = run_bench(exports["mds"], opts)["runs"]
    assert run["samples"] == 40 * 8 and run["idle_workers"] == []
