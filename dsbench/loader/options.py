"""How to run the loader benchmark: every option, checked before any process starts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench.errors import DsbenchError
from dsbench.loader.pipeline import DECODERS, Pipeline, TrainTransform, Transform
from dsbench.loader.worker import Opener

BACKENDS = ("dsbench", "torch")


@dataclass(frozen=True)
class BenchOptions:
    """How to run the benchmark; validated here, so bad options fail before any process starts."""

    workers: tuple[int, ...] = (1,)
    batch_size: int = 64
    seconds: float = 10.0
    rounds: int = 3
    warmup_batches: int = 2  # per worker
    step_time_s: float = 0.0
    cold: bool = False
    decoder: str = "pillow"
    normalize: bool = False
    on_error: str = "raise"
    backend: str = "dsbench"
    prefetch: int = 2
    seed: int = 0
    batches: int | None = None  # measure exactly this many batches per round instead of seconds
    transform: Transform | None = None  # replaces the training transform (e.g. a known cost)
    opener: Opener | None = None  # opens the export in each worker (default: adapters)
    stall_s: float = 120.0  # a worker silent this long fails the run

    def __post_init__(self) -> None:
        def bad(option: str, value: object, want: str) -> DsbenchError:
            return DsbenchError(f"--{option} must be {want}, got {value!r}")
        if not self.workers or any(isinstance(w, bool) or not isinstance(w, int) or w < 1
                                   for w in self.workers):
            raise bad("workers", self.workers, "a list of positive integers")
        for name, lo in (("batch_size", 1), ("rounds", 1), ("warmup_batches", 1),
                         ("prefetch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise bad(name.replace("_", "-"), value, f"an integer >= {lo}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise bad("seconds", self.seconds, "a positive number")
        if not (math.isfinite(self.step_time_s) and self.step_time_s >= 0):
            raise bad("step-time", self.step_time_s, "a non-negative number")
        if self.batches is not None and self.batches < 1:
            raise bad("batches", self.batches, "a positive integer")
        if self.backend not in BACKENDS:
            raise bad("backend", self.backend, " or ".join(BACKENDS))
        if self.decoder not in DECODERS:
            raise bad("decoder", self.decoder, " or ".join(DECODERS))
        self.pipeline()  # checks the error policy and that the decoder is installed

    def pipeline(self) -> Pipeline:
        transform = self.transform or TrainTransform(normalize=self.normalize)
        return Pipeline(decoder=self.decoder, transform=transform, on_error=self.on_error)

    def config(self, path: str | Path) -> dict[str, Any]:
        return {"path": str(path), "workers": list(self.workers), "batch_size": self.batch_size,
                "seconds": self.seconds, "rounds": self.rounds,
                "warmup_batches": self.warmup_batches, "step_time_s": self.step_time_s,
                "cold": self.cold, "decoder": self.decoder, "normalize": self.normalize,
                "on_error": self.on_error, "backend": self.backend, "prefetch": self.prefetch,
                "seed": self.seed, "batches": self.batches,
                "transform": type(self.pipeline().transform).__name__}
