"""How much a corpus can teach beyond the trivial predictors: per job, the job-level iteration-time MAPE of LAST and
MEAN predicting each iteration from the job's causal history, against the oracle's 0 (a pure run's own times), and
how often the job's co-runners change under it (issue 22, item 6: measure a corpus's oracle-versus-MEAN headroom
before training on it).

    OMP_NUM_THREADS=1 python benchmarks/corpus_headroom.py CORPUS_OR_RUNS [...] [--horizons 1,8,16,32]
        [--min-iterations N] [--json OUT]

Each argument is a corpus folder (``hybridsim corpus``; its completed runs), one run folder, or a folder of run
folders (a test scenario's pure runs over seeds); each is reported in rows of its own. Per foreground job with at least two iterations:

* the job's time of iteration t: the mean over its ranks (what a ``sync: job`` completion follows), divided by the
  iteration's relative message volume where it varies (LAMMPS) -- the series the loop's surrogates predict
  (``surrogate.volume_scaling``, :func:`surrogate.pretrain.job_tables`);
* horizon h (1 = one step; 8/16/32 = the fast-forwards of aligned Ft 8-32): iteration t predicted from the history
  up to t - h, LAST = the time of t - h, MEAN = the mean of the 8 times up to t - h (the loop's ``mean``, k 8); the
  job's MAPE is the mean over its iterations t >= h of |prediction / time - 1|; the oracle's is 0 by construction;
* co-runner changes: the share of the job's iterations t >= h whose set of running co-runners (other jobs whose span
  covers the iteration's start; background included) differs from that at iteration t - h; MEAN's MAPE is also
  split into iterations with and without such a change.

A second table gives the size of what moves: at each co-runner change with four iterations of the same co-runners
on both sides, the job's mean time over the four after against the four before; and a job's first iteration against
its later mean (the start transient).

A row gives, over the jobs of its runs, the mean of the per-job MAPEs (each job counts once) with a 95 % interval
from resampling whole runs (2,000 bootstrap draws, seed 0), and the share of iterations with a change (every
iteration counts once).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: MEAN's look-back (the loop's ``mean`` default)
MEAN_K = 8


def run_dirs(path: Path) -> list[Path]:
    """The completed runs of a corpus folder, the run folder itself, or the run folders inside a folder (e.g. the
    pure runs of a test scenario over seeds)."""
    from surrogate.pretrain import corpus_run_dirs

    if (path / "corpus.json").is_file():
        return corpus_run_dirs(path)
    if (path / "iterations.parquet").is_file():
        return [path]
    inside = sorted(p for p in path.iterdir() if (p / "iterations.parquet").is_file()) if path.is_dir() else []
    if inside:
        return inside
    raise SystemExit(f"{path}: neither a corpus folder (corpus.json), a run folder (iterations.parquet) nor a folder "
                     "of run folders")


def job_series(run: Path) -> list[dict]:
    """Per foreground job: ``name``, ``kind``, ``y`` (T,) job time per iteration, ``sets`` (T,) frozenset of the
    co-runners (names of the other jobs, background included) whose span covers the iteration's first rank start."""
    from hybridsim.flow_tables import job_times, run_spans
    from hybridsim_common.rundir import read_description
    from surrogate.pretrain import job_tables

    desc = read_description(run)
    by_id, firsts = run_spans(run)
    spans = {desc.jobs[k].name: span for k, span in by_id.items()}
    starts = {desc.jobs[k].name: s for k, s in firsts.items() if desc.jobs[k].iterations is not None}
    out = []
    for job in job_tables(run):
        t = job_times(job["y"])
        sets = [frozenset(n for n, (a, b) in spans.items() if n != job["name"] and a <= s < b)
                for s in starts[job["name"]][:len(t)]]
        out.append({"name": job["name"], "kind": job["info"].workload, "y": t, "sets": sets})
    return out


def job_scores(job: dict, h: int) -> dict | None:
    """LAST's and MEAN's MAPE % at horizon ``h`` for one job, the share of its iterations with a co-runner change,
    and MEAN's MAPE on the iterations with and without one; None when the job has no iteration t >= h."""
    y, sets = job["y"], job["sets"]
    T = len(y)
    rows = []
    for t in range(h, T):
        a = t - h
        hist = y[max(0, a - MEAN_K + 1):a + 1]
        hist = hist[np.isfinite(hist)]
        if not (np.isfinite(y[t]) and y[t] > 0 and np.isfinite(y[a]) and len(hist)):
            continue
        rows.append((abs(y[a] / y[t] - 1.0), abs(hist.mean() / y[t] - 1.0), sets[t] != sets[a]))
    if not rows:
        return None
    last, mean, changed = (np.array(c) for c in zip(*rows))
    return {"last": 100 * last.mean(), "mean": 100 * mean.mean(), "n": len(rows), "changed": int(changed.sum()),
            "mean_changed": 100 * mean[changed].mean() if changed.any() else None,
            "mean_steady": 100 * mean[~changed].mean() if (~changed).any() else None}


def shifts(job: dict, k: int = 4) -> list[float]:
    """Relative change of the job's time at each co-runner change with ``k`` iterations of the same co-runners on
    both sides: the mean of the ``k`` after over the mean of the ``k`` before, minus 1."""
    y, sets = job["y"], job["sets"]
    out = []
    for t in range(k, len(y) - k + 1):
        if sets[t] != sets[t - 1] and len(set(sets[t - k:t])) == 1 and len(set(sets[t:t + k])) == 1:
            before, after = np.nanmean(y[t - k:t]), np.nanmean(y[t:t + k])
            if np.isfinite(before) and np.isfinite(after) and before > 0:
                out.append(float(after / before - 1.0))
    return out


def headroom(path: Path, horizons: list[int], min_iterations: int = 2) -> dict:
    runs = run_dirs(path)
    jobs = [{**j, "run": k} for k, r in enumerate(runs) for j in job_series(r) if len(j["y"]) >= min_iterations]
    out = {"path": str(path), "runs": len(runs), "jobs": len(jobs),
           "iterations": int(sum(np.isfinite(j["y"]).sum() for j in jobs)), "horizons": {}}
    sh = 100 * np.abs([x for j in jobs for x in shifts(j)])
    first = [100 * (j["y"][0] / np.nanmean(j["y"][1:]) - 1) for j in jobs if len(j["y"]) >= 6]
    out["shifts"] = {"changes": int(len(sh)), "mean_abs": float(sh.mean()) if len(sh) else None,
                     "median_abs": float(np.median(sh)) if len(sh) else None, "above_5": int((sh > 5).sum()),
                     "above_10": int((sh > 10).sum()),
                     "first_vs_rest": float(np.mean(first)) if first else None}
    for h in horizons:
        pairs = [(s, j) for s, j in ((job_scores(j, h), j) for j in jobs) if s is not None]
        sc = [s for s, _ in pairs]
        n = sum(s["n"] for s in sc)
        ch = sum(s["changed"] for s in sc)
        mc = [s["mean_changed"] for s in sc if s["mean_changed"] is not None]
        ms = [s["mean_steady"] for s in sc if s["mean_steady"] is not None]
        kinds = sorted({j["kind"] for _, j in pairs})
        out["horizons"][h] = {
            "jobs": len(sc), "predictions": n,
            "last": float(np.mean([s["last"] for s in sc])) if sc else None,
            "mean": float(np.mean([s["mean"] for s in sc])) if sc else None,
            "mean_median_job": float(np.median([s["mean"] for s in sc])) if sc else None,
            "changed_share": ch / n if n else None,
            "jobs_with_change": sum(s["changed"] > 0 for s in sc),
            "mean_on_changed": float(np.mean(mc)) if mc else None,
            "mean_on_steady": float(np.mean(ms)) if ms else None,
            "per_kind_mean": {k: float(np.mean([s["mean"] for s, j in pairs if j["kind"] == k])) for k in kinds},
            "mean_ci": _bootstrap([s["mean"] for s in sc], [j["run"] for _, j in pairs], len(runs)),
            "last_ci": _bootstrap([s["last"] for s in sc], [j["run"] for _, j in pairs], len(runs)),
        }
    return out


def _bootstrap(values: list, run_of: list, n_runs: int, reps: int = 2000, seed: int = 0) -> list | None:
    """95 % interval of the mean over jobs, resampling whole runs (a run's jobs share its network and co-runners,
    so they are not independent)."""
    if not values:
        return None
    v, r = np.asarray(values), np.asarray(run_of)
    sums = np.bincount(r, weights=v, minlength=n_runs)
    counts = np.bincount(r, minlength=n_runs)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_runs, (reps, n_runs))
    c = counts[draws].sum(axis=1)
    means = sums[draws].sum(axis=1)[c > 0] / c[c > 0]
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def _fmt(v, pct=False):
    if v is None:
        return "-"
    return f"{100 * v:.1f} %" if pct else f"{v:.2f}"


def _ci(ci) -> str:
    return "" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, metavar="CORPUS_OR_RUN")
    ap.add_argument("--horizons", default="1,8,16,32", help="comma-separated, default 1,8,16,32")
    ap.add_argument("--min-iterations", type=int, default=2, metavar="N",
                    help="score only jobs of at least N iterations (default 2), so that corpora of different job "
                         "lengths compare on the same kind of job")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    args = ap.parse_args(argv)
    horizons = [int(h) for h in args.horizons.split(",")]
    res = [headroom(p, horizons, args.min_iterations) for p in args.paths]
    print("| corpus | runs / jobs / iterations | horizon | jobs scored | LAST job MAPE % [95 % CI] | MEAN job MAPE % "
          "[95 % CI] | oracle | iterations with a co-runner change | jobs with one | MEAN % on changed / steady "
          "iterations |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res:
        for h, s in r["horizons"].items():
            print(f"| {Path(r['path']).name} | {r['runs']} / {r['jobs']} / {r['iterations']} | {h} | {s['jobs']} | "
                  f"{_fmt(s['last'])} {_ci(s['last_ci'])} | {_fmt(s['mean'])} {_ci(s['mean_ci'])} | 0 | "
                  f"{_fmt(s['changed_share'], True)} | {s['jobs_with_change']} | "
                  f"{_fmt(s['mean_on_changed'])} / {_fmt(s['mean_on_steady'])} |")
    print()
    print("| corpus | co-runner changes (4 steady iterations each side) | mean / median abs. shift of the job's time % "
          "| shifts > 5 % / > 10 % | first iteration against the job's later mean % |")
    print("|---|---:|---:|---:|---:|")
    for r in res:
        s = r["shifts"]
        print(f"| {Path(r['path']).name} | {s['changes']} | {_fmt(s['mean_abs'])} / {_fmt(s['median_abs'])} | "
              f"{s['above_5']} / {s['above_10']} | {_fmt(s['first_vs_rest'])} |")
    print()
    print("MEAN job MAPE % per workload kind (one-step and the largest horizon):")
    for r in res:
        hs = list(r["horizons"])
        for h in (hs[0], hs[-1]):
            kinds = ", ".join(f"{k} {v:.2f}" for k, v in r["horizons"][h]["per_kind_mean"].items())
            print(f"  {Path(r['path']).name}, h {h}: {kinds}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
