"""One node of a synchronous job: the job's shape (`ClusterSpec`) and its supply and demand.

`node_rates(cost, cluster)` is closed form: how many samples/s a node's loader workers supply
and its GPUs consume, with the per-sample terms behind supply (CPU with contention and
time-sharing, file latency, the shared link: `link_transfer_s`). dsbench.model.cluster
simulates the job from it; docs/model.md gives the equations.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from dsbench.errors import DsbenchError
from dsbench.model.costs import Distribution, LoaderCost
from dsbench.model.profiles import LOCAL, StorageProfile

MAX_RANKS = 16384
DEFAULT_COMPUTE = Distribution("const", 0.25)


@dataclass(frozen=True)
class ClusterSpec:
    """The job: nodes and their GPUs and cores, the DataLoader, the step and its jitter."""

    nodes: int = 16
    gpus_per_node: int = 8
    cores_per_node: int = 96
    trainer_cores_per_gpu: float = 1.0
    workers_per_gpu: int = 8
    prefetch: int = 2
    batch_size: int = 32
    compute: Distribution = DEFAULT_COMPUTE
    allreduce_s: float = 0.0
    stall_prob: float = 0.0
    stall_s: float = 0.0
    storage: StorageProfile = LOCAL
    # A node's memory, for what its loaders take: an 8-GPU node's usual 2 TB (DGX H100).
    node_memory_bytes: float = 2e12

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "cores_per_node", "workers_per_gpu", "prefetch",
                     "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise DsbenchError(f"{name.replace('_', '-')} must be an integer >= 1, not {v!r}")
        for name in ("trainer_cores_per_gpu", "allreduce_s", "stall_s", "node_memory_bytes"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise DsbenchError(f"{name.replace('_', '-')} must be a finite number >= 0")
        if self.node_memory_bytes <= 0:
            raise DsbenchError("node-memory-bytes must be > 0")
        if not 0 <= self.stall_prob < 1:
            raise DsbenchError(f"stall-prob must be in [0, 1), not {self.stall_prob}")
        if self.stall_prob > 0 and self.stall_s <= 0:
            raise DsbenchError("stall-prob > 0 needs a stall-time > 0")
        if self.free_cores <= 0:
            raise DsbenchError(f"no cores left for loader workers: {self.cores_per_node} cores "
                               f"- {self.gpus_per_node} GPUs x {self.trainer_cores_per_gpu} "
                               "trainer cores")
        if self.ranks > MAX_RANKS:
            raise DsbenchError(f"{self.ranks} ranks: the model simulates at most {MAX_RANKS}")

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def free_cores(self) -> float:
        return self.cores_per_node - self.gpus_per_node * self.trainer_cores_per_gpu

    @property
    def workers_per_node(self) -> int:
        return self.gpus_per_node * self.workers_per_gpu

    def replace(self, **changes: Any) -> ClusterSpec:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["compute"] = self.compute.to_json()
        out["storage"] = self.storage.name
        return out


@dataclass(frozen=True)
class NodeRates:
    """Closed-form supply and demand of one node, and the per-sample terms behind supply."""

    free_cores: float
    workers: int
    load: float  # busy-worker share of the free cores, at most 1
    contention: float  # CPU factor at that load, from the worker sweep
    oversubscription: float  # workers / free cores, at least 1
    cpu_s: float  # wall seconds of CPU work per sample in one worker
    latency_s: float  # seconds per sample waiting for files to open
    transfer_s: float  # seconds per sample moving its bytes over the node's shared link
    supply: float  # samples/s the node's workers deliver
    demand: float  # samples/s the node's GPUs consume when they never wait

    @property
    def per_sample_s(self) -> float:
        return self.cpu_s + self.latency_s + self.transfer_s

    @property
    def ratio(self) -> float:
        return self.supply / self.demand

    @property
    def limit(self) -> str:
        """What bounds supply: 'cores', 'workers', 'file latency' or 'storage bandwidth'."""
        terms = {"cpu": self.cpu_s, "file latency": self.latency_s,
                 "storage bandwidth": self.transfer_s}
        top = max(terms, key=terms.__getitem__)
        if top == "cpu":
            return "cores" if self.oversubscription > 1 else "workers"
        return top

    def to_json(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out |= {"per_sample_s": self.per_sample_s, "supply_over_demand": self.ratio,
                "limit": self.limit}
        return out


def node_rates(cost: LoaderCost, cluster: ClusterSpec) -> NodeRates:
    """Samples/s per node: workers / (per-sample wall time of one worker), against demand."""
    free, workers, load, contention, over, cpu, latency = _worker_time(cost, cluster)
    transfer = link_transfer_s(cost.bytes_per_sample, workers, cpu + latency,
                               cluster.storage.node_bytes_per_s)
    demand = cluster.gpus_per_node * cluster.batch_size / (cluster.compute.mean
                                                            + cluster.allreduce_s)
    return NodeRates(free, workers, load, contention, over, cpu, latency, transfer,
                      supply=workers / (cpu + latency + transfer), demand=demand)


def supplies(cost: LoaderCost, cluster: ClusterSpec, need: float) -> bool:
    """node_rates(cost, cluster).supply >= need. The link's queueing model (as many steps as
    workers) is left out where even a free link would fall short: its transfer time only
    lowers supply. A search over thousands of settings (extrapolate's what-if) would otherwise
    spend seconds on settings that are short of CPU."""
    _, workers, _, _, _, cpu, latency = _worker_time(cost, cluster)
    if workers / (cpu + latency) < need:
        return False
    return node_rates(cost, cluster).supply >= need


def _worker_time(cost: LoaderCost, cluster: ClusterSpec
                 ) -> tuple[float, int, float, float, float, float, float]:
    """free cores, workers, load, contention, time-sharing, and a worker's CPU and file
    latency per sample."""
    free, workers = cluster.free_cores, cluster.workers_per_node
    load = min(1.0, workers / free)
    contention = cost.contention_at(load)
    over = max(1.0, workers / free)
    cpu = cost.cpu_s_per_sample * contention * over
    latency = cost.files_per_sample * cluster.storage.per_file_s
    return free, workers, load, contention, over, cpu, latency


def link_transfer_s(nbytes: float, workers: int, other_s: float, link_bytes_per_s: float
                    ) -> float:
    """Mean seconds one sample's bytes take on a node link that `workers` share.

    A closed queueing network: each worker alternates `other_s` of other work (CPU, waiting for
    opens; a delay station) with a transfer of `nbytes` on the link, whose transfers in flight
    share it equally (processor sharing, service time D = nbytes / BW). Mean-value analysis is
    exact for this product-form network (Reiser and Lavenberg, 1980): with n workers the
    transfer takes R(n) = D (1 + Q(n - 1)), and Q(n) = n R(n) / (other_s + R(n)) transfers are
    in flight. A lone worker never queues (R = D); supply n / (other_s + R) never exceeds BW /
    nbytes.
    """
    if nbytes <= 0 or math.isinf(link_bytes_per_s):
        return 0.0
    d = nbytes / link_bytes_per_s
    in_flight, r = 0.0, d
    for n in range(1, workers + 1):
        r = d * (1.0 + in_flight)
        in_flight = n * r / (other_s + r)
    return r
