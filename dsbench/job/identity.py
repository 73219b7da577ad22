"""Who this process is in a job: a rank started by torch's launcher, a Slurm task, or neither.

torch's elastic agent (torchrun, or dsbench's own launch) sets RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK (the node) and GROUP_WORLD_SIZE (nodes), and TORCHELASTIC_RUN_ID,
which is the specific mark: a bare RANK may be left over in a user's shell. It is checked
first because `srun torchrun ...` sets both sets of variables and torchrun's are the ranks'.
A task of `srun` itself has SLURM_STEP_ID; SLURM_PROCID alone is also set inside an allocation's
batch shell, which is not a rank.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from dsbench.errors import DsbenchError


@dataclass(frozen=True)
class Identity:
    """A rank's place in the job."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    node: int
    nodes: int
    launcher: str  # "dsbench", "torchrun" or "slurm"


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None and default is not None:
        return default
    try:
        return int(str(raw))
    except ValueError:
        raise DsbenchError(f"environment variable {name}={raw!r} is not an integer") from None


def detect(env: Mapping[str, str] | None = None) -> Identity | None:
    """The rank this process is, or None when no launcher started it (then dsbench launches)."""
    env = os.environ if env is None else env
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
        world = _int(env, "WORLD_SIZE")
        launcher = "dsbench" if env.get("DSBENCH_JOB_LAUNCHER") == "dsbench" else "torchrun"
        return Identity(_int(env, "RANK"), world, _int(env, "LOCAL_RANK", 0),
                        _int(env, "LOCAL_WORLD_SIZE", world), _int(env, "GROUP_RANK", 0),
                        _int(env, "GROUP_WORLD_SIZE", 1), launcher)
    if "SLURM_STEP_ID" in env and _int(env, "SLURM_NTASKS", 1) > 1:
        world = _int(env, "SLURM_NTASKS")
        nodes = _int(env, "SLURM_NNODES", 1)
        return Identity(_int(env, "SLURM_PROCID"), world, _int(env, "SLURM_LOCALID", 0),
                        _int(env, "SLURM_NTASKS_PER_NODE", max(1, world // nodes))
                        if env.get("SLURM_NTASKS_PER_NODE", "").isdigit()
                        else max(1, world // nodes),
                        _int(env, "SLURM_NODEID", 0), nodes, "slurm")
    return None


def slurm_rendezvous(ident: Identity, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables torch.distributed's env:// needs, for a task that srun started directly.

    MASTER_ADDR and MASTER_PORT are the job's to set (the batch script usually exports the
    first host of SLURM_JOB_NODELIST); dsbench does not guess a host or a port.
    """
    env = os.environ if env is None else env
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not env.get(v)]
    if missing:
        raise DsbenchError(f"under srun, set {' and '.join(missing)} (the address and a free "
                           "port of the first node) before starting the job's tasks")
    return {"RANK": str(ident.rank), "WORLD_SIZE": str(ident.world),
            "LOCAL_RANK": str(ident.local_rank)}
