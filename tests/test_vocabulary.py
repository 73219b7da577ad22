"""One meaning per option name across every command, one name per meaning, and the renamed
options refused with a pointer, never read as something else."""

from __future__ import annotations

import argparse

import pytest
from layouts import assert_one_line_error

from dsbench.cli import build_parser, main
from dsbench.commands import vocabulary


def test_no_option_name_has_two_meanings_across_the_commands() -> None:
    parser = build_parser()
    commands = {c for c, _ in vocabulary.options(parser)}
    assert {"bench", "compare", "gate", "demo", "advise", "extrapolate", "budget", "job",
            "resume", "asv init"} <= commands  # every command walked, asv's actions too
    assert vocabulary.clashes(parser) == []


def test_a_planted_clash_is_found_both_ways() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    a, b = sub.add_parser("measure"), sub.add_parser("model")
    a.add_argument("--batch-size", help="samples per loader batch (default 64)")
    b.add_argument("--batch-size", help="samples per GPU per step (default 256)")
    b.add_argument("--per-batch", help="samples per loader batch: the same, named otherwise")
    found = vocabulary.clashes(parser)
    assert len(found) == 2, found
    assert found[0].startswith("--batch-size means 'samples per loader batch' in measure but "
                               "'samples per gpu per step' in model")
    assert found[1].startswith("'samples per loader batch' is called --batch-size in measure "
                               "and --per-batch in model")


def test_the_loader_batch_and_the_gpu_batch_are_both_in_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--batch-size BATCH_SIZE samples per loader batch" in text
    assert "--gpu-batch GPU_BATCH samples per GPU per step" in text
    assert "--job-prefetch JOB_PREFETCH batches in flight per DataLoader worker in the job" \
        in text


@pytest.mark.parametrize(("argv", "points_to"), [
    (["extrapolate", "--cpu-per-sample", "0.001", "--batch-size", "256"], "--gpu-batch"),
    (["budget", "--gpus", "8", "--batch-size", "256"], "--gpu-batch"),
    (["job", "/nowhere", "--batch-size", "8"], "--gpu-batch"),
    (["compare", "a.json", "b.json", "--prefetch", "4"], "--job-prefetch"),
    (["extrapolate", "--cpu-per-sample", "0.001", "--prefetch", "4"], "--job-prefetch"),
    (["advise", "/nowhere", "--definition", "x.toml"], "--write-definition"),
])
def test_an_old_spelling_that_now_means_something_else_is_refused_with_a_pointer(
        argv: list[str], points_to: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and points_to in err, err


def test_the_renamed_options_carry_their_meaning(capsys: pytest.CaptureFixture[str]) -> None:
    # The GPU's batch through its one name: the budget's capacity part takes it.
    assert main(["budget", "--gpus", "8", "--gpu-batch", "256", "--compute", "0.15",
                 "--cores-per-node", "64", "--cpu-per-sample", "0.005"]) == 0
    assert "256" in capsys.readouterr().out
    assert main(["budget", "--gpus", "8"]) == 2
    assert_one_line_error(capsys.readouterr().err, "budget", "give --gpu-batch")
