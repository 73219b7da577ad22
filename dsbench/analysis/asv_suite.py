"""What the asv suite that `dsbench asv init` writes into a repository runs: make the export as
the measured commit makes it, then measure reading it, as dsbench's own suite does.

The commit: asv sets ASV_COMMIT to the commit it measures. A definition is read from that commit
(`git show COMMIT:PATH`); an export command runs in that commit's files: asv's checkout of it
(ASV_BUILD_DIR, which the dsbench environment always sets), or, under another environment type
that leaves it unset, the commit extracted with `git archive`. Without ASV_COMMIT (`asv run
--python=same`) the working tree is measured.

The figures are those of dsbench's suite (benchmarks/asv/formats.py): the loader benchmark with
one worker over whole passes of the export, CPU ms, bytes and files per sample, and the exact
pass's CPU instructions per sample, three significant digits. asv takes every figure as
lower-is-better.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any, TypedDict

from dsbench import adapters
from dsbench.adapters.survey import summarize
from dsbench.errors import DsbenchError
from dsbench.export.spec import parse_spec
from dsbench.loader import counter, exact, tokenize, worker
from dsbench.loader.options import BenchOptions
from dsbench.loader.runner import run_bench

BATCH = 20  # as dsbench's own suite: a pass of its 200 samples is 10 whole batches
STDERR_LINES = 20  # of a failed export command, in the benchmark's error


class Export(TypedDict):
    """What setup_cache hands every benchmark: where the export is and what made it."""

    path: str
    samples: int
    made_by: str


def _git(root: Path, *args: str) -> bytes:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DsbenchError(f"git {' '.join(args)} failed: {err[-1] if err else done.returncode}",
                           path=root)
    return done.stdout


def commit() -> str | None:
    """The commit asv measures; None outside asv or in an existing environment."""
    return os.environ.get("ASV_COMMIT") or None


def definition_text(root: Path, definition: str) -> tuple[str, str]:
    """The definition as the measured commit has it, and a name for it in errors."""
    sha = commit()
    if sha is None:
        path = root / definition
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise DsbenchError(f"cannot read the definition: {exc.strerror or exc}",
                               path=path) from None
    name = f"{definition} at {sha[:8]}"
    return _git(root, "show", f"{sha}:{definition}").decode("utf-8"), name


def commit_tree(root: Path, scratch: Path) -> Path:
    """A directory holding the measured commit's files, for an export command to run in."""
    sha = commit()
    if sha is None:
        return root
    build = os.environ.get("ASV_BUILD_DIR")
    if build and _git(Path(build), "rev-parse", "HEAD").decode().strip() == sha:
        return Path(build)
    # Another environment type leaves ASV_BUILD_DIR unset when the commit was checked out
    # before; the repository still has the commit.
    tree = scratch / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    archive = scratch / "tree.tar"
    archive.write_bytes(_git(root, "archive", "--format=tar", sha))
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def run_command(command: str, tree: Path, out: Path, samples: int) -> None:
    """The user's export command, `{out}` and `{samples}` filled in, run by the shell in the
    commit's files."""
    line = command.replace("{out}", shlex.quote(str(out))).replace("{samples}", str(samples))
    env = dict(os.environ, DSBENCH_OUT=str(out), DSBENCH_SAMPLES=str(samples))
    done = subprocess.run(line, shell=True, cwd=tree, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        # Its own words, line by line (a DsbenchError would fold them into one), for asv to show.
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-STDERR_LINES:]
        raise RuntimeError("\n".join([f"the export command exited {done.returncode}: {line}",
                                      *tail]))


def make_export(root: Path, definition: str | None, command: str | None,
                samples: int) -> Export:
    """Write the measured commit's export under the current directory (asv's setup_cache runs
    in a temporary one of its own)."""
    out = Path("export").resolve()
    sha = commit()
    made_by = f"commit {sha[:8]}" if sha else "the working tree"
    if definition is not None:
        # Here, not at the top: asv imports the suite (and so this module) once per benchmark,
        # and only setup_cache generates.
        from dsbench.export.generate import generate

        text, name = definition_text(root, definition)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise DsbenchError(f"not valid TOML: {exc}", path=name) from None
        generate(parse_spec(data, name), out, samples=samples, seed=0)
        made_by = f"{name} ({made_by})"
    elif command is not None:
        out.mkdir()
        run_command(command, commit_tree(root, Path("scratch").resolve()), out, samples)
        made_by = f"{command!r} ({made_by})"
    else:
        raise DsbenchError("the suite names neither a definition nor an export command")
    found = int(adapters.open_export(str(out)).survey()["samples"])
    if found < 1:
        raise DsbenchError(f"{made_by} wrote no samples", path=out)
    return {"path": str(out), "samples": found, "made_by": made_by}


def three_digits(x: float) -> float:
    """Three significant digits, as every figure dsbench shows; asv prints track values as is."""
    return float(f"{x:.3g}")


def measure(export: Export) -> dict[str, Any]:
    """One round of the loader benchmark with one worker, its window the export's whole passes
    (one pass when the sample count is a multiple of the batch), after a pass of warm-up. The
    exact pass has a benchmark of its own (`instructions_per_sample`)."""
    batch = min(BATCH, export["samples"])
    batches = math.ceil(export["samples"] / batch)
    opts = BenchOptions(workers=(1,), batch_size=batch, batches=batches, rounds=1,
                        warmup_batches=batches, exact=False)
    run: dict[str, Any] = dict(run_bench(export["path"], opts)["runs"][0])
    return run


def exact_available() -> None:
    """For a benchmark's setup: asv skips the benchmark where valgrind is not installed."""
    if counter.version() is None:
        raise NotImplementedError(counter.INSTALL)


def settled(path: str, opts: BenchOptions) -> BenchOptions:
    """`opts` set for what the export's samples carry, as a bench run sets its sides before
    measuring (the suite's benchmarks that count or decode outside one need the same): token
    ids are cropped, text tokenized, audio cut at its own rate, not decoded as images."""
    found = adapters.open_export(path)
    summary = summarize(found.survey(), path, found.ignored, found)
    return tokenize.settled(path, opts.found(summary), worker.open_export)


def instructions_per_sample(export: Export) -> float:
    """CPU instructions per sample, counted by the exact pass (loader/exact.py): the same for the
    same export on any machine of the same CPU, so a commit that adds 2% shows as a step. Three
    significant digits, as the other figures."""
    opts = settled(export["path"], BenchOptions(batch_size=min(BATCH, export["samples"]),
                                                exact=True))
    x = exact.count([export["path"]], [opts], lambda _m: None)[0]
    return three_digits(float(x.get("instructions_per_sample", 0.0)))


def cpu_ms_per_sample(export: Export) -> float:
    """The loader's CPU per sample (main process and its worker, from the OS's accounting)."""
    return three_digits(1e3 * measure(export)["cpu_s_per_sample"])


def bytes_per_sample(export: Export) -> float:
    """Bytes read plus memory-mapped bytes touched per sample, counted over whole units."""
    return three_digits(measure(export)["bytes_per_sample"])


def files_per_sample(export: Export) -> float:
    """Files opened per sample, counted over whole units."""
    return three_digits(measure(export)["files_per_sample"])
