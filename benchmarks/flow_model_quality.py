"""The flow-level interference model (:mod:`hybridsim.flow`) judged offline on a pure run, at co-runner changes.

For every job and every start or end of another job inside its run: the job's iteration time after the change (the
first iteration that starts after it; job time = mean over ranks) against two predictions made from before it:

* LAST: the last iteration that ended before the change;
* flow ratio: that time x model(co-runners after) / model(co-runners before) -- what the ``flow`` surrogate predicts
  before any truth of the new set (``delta``: that time + model after - model before). With ``--measured`` the
  co-runners' demands are their bytes over their first iteration's time, as in the hybrid loop.

With ``--after K`` / ``--before K`` the means of K iterations on each side are compared instead (same co-runner
set only), which separates the model's error from one iteration's noise.

    OMP_NUM_THREADS=1 python benchmarks/flow_model_quality.py RUN_DIR [RUN_DIR ...] [--before 1] [--after 1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def job_tables(run: Path):
    from hybridsim_common.records import read_iterations

    t = read_iterations(run / "iterations.parquet").to_pydict()
    job = np.asarray(t["job"], dtype=object)
    rank = np.asarray(t["rank"], dtype=np.int64)
    it = np.asarray(t["iteration"], dtype=np.int64)
    s = np.asarray(t["start"], dtype=np.float64)
    e = np.asarray(t["end"], dtype=np.float64)
    out = {}
    for name in dict.fromkeys(job.tolist()):
        sel = job == name
        n = int(it[sel].max()) + 1
        T = np.full(n, np.nan)
        st = np.full(n, np.inf)
        en = np.full(n, -np.inf)
        dur = np.zeros(n)
        cnt = np.zeros(n)
        np.add.at(dur, it[sel], e[sel] - s[sel])
        np.add.at(cnt, it[sel], 1)
        np.minimum.at(st, it[sel], s[sel])
        np.maximum.at(en, it[sel], e[sel])
        T = dur / np.maximum(cnt, 1)
        out[name] = (T, st, en)
    return out


def analyse(run: Path, before: int, after: int, measured: bool = False, **model_kw):
    from hybridsim.flow import flow_model
    from hybridsim.scenario import Scenario

    manifest = json.loads((run / "manifest.json").read_text())
    scenario = Scenario.model_validate(manifest["scenario"])
    desc = json.loads((run / "description.json").read_text())
    terms = {j["name"]: j["terminals"] for j in desc["jobs"]}
    names = [j.name for j in scenario.jobs]
    placement = [terms.get(n) for n in names]
    model = flow_model(scenario, placement, **model_kw)
    tabs = job_tables(run)
    if measured:  # as the hybrid loop does: a job's first iteration time
        for n, (T, st, en) in tabs.items():
            model.set_period(names.index(n), float(T[0]))
    span = {names.index(n): (st.min(), en.max()) for n, (T, st, en) in tabs.items()}
    bg = [i for i, j in enumerate(scenario.jobs) if j.is_background]

    def running(t, me):
        return tuple(k for k, (a, b) in span.items() if k != me and a <= t < b) + tuple(bg)

    rows = []
    for name, (T, st, en) in tabs.items():
        j = names.index(name)
        if j not in model:
            continue
        a0, b0 = span[j]
        changes = sorted({x for k, (a, b) in span.items() if k != j for x in (a, b) if a0 < x < b0})
        for tau in changes:
            ib = np.nonzero(en <= tau)[0]
            ia = np.nonzero(st >= tau)[0]
            if not len(ib) or not len(ia):
                continue
            ib, ia = int(ib[-1]), int(ia[0])
            sb, sa = running(st[ib], j), running(st[ia], j)
            if sb == sa:
                continue  # a start and an end in between, or a change inside one iteration only
            bidx = [i for i in range(ib, max(ib - before, -1), -1) if running(st[i], j) == sb and en[i] <= tau]
            aidx = [i for i in range(ia, min(ia + after, len(T))) if running(st[i], j) == sa]
            tb, ta = float(np.mean(T[bidx])), float(np.mean(T[aidx]))
            mb, ma = model.iteration_time(j, sb), model.iteration_time(j, sa)
            pf = tb * ma / mb
            pd = tb + (ma - mb)
            rows.append({"run": run.name, "job": name, "at_ns": tau, "before": [names[k] for k in sb if k not in bg],
                         "after": [names[k] for k in sa if k not in bg], "truth_change_pct": (ta / tb - 1) * 100,
                         "model_change_pct": (ma / mb - 1) * 100, "last_err_pct": (tb - ta) / ta * 100,
                         "flow_err_pct": (pf - ta) / ta * 100, "delta_err_pct": (pd - ta) / ta * 100,
                         "pair": (j, ib, ia)})
    return rows


def no_change_floor(run: Path, k: int) -> list[float]:
    """|mean of k iterations / mean of the k before - 1| x 100 for every job and every 2k-iteration stretch with one
    co-runner set throughout: how far LAST-of-k is off where nothing changes (the noise any prediction meets)."""
    import json as _json

    manifest = _json.loads((run / "manifest.json").read_text())
    names = [j["name"] for j in manifest["scenario"]["jobs"]]
    tabs = job_tables(run)
    span = {names.index(n): (st.min(), en.max()) for n, (T, st, en) in tabs.items()}
    out = []
    for name, (T, st, en) in tabs.items():
        j = names.index(name)
        sets = [tuple(q for q, (a, b) in span.items() if q != j and a <= s < b) for s in st]
        for i in range(k, len(T) - k + 1, k):
            if len(set(sets[i - k:i + k])) == 1:
                out.append(abs(np.mean(T[i:i + k]) / np.mean(T[i - k:i]) - 1) * 100)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--before", type=int, default=1)
    ap.add_argument("--after", type=int, default=1)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--nonminimal", type=float, default=None,
                    help="the non-minimal share (default: the routing's, hybridsim.flow.NONMINIMAL_SHARE)")
    ap.add_argument("--rule", default="weighted", help="hybridsim.flow.FlowModel.rule")
    ap.add_argument("--quiet", action="store_true", help="the summary only")
    ap.add_argument("--measured", action="store_true",
                    help="co-runners' demand from their first iteration's time (as the hybrid loop), not the model's")
    ap.add_argument("--floor", action="store_true", help="also the no-change floor (see no_change_floor)")
    args = ap.parse_args(argv)
    rows = []
    for r in args.runs:
        seen = set()
        for x in analyse(Path(r), args.before, args.after, args.measured, nonminimal=args.nonminimal, rule=args.rule):
            if x["pair"] not in seen:  # two changes between the same two iterations are one change
                seen.add(x["pair"])
                rows.append(x)
    print(f"{'run':24s} {'job':8s} {'t ms':>7s} {'truth %':>8s} {'model %':>8s} {'LAST err':>9s} {'ratio err':>9s} "
          f"{'delta err':>9s}")
    for x in [] if args.quiet else rows:
        print(f"{x['run'][:24]:24s} {x['job'][:8]:8s} {x['at_ns'] / 1e6:7.3f} {x['truth_change_pct']:+8.2f} "
              f"{x['model_change_pct']:+8.2f} {x['last_err_pct']:+9.2f} {x['flow_err_pct']:+9.2f} "
              f"{x['delta_err_pct']:+9.2f}")
    if rows:
        print(f"\n{len(rows)} changes; |error| %:")
        for key, label in (("last_err_pct", "LAST"), ("flow_err_pct", "flow, ratio"), ("delta_err_pct", "flow, delta")):
            e = np.abs([x[key] for x in rows])
            print(f"  {label:12s} mean {e.mean():5.2f}  median {np.median(e):5.2f}  max {e.max():5.2f}  "
                  f"within 3 %: {np.sum(e <= 3)}/{len(e)}")
    if args.floor:
        fl = np.asarray([x for r in args.runs for x in no_change_floor(Path(r), args.after)])
        print(f"  no change    mean {fl.mean():5.2f}  median {np.median(fl):5.2f}  max {fl.max():5.2f}  "
              f"within 3 %: {np.sum(fl <= 3)}/{len(fl)}  (LAST of {args.after} against the next {args.after}, "
              "same co-runners)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
