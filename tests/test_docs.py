"""Every command the docs show runs, in the order shown, on small data.

dsbench commands run in-process with their sizes cut (`--samples`, `--workers`, `--seconds`,
`--rounds`, `--steps`, `--objects`, `--readers`) and every `/tmp/` path moved under the test's
own directory: the same commands, quicker and rougher. Python blocks run as written, with the
same paths moved. Commands that are not dsbench's are not run here; NOT_HERE says where each is
exercised.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import resultdocs as rd

from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.spec import FORMATS_DIR, load_spec
from dsbench.results import document as results
from dsbench.storage.server import LocalS3

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
NOT_HERE = {
    "pip": "installs the project; .ci/run installs it the same way",
    "sudo apt-get install": "installs a system package (valgrind); .ci/run installs it so",
    "python -m pytest": "is this test suite",
    "asv": ".ci/run runs asv machine, check and run --quick (docs/asv.md)",
    "torchrun": "tests/test_job.py runs a job as two torchrun nodes on localhost",
    "srun": "needs Slurm; tests/test_job_nodes.py runs two tasks with srun's variables set",
    "dsbench job s3://bucket/export --nodes 2": "needs two machines; tests/test_job_nodes.py "
                                                "runs two such launchers on this one",
    "python benchmarks/job_accuracy.py": "is the measurement behind docs/job.md's tables "
                                         "(minutes of jobs)",
    "python benchmarks/access_patterns.py": "is the measurement behind "
                                            "docs/access-patterns.md's table (minutes)",
    "dsbench proxy": "serves until it is stopped; tests/test_store_faults.py starts one, reads "
                     "through it and stops it",
}
# Docs without a command this test runs, and why: their case would pass vacuously.
NO_COMMANDS = {
    "architecture.md": "describes the package's stages; it shows no commands",
    "demo.md": "shows the demo's verdict; README.md runs its command",
    "features.md": "describes every command in a paragraph; the guides run them",
    "glossary.md": "defines words; it shows no commands",
    "asv.md": "shows only asv's commands (see NOT_HERE)",
    "results.md": "is generated from the result schemas; it shows no commands",
    "statistics.md": "explains the statistics; it shows no commands",
    "verdicts.md": "lists the words of verdicts and their thresholds; it shows no commands",
}
# What every `dsbench gate` in the docs exits with: a gate that never fails, or never passes,
# must not satisfy this test.
GATE_EXIT = {
    # README.md: before's shards against after's per-sample files: FAIL (files, bytes, CPU).
    "dsbench gate /tmp/current /tmp/candidate": 1,
    # ci-gate.md: the before export against the after stand-in, one file per sample more: FAIL.
    "dsbench gate /tmp/base /tmp/cand --summary \"$GITHUB_STEP_SUMMARY\" --json gate.json": 1,
    # candidate.md: the after export against the Parquet candidate, which reads fewer files.
    # Its memory fails the gate at the guide's size (tests/test_gate.py measures the guide's
    # candidate at 200 samples and 3 rounds: it fails). Here the export is 40 samples, one row
    # group whose memory is within the gate's 100 MB allowance, and one round gives no interval.
    "dsbench gate /tmp/dsbench/current.json /tmp/dsbench/candidate.json": 0,
}
# What other commands in the docs exit with: the errors they show on purpose.
EXIT = {"dsbench inspect s3://nobucket/after": 2}
# The exports the object-store docs read from a bucket: made here, uploaded to a local server.
# `calm` and `hot` are the same exports in the buckets the throttling example reads (here
# without the proxy: what is checked is that the commands run).
BUCKETS, IN_BUCKET = ("exports", "calm", "hot"), ("before", "after")
SAMPLES, SECONDS, ROUNDS, STEPS, BATCH = 40, 0.3, 1, 400, 8
# `python export.py` in the CI example is a project's own export pipeline: an export written by
# dsbench stands in for it.
STAND_INS = {"python export.py": ["generate", "after"]}

_FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", re.S | re.M)


def commands(doc: Path) -> list[tuple[str, str]]:
    """(kind, text) in document order: kind is 'shell' or 'python'."""
    out: list[tuple[str, str]] = []
    for lang, body in _FENCE.findall(doc.read_text()):
        if lang == "python":
            out.append(("python", textwrap.dedent(body)))
            continue
        lines = _joined(body)
        if lang in ("sh", "bash"):
            picked = [ln for ln in lines if ln and not ln.startswith("#")]
        elif lang == "yaml":
            picked = [ln.split("run:", 1)[1] for ln in lines if ln.lstrip().startswith("- run:")]
        else:  # console and plain blocks: only `$ ` lines are commands
            picked = [ln[2:] for ln in lines if ln.startswith("$ ")]
        for line in picked:
            out += [("shell", part.strip()) for part in line.split("&&")]
    return out


def _joined(body: str) -> list[str]:
    lines, cur = [], ""
    for raw in body.splitlines():
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1]
            continue
        lines.append((cur + raw).strip() if cur else raw.strip())
        cur = ""
    return lines


def _set(argv: list[str], option: str, value: str) -> list[str]:
    if option in argv:
        i = argv.index(option)
        return [*argv[:i + 1], value, *argv[i + 2:]]
    return [*argv, option, value]


def equivalent(argv: list[str], tmp: Path) -> list[str]:
    """The same dsbench command, on small data under `tmp`."""
    argv = [a.replace("/tmp/", f"{tmp}/").replace("$GITHUB_STEP_SUMMARY", f"{tmp}/summary.md")
            for a in argv]
    if argv[0] == "advise" and "--write-definition" not in argv:  # not into the checkout
        argv = [*argv, "--write-definition", "advised.toml"]
    for option in ("--json", "--save", "--write-definition", "--html"):
        # Outputs named relative to where the docs run them land in `tmp`, not the checkout.
        if option in argv and (i := argv.index(option) + 1) < len(argv) and \
                not Path(argv[i]).is_absolute() and argv[i] != "-":
            argv = [*argv[:i], str(tmp / argv[i]), *argv[i + 1:]]
    cmd = argv[0]
    measures = "--dataset" in argv or any(
        a.startswith("s3://") or (not a.endswith(".json") and Path(a).is_dir()) for a in argv[1:])
    if cmd == "generate":
        argv = _set(argv, "--samples", str(SAMPLES))
    if cmd == "demo":
        # The demo's measured 2-rank job, its object-store leg and its advice are tested in
        # tests/test_demo.py.
        argv = [*argv, *(o for o in ("--no-job", "--no-object-store", "--no-advice")
                         if o not in argv)]
        argv = _set(argv, "--cache", str(tmp / "demo-cache"))
        argv = _set(argv, "--samples", str(SAMPLES))
    if cmd == "demo" or (cmd in ("bench", "compare", "gate") and measures):
        argv = _set(_set(_set(argv, "--workers", "1"), "--seconds", str(SECONDS)),
                    "--rounds", str(ROUNDS))
    if (cmd == "demo" or (cmd in ("bench", "compare", "gate", "advise") and measures)) and \
            "--batch-size" not in argv:
        # Batches of 8, where the doc leaves the default (64): a round's warm-up batch of 64
        # would read the small export over and over (two GETs per sample from a bucket).
        argv = [*argv, "--batch-size", str(BATCH)]
    if "--epochs" in argv:  # whole epochs of the small export: batches that fit in it
        argv = _set(_set(argv, "--epochs", "2"), "--batch-size", "8")
    if cmd in ("extrapolate", "demo"):
        argv = _set(argv, "--steps", str(STEPS))
    if cmd == "job":  # each rank count is a launch: a few seconds of start-up each
        argv = _set(argv, "--steps", "30")
        if "--ranks-sweep" in argv:
            argv = _set(argv, "--ranks-sweep", "1")
    if cmd == "advise":  # one layout and shard size beside the export's own: a first pass
        argv = _set(_set(_set(_set(argv, "--layouts", "arrow"), "--shard-sizes", "64MB"),
                        "--budget", "5s"), "--compressions", "none")
    if cmd == "probe":
        argv = _set(_set(_set(argv, "--objects", "20"), "--readers", "1,2"), "--seconds",
                    str(SECONDS))
    return argv


def not_here(text: str) -> bool:
    return any(text == prefix or text.startswith(prefix + " ") for prefix in NOT_HERE)


def run_shell(text: str, tmp: Path) -> None:
    argv = shlex.split(text, comments=True)  # a comment after a command is the reader's
    for prefix, stand_in in STAND_INS.items():
        if text.startswith(prefix + " "):
            out = argv[argv.index("--out") + 1]
            argv = ["dsbench", *stand_in, out]
    assert argv[0] == "dsbench", f"a command the docs test does not know: {text}"
    if argv[1] == "gate":
        assert text in GATE_EXIT, f"a gate command without an expected exit code: {text}"
        want = GATE_EXIT[text]
    else:
        want = EXIT.get(text, 0)
    rc = main(equivalent(argv[1:], tmp))
    assert rc == want, f"exit {rc}, not {want}: {text}"


RUNNABLE = [d for d in DOCS if d.name not in NO_COMMANDS]


@pytest.mark.parametrize("doc", RUNNABLE, ids=[d.name for d in RUNNABLE])
def test_every_command_in_the_doc_runs(doc: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       request: pytest.FixtureRequest) -> None:
    if "s3://" in doc.read_text():
        _fill_bucket(request.getfixturevalue("s3_env"), tmp_path)
    monkeypatch.chdir(tmp_path)  # as a user runs them: outside the checkout, their own
    shutil.copytree(REPO / "docs" / "examples", tmp_path / "docs" / "examples")  # step files
    # docs/examples/wds_dataset.py reads the shards the docs write under /tmp/dsbench/before.
    monkeypatch.setenv("SHARDS", f"{tmp_path}/dsbench/before")
    # docs/model.md's Python sketch reads a result named after.json from where it runs.
    results.write_result(tmp_path / "after.json", rd.document([rd.run(1), rd.run(2)]))
    executed = 0
    for kind, text in commands(doc):
        if kind == "python":
            code = text.replace("/tmp/", f"{tmp_path}/")
            # -P: the block runs in tmp_path, where a folder it makes could shadow the package.
            proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                                  text=True, timeout=300, cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
        elif not_here(text):
            continue
        else:
            run_shell(text, tmp_path)
        executed += 1
    assert executed > 0, f"{doc.name} ran no command: list it in NO_COMMANDS with the reason"


def _fill_bucket(server: LocalS3, tmp: Path) -> None:
    """The bucket the docs read: small before and after exports, uploaded."""
    for name in IN_BUCKET:
        generate(load_spec(FORMATS_DIR / f"{name}.toml"), tmp / "bucket" / name, samples=SAMPLES)
    for bucket in BUCKETS:
        url = server.create_bucket(bucket)
        for name in IN_BUCKET:
            server.upload_tree(tmp / "bucket" / name, f"{url}/{name}")


@pytest.mark.parametrize("name", sorted(NO_COMMANDS))
def test_docs_left_out_show_no_command_to_run(name: str) -> None:
    shown = commands(REPO / "docs" / name)
    assert [t for k, t in shown if k == "python" or not not_here(t)] == []


def test_every_gate_in_the_docs_has_its_exit_code() -> None:
    shown = {t for d in DOCS for k, t in commands(d)
             if k == "shell" and t.startswith("dsbench gate")}
    assert shown == set(GATE_EXIT)


def test_the_docs_show_the_commands_this_test_runs() -> None:
    shown = {d.name: commands(d) for d in DOCS}
    assert any(t.startswith("dsbench demo") for _, t in shown["README.md"])
    assert any(t.startswith("dsbench budget") for _, t in shown["incident.md"])
    assert any(k == "python" for k, _ in shown["candidate.md"])
    assert any(t.startswith("dsbench gate") for _, t in shown["ci-gate.md"])


def shown_outputs(doc: Path) -> list[tuple[str, str]]:
    """(command, the output the doc shows under it) for every `$ ` command with output."""
    pairs: list[tuple[str, str]] = []
    for _lang, body in _FENCE.findall(doc.read_text()):
        cmd, out = None, []
        for line in [*body.splitlines(), "$ "]:
            if line.startswith("$ ") or (cmd and cmd.endswith("\\")):
                if line.startswith("$ ") and cmd and not cmd.endswith("\\") and out:
                    pairs.append((cmd, "\n".join(out)))
                if line.startswith("$ "):
                    cmd, out = line[2:], []
                else:
                    cmd = cmd[:-1] + " " + line.strip()
            elif cmd is not None:
                out.append(line)
    return pairs


# The model's outputs depend only on their stated inputs and the seed, so the docs can show them
# byte for byte; measured outputs differ from run to run and are only run above.
def _pure_model(cmd: str) -> bool:
    return cmd.startswith("dsbench budget") or (cmd.startswith("dsbench extrapolate")
                                                and "--cpu-per-sample" in cmd)


PURE = [(d, c, o) for d in DOCS for c, o in shown_outputs(d) if _pure_model(c)]


@pytest.mark.parametrize(("doc", "cmd", "shown"), PURE,
                         ids=[f"{d.name}:{c[:40]}" for d, c, _ in PURE])
def test_model_outputs_in_the_docs_are_what_the_commands_print(
        doc: Path, cmd: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(shlex.split(cmd)[1:]) == 0
    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    lines = shown.splitlines()
    # An excerpt starts at a heading of the output; a whole output matches from its first line.
    start = printed.index(lines[0])
    assert printed[start:start + len(lines)] == lines


def test_the_docs_show_model_outputs_to_check() -> None:
    assert len(PURE) >= 4


def _transcripts_module() -> Any:
    spec = importlib.util.spec_from_file_location("transcripts", REPO / "docs" / "transcripts.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["transcripts"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_transcript_script_replaces_each_shown_output_and_nothing_else(
        tmp_path: Path) -> None:
    tool = _transcripts_module()
    budget = ("dsbench budget --gpus 16 --gpus-per-node 8 --mean-step 1.4 --p99-step 6.8 "
              "--gpu-util 61% --host-cpu 95% --slowdown 2.1x")
    doc = tmp_path / "guide.md"
    doc.write_text(f"Prose.\n\n```console\n$ echo one\nstale\n$ {budget}\nstale too\n```\n\n"
                   "More prose.\n\n<!-- output of: printf 'a\\nb\\n' -->\n\n```\nold\n```\n")
    assert [s.command for s in tool.transcripts(doc.read_text())] == [
        "echo one", budget, "printf 'a\\nb\\n'"]
    assert tool.main([str(doc)]) == 0
    text = doc.read_text()
    printed = subprocess.run([sys.executable, "-m", *shlex.split(budget)],
                             capture_output=True, text=True).stdout
    assert text == (f"Prose.\n\n```console\n$ echo one\none\n$ {budget}\n{printed}```\n\n"
                    "More prose.\n\n<!-- output of: printf 'a\\nb\\n' -->\n\n```\na\nb\n```\n")
    # A command that fails as the doc does not show leaves the doc as it was, whole.
    doc.write_text("```console\n$ echo fine\nx\n$ exit 3\ny\n```\n")
    assert tool.main([str(doc)]) == 1
    assert doc.read_text() == "```console\n$ echo fine\nx\n$ exit 3\ny\n```\n"
    assert [p.name for p in tmp_path.iterdir()] == ["guide.md"]
