"""At a co-runner's start or end, before any truth of the new mix: how close does a surrogate come to a job's next
iteration time? (issue 22, item 6's target: within 3 %.) Offline, on pure runs, one-step: at every iteration t of a
job whose co-runner set (other jobs running at its start, background included) differs from iteration t - 1's, the
job's time of t (mean over ranks, volume-normalised as the loop predicts it) predicted from the up to 8 iterations
before it, every rank's own, with the co-runner load of those iterations and of t (``Context.load`` /
``load_now``, as the loop passes them):

* LAST: the job's time of t - 1; MEAN: the mean of the job's times of the up to 8 before;
* each ``pretrained`` checkpoint given: its per-rank predictions without the online bias (nothing to tune on before
  a truth of the new mix), combined by their mean, as a ``sync: job`` job advances.

    OMP_NUM_THREADS=1 python benchmarks/change_prediction.py RUNS [...] --model LABEL=WEIGHTS [...]

RUNS: a corpus folder, a run folder, or a folder of run folders (as ``corpus_headroom.py``); WEIGHTS: ``shipped``,
``none`` or a checkpoint folder. Prints per argument: changes, and per predictor the mean and median absolute error %
and how many are within 3 %; and the same on the iterations without a change (the noise every prediction meets).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_spec = importlib.util.spec_from_file_location("corpus_headroom", ROOT / "benchmarks" / "corpus_headroom.py")
headroom = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(headroom)

LOOKBACK = 8


def predictions(run: Path, models: dict) -> list[dict]:
    """One row per (job, iteration t >= 1): ``changed``, ``true``, and each predictor's job-time prediction."""
    from surrogate.base import Context
    from surrogate.pretrain import job_tables

    series = {j["name"]: j for j in headroom.job_series(run)}
    rows = []
    for job in job_tables(run):
        y, load, info = job["y"], job["load"], job["info"]
        sets = series[job["name"]]["sets"]
        jt = series[job["name"]]["y"]
        for t in range(1, y.shape[1]):
            cols = np.arange(max(0, t - LOOKBACK), t)
            if not (np.isfinite(jt[t]) and jt[t] > 0 and np.isfinite(jt[cols]).all()):
                continue
            row = {"changed": sets[t] != sets[t - 1], "true": jt[t], "last": jt[t - 1], "mean": float(jt[cols].mean())}
            ctx = Context(job["name"], info.workload, y[:, cols], iteration=t - 1, columns=cols, info=info,
                          load=load[cols], load_now=float(load[t]))
            for label, m in models.items():
                p = m._raw(ctx)
                row[label] = float(np.mean(p[np.isfinite(p)]))
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, metavar="RUNS")
    ap.add_argument("--model", action="append", default=[], metavar="LABEL=WEIGHTS",
                    help="a pretrained checkpoint to score (repeatable): shipped, none or a checkpoint folder")
    args = ap.parse_args(argv)
    from surrogate.registry import create

    models = {}
    for spec in args.model:
        label, _, weights = spec.partition("=")
        models[label] = create("pretrained", weights=weights or label)
    names = ["last", "mean", *models]
    print("| runs | iterations | n | " + " | ".join(f"{n}: mean / median abs. error %, within 3 %" for n in names)
          + " |")
    print("|---|---|---:|" + "---:|" * len(names))
    for path in args.paths:
        rows = [r for run in headroom.run_dirs(path) for r in predictions(run, models)]
        for what, sel in (("after a co-runner change", True), ("no change", False)):
            rs = [r for r in rows if r["changed"] == sel]
            cells = []
            for n in names:
                e = 100 * np.abs(np.array([r[n] / r["true"] - 1.0 for r in rs])) if rs else np.zeros(0)
                cells.append(f"{e.mean():.2f} / {np.median(e):.2f}, {int((e <= 3).sum())}" if len(e) else "-")
            print(f"| {path.name} | {what} | {len(rs)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
