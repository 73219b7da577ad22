"""What a job asks of an object store: its requests per second against the store's limit per
prefix, and the bill for an epoch's reads.

At the target scale the job reads `samples/s of the job x requests per sample` requests per
second, spread over `prefixes` key prefixes (1 by default: an export uploaded under one prefix
is one partition until the store splits it, which S3 does on its own over tens of minutes). A
store throttles a prefix asked for more than its limit (S3: 5,500 GET/HEAD per second per
partitioned prefix, answered 503 SlowDown); the client backs off and retries, so the job gets
no more than the limit. Such a job is throttle-bound: its samples/s are at most
`limit x prefixes / requests per sample`, each step takes at least its samples over that rate,
and GPU utilization falls by the same factor. That is a floor under the step time, not a
simulation of the retries' timing; a measured throttled run (`bench` through `dsbench proxy
--throttle`) shows what the backoff costs on top.

The bill for one epoch: its requests x the price per 1,000 GETs plus its bytes x the price
per GB read, with the profile's stated prices (S3 Standard's by default for `s3`).
Requests per sample are the measured ones where the export was benched in an object store,
else the files per sample times the profile's requests per file.
"""

from __future__ import annotations

from typing import Any

from dsbench.errors import DsbenchError
from dsbench.model.costs import LoaderCost
from dsbench.model.node import ClusterSpec
from dsbench.model.profiles import StorageProfile


def store_load(cost: LoaderCost, cluster: ClusterSpec, step_mean_s: float, gpu_util: float, *,
               prefixes: int = 1, epoch_samples: int | None = None) -> dict[str, Any] | None:
    """The job's requests per second, its standing against the profile's limit, and an epoch's
    bill; None when neither the result (measured on disk) nor the profile makes requests."""
    if prefixes < 1:
        raise DsbenchError(f"--prefixes must be an integer >= 1, not {prefixes}")
    if epoch_samples is not None and epoch_samples < 1:
        raise DsbenchError(f"--epoch-samples must be an integer >= 1, not {epoch_samples}")
    profile = cluster.storage
    if cost.requests_per_sample is not None:
        per_sample, basis = cost.requests_per_sample, "measured in the object store"
    elif profile.ops_per_file and not profile.is_local:
        per_sample = cost.files_per_sample * profile.ops_per_file
        basis = f"files per sample x {profile.ops_per_file} request per file ({profile.name})"
    else:
        return None
    step_samples = cluster.ranks * cluster.batch_size
    samples_per_s = step_samples / step_mean_s
    rate = samples_per_s * per_sample
    limit = profile.read_limit_per_prefix_s
    bound = limit is not None and rate / prefixes > limit
    out: dict[str, Any] = {
        "requests_per_sample": per_sample, "requests_basis": basis,
        "job_samples_per_s": samples_per_s, "requests_per_s": rate, "prefixes": prefixes,
        "requests_per_s_per_prefix": rate / prefixes, "limit_per_prefix_s": limit,
        "limit_source": profile.limit_source or None, "throttle_bound": bound,
        "step_floor_s": None, "gpu_util_at_limit": None,
    }
    if bound:
        assert limit is not None
        capped = limit * prefixes / per_sample
        floor = step_samples / capped
        out |= {"step_floor_s": floor, "gpu_util_at_limit": gpu_util * step_mean_s / floor,
                "job_samples_per_s_at_limit": capped}
    out["epoch"] = _bill(*epoch_size(cost, epoch_samples), per_sample, cost.bytes_per_sample,
                         profile, samples_per_s, out.get("job_samples_per_s_at_limit"))
    return out


def epoch_size(cost: LoaderCost, epoch_samples: int | None) -> tuple[int | None, str]:
    """One epoch's samples and where the figure comes from: --epoch-samples, else the measured
    export's (None where neither is known)."""
    if epoch_samples:
        return epoch_samples, "stated with --epoch-samples"
    return cost.export_samples, "the measured export's"


def _bill(samples: int | None, samples_from: str, per_sample: float, bytes_per_sample: float,
          profile: StorageProfile, rate: float, capped: float | None
          ) -> dict[str, Any] | None:
    if samples is None:
        return None
    requests = samples * per_sample
    gib = samples * bytes_per_sample / 2**30  # a store's "GB" on the bill is 2^30 bytes
    usd = None
    if profile.usd_per_1000_get is not None:
        usd = requests / 1000 * profile.usd_per_1000_get + gib * (profile.usd_per_gb_read or 0.0)
    return {"samples": samples, "samples_from": samples_from, "requests": requests, "gib_read": gib,
            "usd": usd, "wall_s": samples / (capped or rate)}
