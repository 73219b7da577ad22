"""`dsbench asv init` in a throw-away git repository: asv measures the export as each commit
makes it, and `asv continuous` fails (exit 1) the commit that re-exports to per-sample files.
Bad input is one line and exit 2, with nothing written."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from layouts import assert_one_line_error

import dsbench
from dsbench.analysis import asv_suite
from dsbench.cli import main

FORMATS = Path(dsbench.__file__).parent / "export" / "formats"
SAMPLES = 40  # one shard of the WebDataset export: 1/40 = 0.025 files per sample


def definition(layout_of: str) -> str:
    """A shipped definition (before: WebDataset shards; after: per-sample files) under the name
    `train`, as a repository's own definition would be."""
    lines = (FORMATS / f"{layout_of}.toml").read_text(encoding="utf-8").splitlines()
    return "\n".join('name = "train"' if line.startswith("name =") else line
                     for line in lines) + "\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of git and asv: a home of the test's own (asv machine writes
    ~/.asv-machine.json there) and a fixed identity for commits."""
    home = tmp_path / "home"
    home.mkdir()
    return dict(os.environ, HOME=str(home), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                GIT_CONFIG_NOSYSTEM="1")


def sh(env: dict[str, str], cwd: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL, timeout=300)


def git(env: dict[str, str], repo: Path, *args: str) -> str:
    done = sh(env, repo, "git", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def asv(env: dict[str, str], repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The Python running the tests runs asv, so the dsbench environment runs on it too.
    return sh(env, repo, sys.executable, "-m", "asv", *args)


def new_repo(env: dict[str, str], repo: Path) -> Path:
    repo.mkdir()
    git(env, repo, "init", "-q", "-b", "main")
    return repo


def test_continuous_fails_the_commit_that_reexports_to_per_sample_files(
        tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    repo = new_repo(env, tmp_path / "repo")
    (repo / "formats").mkdir()
    (repo / "formats" / "train.toml").write_text(definition("before"), encoding="utf-8")
    assert main(["asv", "init", str(repo), "--definition", "formats/train.toml",
                 "--samples", str(SAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "wrote asv.conf.json, benchmarks/dsbench_export.py" in out
    assert "asv continuous --factor 1.1 main HEAD" in out
    git(env, repo, "add", "-A")
    git(env, repo, "commit", "-q", "-m", "train: WebDataset shards, tracked with asv")
    assert git(env, repo, "status", "--porcelain") == ""  # .asv/ is ignored

    assert asv(env, repo, "machine", "--yes").returncode == 0
    (repo / "formats" / "train.toml").write_text(definition("after"), encoding="utf-8")
    git(env, repo, "commit", "-q", "-am", "train: re-export as per-sample JPEG + JSON")
    # Both commits measured, in the dsbench environment.
    # The figure checked below (the instructions' benchmark: test_an_export_command_...).
    cont = asv(env, repo, "continuous", "--factor", "1.1", "--bench", "track_files",
               "main~1", "main")
    assert cont.returncode == 1, cont.stdout + cont.stderr
    assert "dsbench-py" in cont.stdout, cont.stdout
    assert "PERFORMANCE DECREASED" in cont.stdout, cont.stdout
    # | Change | Before | After | Ratio | Benchmark |: files per sample 0.025 -> 2.0, worse.
    rows = [[cell.strip() for cell in line.split("|")[1:-1]]
            for line in cont.stdout.splitlines() if line.startswith("| ")]
    files_row = [r for r in rows if r[-1] == "dsbench_export.ExportCost.track_files_per_sample"]
    assert files_row == [["+", "0.025", "2", "80", files_row[0][-1]]], cont.stdout


EXPORTER = """\
import io, sys, tarfile
from PIL import Image

out, n = sys.argv[1], int(sys.argv[2])
with tarfile.open(f"{out}/shard-000000.tar", "w") as tar:
    for i in range(n):
        buf = io.BytesIO()
        Image.new("RGB", (48, 32), (i, 0, 0)).save(buf, "JPEG")
        for ext, data in (("jpg", buf.getvalue()), ("cls", str(i % 10).encode())):
            info = tarfile.TarInfo(f"{i:06d}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
"""


@pytest.mark.slow  # 15 to 20 s: `python -m pytest -m slow` (CI runs it)
def test_an_export_command_runs_in_the_measured_commits_files(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_repo(env, tmp_path / "repo")
    (repo / "export.py").write_text(EXPORTER, encoding="utf-8")
    git(env, repo, "add", "-A")
    git(env, repo, "commit", "-q", "-m", "our exporter")
    sha = git(env, repo, "rev-parse", "HEAD")
    # The working tree's exporter is broken since: the commit's is the one that must run.
    (repo / "export.py").write_text("raise SystemExit(3)\n", encoding="utf-8")
    scratch = tmp_path / "cache"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("ASV_COMMIT", sha)
    monkeypatch.delenv("ASV_BUILD_DIR", raising=False)  # as other environment types leave it
    command = f"{shlex.quote(sys.executable)} export.py {{out}} {{samples}}"
    export = asv_suite.make_export(repo, None, command, 20)
    assert export["samples"] == 20 and sha[:8] in export["made_by"]
    assert asv_suite.files_per_sample(export) == 0.05  # one shard of 20 samples
    # The instructions' benchmark (ExactCost): counted under valgrind, three digits.
    asv_suite.exact_available()
    counted = asv_suite.instructions_per_sample(export)
    assert counted > 1e5 and counted == float(f"{counted:.3g}")
    monkeypatch.delenv("ASV_COMMIT")  # outside asv: the working tree, broken
    (scratch / "export").rename(scratch / "first")
    with pytest.raises(RuntimeError, match="exited 3"):
        asv_suite.make_export(repo, None, command, 20)


def refuse(capsys: pytest.CaptureFixture[str], args: list[str], *needles: str) -> None:
    assert main(["asv", "init", *args]) == 2
    assert_one_line_error(capsys.readouterr().err, "asv", *needles)


def test_bad_input_is_one_line_and_writes_nothing(
        tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    refuse(capsys, [str(plain), "--command", "x {out}"], "not a git repository")
    repo = new_repo(env, tmp_path / "repo")
    (repo / "train.toml").write_text(definition("before"), encoding="utf-8")
    (tmp_path / "outside.toml").write_text(definition("before"), encoding="utf-8")
    (repo / "bad.toml").write_text("name = \n", encoding="utf-8")
    refuse(capsys, [str(repo), "--definition", "missing.toml"], "no such definition file")
    refuse(capsys, [str(repo), "--definition", str(tmp_path / "outside.toml")],
           "inside the repository")
    refuse(capsys, [str(repo), "--definition", "bad.toml"], "bad.toml", "TOML")
    refuse(capsys, [str(repo)], "either --definition PATH or --command CMD")
    refuse(capsys, [str(repo), "--definition", "train.toml", "--command", "x {out}"],
           "not both")
    refuse(capsys, [str(repo), "--command", "make export"], "{out}")
    refuse(capsys, [str(repo), "--definition", "train.toml", "--samples", "0"], "--samples")
    refuse(capsys, [str(repo), "--definition", "train.toml", "--branch", "nope"],
           "--branch nope: no such branch")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "bad.toml", "train.toml"]

    assert main(["asv", "init", str(repo), "--definition", "train.toml"]) == 0
    capsys.readouterr()
    suite = (repo / "benchmarks" / "dsbench_export.py").read_text(encoding="utf-8")
    refuse(capsys, [str(repo), "--command", "x {out}"],
           "asv.conf.json, benchmarks/dsbench_export.py already there", "--force")
    assert (repo / "benchmarks" / "dsbench_export.py").read_text(encoding="utf-8") == suite
    assert main(["asv", "init", str(repo), "--command", "x {out}", "--force"]) == 0
    assert "COMMAND = 'x {out}'" in (repo / "benchmarks" / "dsbench_export.py").read_text(
        encoding="utf-8")
    assert not [p for p in repo.rglob(".*.tmp*")]  # no temporaries left


@pytest.mark.slow  # two exact passes under valgrind, 15 s: with the slow tests (CI runs them)
def test_the_instructions_benchmark_counts_a_token_export_as_bench_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The asv suite counts outside a bench run, so it must set the pipeline for what the
    # samples carry as bench does: token ids cropped to a sequence, not decoded as images
    # (which failed: "could not broadcast ... (224,224,3)").
    import json

    asv_suite.exact_available()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASV_COMMIT", raising=False)
    (tmp_path / "tokens.toml").write_text((FORMATS / "tokens.toml").read_text("utf-8"), "utf-8")
    export = asv_suite.make_export(tmp_path, "tokens.toml", None, 20)
    counted = asv_suite.instructions_per_sample(export)
    out = tmp_path / "bench.json"
    assert main(["bench", export["path"], "--exact", "--workers", "1", "--rounds", "2",
                 "--seconds", "0.2", "--batch-size", "20", "--json", str(out)]) == 0
    bench = json.loads(out.read_text())["exact"]["instructions_per_sample"]
    assert counted == float(f"{bench:.3g}")
