"""dsbench resume: each policy's replayed/skipped against an uninterrupted epoch, per rank and in
total, the cold buffer's entropy dip, bad input, the schema, and nothing left behind."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from conftest import write_export
from PIL import Image

from dsbench.cli import main
from dsbench.results import schema
from dsbench.resume.measure import ResumeOptions, run_resume

K, B = 5, 8


def _stray() -> list[psutil.Process]:
    """Children of this process other than multiprocessing's resource tracker."""
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    return [p for p in psutil.Process().children(recursive=True) if p.pid != tracker]


def _shm() -> set[str]:
    """Segments this run's kind of loader would leave: dsbench's (named by this process),
    Python's SharedMemory and torch's."""
    mine = f"dsbench-{os.getpid()}-"
    return {p.name for p in Path("/dev/shm").iterdir()
            if p.name.startswith((mine, "psm_", "torch_"))}


def one_class_shards(root: Path, shards: int, per_shard: int) -> Path:
    """A WebDataset export whose shard i holds only class i (as exports sorted by class are)."""
    out = root / "one-class"
    out.mkdir()
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 128, np.uint8)).save(buf, format="JPEG")
    jpg = buf.getvalue()
    for s in range(shards):
        with tarfile.open(out / f"shard-{s:06d}.tar", "w") as tar:
            for i in range(per_shard):
                key = f"{s * per_shard + i:08d}"
                for ext, data in (("jpg", jpg), ("cls", str(s).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return out


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One rank, two workers, shards of 20 with a buffer of 8: every policy restarted after K
    steps (one reference epoch and one job serve all three), and what was left running after."""
    root = tmp_path_factory.mktemp("resume")
    export = write_export(root, "wds", 160, shard_samples=20)
    shm = _shm()
    doc = run_resume(str(export), ResumeOptions(restart_at=K, policies=("none", "fast-forward",
                                                                         "stateful"),
                                                workers=2, batch_size=B, buffer=8))
    return {"doc": doc, "by": {p["policy"]: p for p in doc["policies"]}, "stray": _stray(),
            "new_shm": _shm() - shm}


def test_none_replays_exactly_the_first_k_steps_and_skips_nothing(policies: dict[str, Any]
                                                                   ) -> None:
    none = policies["by"]["none"]
    rank = none["ranks"][0]
    assert rank["replayed"] == K * B == rank["first_k_samples"]
    assert rank["skipped"] == 0
    assert rank["first_divergence"] == K
    assert rank["delivered_steps"] == K + rank["steps_per_epoch"]
    assert none["total"]["replayed"] == K * B


def test_fast_forward_replays_and_skips_nothing_and_reports_its_time(policies: dict[str, Any]
                                                                      ) -> None:
    t = policies["by"]["fast-forward"]["total"]
    assert (t["replayed"], t["skipped"], t["first_divergence"]) == (0, 0, None)
    assert t["fast_forward_s"] > 0
    assert t["first_batch_s"] >= t["fast_forward_s"]
    assert t["state_bytes"] is None


def test_dsbench_loader_state_restores_the_exact_order(policies: dict[str, Any]) -> None:
    t = policies["by"]["stateful"]["total"]
    assert (t["replayed"], t["skipped"], t["first_divergence"]) == (0, 0, None)
    assert t["state_bytes"] > 0 and t["fast_forward_s"] is None
    # A warm buffer restored: the batches after the restart are those of the same steps.
    assert t["entropy_after_bits"] == pytest.approx(t["entropy_same_steps_bits"])


def test_the_result_validates_against_its_schema(policies: dict[str, Any]) -> None:
    schema.validate(policies["doc"], "resume")
    assert policies["doc"]["settings"]["shuffle"] == "shard+buffer"


def test_a_run_leaves_no_process_and_no_shared_memory(policies: dict[str, Any]) -> None:
    assert policies["stray"] == []
    assert not {n for n in policies["new_shm"] if Path("/dev/shm", n).exists()}


def test_four_ranks_are_each_reported_and_the_totals_add_up(tmp_path: Path) -> None:
    export = write_export(tmp_path, "files", 64)
    out = tmp_path / "r.json"
    assert main(["resume", str(export), "--restart-at", "2", "--policy", "none", "--ranks", "4",
                 "--workers", "1", "--batch-size", "4", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    schema.validate(doc, "resume")
    ranks, total = doc["policies"][0]["ranks"], doc["policies"][0]["total"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["replayed"] for r in ranks] == [2 * 4] * 4
    assert total["replayed"] == sum(r["replayed"] for r in ranks) == 2 * 4 * 4
    assert total["skipped"] == sum(r["skipped"] for r in ranks) == 0
    assert total["samples_per_epoch"] == sum(r["samples_per_epoch"] for r in ranks) == 64
    assert doc["settings"]["shuffle"] == "sample"


def test_one_class_shards_give_lower_entropy_right_after_a_restart(tmp_path: Path) -> None:
    export = one_class_shards(tmp_path, shards=8, per_shard=48)
    doc = run_resume(str(export), ResumeOptions(restart_at=12, policies=("none",), workers=2,
                                                batch_size=B, buffer=16, window=4))
    t = doc["policies"][0]["total"]
    # Each worker's first (48 - 16) / 8 = 4 batches after an epoch start come from one shard.
    assert t["entropy_after_bits"] == 0.0 and t["shards_after"] == 1.0
    assert t["entropy_steady_bits"] > 0.3
    assert t["shards_steady"] > 1.2


def test_torchdata_stateful_loader_restores_the_exact_order(tmp_path: Path) -> None:
    pytest.importorskip("torchdata.stateful_dataloader")
    export = write_export(tmp_path, "wds", 96, shard_samples=24)
    shm = _shm()
    doc = run_resume(str(export), ResumeOptions(restart_at=3, policies=("stateful",),
                                                backend="torch", workers=1, batch_size=B,
                                                buffer=8))
    t = doc["policies"][0]["total"]
    assert (t["replayed"], t["skipped"], t["first_divergence"]) == (0, 0, None)
    assert t["state_bytes"] > 0
    assert _stray() == []
    assert not {n for n in _shm() - shm if Path("/dev/shm", n).exists()}


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    # Progress lines may come first; the error is one line, the last.
    assert [ln for ln in lines if "error" in ln] == lines[-1:]
    assert lines[-1].startswith("dsbench resume: error: ")
    return lines[-1]


def test_a_restart_beyond_the_epoch_exits_2_with_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    export = write_export(tmp_path, "wds", 40, shard_samples=20)
    # Two workers, one shard of 20 each: 3 batches of 8 each, 6 steps per epoch.
    err = _one_line_exit_2(["resume", str(export), "--restart-at", "6", "--batch-size", "8"],
                           capsys)
    assert "not inside the epoch: it has 6 steps" in err
    _one_line_exit_2(["resume", str(export), "--restart-at", "1", "--policy", "rewind"], capsys)
    assert _stray() == []


def test_a_missing_torchdata_exits_2_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # A None entry in sys.modules makes `import torchdata...` raise ImportError, as when absent.
    monkeypatch.setitem(sys.modules, "torchdata", None)
    monkeypatch.setitem(sys.modules, "torchdata.stateful_dataloader", None)
    err = _one_line_exit_2(["resume", str(tmp_path), "--restart-at", "1", "--policy",
                            "stateful", "--backend", "torch"], capsys)
    assert "torchdata" in err


def test_a_worker_failing_on_a_bad_sample_exits_2_and_leaves_no_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = write_export(tmp_path, "wds", 40, shard_samples=20)
    shard = sorted(export.glob("*.tar"))[1]
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    first_jpg = next(m.name for m, _ in members if m.name.endswith(".jpg"))
    with tarfile.open(shard, "w") as tar:
        for m, data in members:
            if m.name == first_jpg:
                data = b"not a jpeg"
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data))
    err = _one_line_exit_2(["resume", str(export), "--restart-at", "1", "--batch-size", "4"],
                           capsys)
    assert shard.name in err
    assert _stray() == []
