"""Options from a settings file (dsbench.toml or pyproject.toml's [tool.dsbench]), under the
command line, and `dsbench config` saying where each value comes from."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from layouts import write_result
from resultdocs import document, run

from dsbench.cli import apply_settings, build_parser, main, settled
from dsbench.errors import DsbenchError
from dsbench.loader.options import BenchOptions

PYPROJECT = """\
[project]
name = "team"

[tool.dsbench]
seconds = 0.5
workers = 2

[tool.dsbench.gate]
max-files-ratio = 3
strict_throughput = true
"""


def parsed(argv: list[str]) -> argparse.Namespace:
    parser = build_parser(argv)
    applied = apply_settings(parser, argv)
    args = parser.parse_args(argv)
    settled(args, argv, applied)
    return args


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose pyproject.toml sets options; the commands run in a directory below."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "ci" / "jobs").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "ci" / "jobs")
    return tmp_path


def one_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_top_keys_reach_every_command_with_the_option_and_a_table_only_its_command(
        team: Path) -> None:
    gate = parsed(["gate", "a.json", "b.json"])
    assert (gate.seconds, gate.workers, gate.max_files_ratio, gate.strict_throughput) == (
        0.5, "2", 3.0, True)
    bench = parsed(["bench", "x"])
    assert (bench.seconds, bench.workers) == (0.5, "2")
    assert not hasattr(bench, "max_files_ratio")
    job = parsed(["job", "x"])
    assert job.workers == 2  # job's --workers is one count: the same key, its own type
    assert parsed(["gate", "a", "b", "--seconds", "3", "--max-files-ratio", "1.1"]).seconds == 3.0


def test_the_command_line_wins_over_the_table_and_the_table_over_the_top(
        team: Path) -> None:
    (team / "pyproject.toml").write_text(PYPROJECT + "seconds = 0.25\n")  # into [...gate]
    assert parsed(["gate", "a", "b"]).seconds == 0.25
    assert parsed(["compare", "a", "b"]).seconds == 0.5
    assert parsed(["gate", "a", "b", "--seconds=4"]).seconds == 4.0


def test_a_dsbench_toml_wins_over_pyproject_and_a_pyproject_without_the_table_is_passed_over(
        team: Path) -> None:
    (team / "ci" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    assert parsed(["bench", "x"]).seconds == 0.5  # the inner pyproject has no [tool.dsbench]
    (team / "ci" / "dsbench.toml").write_text("seconds = 1.5\n[bench]\nrounds = 7\n")
    args = parsed(["bench", "x"])
    assert (args.seconds, args.rounds) == (1.5, 7)
    assert args.workers != "2"  # the nearest file only: pyproject's workers not merged in
    other = team / "elsewhere.toml"
    other.write_text("[tool.dsbench]\nseconds = 9\n")
    assert parsed(["bench", "x", "--config", str(other)]).seconds == 9.0


def test_the_gate_passes_or_fails_by_the_file_and_the_command_line_overrides_it(
        team: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_result(team, "a.json", document([run(files_per_sample=1.0)]))
    b = write_result(team, "b.json", document([run(files_per_sample=2.0)]))
    assert main(["gate", a, b]) == 0  # 2x the files, within the file's 3x
    assert "PASSED" in capsys.readouterr().out
    assert main(["gate", a, b, "--max-files-ratio", "1.5"]) == 1
    assert "FAILED" in capsys.readouterr().out
    (team / "pyproject.toml").write_text(PYPROJECT.replace("max-files-ratio = 3",
                                                           "max-files-ratio = -3"))
    assert main(["gate", a, b]) == 2
    one_line(capsys, f"{team / 'pyproject.toml'} [tool.dsbench.gate]: max-files-ratio must be "
                     "a positive number")


@pytest.mark.parametrize(("toml", "needles"), [
    ("[tool.dsbench.gate]\nmax_byte_ratio = 2\n",
     ["[tool.dsbench.gate]: max_byte_ratio: not an option of dsbench gate",
      "did you mean max-bytes-ratio?"]),
    ("[tool.dsbench]\nsecond = 2\n", ["second: not an option of any dsbench command",
                                      "did you mean seconds?"]),
    ("[tool.dsbench.gat]\nseconds = 2\n", ["[gat]: not a dsbench command"]),
    ("[tool.dsbench]\nseconds = 'soon'\n", ["seconds = 'soon': not a value --seconds takes"]),
    ("[tool.dsbench]\ncold = 1\n", ["cold = 1: must be true or false"]),
    ("[tool.dsbench]\ndecoder = 'gif'\n", ["decoder = 'gif': not one of"]),
    ("[tool.dsbench]\nworkers = [1, 2]\n",
     ["workers = [1, 2]: not a value --workers takes", "as [tool.dsbench.bench]"]),
    ("[tool.dsbench.extrapolate]\nbatch-size = 256\n",
     ["batch-size: --batch-size is the loader's batch; the GPU's batch per step is --gpu-batch"]),
    ("[tool.dsbench\n", ["cannot read settings"]),
    ("[tool]\ndsbench = 3\n", ["[tool.dsbench] must be a table"]),
])
def test_a_bad_setting_is_one_line_naming_the_file_and_key(
        team: Path, capsys: pytest.CaptureFixture[str], toml: str, needles: list[str]) -> None:
    (team / "pyproject.toml").write_text(toml)
    # workers = [1, 2] fits bench's --workers (a list), not job's (one count)
    command = next((c for c in ("gate", "extrapolate", "job") if c in toml or (
        c == "job" and "workers" in toml)), "bench")
    assert main([command, "x"]) == 2
    one_line(capsys, str(team / "pyproject.toml"), *needles)


def test_a_missing_settings_file_is_one_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "x", "--config", str(tmp_path / "nope.toml")]) == 2
    one_line(capsys, "nope.toml: no such settings file")


def test_config_lists_each_value_with_its_origin(team: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "gate"]) == 0
    out = capsys.readouterr().out
    where = str(team / "pyproject.toml")
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()
            if line.startswith("--") and line[2] != "-"}
    assert rows["--max-files-ratio"] == ["3.0", f"{where} [tool.dsbench.gate]"]
    assert rows["--strict-throughput"] == ["true", f"{where} [tool.dsbench.gate]"]
    assert rows["--seconds"] == ["0.5", f"{where} [tool.dsbench]"]
    assert rows["--max-bytes-ratio"] == ["1.05", "default"]
    assert "--config" not in rows and "--help" not in rows
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"settings: {where} [tool.dsbench]")
    assert "dsbench job:" in out and "dsbench inspect:" not in out  # inspect takes none


def test_config_without_a_file_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["config", "bench"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("settings: none")
    rows = [line for line in out.splitlines() if line.startswith("--") and line[2] != "-"]
    assert len(rows) > 20 and all(line.endswith(" default") for line in rows)


def test_the_settings_guides_example_is_valid_for_every_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    guide = (Path(__file__).parents[1] / "docs" / "settings.md").read_text()
    example = guide.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "pyproject.toml").write_text(example)
    monkeypatch.chdir(tmp_path)
    assert main(["config"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    for key in ("--nodes", "--gpu-batch", "--max-files-ratio", "--seconds", "--workers"):
        assert key in out, key


def test_a_repeatable_option_takes_a_list_and_the_command_line_adds_to_it(team: Path) -> None:
    (team / "pyproject.toml").write_text(PYPROJECT + "\n[tool.dsbench.bench]\n"
                                         "native-option = ['predownload=8']\n")
    assert parsed(["bench", "x"]).native_option == ["predownload=8"]
    assert parsed(["bench", "x", "--native-option", "seed=1"]).native_option == [
        "predownload=8", "seed=1"]


def test_what_a_file_sets_the_command_line_can_still_undo(team: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    (team / "pyproject.toml").write_text(PYPROJECT + "\n[tool.dsbench.bench]\ncold = true\n"
                                         "\n[tool.dsbench.budget]\ngpus = 64\n")
    assert parsed(["bench", "x"]).cold is True
    assert parsed(["bench", "x", "--no-cold"]).cold is False  # a flag the file turned on
    # An option the file gives is no longer required on the command line.
    assert parsed(["budget", "--gpus-per-node", "8", "--mean-step", "1.4", "--p99-step", "6.8",
                   "--gpu-util", "61%"]).gpus == 64
    # A top key that is only an old spelling in some command is not that command's.
    (team / "pyproject.toml").write_text("[tool.dsbench]\nbatch-size = 32\n")
    assert parsed(["bench", "x"]).batch_size == 32
    assert parsed(["extrapolate", "r.json"]).cluster_batch_size is None
    # A bad value given on the command line is the option's fault, not the file's.
    (team / "pyproject.toml").write_text(PYPROJECT)
    a = write_result(team, "a.json", document([run()]))
    assert main(["gate", a, a, "--max-files-ratio", "-2"]) == 2
    err = one_line(capsys, "--max-files-ratio must be a positive number")
    assert "pyproject.toml" not in err
    # --config abbreviated would be read after the defaults it sets: refused.
    assert main(["bench", "x", "--conf", str(team / "pyproject.toml")]) == 2
    one_line(capsys, "--config: write the option in full")


def test_a_broken_pyproject_of_another_project_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[project\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert parsed(["bench", "x"]).seconds == BenchOptions().seconds  # the default
    (tmp_path / "pyproject.toml").write_text("[tool.dsbench\nseconds = 1\n")
    with pytest.raises(DsbenchError, match="cannot read settings"):
        parsed(["bench", "x"])
