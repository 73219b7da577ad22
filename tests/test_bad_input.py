"""Bad input, bad options and odd files around an export or an output path: exit 2 with one
line naming the file (and the sample) at fault, or, for what is merely not read, a mention in
`ignored_files`; never a traceback, a hang, or a device node replaced by a regular file."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import resultdocs as rd
from conftest import write_export

from dsbench.cli import main
from dsbench.storage import files as store

DSBENCH = [sys.executable, "-m", "dsbench"]


def one_line(capsys: pytest.CaptureFixture[str], command: str, *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dsbench {command}: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_export(tmp_path_factory.mktemp("bad"), "wds", 8, shard_samples=4)


@pytest.fixture(scope="module")
def result_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("docs") / "r.json"
    path.write_text(json.dumps(rd.document([rd.run(1)])))
    return path


# ---- what an export directory holds besides its data ----

def _dangling(d: Path) -> None:
    (d / "shard-000009.tar").symlink_to(d / "nowhere.tar")


def _loop(d: Path) -> None:
    (d / "shard-000009.tar").symlink_to("shard-000009.tar")


def _fifo(d: Path) -> None:
    os.mkfifo(d / "shard-000009.tar")


def _socket(d: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "shard-000009.tar"))
    s.close()


def _directory(d: Path) -> None:
    (d / "shard-000009.tar").mkdir()


def _link_to_directory(d: Path) -> None:
    (d.parent / "more").mkdir(exist_ok=True)
    (d / "more").symlink_to(d.parent / "more", target_is_directory=True)


def _hidden_copy(d: Path) -> None:
    (d / "_shard-000009.tar").write_bytes((d / "shard-000000.tar").read_bytes())


@pytest.mark.parametrize(("make", "name", "why"), [
    (_dangling, "shard-000009.tar", "dangling symbolic link"),
    (_loop, "shard-000009.tar", "Too many levels of symbolic links"),
    (_fifo, "shard-000009.tar", "not a regular file"),
    (_socket, "shard-000009.tar", "not a regular file"),
    (_directory, "shard-000009.tar", "empty directory"),
    (_link_to_directory, "more", "symbolic link to a directory"),
    (_hidden_copy, "_shard-000009.tar", "hidden"),
])
def test_entries_not_read_are_listed_as_such(tmp_path: Path, shards: Path, make: object,
                                             name: str, why: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "x"
    d.mkdir()
    for f in shards.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    make(d)  # type: ignore[operator]
    assert main(["inspect", str(d), "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 8
    assert summary["ignored_files"]["count"] == 1
    example = summary["ignored_files"]["examples"][0]
    assert example.startswith(name) and why in example, example


def test_the_manifest_and_temporaries_are_not_listed(shards: Path) -> None:
    from dsbench import adapters
    assert adapters.open_export(shards).ignored == []


def test_an_unlistable_directory_is_named(tmp_path: Path, shards: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # As root, permissions deny nothing: the refusal is simulated where the listing happens.
    real = os.scandir

    def scandir(path: object) -> object:
        if Path(str(path)) == shards:
            raise PermissionError(13, "Permission denied")
        return real(path)  # type: ignore[arg-type]
    monkeypatch.setattr(store.os, "scandir", scandir)
    assert main(["inspect", str(shards)]) == 2
    one_line(capsys, "inspect", str(shards), "cannot list this directory: Permission denied")


def test_an_empty_path_is_not_the_current_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", ""]) == 2
    one_line(capsys, "inspect", "empty path")


def test_files_layout_over_shards_does_not_read_a_shard_as_a_sample(
        tmp_path: Path, shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_export(tmp_path, "files", 4)
    (files / "shard-000000.tar").write_bytes((shards / "shard-000000.tar").read_bytes())
    assert main(["inspect", str(files), "--layout", "files", "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 4 and summary["ignored_files"]["examples"] == [
        "shard-000000.tar"]


# ---- output paths: checked before any work, device nodes and FIFOs written in place ----

EXTRAPOLATE = ["extrapolate", "--cpu-per-sample", "0.003", "--steps", "200"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize(("minor", "code"), [(3, 0), (7, 2)])  # a private /dev/null, /dev/full
def test_a_character_device_is_written_in_place_never_replaced(
        tmp_path: Path, minor: int, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    assert main([*EXTRAPOLATE, "--json", str(node)]) == code
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    if code:
        one_line(capsys, "extrapolate", str(node), "No space left on device")


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main([*EXTRAPOLATE, "--json", str(fifo)]) == 0
    reader.join(10)
    assert json.loads(got[0])["kind"] == "dsbench-extrapolation"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symbolic_link_stays_a_link_to_the_written_file(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("target.json")
    assert main([*EXTRAPOLATE, "--json", str(tmp_path / "link")]) == 0
    assert (tmp_path / "link").is_symlink()
    assert json.loads((tmp_path / "target.json").read_text())["kind"] == "dsbench-extrapolation"


@pytest.mark.parametrize("case", ["directory", "no-parent", "twice", "save-directory"])
def test_unwritable_outputs_are_refused_before_measuring(
        tmp_path: Path, shards: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    argv = {"directory": ["bench", str(shards), "--json", str(tmp_path)],
            "no-parent": ["bench", str(shards), "--json", str(tmp_path / "no" / "r.json")],
            "twice": ["compare", str(shards), str(shards), "--save", str(out), str(out)],
            "save-directory": ["compare", str(shards), str(shards), "--save", str(out),
                               str(tmp_path)]}[case]
    assert main(argv) == 2
    one_line(capsys, argv[0], "cannot write" if case != "twice" else "named twice")
    assert not out.exists()  # nothing measured, nothing half written


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_full_standard_output_is_one_line(tmp_path: Path) -> None:
    node = tmp_path / "full"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    with open(node, "w") as full:
        proc = subprocess.run([*DSBENCH, *EXTRAPOLATE], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot write to standard output: No space left on device" in proc.stderr


# ---- options and small files out of range ----

@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "{shards}", "--seed", "-1"], "--seed"),
    (["bench", "{shards}", "--step-time", "1e20"], "--step-time"),
    ([*EXTRAPOLATE, "--seed", "-1"], "--seed"),
    ([*EXTRAPOLATE, "--cpu-cv", "1e300"], "coefficient of variation"),
    (["generate", "{definition}", "{tmp}/g", "--jobs", "0"], "--jobs"),
    (["generate", "{definition}", "{tmp}/g", "--jobs", "-1"], "--jobs"),
    (["generate", "{definition}", "{tmp}/g", "--samples", "99999999999999999999"], "--samples"),
    (["generate", "{fifo}", "{tmp}/g"], "not a regular file"),
    (["extrapolate", "{fifo}"], "not a regular file"),
    (["gate", "{result}", "{result}", "--config", "{tool_int}"], "[tool] must be a table"),
    (["gate", "{result}", "{result}", "--config", "{dsbench_str}"],
     "[tool.dsbench] must be a table"),
])
def test_bad_values_are_one_line(tmp_path: Path, shards: Path, result_file: Path,
                                 argv: list[str], needle: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "tool_int.toml").write_text("tool = 5\n")
    (tmp_path / "dsbench_str.toml").write_text('[tool]\ndsbench = "x"\n')
    names = {"shards": str(shards), "tmp": str(tmp_path), "result": str(result_file),
             "definition": str(Path(__file__).parents[1] / "formats" / "before.toml"),
             "fifo": str(tmp_path / "fifo.toml"), "tool_int": str(tmp_path / "tool_int.toml"),
             "dsbench_str": str(tmp_path / "dsbench_str.toml")}
    argv = [a.format(**names) for a in argv]
    assert main(argv) == 2
    one_line(capsys, argv[0], needle)
    assert not (tmp_path / "g").exists()


def test_a_bad_threshold_option_is_not_blamed_on_the_config(
        tmp_path: Path, result_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.dsbench.gate]\nmax_files_ratio = 2\n")
    assert main(["gate", str(result_file), str(result_file), "--config", str(config),
                 "--max-bytes-ratio", "-1"]) == 2
    err = one_line(capsys, "gate", "--max-bytes-ratio must be a positive number")
    assert str(config) not in err


def test_a_huge_throughput_is_printed_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = rd.document([rd.run(1, sps=[1e308] * 3)])
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    small = tmp_path / "small.json"
    small.write_text(json.dumps(rd.document([rd.run(1)])))
    for command in ("compare", "gate"):
        assert main([command, str(small), str(path)]) in (0, 1), command
        assert "e+308" in capsys.readouterr().out


# ---- a field that changes between samples: one line naming file and sample, or counted ----

BENCH = ["--seconds", "0.2", "--rounds", "1", "--batch-size", "2", "--warmup-batches", "1"]


def _files_tree(root: Path, bad: str) -> tuple[Path, str]:
    from layouts import jpeg
    img = jpeg()
    for i in range(6):
        (root / f"{i:04d}.jpg").write_bytes(img)
        (root / f"{i:04d}.json").write_text(json.dumps({"label": i, "emb": [0.5] * 8}))
    bad_doc = {"missing": '{"emb": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]}',
               "inf": '{"label": 1e999, "emb": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]}',
               "length": '{"label": 3, "emb": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]}',
               "deep": "[" * 100_000 + "]" * 100_000}[bad]
    (root / "0003.json").write_text(bad_doc)
    return root / "0003.json", "0003"


@pytest.mark.parametrize(("bad", "needle"), [("missing", "'json.label' is missing here"),
                                             ("inf", "'json.label' is inf"),
                                             ("length", "'json.emb' is list<float>[7] here"),
                                             ("deep", "nested too deep")])
def test_per_sample_json_that_differs_is_named(tmp_path: Path, bad: str, needle: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path, key = _files_tree(tmp_path, bad)
    assert main(["inspect", str(tmp_path)]) == 2
    one_line(capsys, "inspect", f"{path} [sample {key}]", needle.split("list<")[0])
    assert main(["bench", str(tmp_path), *BENCH]) == 2
    one_line(capsys, "bench", f"{path} [sample {key}]")
    assert main(["bench", str(tmp_path), *BENCH, "--on-error", "skip", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"][0]["skipped_samples"] >= 1


def _columnar(root: Path, layout: str, change: str) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from layouts import write_columnar
    out = write_export(root, layout, 8, shard_samples=4,
                       fields={"emb": {"type": "embedding", "dim": 8, "encoding": "list"}})
    path = out / f"shard-000001.{layout}"
    data = pa.BufferReader(path.read_bytes())
    table = pq.read_table(data) if layout == "parquet" else pa.ipc.open_file(data).read_all()
    if change == "column":
        table = table.drop(["label"])
    else:
        name = "label" if change == "null" else "emb"
        values = table.column(name).to_pylist()
        values[1] = None if change == "null" else values[1][:5]
        kind = table.schema.field(name).type
        if pa.types.is_fixed_size_list(kind):
            kind = pa.list_(kind.value_type)
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.array(values, kind))
    path.unlink()
    write_columnar(path, table)
    return path


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
@pytest.mark.parametrize(("change", "needle"), [
    ("column", "'label' is missing in this shard"),
    ("null", "'label' is null here"),
    ("length", "'emb' is a float array of 5 values here but a float array of 8 values")])
def test_a_column_that_differs_is_named(tmp_path: Path, layout: str, change: str, needle: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _columnar(tmp_path, layout, change)
    assert main(["bench", str(path.parent), *BENCH]) == 2
    one_line(capsys, "bench", str(path), needle)
    assert main(["inspect", str(path.parent)]) == 2
    one_line(capsys, "inspect", str(path), needle)


# ---- images: inspect holds headers to bench's limit; no Python reprs in messages ----

def _image_tree(root: Path, bad: bytes) -> Path:
    from layouts import jpeg
    for i in range(4):
        (root / f"{i:04d}.jpg").write_bytes(bad if i == 2 else jpeg())
        (root / f"{i:04d}.cls").write_text("1")
    return root / "0002.jpg"


def _huge_header() -> bytes:
    from layouts import jpeg
    data = bytearray(jpeg())
    sof = data.find(b"\xff\xc0")
    data[sof + 5:sof + 9] = (65000).to_bytes(2, "big") * 2  # height, width
    return bytes(data)


@pytest.mark.parametrize(("make", "needle"), [
    (_huge_header, "65000 x 65000 px"),
    (lambda: os.urandom(600), "not an image Pillow can identify")])
def test_a_bad_image_header_is_named_by_inspect_and_bench(
        tmp_path: Path, make: object, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _image_tree(tmp_path, make())  # type: ignore[operator]
    assert main(["inspect", str(tmp_path)]) == 2
    err = one_line(capsys, "inspect", f"{path} [sample 0002]", needle)
    assert main(["bench", str(tmp_path), *BENCH]) == 2
    err += one_line(capsys, "bench", f"{path} [sample 0002]", needle)
    assert "object at 0x" not in err


def test_a_refused_shared_memory_registration_leaves_no_segment(
        shards: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # What a user whose resource tracker cannot start meets: the segment is made, then
    # registering it fails with a broken pipe.
    from multiprocessing import resource_tracker

    def refuse(name: str, rtype: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(resource_tracker, "register", refuse)
    assert main(["bench", str(shards), *BENCH]) == 2
    one_line(capsys, "bench", "resource tracker refused it (Broken pipe); it was removed")
    assert not list(Path("/dev/shm").glob(f"dsbench-{os.getpid()}-*"))


def test_a_corrupt_tar_header_is_not_called_a_truncation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tarfile
    out = write_export(tmp_path, "wds", 4)
    shard = out / "shard-000000.tar"
    with tarfile.open(shard) as tf:
        third = tf.getmembers()[2]  # the first member of sample 00000001
    with open(shard, "r+b") as f:
        f.seek(third.offset + 148)  # the header's checksum field
        f.write(b"9999999\0")
    for command, extra in (("inspect", []), ("bench", BENCH)):
        assert main([command, str(out), *extra]) == 2
        err = one_line(capsys, command, f"{shard} [sample 00000001]: corrupt tar header of "
                                        f"member '{third.name}'")
        assert "truncated" not in err


@pytest.mark.parametrize("layout", ["wds", "arrow", "parquet"])
def test_generate_rewrites_a_unit_cut_short_after_a_complete_run(tmp_path: Path,
                                                                  layout: str) -> None:
    from conftest import tiny_spec

    from dsbench import adapters
    from dsbench.export.generate import generate
    out = write_export(tmp_path, layout, 8, shard_samples=4)
    shard = sorted(out.glob("shard-*"))[1]
    whole = shard.read_bytes()
    shard.write_bytes(whole[:len(whole) // 2])
    report = generate(tiny_spec(layout, shard_samples=4), out, samples=8, jobs=1)
    assert (report.units_written, report.units_skipped) == (1, 1)
    assert shard.read_bytes() == whole  # the same samples, written again whole
    assert adapters.open_export(out).survey()["problems"] == []


@pytest.mark.parametrize(("change", "needle"), [
    (lambda d: d["statistics"].update(level=7.5), "statistics.level: 7.5"),
    (lambda d: d["statistics"].update(level=1e308), "statistics.level"),
    (lambda d: d["runs"].append(d["runs"][0]), "runs[1]: a second run of 1 workers")])
def test_a_result_valid_by_schema_but_absurd_is_refused(
        tmp_path: Path, change: object, needle: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = rd.document([rd.run(1)])
    change(doc)  # type: ignore[operator]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    assert main(["extrapolate", str(path), "--steps", "200"]) == 2
    one_line(capsys, "extrapolate", str(path), needle)


def test_an_output_inside_an_input_is_refused(tmp_path: Path, shards: Path, result_file: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    shard = shards / "shard-000000.tar"
    before = shard.read_bytes()
    assert main(["bench", str(shards), "--json", str(shard)]) == 2
    one_line(capsys, "bench", str(shard), "an input of this command")
    assert shard.read_bytes() == before
    assert main(["compare", str(result_file), str(result_file), "--json",
                 str(result_file)]) == 2
    one_line(capsys, "compare", str(result_file), "an input of this command")


def test_a_closed_standard_output_is_one_line() -> None:
    proc = subprocess.run([*DSBENCH, *EXTRAPOLATE], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=60,
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "standard output: it is closed" in proc.stderr
