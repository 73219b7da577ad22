"""The demo's verdict in words: what was measured, what the model says, and what to do.

Every sentence is built from the demo document (dsbench.demo) and says which of its figures
are measured and which are modelled. A difference the rounds cannot tell from noise is called
that, and advice is only given for a regression the figures show.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsbench import fmt
from dsbench.report import claims
from dsbench.report.advise import demo_lines as advice_lines
from dsbench.report.demo import EXPORTS
from dsbench.report.headline import headline
from dsbench.report.measured import (
    COUNT_HEADERS,
    MEASURED_HEADERS,
    base_run,
    count_rows,
    counts_text,
    cpu_moves_text,
    cpu_text,
    exact_text,
    first_run,
    measured_rows,
    metric,
    noisy_note,
    speed_text,
    workers_text,
)
from dsbench.report.resume import demo_lines as resume_lines

UTIL_MARGIN = 0.01  # modelled GPU utilization closer than this counts as the same


def cluster_text(e: dict[str, Any]) -> str:
    st = e["step_time_s"]
    return (f"mean step {fmt.seconds(st['mean'])}, p99 {fmt.seconds(st['p99'])}, GPU "
            f"utilization {fmt.percent(e['gpu_util'])}, {e['verdict']} (supply "
            f"{fmt.ratio(e['supply_over_demand'])} of demand, limit: {e['node']['limit']})")


def carries_text(e: dict[str, Any], name: str) -> str:
    """The figure behind an export's predicted step, and whether it was measured or assumed."""
    node = e["node"]
    inputs = {r["name"]: r for r in e["inputs"]}
    files, storage = inputs["files_per_sample"], inputs["storage"]
    terms = [f"CPU {fmt.seconds(node['cpu_s'])} (measured here, with contention "
             f"{fmt.ratio(node['contention'])} and time-sharing "
             f"{fmt.ratio(node['oversubscription'])})"]
    if node["latency_s"] > 0:
        counted = "counted here" if files["source"] == "measured" else files["source"]
        terms.append(f"file latency {fmt.seconds(node['latency_s'])} ({files['text']} "
                     f"files/sample {counted} x {fmt.seconds(e['storage']['per_file_s'])} per "
                     f"file {_per_file_source(storage)})")
    if node["transfer_s"] > 0:
        terms.append(f"transfer {fmt.seconds(node['transfer_s'])} (bytes per sample over the "
                     f"node's shared link, {storage['value']} profile)")
    return (f"each of {name}'s loader workers needs {fmt.seconds(node['per_sample_s'], 'sample')}"
            f": {', '.join(terms)}; the largest term, {node['limit']}, sets the limit")


def _per_file_source(storage: dict[str, Any]) -> str:
    """Where a storage row's latency per file came from, in words."""
    source, name = storage["source"], storage["value"]
    if source == "measured":
        return f"measured by dsbench probe ({name})"
    if source == "measured + stated":
        return f"measured by dsbench probe, plus a stated round trip ({name})"
    if source == "stated":
        return f"stated ({name})"
    return f"assumed by the {name} profile"


TAIL_GROWTH = 1.05  # a p99 at 128 GPUs this much above (or below) the one at 64 has moved
P99_SHARE = 0.01  # a delay in at least this share of steps reaches the p99


def tail_text(doc: dict[str, Any], name: str) -> str:
    a, b = doc["tails"][name]["64"], doc["tails"][name]["128"]
    spec = doc["cluster_spec"]
    q, stall = spec["stall_prob"], spec["stall_s"]
    growth = b["p99_s"] / a["p99_s"] if a["p99_s"] > 0 else 1.0
    # Digits that keep the printed growth on its side of 1x and of the thresholds the words use.
    d = max(claims.ratio_digits([growth]), claims.side_digits([growth], TAIL_GROWTH),
            claims.side_digits([growth], 1 / TAIL_GROWTH))
    head = (f"{name}'s p99 step is {fmt.seconds(a['p99_s'])} at 64 GPUs and "
            f"{fmt.seconds(b['p99_s'])} at 128 ({claims.times(growth, d)}), with the work per "
            "rank unchanged.")
    shown = float(fmt.sig(growth, d))  # within a millionth of a threshold: as printed
    grew, fell = shown > TAIL_GROWTH, shown < 1 / TAIL_GROWTH
    # A step waits for its slowest rank, which more ranks never make faster: a p99 lower at
    # 128 GPUs than at 64 is the simulation's sampling of the rare steps, not an effect.
    lower = (" Here it is lower at 128 GPUs than at 64, which only the simulation's sampling "
             "of rare steps can do: the slowest of more ranks is never faster.")
    if q <= 0:
        if grew:
            return (head + " No per-rank stall is assumed (--stall-prob 0): it grows with the "
                    "per-rank jitter of loading and compute, since every step waits for its "
                    "slowest rank and more ranks draw a slower one.")
        if fell:
            return head + " No per-rank stall is assumed (--stall-prob 0)." + lower
        return (head + " No per-rank stall is assumed (--stall-prob 0), so the tail is the "
                "loader's own rhythm, which every rank shares: it hardly moves with ranks.")
    # The shares print on their side of the 1% a p99 sees, and the words go by the printed share.
    shares = [100 * (1 - (1 - q) ** n) for n in (64, 128)]
    sd = claims.side_digits(shares, 100 * P99_SHARE)
    held128 = float(fmt.sig(shares[1], sd)) / 100
    held = (f" Every step waits for the slowest rank, so the assumed stall "
            f"({fmt.seconds(stall)} in {fmt.percent(q)} of rank-steps) holds up "
            f"{fmt.sig(shares[0], sd)}% of steps at 64 GPUs and {fmt.sig(shares[1], sd)}% at 128")
    sets = held128 >= P99_SHARE and a["mean_s"] + stall >= a["p99_s"]
    if grew and sets:
        return (head + held + "; past 1% of steps it sets the p99. Any rare per-rank delay "
                "reaches the p99 this way as a job grows.")
    if grew:
        return (head + held + "; that is not what grows it here, but the per-rank jitter of "
                "loading and compute: every step waits for its slowest rank, and more ranks "
                "draw a slower one.")
    if fell:
        return head + held + "." + lower
    # The stall lengthens a typical step by `stall`; when the loader's own rhythm already
    # makes the slowest 1% of steps longer than that, the stall cannot set the p99.
    if a["mean_s"] + stall < a["p99_s"]:
        why = (f", but a stalled step ({fmt.seconds(a['mean_s'])} + {fmt.seconds(stall)}) is "
               "shorter than the p99 the loader's own rhythm already gives")
    elif held128 < P99_SHARE:
        why = ", under the 1% of steps a p99 sees at both sizes"
    else:
        why = ", and other delays of the same size already set the p99"
    return (head + held + why + ", so here the tail hardly moves with ranks. A rare per-rank "
            "delay longer than the loader's rhythm would set the p99, and grow it, as a job "
            "grows.")


def regressed(doc: dict[str, Any]) -> bool:
    """Whether the model puts after's job below before's."""
    cl = doc["cluster"]
    return cl["after"]["gpu_util"] < cl["before"]["gpu_util"] - UTIL_MARGIN


def advice(doc: dict[str, Any]) -> list[str]:
    """What to do, from the figures: the candidate or the old layout, the fields, no GPUs."""
    cl, res = doc["cluster"], doc["results"]
    after, arrow, before = cl["after"], cl["arrow"], cl["before"]
    out = []
    if regressed(doc):
        if arrow["gpu_util"] >= before["gpu_util"] - UTIL_MARGIN:
            r = base_run(res["arrow"])
            out.append(f"roll out the arrow candidate instead of after: it keeps the new fields "
                       f"in shards; measured {fmt.rate(r['samples_per_s'])} and "
                       f"{fmt.seconds(r['cpu_s_per_sample'], 'sample')} with "
                       f"{fmt.sig(r['files_per_sample'])} files/sample "
                       f"({workers_text(r['workers'])}); predicted GPU utilization "
                       f"{fmt.percent(arrow['gpu_util'])} against after's "
                       f"{fmt.percent(after['gpu_util'])}")
        else:
            out.append(f"go back to before's layout ({res['before']['export']['layout']} "
                       "shards) and add the new fields to it: no candidate measured here keeps "
                       f"before's {fmt.percent(before['gpu_util'])} predicted GPU utilization")
    fields = _fields_text(doc)
    if fields:
        out.append(fields)
    if regressed(doc) and after["verdict"] == "input-bound":
        cores = after["what_if"].get("cores_per_node")
        if cores:
            out.append(f"if after must stay: {cores['workers_per_gpu']} workers per GPU on "
                       f"{cores['cores_per_node']} cores per node would reach "
                       f"{fmt.percent(cores['simulated_util'])} GPU utilization (simulated)")
        out.append("do not add GPUs: the loaders, not the GPUs, set the step; more GPUs add "
                   "nodes with the same shortfall and more ranks for every step to wait for")
    adv = doc.get("advice")
    if adv and adv["recommendation"]["winner"]:
        where = adv.get("definition_path")
        out.append(f"dsbench advise's pick for after is {adv['recommendation']['winner']} "
                   "(above): " + (f"dsbench generate {where} OUT --from "
                                  f"{adv['source']['path']} makes the full export" if where
                                  else "run the demo with --out DIR to keep its definition"))
    return out


def _fields_text(doc: dict[str, Any]) -> str | None:
    """The fields stage's cost, when after's CPU per sample rose beyond noise because of it."""
    run = first_run(doc["comparisons"]["after"])
    if run is None or metric(run, "cpu_s_per_sample")["change"] != "worse":
        return None
    row = next(r for r in run["attribution"] if r["what"] == "fields")
    if not row["distinguishable"] or row["delta"] <= 0:
        return None
    text = (f"parsing after's new fields from JSON costs {fmt.seconds(row['cand'], 'sample')} "
            "of CPU (the fields stage)")
    arrow = first_run(doc["comparisons"]["arrow"])
    if arrow is not None:
        cost = next(r for r in arrow["attribution"] if r["what"] == "fields")["cand"]
        text += (f"; the arrow candidate, with the embedding stored as float32, spends "
                 f"{fmt.seconds(cost, 'sample')} there: store the embedding as binary, not as "
                 "a JSON list of numbers")
    return text


def verdict_lines(doc: dict[str, Any]) -> list[str]:
    comp, cl, spec = doc["comparisons"], doc["cluster"], doc["cluster_spec"]
    exact = [f"  CPU instructions per sample: {text}"
             for text in [exact_text(comp["after"], "before", "after")] if text]
    lines = [*headline(doc, advice(doc)),
             "Verdict (measured on this machine; counts first, then timings with their 95% "
             "intervals)",
             f"  {counts_text(comp['after'], 'before', 'after')}",
             *exact,
             f"  CPU per sample: {cpu_text(comp['after'], 'before', 'after')}",
             f"  where the CPU went: {cpu_moves_text(comp['after'])}",
             f"  throughput: {speed_text(comp['after'], 'before', 'after')}",
             f"  the candidate: {counts_text(comp['arrow'], 'before', 'arrow')}; "
             + "".join(f"CPU instructions per sample: {text}; " for text in
                       [exact_text(comp["arrow"], "before", "arrow")] if text)
             + speed_text(comp["arrow"], "before", "arrow"),
             "",
             f"On {spec['nodes']} nodes x {spec['gpus_per_node']} GPUs (a model, not a "
             f"measurement; assumptions below{model_confidence(doc)})"]
    lines += [f"  {name:<6}  {cluster_text(cl[name])}" for name in EXPORTS]
    lines.append(f"  what sets it: {carries_text(cl['after'], 'after')}")
    if cl["after"]["verdict"] == "input-bound":
        lines.append(f"  the oscillation: {cl['after']['timeline']['note']}")
    lines.append(f"  the tail: {tail_text(doc, 'after')}")
    lines.append(f"  the model against a measured job: {job_check_text(doc.get('job_check'))}")
    if cl["after"].get("store") and cl["before"].get("store"):
        lines.append(f"  the store: {store_load_text(cl['after']['store'], 'after')}; "
                     f"{store_load_text(cl['before']['store'], 'before')}")
    lines += store_lines(doc.get("object_store"))
    lines += resume_lines(doc.get("resume"))
    lines += advice_lines(doc.get("advice"))
    lines += ["", "What to do"]
    steps = advice(doc)
    lines += [f"  {i}. {text}" for i, text in enumerate(steps, 1)] or [
        "  nothing: after holds up against before on these measurements and assumptions"]
    lines += ["", "Assumptions of the model (stated by the demo; change them with its options)",
              f"  {assumptions_text(spec, doc['results']['before'])}"]
    storage = storage_text(doc)
    if storage:
        lines.append(f"  {storage}")
    return lines


def storage_text(doc: dict[str, Any]) -> str | None:
    """Where the model's storage figures came from, when the demo probed its local S3 server."""
    probed = (doc.get("object_store") or {}).get("probe")
    used = doc["cluster"]["after"]["storage"]
    if probed is None or not used["name"].startswith("probed local S3 server"):
        return None
    measured = probed["latency"]["p50_s"]
    return (f"storage: {fmt.seconds(used['per_file_s'])} per request = "
            f"{fmt.seconds(measured)} measured (p50 first byte of the local S3 server, dsbench "
            f"probe) + {fmt.seconds(used['per_file_s'] - measured)} stated (a network round "
            f"trip, --network-latency); {fmt.nbytes(used['node_bytes_per_s'], 's')} per node, "
            f"the s3 profile's published figure (the loopback server streamed "
            f"{fmt.nbytes(probed['bandwidth']['best']['bytes_per_s'], 's')}, its own limit)")


def demo_checks(check: dict[str, Any] | None) -> list[claims.Check]:
    """The demo's job check as checks with tolerances (none when no job was run)."""
    if check is None or "skipped" in check:
        return []
    m, p = check["measured"], check["model"]
    return claims.job_checks({"mean": p["mean_s"], "gpu_util": p["gpu_util"], "p99": p["p99_s"]},
                             {"mean": m["mean_s"], "gpu_util": m["gpu_util"], "p99": m["p99_s"]},
                             check.get("time_sharing"))


def job_check_text(check: dict[str, Any] | None) -> str:
    """Which of the model's figures a measured job on this machine checked, and whether each
    came within its tolerance."""
    if check is None:
        return "none run (--no-job); `dsbench job` measures one (docs/job.md)"
    if "skipped" in check:
        return f"none run ({check['skipped']})"
    m = check["measured"]
    checks = demo_checks(check)
    missed = claims.missed(checks)
    outcome = (f"missed on {', '.join(c.what for c in missed)}" if missed
               else "within its tolerances")
    return (f"{outcome}: the model behind step time, GPU utilization and p99 above, run on a "
            f"{check['ranks']}-rank job measured here (after, {check['workers_per_rank']} "
            f"loader worker per rank, batch {check['batch_size']}, "
            f"{fmt.seconds(check['compute_s'])} compute, {check['steps']} steps; load average "
            f"{check['load_avg_1m']:.2g}; measured mean step {fmt.seconds(m['mean_s'])}, GPU "
            f"utilization {fmt.percent(m['gpu_util'])}, p99 {fmt.seconds(m['p99_s'])}): "
            f"{claims.checks_text(checks)}; not checked here: the cluster's scale, its storage "
            "latency and its stalls")


def model_confidence(doc: dict[str, Any]) -> str:
    """What the job check earned the model's figures, said where they are printed."""
    missed = claims.missed(demo_checks(doc.get("job_check")))
    if not missed:
        return ""
    return (f"; rough: its check against a measured job missed on "
            f"{', '.join(c.what for c in missed)}")


def store_lines(store: dict[str, Any] | None) -> list[str]:
    """The object-storage measurement: requests, CPU and host CPU of after against before."""
    if store is None:
        return []
    if "skipped" in store:
        return ["", f"On object storage: not measured ({store['skipped']})"]
    comp = store["comparison"]
    after = store["results"]["after"]
    q = after.get("requests", {})
    lines = ["", f"On object storage (measured: before's first shard and after's first "
             f"{after['counts']['units']} samples served by {store['server']}, read through "
             f"{q.get('client', '?')} {q.get('client_version', '')})",
             f"  {counts_text(comp, 'before', 'after')}",
             f"  CPU per sample: {cpu_text(comp, 'before', 'after')}",
             f"  host CPU per sample: "
             f"{cpu_text(comp, 'before', 'after', 'host_cpu_s_per_sample')} (the whole "
             "machine: the local server's own CPU too)"]
    if "first_byte_s" in q:
        lines.append(f"  after's requests: first byte p50 {fmt.seconds(q['first_byte_s']['p50'])}"
                     f", p99 {fmt.seconds(q['first_byte_s']['p99'])} (a loopback server, not a "
                     f"cloud store's latency); client CPU "
                     f"{fmt.seconds(q['client_cpu_s_per_request'])} per request")
    pushed = store.get("throttled")
    if pushed:
        counts = pushed["counts"]
        lines.append(f"  through a store that pushes back (503 SlowDown past "
                     f"{pushed['limit_per_s']:.1f} GETs/s: S3's limit per prefix shared by the "
                     f"job's {pushed['workers']:,} loader workers; one pass each): after "
                     f"{pushback_text(counts['after'])}; before "
                     f"{pushback_text(counts['before'])}")
    return lines


def pushback_text(q: dict[str, Any]) -> str:
    if not q["throttled_per_sample"] and not q["retries_per_sample"]:
        return (f"never throttled ({fmt.sig(q['requests_per_sample'])} requests/sample over "
                f"{q['samples']} samples)")
    return (f"{fmt.sig(q['throttled_per_sample'])} throttle answers and "
            f"{fmt.sig(q['retries_per_sample'])} retries per sample, "
            f"{fmt.seconds(q['retry_s_per_sample'])}/sample spent in them (measured over "
            f"{q['samples']} samples)")


def store_load_text(store: dict[str, Any], name: str) -> str:
    """The modelled job's requests against the store's limit per prefix."""
    rate = f"{name} asks {round(store['requests_per_s_per_prefix']):,} GETs/s of one prefix"
    limit = store["limit_per_prefix_s"]
    if limit is None:
        return rate
    if store["throttle_bound"]:
        return (f"{rate}, {fmt.ratio(store['requests_per_s_per_prefix'] / limit)} S3's "
                f"{limit:,.0f}: throttle-bound until S3 partitions the prefix, GPU utilization "
                f"at most {fmt.percent(store['gpu_util_at_limit'])} meanwhile")
    return f"{rate}, within S3's {limit:,.0f}"


def assumptions_text(spec: dict[str, Any], base: dict[str, Any]) -> str:
    measured_batch = base["config"]["batch_size"]
    return (f"{spec['cores_per_node']} cores and {spec['workers_per_gpu']} loader workers per "
            f"GPU per node, batch {spec['batch_size']} per GPU (measured at {measured_batch}, "
            f"rescaled), {fmt.seconds(spec['compute']['mean_s'])} of GPU compute per step, "
            f"storage {spec['storage']}, a {fmt.seconds(spec['stall_s'])} stall in "
            f"{fmt.percent(spec['stall_prob'])} of rank-steps; CPU per sample as measured here, "
            "per core")


def report(doc: dict[str, Any], out: Path | None = None, written: Sequence[Path] = ()) -> str:
    """What `dsbench demo` prints: what was measured, the verdict, where the files went."""
    m = doc["results"]["before"]["machine"]
    spec = doc["cluster_spec"]
    lines = [f"dsbench demo: the incident's exports ({doc['samples']} samples each), measured on "
             f"this machine ({m['usable_cores']} cores, {m['cpu_model']}) and carried to "
             f"{spec['nodes'] * spec['gpus_per_node']} GPUs", "",
             fmt.table(COUNT_HEADERS, count_rows(doc)), "",
             fmt.table(MEASURED_HEADERS, measured_rows(doc)),
             *([note] if (note := noisy_note(doc)) else []), "", *verdict_lines(doc), ""]
    if out is None:
        lines.append("Add --out DIR to keep the result files, the plots and an HTML report.")
    else:
        lines.append(f"Wrote {len(written)} files to {out}; open {out / 'report.html'}")
    return fmt.wrap("\n".join(lines))
