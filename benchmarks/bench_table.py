"""Markdown table of one or more ``hybridsim bench`` directories judged against the same pure run (for example a
baseline bench and a later one with more surrogates, both with ``--pure``): one row per hybrid run, job-level errors
first, per-rank MAPE last (hybridsim.bench's definitions); a (surrogate, policy) pair measured again in a later
directory replaces the earlier row. A bench with several seeds: use its ``seed<S>-`` runs of one seed, or read its
``paired`` section (``hybridsim bench`` prints it).

    python benchmarks/bench_table.py BENCH_DIR [BENCH_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(dirs: list[str]) -> str:
    benches = [json.loads((Path(d) / "bench.json").read_text()) for d in dirs]
    latest = {}
    for b in benches:
        for r in b["runs"]:
            latest[(r["surrogate_spec"], json.dumps(r.get("params"), sort_keys=True))] = r
    runs = list(latest.values())
    pure = benches[0]["pure"]
    if any(b["pure"]["events"] != pure["events"] for b in benches):
        raise SystemExit("bench_table: the benches were judged against different pure runs")
    jobs = list(runs[0]["jobs"])
    stream = "makespan_error_pct" in runs[0]
    many = len(jobs) > 4
    jobs_head = ("completion error % max / mean over jobs" if many
                 else "completion error % (signed) " + " / ".join(jobs))
    head = (["surrogate", "policy", "events ratio", "wall speedup", "f", "job iteration MAPE %", jobs_head]
            + (["makespan error %", "run-time error % mean / max"] if stream else [])
            + ["inference + tuning s (% of wall)", "controller s", "per-rank MAPE %"])
    out = [f"pure run: {pure['events'] / 1e6:.2f} M events, {pure['wall_s']:.0f} s wall",
           "", "| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for r in runs:
        ce = [r["jobs"][j]["completion_error_pct"] for j in jobs]
        signed = [r["jobs"][j].get("completion_error_signed_pct", r["jobs"][j]["completion_error_pct"]) for j in jobs]
        ces = f"{max(ce):.2f} / {sum(ce) / len(ce):.2f}" if many else " / ".join(f"{x:+.2f}" for x in signed)
        pol = r["policy"] if isinstance(r["policy"], str) else r["policy"].get("policy")
        params = ",".join(f"{k}={v}" for k, v in sorted((r.get("params") or {}).items()))
        jm = r.get("job_iteration_mape_pct")
        cells = [str(r["surrogate_spec"]), f"{pol}{':' + params if params else ''}", f"{r['theoretical_speedup']:.2f}",
                 f"{r['speedup']:.2f}", f"{r['surrogate_fraction']:.2f}", "-" if jm is None else f"{jm:.2f}", ces]
        if stream:
            cells += [f"{r['makespan_error_pct']:.2f}",
                      f"{r['mean_run_time_error_pct']:.2f} / {r['max_run_time_error_pct']:.2f}"]
        cells.append(f"{r['inference_s'] + r['tuning_s']:.2f} ({r['overhead_pct']:.1f} %)")
        cells.append(f"{r.get('controller_s', 0.0):.2f}")
        cells.append("-" if r.get("iteration_mape_pct") is None else f"{r['iteration_mape_pct']:.2f}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(table(sys.argv[1:]))
