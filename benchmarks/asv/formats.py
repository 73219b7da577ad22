"""What reading each export definition in dsbench/formats/ costs per sample, tracked over commits.

`setup_cache` writes a small export (SAMPLES samples) of every shipped definition, once per
environment and commit, so a commit that changes a definition (say, the current export `before`
re-exported as per-sample files) or the code that writes or reads it shows up here.

asv treats every value as lower-is-better, so only costs are tracked: CPU ms, bytes and files per
sample, never samples/s. The CPU figure is the loader benchmark's own (the OS's accounting of the
main process and its worker process over the measured window), because asv's process_time timer
cannot see child processes. Beside it, CPU instructions per sample are counted by the exact pass
(ExactCost): a count, so a commit that adds 2% of CPU is a step, not noise.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import dsbench
from dsbench.adapters import open_export
from dsbench.analysis import asv_suite
from dsbench.export.generate import generate
from dsbench.export.spec import load_spec
from dsbench.loader.pipeline import make_decoder, parse_fields
from dsbench.loader.runner import BenchOptions, run_bench

FORMATS_DIR = Path(dsbench.__file__).parent / "export" / "formats"
EXPORTS = sorted(p.stem for p in FORMATS_DIR.glob("*.toml"))
SAMPLES = 200
BATCH = 20
# Whole passes over the export, so that the per-sample figures are exact: the runner counts bytes
# over the measured window and opens from the worker's start, and a shard is opened (and, for the
# columnar layouts, read a record batch or row group at a time) only when a pass reaches it.
# A warm-up of one pass and a window of one pass make both figures those of one whole pass.


def write_exports() -> dict[str, str]:
    """Generate a SAMPLES-sample export of every definition; definition name -> export path."""
    out = {}
    for name in EXPORTS:
        path = Path("exports", name).resolve()
        generate(load_spec(FORMATS_DIR / f"{name}.toml"), path, samples=SAMPLES, seed=0)
        out[name] = str(path)
    return out


def three_digits(x: float) -> float:
    """Three significant digits, as every figure dsbench shows; asv prints track values as is."""
    return float(f"{x:.3g}")


def held(export: str, path: str) -> int:
    """The samples an export of SAMPLES samples holds as read: SAMPLES, or for a token stream
    (its SAMPLES documents laid end to end) the blocks its reader cuts."""
    tokens = load_spec(FORMATS_DIR / f"{export}.toml").tokens
    if tokens is None or not tokens.stream:
        return SAMPLES
    return sum(1 for _ in open_export(path).read())


def measure(path: str, samples: int = SAMPLES) -> dict[str, Any]:
    """One round of the loader benchmark over one pass of the export's `samples`, with one
    worker (the exact pass has a benchmark of its own: ExactCost)."""
    batch = BATCH if samples % BATCH == 0 else samples  # a pass in whole batches
    opts = BenchOptions(workers=(1,), batch_size=batch, batches=samples // batch, rounds=1,
                        warmup_batches=samples // batch, exact=False)
    run = run_bench(path, opts)["runs"][0]
    if run["samples"] != samples:
        # The per-sample figures are exact only for a window of one whole pass.
        raise RuntimeError(f"{path}: window held {run['samples']} samples, not {samples}")
    return dict(run)


def make_exports(self: object) -> dict[str, str]:
    """Both classes' setup_cache: asv writes the exports once per commit for the two."""
    return write_exports()


class ReadCost:
    """Per-sample cost of loading each export definition, as a training job's loader does."""

    params: ClassVar[list[str]] = EXPORTS
    param_names: ClassVar[list[str]] = ["export"]
    timeout = 300
    setup_cache = make_exports

    def setup(self, exports: dict[str, str], export: str) -> None:
        self.path = exports[export]
        self.samples = held(export, self.path)
        # Decoded as bench decodes the export's samples: a text export's with its tokenizer.
        pipeline = asv_suite.settled(self.path, BenchOptions()).pipeline()
        self.decode = make_decoder(pipeline.decoder, tokenizer=pipeline.tokenizer)

    def track_cpu_ms_per_sample(self, exports: dict[str, str], export: str) -> float:
        return three_digits(1e3 * measure(self.path, self.samples)["cpu_s_per_sample"])

    track_cpu_ms_per_sample.unit = "ms/sample"  # type: ignore[attr-defined]

    def track_bytes_per_sample(self, exports: dict[str, str], export: str) -> float:
        return three_digits(measure(self.path, self.samples)["bytes_per_sample"])

    track_bytes_per_sample.unit = "bytes/sample"  # type: ignore[attr-defined]
    track_bytes_per_sample.processes = 1  # type: ignore[attr-defined]  # exact: one is enough

    def track_files_per_sample(self, exports: dict[str, str], export: str) -> float:
        return three_digits(measure(self.path, self.samples)["files_per_sample"])

    track_files_per_sample.unit = "files/sample"  # type: ignore[attr-defined]
    track_files_per_sample.processes = 1  # type: ignore[attr-defined]

    def time_read_decode_shard(self, exports: dict[str, str], export: str) -> None:
        # The whole small export: one shard of SAMPLES samples for the sharded layouts, one
        # directory of them for per-sample files; 0.25 to 0.4 s of CPU per call here.
        n = 0
        for raw in open_export(self.path).read():
            self.decode(raw)
            parse_fields(raw)
            n += 1
        if n != self.samples:
            raise RuntimeError(f"{self.path}: read {n} samples, not {self.samples}")

    # Reading happens in this process: its CPU clock counts pyarrow's threads and ignores
    # whatever else the machine is doing.
    time_read_decode_shard.timer = time.process_time  # type: ignore[attr-defined]
    time_read_decode_shard.repeat = (2, 5, 10.0)  # type: ignore[attr-defined]


class ExactCost:
    """CPU instructions per sample of loading each export definition, counted by the exact pass
    under valgrind (dsbench/loader/exact.py): the same on every run, so a commit that adds 2%
    of CPU shows as a step. Skipped where valgrind is not installed."""

    params: ClassVar[list[str]] = EXPORTS
    param_names: ClassVar[list[str]] = ["export"]
    timeout = 300
    setup_cache = make_exports

    def setup(self, exports: dict[str, str], export: str) -> None:
        asv_suite.exact_available()
        self.path = exports[export]

    def track_instructions_per_sample(self, exports: dict[str, str], export: str) -> float:
        return asv_suite.instructions_per_sample({"path": self.path, "samples": SAMPLES,
                                                  "made_by": export})

    track_instructions_per_sample.unit = "instructions/sample"  # type: ignore[attr-defined]
    track_instructions_per_sample.processes = 1  # type: ignore[attr-defined]  # exact: one is enough
