"""How to run a measured job: every option, checked before any rank starts.

The step's compute and its stalls are the cluster model's own definitions (model.costs.
Distribution, the stall probability and length of model.node.ClusterSpec), so a job and its
prediction are described by the same figures. `to_json`/`from_json` carry the options to the
ranks, which are separate processes started by torch's launcher.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from dsbench import adapters
from dsbench.adapters.base import SEQ_LEN
from dsbench.errors import DsbenchError
from dsbench.loader.decode import DECODERS
from dsbench.loader.options import BACKENDS, check_clip, check_rate
from dsbench.model.costs import Distribution

DEVICES = ("auto", "cpu", "cuda")
MAX_RANKS = 256  # ranks dsbench starts on one machine (a job's world may be larger)
MIN_STEPS = 10
# A collective that does not complete in this long (a peer alive but hung) fails the job; a
# peer that died is noticed at once, by its closed connection.
MIN_COLLECTIVE_TIMEOUT_S = 30.0
IDLE_COLLECTIVES = 30  # all-reduces with nothing else to do: the collective's own cost


@dataclass(frozen=True)
class JobOptions:
    """One job: ranks, each rank's loader, the step it emulates and how long to measure."""

    ranks: int = 2
    workers: int = 1
    batch_size: int = 32
    steps: int = 200
    compute: Distribution = field(default_factory=lambda: Distribution("const", 0.04))
    stall_prob: float = 0.0
    stall_s: float = 0.0
    backend: str = "dsbench"
    prefetch: int = 2
    seed: int = 0
    decoder: str = "pillow"
    layout: str | None = None
    device: str = "auto"
    # What the samples carry, as share.check found them, and how each becomes a training
    # sample: token ids cropped to seq_len (or packed into sequences of it), clips of clip_s
    # seconds at the export's rate.
    kind: str = "image"
    seq_len: int = SEQ_LEN
    pack: bool = False  # --pack: token documents laid end to end into sequences (packing.py)
    clip_s: float = 4.0
    rate: int | None = None
    sample_rate: int | None = None  # --sample-rate: clips resampled to it; None: at `rate`
    tokenizer: str | None = None  # text: where the ranks' tokenizer came from (TokenizerSpec)

    def __post_init__(self) -> None:
        def bad(option: str, value: object, want: str) -> DsbenchError:
            return DsbenchError(f"--{option} must be {want}, got {value!r}")
        for name, lo in (("ranks", 1), ("workers", 1), ("batch_size", 1), ("prefetch", 1),
                         ("steps", MIN_STEPS), ("seq_len", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise bad(name.replace("_", "-"), value, f"an integer >= {lo}")
        if self.steps <= 2 * self.warmup_steps:
            raise bad("steps", self.steps, f"more than twice workers x prefetch "
                      f"({2 * self.warmup_steps}): those first steps are not counted")
        if not 0 <= self.stall_prob < 1:
            raise bad("stall-prob", self.stall_prob, "in [0, 1)")
        if not (math.isfinite(self.stall_s) and self.stall_s >= 0):
            raise bad("stall-time", self.stall_s, "a finite number >= 0")
        if self.stall_prob > 0 and self.stall_s <= 0:
            raise DsbenchError("--stall-prob > 0 needs a --stall-time > 0")
        check_clip(self.clip_s)
        check_rate(self.sample_rate)
        if self.backend not in BACKENDS:
            raise bad("backend", self.backend, " or ".join(BACKENDS))
        if self.pack and self.backend == "native":
            raise DsbenchError("--pack packs documents into sequences in dsbench's workers "
                               "(--backend dsbench or torch)")
        if self.decoder not in DECODERS:
            raise bad("decoder", self.decoder, " or ".join(DECODERS))
        if self.device not in DEVICES:
            raise bad("device", self.device, " or ".join(DEVICES))
        if self.layout is not None:
            adapters.get(self.layout)

    @property
    def warmup_steps(self) -> int:
        """Steps not counted: the loader's start, when every outstanding batch was handed out at
        once (the model leaves out the same steps)."""
        return self.workers * self.prefetch

    @property
    def collective_timeout_s(self) -> float:
        step = self.compute.mean + 6 * self.compute.sd + self.stall_s
        return max(MIN_COLLECTIVE_TIMEOUT_S, 20 * step)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["compute"] = self.compute.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobOptions:
        values = dict(data)
        c = values.pop("compute")
        return cls(compute=Distribution(c["kind"], c["mean_s"], c["sd_s"]), **values)
