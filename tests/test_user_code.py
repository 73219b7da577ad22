"""A team's own code in the benchmark: their per-sample step (`bench --pipeline`) and their
whole torch Dataset (`bench --dataset`), measured in the same rounds and accounting, with
results that compare and gate take, and their failures in one line with nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from layouts import assert_one_line_error
from leftovers import left_behind

from dsbench.cli import main

# The user's per-sample steps: NumPy and PIL only, so that loader workers start quickly; one
# returns torch tensors, as a torchvision-style step does.
STEPS = textwrap.dedent('''
    import io
    import numpy as np
    from PIL import Image

    def _label(sample):
        return int(sample["label"] if "label" in sample else sample["cls"])  # a column, or .cls

    def to_array(sample):
        """Decode, resize, CHW float, and the label."""
        im = Image.open(io.BytesIO(sample["image"])).convert("RGB").resize((32, 32))
        x = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255
        return {"image": x, "label": _label(sample)}

    def to_tensor(sample):
        import torch

        out = to_array(sample)
        return torch.from_numpy(out["image"]), out["label"]

    def notes_adapters(sample):
        """Notes which of dsbench's format adapters this process has imported."""
        import os
        import sys
        with open("adapters-seen.txt", "a") as f:
            print(os.getpid(), *sorted(m for m in sys.modules if m.startswith("dsbench.adapters.")),
                  file=f)
        return to_array(sample)

    def fails_at_5(sample):
        if sample["__key__"].endswith("5"):
            raise ValueError("cannot handle this one")
        return np.zeros(3, np.float32)
''')
# The user's own torch Datasets: map-style, iterable (splitting itself over the workers), and
# one that fails.
DATASETS = textwrap.dedent('''
    import torch

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            return torch.full((3, 16, 16), float(i))

    class Stream(torch.utils.data.IterableDataset):
        """Two shards of 32, split over the workers: a third worker gets none."""
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            start = info.id if info else 0
            step = info.num_workers if info else 1
            for shard in range(start, 2, step):
                for i in range(32 * shard, 32 * shard + 32):
                    yield torch.full((8,), float(i)), i % 10

    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            raise KeyError(f"no sample {i} in this store")

    def squares():
        return Squares()

    def stream():
        return Stream()

    def broken():
        return Broken()
''')
QUICK = ["--rounds", "1", "--seconds", "0.2", "--batch-size", "4"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's module in the current directory, as it is when they run dsbench."""
    (tmp_path / "usersteps.py").write_text(STEPS)
    (tmp_path / "userdata.py").write_text(DATASETS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bench(args: list[str], out: Path) -> dict:
    assert main(["bench", *args, *QUICK, "--json", str(out)]) == 0
    doc: dict = json.loads(out.read_text())
    return doc


def test_a_pipeline_step_replaces_decode_fields_and_transform(
        here: Path, tiny_exports: dict[str, Path]) -> None:
    arrow = tiny_exports["arrow"]
    doc = _bench([str(arrow), "--pipeline", "usersteps:to_array"], here / "step.json")
    assert doc["config"]["pipeline"] == "usersteps:to_array"
    stages = doc["runs"][0]["stages"]
    assert stages["decode"] == stages["fields"] == 0
    assert stages["transform"] > 0 and stages["read"] > 0
    plain = _bench([str(arrow)], here / "plain.json")
    # Both read the same export: the counts are the export's, whoever does the work.
    assert doc["counts"] == plain["counts"]
    # A step that returns torch tensors, collated by torch's DataLoader.
    torch_doc = _bench([str(arrow), "--pipeline", "usersteps:to_tensor", "--backend", "torch"],
                       here / "torch.json")
    assert torch_doc["runs"][0]["stages"]["transform"] > 0


def test_step_results_go_to_compare_and_gate(here: Path, tiny_exports: dict[str, Path]) -> None:
    sides = [str(tiny_exports["before"]), str(tiny_exports["arrow"])]
    assert main(["compare", *sides, "--pipeline", "usersteps:to_array", "--rounds", "2",
                 "--seconds", "0.2", "--batch-size", "4", "--no-cluster",
                 "--save", str(here / "a.json"), str(here / "b.json")]) == 0
    docs = [json.loads((here / n).read_text()) for n in ("a.json", "b.json")]
    assert [d["config"]["pipeline"] for d in docs] == ["usersteps:to_array"] * 2
    assert main(["gate", str(here / "a.json"), str(here / "b.json")]) in (0, 1)


@pytest.fixture
def dataset_docs(here: Path) -> dict[str, dict]:
    """Two runs of the user's map-style dataset (two rounds each, to compare), and one of the
    iterable at 1 and 3 workers (its two shards split over them by the dataset itself)."""
    window = ["--seconds", "0.2", "--batch-size", "4"]
    runs = {"a": ("squares", ["--workers", "1", "--rounds", "2"]),
            "b": ("squares", ["--workers", "1", "--rounds", "2"]),
            "stream": ("stream", ["--workers", "1,3", "--rounds", "1"])}
    out = {}
    for name, (factory, args) in runs.items():
        assert main(["bench", "--dataset", f"userdata:{factory}", *args, *window, "--json",
                     str(here / f"{name}.json")]) == 0, name
        out[name] = json.loads((here / f"{name}.json").read_text())
    return out


def test_workers_open_the_export_as_the_layout_the_run_found(
        here: Path, tiny_exports: dict[str, Path]) -> None:
    # Each worker of each round used to detect the layout again: asking every format with a
    # signature imported the columnar adapters and pyarrow (about 0.1 s of CPU per worker
    # start here) before it read a WebDataset shard.
    assert main(["bench", str(tiny_exports["before"]), "--pipeline", "usersteps:notes_adapters",
                 "--rounds", "2", "--workers", "2", "--seconds", "0.2", "--batch-size", "4"]) == 0
    lines = [line.split() for line in (here / "adapters-seen.txt").read_text().splitlines()]
    # (The step also runs once here, in this process, to size the workers' slots.)
    seen = [line[1:] for line in lines if int(line[0]) != os.getpid()]
    assert len({line[0] for line in lines}) == 1 + 2 * 2  # two rounds of two workers
    assert all("dsbench.adapters.wds" in modules for modules in seen)
    assert not {m for modules in seen for m in modules} & {
        f"dsbench.adapters.{name}" for name in ("arrow", "parquet", "columns", "hf", "lance",
                                                "mds", "litdata", "tfrecord")}


def test_a_dataset_is_measured_as_a_black_box_and_compared(
        here: Path, dataset_docs: dict[str, dict]) -> None:
    one, three = dataset_docs["stream"]["runs"]
    assert (one["workers"], three["workers"]) == (1, 3)
    # The third worker was given no shard: it delivered nothing and is reported, not waited on.
    assert (one["idle_workers"], three["idle_workers"]) == ([], [2])
    assert three["worker_samples"][2] == 0 and min(three["worker_samples"][:2]) > 0
    assert any("1 loader worker of 3 delivered no samples (worker 2): your dataset gave them "
               "nothing to read" in w for w in dataset_docs["stream"]["warnings"])
    for doc in dataset_docs.values():
        for run in doc["runs"]:
            assert run["samples_per_s"] > 0 and run["cpu_s_per_sample"] > 0
            assert run["stages"]["read"] > 0
        assert doc["counts"]["method"] == "not counted" and not doc["counts"]["exact"]
        assert any("not counted" in w for w in doc["warnings"])
    a, b = str(here / "a.json"), str(here / "b.json")
    assert main(["compare", a, b, "--no-cluster"]) == 0
    # The same dataset against itself: the gate never fails it on a timing.
    assert main(["gate", a, b]) == 0


def _run_alone(args: list[str], cwd: Path) -> tuple[int, str, int]:
    """(exit code, standard error, session id) of a bench run in a session of its own."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "dsbench", "bench", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err, proc.pid


def test_a_failing_step_is_one_line_naming_the_sample_and_the_step(
        here: Path, tiny_exports: dict[str, Path]) -> None:
    code, err, session = _run_alone([str(tiny_exports["before"]), "--pipeline",
                                     "usersteps:fails_at_5", "--workers", "2", *QUICK], here)
    assert code == 2
    assert_one_line_error(err, "bench", "usersteps:fails_at_5", "ValueError",
                          "cannot handle this one", "[sample ")
    assert left_behind(session) == []


def test_a_failing_dataset_is_one_line_and_leaves_nothing(here: Path) -> None:
    code, err, session = _run_alone(["--dataset", "userdata:broken", "--workers", "2", *QUICK],
                                    here)
    assert code == 2
    assert_one_line_error(err, "bench", "no sample")
    assert left_behind(session) == []


@pytest.mark.parametrize(("option", "spec", "needle"), [
    ("--pipeline", "usersteps:nope", "has no callable 'nope'"),
    ("--pipeline", "nomodule:step", "No module named 'nomodule'"),
    ("--pipeline", "just_a_name", "expected MODULE:CALLABLE"),
    ("--dataset", "./missing.py:make", "no such file"),
])
def test_a_bad_spec_is_one_line_before_anything_runs(
        here: Path, option: str, spec: str, needle: str, tiny_exports: dict[str, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    path = [] if option == "--dataset" else [str(tiny_exports["before"])]
    assert main(["bench", *path, option, spec]) == 2
    assert_one_line_error(capsys.readouterr().err, "bench", needle)
