"""Zero-shot accuracy of the surrogates of a ``hybridsim bench`` directory: per job, the iteration MAPE against the
pure run of the predictions made before the job's first truth window (from the warm-up alone) and of those made after
it; per rank and iteration (``rank``), and of the job's iteration time (``job``: per iteration, the median over ranks
of the predictions, as the loop's ``sync: job`` uses them, against the mean over ranks of the pure run's times, what
a bulk-synchronous job's completion follows; a nearest-neighbour rank's own time varies ~20 % around it).

    python benchmarks/zero_shot.py BENCH_DIR [BENCH_DIR ...] [--json OUT.json]

Prints one row per (hybrid run, job) and writes the rows as JSON (default BENCH_DIR/zero_shot.json of the first).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _truth(pure: Path) -> dict:
    t = pq.read_table(pure / "iterations.parquet", columns=["job", "rank", "iteration", "start", "end"]).to_pydict()
    return {(j, r, i): e - s for j, r, i, s, e in zip(t["job"], t["rank"], t["iteration"], t["start"], t["end"])}


def phases(run: Path, truth: dict) -> list[dict]:
    t = pq.read_table(run / "iterations.parquet", columns=["job", "rank", "iteration", "mode", "predicted"]).to_pydict()
    rows = []
    for job in sorted(set(t["job"])):
        sel = [k for k, j in enumerate(t["job"]) if j == job]
        modes = {}
        for k in sel:
            modes[t["iteration"][k]] = t["mode"][k]
        order = [modes[i] for i in sorted(modes)]
        if "predict" not in order:
            continue
        first_pred = order.index("predict")
        later_sim = [i for i in range(first_pred, len(order)) if order[i] == "simulate"]
        first_window = later_sim[0] if later_sim else len(order)
        before, after = [], []
        per_it: dict[int, tuple[list, list]] = {}
        for k in sel:
            it = t["iteration"][k]
            if modes[it] != "predict":
                continue
            y = truth.get((job, t["rank"][k], it))
            p = t["predicted"][k]
            if y and p == p:
                (before if it < first_window else after).append(abs(p - y) / y * 100.0)
                pair = per_it.setdefault(it, ([], []))
                pair[0].append(p)
                pair[1].append(y)
        jb = [abs(np.median(p) - np.mean(y)) / np.mean(y) * 100.0 for it, (p, y) in sorted(per_it.items())
              if it < first_window]
        ja = [abs(np.median(p) - np.mean(y)) / np.mean(y) * 100.0 for it, (p, y) in sorted(per_it.items())
              if it >= first_window]
        rows.append({"run": run.name, "job": job, "warmup_iterations": first_pred,
                     "first_window_at": first_window if later_sim else None,
                     "mape_before_first_window": float(np.mean(before)) if before else None,
                     "n_before": len(before),
                     "mape_after_first_window": float(np.mean(after)) if after else None, "n_after": len(after),
                     "job_mape_before_first_window": float(np.mean(jb)) if jb else None,
                     "job_mape_after_first_window": float(np.mean(ja)) if ja else None})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", nargs="+")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for b in map(Path, args.bench):
        meta = json.loads((b / "bench.json").read_text())
        pure = Path(meta["pure"].get("run", "pure"))
        truth = _truth(pure if pure.is_absolute() else b / pure)
        for r in meta["runs"]:
            rows += [{"bench": str(b), "surrogate": r.get("surrogate_spec"), **row}
                     for row in phases(b / r["run"], truth)]

    def f(x):
        return "-" if x is None else f"{x:.2f}"

    print(f"{'run':<52} {'job':<10} {'warm-up':>7} {'rank MAPE % before 1st window':>29} {'after':>6} "
          f"{'job MAPE % before':>17} {'after':>6}")
    for r in rows:
        print(f"{r['run']:<52} {r['job']:<10} {r['warmup_iterations']:>7} {f(r['mape_before_first_window']):>29} "
              f"{f(r['mape_after_first_window']):>6} {f(r['job_mape_before_first_window']):>17} "
              f"{f(r['job_mape_after_first_window']):>6}")
    out = Path(args.json) if args.json else Path(args.bench[0]) / "zero_shot.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
