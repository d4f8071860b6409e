"""How a predicted iteration ends on a job's ranks (``controller.sync``), compared in the loop, paired over seeds.

    python benchmarks/sync_compare.py SCENARIO -o OUT [--sync job --sync skew] [--seeds 3] [--surrogate last ...]
                                      [--policy aligned:ft=64 ...]

Runs ``hybridsim bench SCENARIO --seeds N`` once per ``sync`` value (the scenario copied into OUT with its
``controller.sync`` set; its other settings untouched) and prints, per policy and surrogate, each metric's mean over
the seeds for the first and the second value and their paired difference (second - first) with a 95 % t-interval:
the worst job's absolute completion error, the mean absolute truth bias (simulated iterations against the pure run's
same iterations), the theoretical (event) speedup and, for job streams, the makespan and worst run-time errors.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml
from scipy import stats

METRICS = ("max_completion_error_pct", "mean_abs_truth_bias_pct", "theoretical_speedup", "makespan_error_pct",
           "max_run_time_error_pct")


def _variant(scenario: Path, sync: str, out: Path) -> Path:
    data = yaml.safe_load(scenario.read_text())
    data.setdefault("controller", {})["sync"] = sync
    path = out / f"{scenario.stem}-sync-{sync}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _table(bench: dict) -> dict:
    t = defaultdict(dict)
    for r in bench["runs"]:
        params = ",".join(f"{k}={v}" for k, v in sorted((r.get("params") or {}).items()))
        t[(f"{r['policy']}:{params}" if params else r["policy"], r["surrogate_spec"])][r["seed"]] = {
            m: (abs(r[m]) if m.endswith("error_pct") else r[m]) for m in METRICS if r.get(m) is not None}
    return t


def paired(a: dict, b: dict) -> list[str]:
    ta, tb = _table(a), _table(b)
    lines = []
    for key in ta:
        seeds = sorted(set(ta[key]) & set(tb.get(key, {})))
        if not seeds:
            continue
        lines.append(f"{key[0]} {key[1]} (seeds {', '.join(map(str, seeds))})")
        for m in METRICS:
            if not all(m in ta[key][s] and m in tb[key][s] for s in seeds):
                continue
            xa = [ta[key][s][m] for s in seeds]
            xb = [tb[key][s][m] for s in seeds]
            d = [y - x for x, y in zip(xa, xb)]
            n, md = len(d), sum(d) / len(d)
            iv = ""
            if n > 1:
                sd = math.sqrt(sum((x - md) ** 2 for x in d) / (n - 1))
                h = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
                iv = f"[{md - h:+.2f}, {md + h:+.2f}]"
            lines.append(f"   {m:28s} {sum(xa) / n:8.2f} {sum(xb) / n:8.2f}   diff {md:+.2f} {iv}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--sync", action="append", help="two values to compare (default: job, skew)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--surrogate", action="append", default=[])
    ap.add_argument("--policy", action="append", default=[])
    args = ap.parse_args(argv)
    syncs = args.sync or ["job", "skew"]
    if len(syncs) != 2:
        ap.error("give two --sync values")
    args.output.mkdir(parents=True, exist_ok=True)
    benches = []
    for sync in syncs:
        sc = _variant(args.scenario, sync, args.output)
        out = args.output / f"bench-{sync}"
        cmd = [sys.executable, "-m", "hybridsim", "bench", str(sc), "-o", str(out), "--force", "--no-progress",
               "--seeds", str(args.seeds)]
        for s in args.surrogate:
            cmd += ["--surrogate", s]
        for p in args.policy:
            cmd += ["--policy", p]
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        benches.append(json.loads((out / "bench.json").read_text()))
    print(f"{args.scenario.name}: sync {syncs[0]} -> {syncs[1]} (columns: mean over seeds of each, paired difference)")
    print("\n".join(paired(*benches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
