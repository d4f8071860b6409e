"""At a job's start and at every co-runner start or end, before any truth of the new mix: how close does a predictor
come to the job's next iteration time? (issue 32, item 6; target: within 3 % at >= 80 % of the starts and changes of
stream and staggered scenarios.) Offline, on pure runs, one step, job time = mean over ranks, volume-normalised as the
loop predicts it (:mod:`hybridsim.flow_tables`):

* a **start**: the job's first iteration, predicted before any truth of it. LAST and MEAN have nothing to predict
  from (counted as misses); ``flow``: the flow model's first-iteration time beside the co-runners running then
  (:meth:`hybridsim.flow.FlowModel.start_time`); ``flow+corr``: that time times the learned correction's
  ``exp(beta . x)`` (:mod:`surrogate.flow_correction`);
* a **change**: every iteration t whose co-runner set (other jobs running at its start, background included) differs
  from t - 1's. LAST: the job's time of t - 1; MEAN: the mean of the up to 8 before; ``flow``: LAST x the model's
  ratio between the two sets (:meth:`FlowModel.ratio`); ``flow+corr``: that times ``exp(beta . (x_t - x_{t-1}))``
  (the ``flow`` surrogate's ``correction=shipped``; off by default, as in the surrogate);
* the oracle answers with the pure run's own time (within 3 % everywhere by construction: the column says that the
  events are counted alike, not that any model is that good);
* each ``pretrained`` checkpoint given (``--model``): at changes, its per-rank predictions from the up to 8
  iterations before, without the online bias, combined by their mean (issue 22's comparison).

    OMP_NUM_THREADS=1 python benchmarks/change_prediction.py RUNS [...] [--correction shipped|none|FOLDER]
        [--model LABEL=WEIGHTS ...] [--nonminimal Q] [--no-latency] [--json OUT]
    python benchmarks/change_prediction.py --rescore OUT-NAME.json [...] --correction FOLDER   # no tables rebuilt

RUNS: a corpus folder, a run folder, or a folder of run folders (one row group each). Prints per argument: the
number of starts and changes, and per predictor the share within 3 % (and mean / median absolute error %) at starts,
at changes and at both; then the same on the iterations without a change (the noise every prediction meets); then
starts and changes against the stretch's mean (the iterations from the event on with its co-runners, at most 8: what a
fast-forward repeats) instead of the one iteration; ``--by-kind``: per workload kind, starts and changes apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOOKBACK = 8
WITHIN = 3.0   # %


def event_rows(tables, correction=None) -> list[dict]:
    """One row per (job, iteration t): ``kind`` (start / change / steady), ``true``, and each predictor's job time
    (NaN: no prediction)."""
    from surrogate.flow_correction import features

    rows = []
    for tb in tables:
        y, f = tb.y, tb.flow
        x = [features(tb.info, f[t], tb.load[t], t) if tb.info is not None and np.isfinite(f[t]) else None
             for t in range(len(y))]
        for t in range(len(y)):
            if not (np.isfinite(y[t]) and y[t] > 0):
                continue
            # the stretch: the iterations from t on with t's co-runners (at most LOOKBACK), their mean time
            end = t + 1
            while end < min(len(y), t + LOOKBACK) and tb.sets[end] == tb.sets[t] and np.isfinite(y[end]):
                end += 1
            row = {"run": tb.run, "job": tb.name, "workload": tb.info.workload if tb.info is not None else "?",
                   "t": t, "true": y[t], "oracle": y[t], "stretch": float(np.mean(y[t:end]))}
            if t == 0:
                start = tb.start if np.isfinite(tb.start) else f[0]
                row.update(kind="start", last=np.nan, mean=np.nan, flow=start)
                if x[0] is not None:
                    row["x"] = x[0].tolist()   # for --rescore
                if correction is not None and x[0] is not None:
                    row["flow+corr"] = start * float(np.exp(correction.residual(x[0])))
            else:
                cols = np.arange(max(0, t - LOOKBACK), t)
                if not np.isfinite(y[cols]).all():
                    continue
                row.update(kind="change" if tb.sets[t] != tb.sets[t - 1] else "steady", last=y[t - 1],
                           mean=float(y[cols].mean()), flow=y[t - 1] * f[t] / f[t - 1])
                if x[t] is not None and x[t - 1] is not None:
                    row["dx"] = (x[t] - x[t - 1]).tolist()   # for --rescore
                    if correction is not None:
                        row["flow+corr"] = row["flow"] * float(np.exp(correction.residual(x[t] - x[t - 1])))
            rows.append(row)
    return rows


def pretrained_predictions(run: Path, models: dict, rows: list[dict]) -> None:
    """Adds each ``pretrained`` model's job-time prediction to the change rows of ``run`` (issue 22's columns)."""
    from surrogate.base import Context
    from surrogate.pretrain import job_tables

    at = {(r["job"], r["t"]): r for r in rows if r["run"] == run.name and r["kind"] == "change"}
    for job in job_tables(run):
        y, load, info = job["y"], job["load"], job["info"]
        for t in range(1, y.shape[1]):
            row = at.get((job["name"], t))
            if row is None:
                continue
            cols = np.arange(max(0, t - LOOKBACK), t)
            ctx = Context(job["name"], info.workload, y[:, cols], iteration=t - 1, columns=cols, info=info,
                          load=load[cols], load_now=float(load[t]))
            for label, m in models.items():
                p = m._raw(ctx)
                row[label] = float(np.mean(p[np.isfinite(p)]))


def cell(rows: list[dict], name: str, truth: str = "true") -> str:
    """``share within 3 % (k of n); mean / median |error| %`` of predictor ``name`` over ``rows`` against ``truth``
    (``true``: the iteration's time; ``stretch``: the mean of the iterations from it with its co-runners, at most
    LOOKBACK; a missing prediction is a miss and has no error)."""
    if not rows:
        return "-"
    p = np.array([r.get(name, np.nan) for r in rows], dtype=np.float64)
    if name == "oracle":
        p = np.array([r[truth] for r in rows])
    t = np.array([r[truth] for r in rows])
    e = 100 * np.abs(p / t - 1.0)
    ok = np.isfinite(e)
    hit = int((e[ok] <= WITHIN).sum())
    stats = f"; {e[ok].mean():.2f} / {np.median(e[ok]):.2f}" if ok.any() else "; no prediction"
    return f"**{100 * hit / len(rows):.0f} %** ({hit}/{len(rows)}){stats}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, metavar="RUNS")
    ap.add_argument("--correction", default="none",
                    help="the flow model's learned correction: none (default: the flow surrogate's), shipped, or a "
                         "checkpoint folder")
    ap.add_argument("--model", action="append", default=[], metavar="LABEL=WEIGHTS",
                    help="a pretrained checkpoint to score at changes (repeatable): shipped, none or a folder")
    ap.add_argument("--nonminimal", type=float, default=None, help="hybridsim.flow.flow_model's nonminimal share")
    ap.add_argument("--no-latency", action="store_true", help="the flow model without protocol latency")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--by-kind", action="store_true", help="also per workload kind, starts and changes apart")
    ap.add_argument("--rescore", action="store_true",
                    help="RUNS are --json files of an earlier call: score them again with --correction")
    args = ap.parse_args(argv)
    from hybridsim.flow_tables import corpus_runs, run_tables
    from surrogate.flow_correction import Correction
    from surrogate.registry import create

    correction = None if args.correction == "none" else Correction.load(args.correction)
    models = {}
    for spec in args.model:
        label, _, weights = spec.partition("=")
        models[label] = create("pretrained", weights=weights or label)
    names = ["last", "mean", "flow"] + (["flow+corr"] if correction is not None else []) + list(models) + ["oracle"]
    print("| runs | events | n | " + " | ".join(names) + " |")
    print("|---|---|---:|" + "---|" * len(names))
    every = []
    for path in args.paths:
        rows, cpu = [], time.process_time()
        if args.rescore:
            rows = json.loads(path.read_text())
            runs = sorted({r["run"] for r in rows})
            for r in rows:
                if correction is not None and r["kind"] == "start" and "x" in r:
                    r["flow+corr"] = r["flow"] * float(np.exp(correction.residual(np.asarray(r["x"]))))
                elif correction is not None and "dx" in r:
                    r["flow+corr"] = r["flow"] * float(np.exp(correction.residual(np.asarray(r["dx"]))))
        else:
            runs = corpus_runs(path)
        for run in [] if args.rescore else runs:
            got = event_rows(run_tables(run, nonminimal=args.nonminimal, latency=not args.no_latency), correction)
            if models:
                pretrained_predictions(run, models, got)
            rows += got
        cpu = time.process_time() - cpu
        for what, sel in (("starts", ("start",)), ("changes", ("change",)), ("starts + changes", ("start", "change")),
                          ("no change", ("steady",))):
            rs = [r for r in rows if r["kind"] in sel]
            print(f"| {path.name} ({len(runs)} runs) | {what} | {len(rs)} | "
                  + " | ".join(cell(rs, n) for n in names) + " |")
        rs = [r for r in rows if r["kind"] in ("start", "change")]
        print(f"| {path.name} ({len(runs)} runs) | starts + changes, against the stretch's mean | {len(rs)} | "
              + " | ".join(cell(rs, n, "stretch") for n in names) + " |")
        if args.by_kind:
            for wk in sorted({r.get("workload", "?") for r in rs}):
                for what in ("start", "change"):
                    sub = [r for r in rs if r.get("workload") == wk and r["kind"] == what]
                    if sub:
                        print(f"| {path.name} | {wk} {what}s | {len(sub)} | "
                              + " | ".join(cell(sub, n) for n in names) + " |")
        print(f"<!-- {path.name}: {cpu:.1f} s CPU for the flow model and the tables -->")
        every += [{**r, "_src": str(path)} for r in rows]
    if args.json:
        for path in args.paths:   # one file per argument: NAME.json beside the given path
            mine = [r for r in every if r.get("_src") == str(path)]
            (args.json.parent / f"{args.json.stem}-{path.name}.json").write_text(json.dumps(mine, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
