"""What installing dsbench does to an environment: no requirement pins a version (a training
environment keeps its own torch), and a version too old to work is one line at run time."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from layouts import assert_one_line_error

from dsbench import installed
from dsbench.cli import main
from dsbench.errors import DsbenchError

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def requirements() -> list[tuple[str, str]]:
    """(where, requirement) for the dependencies and every extra."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    found = [("dependencies", r) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        found += [(f"[{extra}]", r) for r in reqs]
    return found


def test_no_requirement_pins_or_caps_a_version() -> None:
    reqs = requirements()
    assert any(r.startswith("torch>=") for _, r in reqs)  # the bound the test is about
    # ==, ~= and an upper bound would each replace what a training environment has.
    pinned = [(where, r) for where, r in reqs if re.search(r"==|~=|<|!=", r)]
    assert pinned == []


def test_every_minimum_checked_at_run_time_is_the_extras_bound() -> None:
    for module, (minimum, extra) in installed.MINIMUM.items():
        reqs = [r for where, r in requirements() if where == f"[{extra}]"]
        assert f"{module}>={minimum}" in reqs, (module, extra, reqs)


@pytest.mark.parametrize(("version", "older"), [("2.3.1+cpu", True), ("2.4.0", False),
                                                 ("2.13.0+cpu", False), ("10.0", False)])
def test_a_version_is_compared_by_its_release_numbers(version: str, older: bool) -> None:
    assert (installed.release(version) < installed.release("2.4")) is older


def test_a_torch_too_old_is_one_line_naming_the_version(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    monkeypatch.setattr(installed, "version_of", lambda name: "2.3.1")
    with pytest.raises(DsbenchError, match=r"needs torch >= 2\.4; this environment has torch "
                                           r"2\.3\.1"):
        installed.require("torch", "--backend torch")
    # Through a command: one line, exit 2, before anything starts.
    assert main(["job", "/nowhere", "--ranks", "2"]) == 2
    assert_one_line_error(capsys.readouterr().err, "job", "dsbench job needs torch >= 2.4",
                          "torch 2.3.1")


def test_a_missing_library_is_one_line_naming_its_extra(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setitem(sys.modules, "torchdata", None)
    with pytest.raises(DsbenchError, match=r"torchdata >= 0\.11, which is not installed .*"
                                           r"pip install 'dsbench\[torch\]'"):
        installed.require("torchdata", "--policy stateful")


def test_the_demo_extra_leaves_torch_out_and_the_demo_says_what_it_skips_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsbench.report import demo, verdict

    demo_extra = {re.split(r"[\[<>=!~ ]", r)[0] for where, r in requirements()
                  if where == "[demo]"}
    # torch's wheels come with gigabytes of CUDA libraries: the demo runs without them.
    assert demo_extra and not demo_extra & {"torch", "torchdata", "torchvision"}
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ImportError
    said: list[str] = []
    check = demo.job_check(tmp_path, demo.DemoOptions(cache=tmp_path), said.append)
    assert said == [] and check["skipped"].startswith("the job check needs torch >= ")
    line = verdict.job_check_text(check)
    assert line.startswith("none run (the job check needs torch") and line.endswith(
        "pip install 'dsbench[torch]')")
