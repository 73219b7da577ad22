"""`dsbench probe`'s report for people: first-byte latency, bandwidth per reader count, and the
figures `--storage FILE.json` gives the cluster model; every figure with its unit."""

from __future__ import annotations

from typing import Any

from dsbench import fmt


def _share(x: float | None) -> str:
    return "unknown" if x is None else fmt.percent(x)


def limit_lines(limit: dict[str, Any] | None) -> list[str]:
    if not limit:
        return []
    rows = [[f"{s['asked_per_s']:g}/s", str(s["sent"]), f"{s.get('sent_per_s', 0):.0f}/s",
             str(s["throttled"]), fmt.percent(s["throttled_share"]),
             f"{s.get('answered_late_per_s', 0):.0f}/s"] for s in limit["steps"]]
    heads = ["asked", "sent", "sent at", "throttled", "share", "answered, 2nd half"]
    found = (f"  limit: {limit['limit_per_s']:.0f} requests/s sustained (--storage FILE.json "
             "takes it as the limit per prefix)" if limit["found"]
             else f"  no limit found: {limit['reason']}")
    return ["", f"Request limit ({limit['what']})",
            *("  " + ln for ln in fmt.table(heads, rows).splitlines()), found]


def render(doc: dict[str, Any]) -> str:
    lat, bw, files = doc["latency"], doc["bandwidth"], doc["files"]
    where = (f"an object store, client {doc['client']['client']} "
             f"{doc['client']['client_version']}" if doc["remote"] else "a local path")
    m = doc["machine"]
    lines = [f"dsbench probe: {doc['location']} ({where}): {files['listed']} files, "
             f"{fmt.nbytes(files['bytes'])}"
             + (f", {files['empty']} empty (skipped)" if files["empty"] else ""),
             f"  measured on {m['cpu_model']}, {m['usable_cores']} usable cores"
             + (f", load {fmt.sig(m['load_avg_1m'])}" if "load_avg_1m" in m else ""),
             "", f"First-byte latency ({lat['what']})"]
    tail = (f"p99 {fmt.seconds(lat['p99_s'])}" if lat["p99_s"] is not None
            else f"no p99 from {lat['timed']} timings")
    n = lat["distinct_files"]
    lines.append(f"  {lat['timed']} timings over {n} file{'s' if n > 1 else ''}: "
                 f"p50 {fmt.seconds(lat['p50_s'])}, mean {fmt.seconds(lat['mean_s'])}, {tail}, "
                 f"max {fmt.seconds(lat['max_s'])}, min {fmt.seconds(lat['min_s'])}")
    cache = lat["page_cache"]
    if cache is not None:
        lines.append(f"  page cache: {_share(cache['resident_before'])} of these files' pages "
                     f"resident before eviction, {_share(cache['resident_after_evict'])} after")
    lines += ["", f"Streaming bandwidth ({bw['what']}; window {fmt.seconds(bw['window_s'])} "
                  f"per reader count, {bw['files']} files)"]
    rows = [[str(r["readers"]), fmt.nbytes(r["bytes"]), fmt.seconds(r["seconds"]),
             fmt.nbytes(r["bytes_per_s"], "s"), str(r["files"]),
             fmt.rate(r["files"] / r["seconds"] if r["seconds"] > 0 else 0.0, "files/s"),
             "-" if r.get("first_byte_p50_s") is None else fmt.seconds(r["first_byte_p50_s"]),
             fmt.percent(r["latency_share"]), "files ran out" if r["ended"] == "files"
             else "time"] for r in bw["runs"]]
    heads = ["readers", "read", "time", "bandwidth", "files", "rate", "first byte p50",
             "first bytes", "ended by"]
    lines += ["  " + ln for ln in fmt.table(heads, rows).splitlines()]
    lines.append("  first bytes: the share of the readers' time that first-byte latency alone "
                 "takes, at the p50 above (a lower bound)")
    best = bw["best"]
    lines += ["", "For the cluster model (dsbench extrapolate --storage FILE.json)",
              f"  latency per file  {fmt.seconds(lat['p50_s'])} (the p50; one request per "
              "file)",
              f"  bandwidth         {fmt.nbytes(best['bytes_per_s'], 's')} per node (the best, "
              f"with {best['readers']} reader{'s' if best['readers'] > 1 else ''}, from "
              "this one machine)"]
    lines += limit_lines(doc.get("limit"))
    if doc["notes"]:
        lines += ["", "Notes"] + [f"  - {n}" for n in doc["notes"]]
    return "\n".join(lines)
