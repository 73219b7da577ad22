"""Every command refuses bad options and inputs alike: exit 2, one line on stderr that starts with
`dsbench COMMAND: error:` and names what was wrong, and nothing written.

Arguments may name fixtures' files: {result} (a bench result), {export} (a small export),
{definition} (an export definition), {generated} (the export written from it), {tmp} (this
test's own directory, which must stay empty).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import resultdocs as rd
from layouts import assert_one_line_error, write_result

from dsbench.cli import main
from dsbench.export.generate import generate
from dsbench.export.spec import load_spec

DEFINITION = """
name = "tiny"
layout = "wds"
samples = 6
shard_samples = 2
[image]
sizes = "fixed"
width = 64
height = 48
[fields.label]
type = "int"
"""
# The demo, cut small, with its cache under {tmp}: a refusal must come before the cache is made.
DEMO = ["--cache", "{tmp}/cache", "--samples", "40", "--workers", "1", "--seconds", "0.3",
        "--rounds", "1", "--steps", "300", "--nodes", "2"]
STEPS = ["--steps", "300"]

CASES: list[tuple[Any, ...]] = [
    # demo
    ("demo", [*DEMO, "--samples", "0"], "--samples must be at least 1"),
    ("demo", [*DEMO, "--storage", "floppy"], "floppy"),
    ("demo", [*DEMO, "--rounds", "0"], "--rounds"),
    ("demo", [*DEMO, "--compute", "normal:x"], "--compute"),
    ("demo", [*DEMO, "--steps", "10"], "--steps 10"),
    ("demo", [*DEMO, "--steps", "100000000"], "at most 1,000,000 steps"),
    ("demo", [*DEMO, "--nodes", "32", "--steps", "900000"], "lower --steps"),  # x 256 ranks
    ("demo", [*DEMO, "--workers", "1,2"],
     "--workers 2: at --samples 40 the before export has 1 shard"),
    ("demo", [*DEMO, "--gpu-batch", "0"], "--gpu-batch must be"),
    ("demo", [*DEMO, "--stall-time", "-1"], "--stall-time must be"),
    ("demo", [*DEMO, "--out", "/dev/null/x"], "--out cannot be created"),
    ("demo", [*DEMO, "--cache", "/dev/null"], "--cache must be a directory"),
    # extrapolate
    ("extrapolate", STEPS, "either RESULT.json or --cpu-per-sample"),
    ("extrapolate", ["{result}", "--cpu-per-sample", "0.01", *STEPS], "not both"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--compute", "gamma:1,2", *STEPS],
     "unknown distribution"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--compute", "fast", *STEPS],
     "expected SECONDS"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--storage", "tape", *STEPS],
     "unknown profile"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--nodes", "0", *STEPS], "nodes must be"),
    ("extrapolate", ["--cpu-per-sample", "-1", *STEPS], "must be a finite number"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--stall-prob", "1.5", "--stall-time", "1",
                     *STEPS], "stall-prob"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--steps", "10"], "--steps 10"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--scaling", "8,x", *STEPS], "--scaling"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--cores-per-node", "8", *STEPS],
     "no cores left"),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--storage", "{corrupt_profile}", *STEPS],
     ("{corrupt_profile}", "not a storage profile")),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--storage", "{tmp}/none.json", *STEPS],
     ("{tmp}/none.json", "cannot read the storage profile")),
    ("extrapolate", ["--cpu-per-sample", "0.01", "--storage", "{result}+x", *STEPS],
     "expected FILE.json+SECONDS"),
    # bench
    ("bench", ["{export}", "--workers", "1,x"], "--workers expects positive integers"),
    ("bench", ["{export}", "--workers", "0"], "--workers expects positive integers"),
    ("bench", ["{export}", "--batch-size", "0"], "--batch-size must be an integer >= 1"),
    ("bench", ["{export}", "--seconds", "0"], "--seconds must be a positive number"),
    ("bench", ["{tmp}/nope"], "no such file or directory"),
    # probe
    ("probe", ["{tmp}/nope"], "no such file or directory"),
    ("probe", ["{tmp}"], "no non-empty files to probe"),
    ("probe", ["{export}", "--objects", "0"], "--objects must be at least 1"),
    ("probe", ["{export}", "--readers", "1,0"], "--readers expects positive integers"),
    ("probe", ["{export}", "--seconds", "0"], "--seconds must be a positive number"),
    # budget
    ("budget", ["--gpus", "128", "--mean-step", "1.4", "--gpu-util", "0.61", "--p99-step", "1.0"],
     "--p99-step 1 s is below --mean-step 1.4 s"),
    ("budget", ["--gpus", "128", "--mean-step", "-1", "--gpu-util", "0.61"],
     "--mean-step must be > 0"),
    ("budget", ["--gpus", "0", "--mean-step", "1", "--gpu-util", "0.61"],
     "--gpus must be an integer >= 1"),
    ("budget", ["--gpus", "128"], "nothing to compute"),
    ("budget", ["--gpus", "128", "--compute", "0.25"],
     "needs --gpu-batch, --cores-per-node, --cpu-per-sample"),
    # compare
    ("compare", ["{result}", "{result}", "--gpu-batch", "0"],
     "--gpu-batch must be an integer >= 1"),
    ("compare", ["{result}", "{result}", "--compute", "normal:x"], "--compute 'normal:x'"),
    ("compare", ["{result}", "{tmp}/nope.json"], "nope.json"),
    # generate
    ("generate", ["{bad_definition}", "{tmp}/o1"], ("bad.toml", "layout")),
    ("generate", ["{tmp}/missing.toml", "{tmp}/o2"], "{tmp}/missing.toml"),
    ("generate", ["{definition}", "{tmp}/o3", "--samples", "0"], "--samples"),
    ("generate", ["{definition}", "{generated}", "--seed", "4"], "different export"),
    ("generate", ["{gif_definition}", "{tmp}/o4"], ("{gif_definition}", "image.codec")),
    ("generate", ["{definition}", "{tmp}/o5", "--from", "{tmp}/nope"],
     ("{tmp}/nope", "no such file or directory")),
    ("generate", ["{definition}", "{tmp}/o6", "--from", "{export}", "--samples", "201"],
     ("{export}", "--samples 201 is more than the 200 samples")),
    ("generate", ["{definition}", "{tmp}/o7", "--from", "{export}", "--samples", "0"],
     "--samples must be at least 1"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_exports: dict[str, Path]
          ) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli-inputs")
    definition = root / "tiny.toml"
    definition.write_text(DEFINITION)
    generate(load_spec(definition), root / "generated", jobs=1)
    gif = root / "gif.toml"
    gif.write_text('name = "x"\nlayout = "wds"\n[image]\ncodec = "gif"\n')
    bad = root / "bad.toml"
    bad.write_text(DEFINITION.replace('layout = "wds"', 'layout = "zip"'))
    corrupt = root / "corrupt.json"
    corrupt.write_text('{"kind": "dsbench-bench"}')
    return {"result": write_result(root, "result.json", rd.document([rd.run(1), rd.run(2)])),
            "corrupt_profile": str(corrupt),
            "export": str(tiny_exports["before"]), "definition": str(definition),
            "generated": str(root / "generated"), "gif_definition": str(gif),
            "bad_definition": str(bad)}


def _params() -> list[Any]:
    """CASES as parameters named command-n (the n-th case of each command), with any marks."""
    out: list[Any] = []
    for command, argv, needle, *marks in CASES:
        n = sum(p.id is not None and p.id.startswith(f"{command}-") for p in out) + 1
        out.append(pytest.param(command, argv, needle, marks=marks, id=f"{command}-{n}"))
    return out


@pytest.mark.parametrize(("command", "argv", "needle"), _params())
def test_bad_options_exit_2_with_one_line_and_write_nothing(
        command: str, argv: list[str], needle: str | tuple[str, ...], files: dict[str, str],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.format(tmp=tmp_path, **files) for a in argv]
    capsys.readouterr()
    assert main([command, *args]) == 2
    needles = (needle,) if isinstance(needle, str) else needle
    assert_one_line_error(capsys.readouterr().err, command,
                          *(n.format(tmp=tmp_path, **files) for n in needles))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_sigterm_lost_in_a_finalizer_is_delivered_again() -> None:
    # Python ignores an exception raised in a __del__: a SIGTERM whose handler ran there (seen
    # in a library's finalizer during a native resume) would be lost, and the run go on. The
    # command's unraisablehook sends it again, and it unwinds from where the program is.
    import signal
    import sys
    import time

    from dsbench import cli

    class Dies:
        def __del__(self) -> None:
            raise cli.Terminated

    old, hook = signal.signal(signal.SIGTERM, cli._terminate), sys.unraisablehook
    sys.unraisablehook = cli._redeliver(hook)
    reached = False
    try:
        with pytest.raises(cli.Terminated):
            Dies()  # collected at once: its Terminated is ignored there, and sent again
            for _ in range(200):
                time.sleep(0.01)
            reached = True
    finally:
        sys.unraisablehook = hook
        signal.signal(signal.SIGTERM, old)
    assert not reached
