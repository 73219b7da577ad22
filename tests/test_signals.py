"""A signal at any moment ends a command: exit 130 (SIGINT, to the whole group as a terminal's
Ctrl-C) or 143 (SIGTERM, as a CI system cancels a job), within a few seconds, its last line on
stderr saying so with no traceback, and no process, shared memory or half-written file left.

The moments are drawn by a seeded generator over each command's run, so that they fall in its
start-up, its survey and count pass, worker spawn, warm-up, the window, between rounds and
worker counts, and its writes, and are the same in every run of the suite. `bench` has its own
test at named moments (test_bench_cli.py)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from leftovers import as_in_a_terminal, ended, group_killed_after, left_behind

from dsbench.export.generate import generate
from dsbench.export.spec import parse_spec

BOUND_S = 10.0  # a signal's run ends within this, from the moment it was sent
ENDING_S = 2.0  # a run that ends on its own this soon after a signal was already ending
_RNG = random.Random(20261205)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("signals")
    out = {}
    for layout in ("files", "wds"):
        spec = parse_spec({"name": f"tiny-{layout}", "layout": layout, "fields_as": "json",
                           "shard_samples": 6,
                           "image": {"sizes": "fixed", "width": 64, "height": 48},
                           "fields": {"label": {"type": "int"}}}, "test")
        out[layout] = root / layout
        generate(spec, out[layout], samples=24, jobs=1)
    return out


def _argv(command: str, exports: dict[str, Path], tmp: Path) -> list[str]:
    window = ["--seconds", "0.2", "--rounds", "2", "--batch-size", "2", "--workers", "1,2"]
    resume = ["resume", str(exports["files"]), "--restart-at", "2", "--ranks", "2", "--workers",
              "1", "--batch-size", "2", "--json", str(tmp / "a.json")]
    return {
        "compare": ["compare", str(exports["wds"]), str(exports["files"]), *window,
                    "--save", str(tmp / "a.json"), str(tmp / "b.json")],
        "gate": ["gate", str(exports["wds"]), str(exports["files"]), *window],
        "generate": ["generate", "formats/after.toml", str(tmp / "gen"), "--samples", "300"],
        "probe": ["probe", str(exports["files"]), "--seconds", "0.5"],
        "job": ["job", str(exports["wds"]), "--ranks", "2", "--workers", "1", "--gpu-batch",
                "2", "--compute", "0.01", "--steps", "200", "--json", str(tmp / "a.json")],
        "resume": resume,
        # torch's StatefulDataLoader: its workers spawn and import torch, seconds each
        "resume-torch": [*resume, "--backend", "torch", "--policy", "stateful"],
        # the demo runs the others in turn, and a local S3 server of its own
        # writes its candidates through a pool, then measures them as compare does
        "advise": ["advise", str(exports["files"]), "--layouts", "wds,arrow", "--shard-sizes",
                   "2kB", "--budget", "8s", "--batch-size", "2", "--write-definition",
                   str(tmp / "a.toml"), "--json", str(tmp / "a.json")],
        "demo": ["demo", "--cache", str(tmp / "cache"), "--samples", "40", "--workers", "1",
                 "--seconds", "0.3", "--rounds", "1", "--steps", "300", "--nodes", "2",
                 "--network-latency", "0.004", "--json", str(tmp / "a.json")],
    }[command]


# (command, signal, seconds after start), spread over a whole run of each (here compare and gate
# take about 6.5 s, generate about 4.4 s, probe about 1 s, job 8 s, resume 2 s, the demo 33 s,
# advise 12 s): 17 moments, with bench's 6 named ones (test_bench_cli.py) 23. gate is compare's
# run and a verdict: it gets fewer; probe's moments cost a second each, compare's three, the
# demo's a quarter of a minute: the suite's time is shared. The demo's moment falls in its
# object-store leg (8-15 s here; its later part, which a busy machine still reaches in time:
# its S3 server must be stopped too); its compare, probe and job are the commands above, and
# that a job puts back the handlers torch's launcher replaces is checked in tests/test_job.py.
SPAN = {"compare": (0.0, 6.0, 2), "gate": (0.0, 6.0, 2), "generate": (0.0, 4.2, 3),
        "probe": (0.0, 1.0, 4), "job": (0.0, 8.0, 1), "resume": (0.2, 1.2, 2),
        "resume-torch": (2.0, 6.0, 1), "demo": (12.0, 14.0, 1), "advise": (0.0, 11.0, 1)}
MOMENTS = [(c, _RNG.choice((signal.SIGINT, signal.SIGTERM)), round(_RNG.uniform(a, b), 3))
           for c, (a, b, n) in SPAN.items() for _ in range(n)]


# The demo's and advise's moments come 9 to 14 s into their runs: with the slow tests.
SLOW = {"demo", "advise"}


@pytest.mark.parametrize(("command", "sig", "delay"),
                         [pytest.param(*m, marks=pytest.mark.slow) if m[0] in SLOW else m
                          for m in MOMENTS],
                         ids=[f"{c}-{signal.Signals(s).name}-{d}s" for c, s, d in MOMENTS])
def test_a_signal_at_any_moment_ends_the_command_cleanly(
        command: str, sig: int, delay: float, exports: dict[str, Path], tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "dsbench", *_argv(command, exports, tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=repo, preexec_fn=as_in_a_terminal)
    with group_killed_after(proc):
        time.sleep(delay)
        sent = proc.poll() is None
        if sent:
            # SIGINT to the group, as a terminal's Ctrl-C; SIGTERM to the command, as a CI
            # runner's cancel (its children are its own to stop).
            if sig == signal.SIGINT:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        err, took = ended(proc, timeout=60)
    where = f"{command}, {signal.Signals(sig).name} at {delay} s"
    assert "Traceback" not in err, f"{where}: {err}"
    if not sent:  # it had finished (gate exits 1 on this pair)
        assert proc.returncode in (0, 1), f"{where}: {proc.returncode}: {err}"
    elif proc.returncode in (0, 1, -sig):
        # The signal came as it was ending, so it ended on its own a moment later: a run that
        # ignored the signal would have gone on for seconds. (-sig: it came in the interpreter's
        # last steps, after its work and its output, where Python has given the signal's
        # default action back.)
        assert took < ENDING_S, f"{where}: ran {took:.1f} s past the signal, exit " \
            f"{proc.returncode}: {err}"
    else:
        want = 130 if sig == signal.SIGINT else 143
        assert proc.returncode == want, f"{where}: exit {proc.returncode}: {err}"
        last = err.strip().splitlines()[-1]
        # 'dsbench compare: interrupted'; a launcher's: 'interrupted by SIGTERM; every rank
        # stopped'
        said = ("interrupted" if want == 130 else "terminated",
                f"interrupted by {signal.Signals(sig).name}; every rank stopped")
        assert last.endswith(said), f"{where}: {err}"
    assert took < BOUND_S, f"{where}: took {took:.1f} s"
    assert left_behind(proc.pid) == [], where
    # A run's own temporary directories (a native round's, advise's candidates) name it.
    assert list(Path(tempfile.gettempdir()).glob(f"dsbench-*-{proc.pid}-*")) == [], where
    _nothing_half_written(command, tmp_path, where)


def _nothing_half_written(command: str, tmp: Path, where: str) -> None:
    """What a command writes is whole or absent: result files parse, an export holds only
    complete units (and its manifest), no temporary file is left beside them."""
    for p in tmp.rglob("*"):
        assert ".tmp" not in p.name and not p.name.startswith(".dsbench"), f"{where}: {p}"
    for name in ("a.json", "b.json"):
        if (tmp / name).exists():
            json.loads((tmp / name).read_text())


def test_a_ctrl_c_in_the_interpreters_last_steps_prints_no_traceback(tmp_path: Path) -> None:
    """A Ctrl-C after the work and its output, while the interpreter shuts down (atexit), ends
    the process by the signal's own action: no KeyboardInterrupt traceback (seen once in the
    suite's runs, a probe's thread pool being joined at exit)."""
    script = ("import atexit, os, signal, sys\n"
              "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
              "sys.argv = ['dsbench', 'budget', '--gpus', '16', '--gpus-per-node', '8',\n"
              "            '--mean-step', '1.4', '--p99-step', '6.8', '--gpu-util', '61%',\n"
              "            '--host-cpu', '95%', '--slowdown', '2.1x']\n"
              "from dsbench.cli import entry\n"
              "entry()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, preexec_fn=as_in_a_terminal)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == -signal.SIGINT
    assert proc.stdout  # the report was printed before


def test_a_sigterm_inside_code_that_catches_a_librarys_errors_is_not_taken_for_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The SIGTERM handler raises Terminated wherever the main thread is. Arriving inside the
    # image-header probe (which turns PIL's errors into "not an image") or a format writer's
    # call (whose errors become one line), it must go on unwinding to the command line: once it
    # was counted as an unreadable image and the run went on to exit 0.
    from dsbench.adapters import survey
    from dsbench.cli import Terminated
    from dsbench.export.generate import library_errors

    def signalled(data: object) -> object:
        raise Terminated

    monkeypatch.setattr(survey, "open_image", signalled)
    with pytest.raises(Terminated):
        survey.probe_image(b"\xff\xd8\xff\xe0 a jpeg's first bytes")
    spec = parse_spec({"name": "t", "layout": "wds", "fields": {}}, "test")
    with pytest.raises(Terminated), library_errors(spec, "unit 0"):
        raise Terminated
