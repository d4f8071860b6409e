"""Markdown tables of a ``hybridsim bench --seeds N --sweep-ft ...`` directory: per policy case (each Ft, zero-shot)
and surrogate, the mean over seeds of the events ratio and of the worst job's error (completion error; for a job
stream also the run-time error), then each surrogate's paired differences to the baselines on the worst job's error
(``bench.json``'s ``paired`` section: mean and 95 % t-interval over the seeds).

    python benchmarks/seeds_curve_table.py BENCH_DIR [--surrogate SPEC ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def _case(r: dict) -> str:
    return f"{r['policy']}:" + ",".join(f"{k}={v}" for k, v in sorted((r.get("params") or {}).items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench")
    ap.add_argument("--surrogate", action="append", help="only these surrogates' paired rows (default: all)")
    args = ap.parse_args(argv)
    b = json.loads((Path(args.bench) / "bench.json").read_text())
    runs = b["runs"]
    stream = any(r.get("max_run_time_error_pct") is not None for r in runs)
    cases = list(dict.fromkeys(_case(r) for r in runs))
    specs = list(dict.fromkeys(r["surrogate_spec"] for r in runs))
    print(f"seeds {b.get('seeds')}; cell: events ratio / worst-job completion error %"
          + (" / worst-job run-time error %" if stream else "") + ", means over the seeds\n")
    print("| surrogate | " + " | ".join(cases) + " |")
    print("|---|" + "---:|" * len(cases))
    for spec in specs:
        cells = []
        for c in cases:
            rs = [r for r in runs if r["surrogate_spec"] == spec and _case(r) == c]
            if not rs:
                cells.append("")
                continue
            ev = np.mean([r["theoretical_speedup"] for r in rs])
            err = np.mean([r["max_completion_error_pct"] for r in rs])
            cell = f"{ev:.2f} / {err:.2f}"
            if stream:
                cell += f" / {np.mean([r['max_run_time_error_pct'] for r in rs]):.2f}"
            cells.append(cell)
        print(f"| {spec} | " + " | ".join(cells) + " |")
    metrics = ["max_completion_error_pct"] + (["max_run_time_error_pct"] if stream else [])
    print("\n| case | surrogate | vs | " + " | ".join(metrics) + " |")
    print("|---|---|---|" + "---:|" * len(metrics))
    rows = b.get("paired") or []
    for c in cases:
        for spec in specs:
            if args.surrogate and spec not in args.surrogate:
                continue
            for base in dict.fromkeys(r["baseline"] for r in rows):
                got = {r["metric"]: r for r in rows if r["case"] == c and r["surrogate"] == spec
                       and r["baseline"] == base}
                if not got:
                    continue
                cells = []
                for m in metrics:
                    r = got.get(m)
                    if r is None:
                        cells.append("")
                    elif r["ci95"]:
                        lo, hi = r["ci95"]
                        mark = " *" if hi < 0 or lo > 0 else ""
                        cells.append(f"{r['mean_diff']:+.2f} [{lo:+.2f}, {hi:+.2f}]{mark}")
                    else:
                        cells.append(f"{r['mean_diff']:+.2f}")
                print(f"| {c} | {spec} | {base} | " + " | ".join(cells) + " |")
    print("\n(* the 95 % interval excludes zero; negative: the surrogate has the lower error)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
