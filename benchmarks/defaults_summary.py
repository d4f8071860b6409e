"""Per surrogate, over the seeds of one or more ``hybridsim bench --seeds N`` directories: the median event and CPU
speedups (pure / hybrid, measured in one process), the worst job's completion error (mean over seeds and the worst
seed; run-time error for streams), and the coverage of the error target pooled over seeds (jobs within it / jobs).
Markdown, for benchmarks/RESULTS.md.

    python benchmarks/defaults_summary.py BENCH_DIR [BENCH_DIR ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from hybridsim.bench import coverage


def rows(bench_dir: str) -> list[str]:
    b = json.loads((Path(bench_dir) / "bench.json").read_text())
    pures = b.get("pures") or {str(b["runs"][0]["seed"]): b["pure"]}
    by = {}
    for r in b["runs"]:
        by.setdefault((r["surrogate_spec"].split(":")[0], r.get("sweep"),
                       ",".join(f"{k}={v}" for k, v in sorted((r.get("params") or {}).items()))), []).append(r)
    out = []
    for (spec, sweep, params), rs in by.items():
        ev = statistics.median(r["theoretical_speedup"] for r in rs)
        cpu = statistics.median(r["cpu_speedup"] for r in rs if r.get("cpu_speedup") is not None)
        stream = "max_run_time_error_pct" in rs[0]
        worst = [r["max_run_time_error_pct"] if stream else r["max_completion_error_pct"] for r in rs]
        covs = [coverage(r, r["run"].split("-", 2)[-1].split("-")[0] if "confident" in r["run"] else "",
                         r.get("params") or {}) for r in rs]
        within = sum(c["coverage_within"] for c in covs)
        jobs = sum(c["coverage_jobs"] for c in covs)
        cov = f"{within}/{jobs} ({within / jobs:.0%})" if jobs else "-"
        truth = sum(1 for r in rs if r.get("runs_truth"))
        pure_cpu = statistics.median(p["cpu_s"] for p in pures.values() if p.get("cpu_s") is not None)
        label = spec + ("" if sweep is None else f" ({sweep})") + (f" [{params}]" if params else "")
        out.append(f"| {b['scenario']} | {label} | {len(rs)} | "
                   f"{pure_cpu:.2f} | {ev:.2f} | {cpu:.2f} | {statistics.mean(worst):.2f} / {max(worst):.2f} | "
                   f"{cov} | {truth} |")
    return out


def main(argv: list[str]) -> None:
    print("| scenario | surrogate | seeds | pure CPU s (median) | events pure/hybrid (median) | CPU pure/hybrid "
          "(median) | worst job % (mean / max over seeds) | jobs within 2 % | runs that ran the truth |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for d in argv:
        print("\n".join(rows(d)))


if __name__ == "__main__":
    main(sys.argv[1:])
