"""A pure run seen through the flow model: per job and iteration, the engine's time beside the flow model's.

The one place where a finished pure run (``hybridsim run``, a corpus run) is joined with :mod:`hybridsim.flow`: for
every foreground job, its time per iteration (the mean over its ranks, divided by the iteration's relative volume, as
the loop's surrogates predict it: :func:`surrogate.pretrain.job_tables`), the co-runners running at each iteration's
start (other jobs whose span covers the iteration's first rank start, background included), and the flow model's
iteration time beside them (:meth:`hybridsim.flow.FlowModel.iteration_time`). A co-runner's demand is its bytes over
its first iteration's time, as the hybrid loop sets it once it has that truth (:meth:`FlowModel.set_period`).

From these tables :mod:`benchmarks.change_prediction` scores predictions at job starts and co-runner changes, and
:func:`fit_correction` fits the ``flow`` surrogate's learned correction (:mod:`surrogate.flow_correction`) on a
corpus's runs:

    python -m hybridsim.flow_tables CORPUS_OR_RUNS [...] -o surrogate/checkpoints/flow-correction [--ridge 1.0]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class JobTable:
    """One foreground job of a pure run: ``y`` (T,) job time per iteration (ns, volume-normalised), ``flow`` (T,) the
    flow model's time beside the co-runners of ``sets`` (T,) (job ids), ``load`` (T,) the co-runner load
    (:meth:`surrogate.base.JobInfo.load`), ``info`` the job's :class:`~surrogate.base.JobInfo`."""

    run: str
    name: str
    job_id: int
    y: np.ndarray
    flow: np.ndarray
    sets: list
    load: np.ndarray
    info: object
    start: float = float("nan")       # the model's first-iteration time (FlowModel.start_time) beside sets[0]
    #: (T + 1, 3) the model's unscaled (compute, latency, bandwidth) at each iteration, then its start's (the
    #: replayed first iteration's where the job is replayed)
    parts: np.ndarray | None = None

    def events(self) -> list[tuple[str, int]]:
        """``("start", 0)`` and ``("change", t)`` for every iteration t whose co-runners differ from t - 1's, where
        the times involved are known."""
        out = [("start", 0)] if len(self.y) and np.isfinite(self.y[0]) and self.y[0] > 0 else []
        for t in range(1, len(self.y)):
            if self.sets[t] != self.sets[t - 1] and np.isfinite(self.y[[t - 1, t]]).all():
                out.append(("change", t))
        return out


def run_spans(run: Path) -> tuple[dict, dict]:
    """From run ``run``'s iterations table, per job id with rows: its span (first start, last end) and, per iteration,
    the earliest start over its ranks (what decides which co-runners an iteration ran beside)."""
    from hybridsim_common.records import read_iterations

    tab = read_iterations(Path(run) / "iterations.parquet").to_pydict()
    jid = np.asarray(tab["job_id"], np.int64)
    it = np.asarray(tab["iteration"], np.int64)
    start = np.asarray(tab["start"], np.float64)
    end = np.asarray(tab["end"], np.float64)
    spans, firsts = {}, {}
    for k in np.unique(jid).tolist():
        sel = jid == k
        spans[k] = (float(start[sel].min()), float(end[sel].max()))
        s = np.full(int(it[sel].max()) + 1, np.inf)
        np.minimum.at(s, it[sel], start[sel])
        firsts[k] = s
    return spans, firsts


def job_times(y: np.ndarray) -> np.ndarray:
    """A job's time per iteration from its (ranks, iterations) times ``y``: the mean over the ranks with a positive
    finite time (NaN where none)."""
    with np.errstate(invalid="ignore"):
        return np.nanmean(np.where(np.isfinite(y) & (y > 0), y, np.nan), axis=0)


def run_tables(run: Path, measured: bool = True, with_parts: bool = False, **model_kw) -> list[JobTable]:
    """The :class:`JobTable` of every foreground job of pure run ``run`` (``model_kw``:
    :func:`hybridsim.flow.flow_model` options; ``with_parts``: fill :attr:`JobTable.parts`)."""
    from hybridsim_common.rundir import read_description, read_manifest
    from surrogate.pretrain import job_tables

    from .flow import flow_model
    from .scenario import Scenario

    run = Path(run)
    scenario = Scenario.model_validate(read_manifest(run)["scenario"])
    desc = read_description(run)
    names = [j.name for j in scenario.jobs]
    terms = {j.name: j.terminals for j in desc.jobs}
    model = flow_model(scenario, [terms.get(n) for n in names], **model_kw)
    spans, firsts = run_spans(run)
    jobs = job_tables(run)
    out = []
    ys = {job["name"]: job_times(job["y"]) for job in jobs}
    if measured:   # a co-runner's demand from its first iteration's time, as the loop sets it
        for name, y in ys.items():
            if len(y) and np.isfinite(y[0]) and y[0] > 0:
                model.set_period(names.index(name), float(y[0]))
    for job in jobs:
        j = names.index(job["name"])
        y = ys[job["name"]]
        sets = [tuple(sorted(k for k, (a, b) in spans.items() if k != j and a <= s < b)) for s in firsts[j][:len(y)]]
        flow = np.array([model.iteration_time(j, s) for s in sets])
        parts = None
        if with_parts:
            scale, model.scale = model.scale, {}
            model._cache.clear()
            parts = np.array([model.parts(j, s) for s in sets]).reshape(-1, 3)
            if len(parts) and j in model.replayed:   # a start is of the replayed first iteration
                parts = np.vstack([parts, [parts[0, 0], model.replayed[j][0], parts[0, 2]]])
            elif len(parts):
                parts = np.vstack([parts, parts[:1]])
            model.scale = scale
            model._cache.clear()
        start = model.start_time(j, sets[0]) if sets else float("nan")
        out.append(JobTable(run.name, job["name"], j, y, flow, sets, np.asarray(job["load"][:len(y)], np.float64),
                            job["info"], start, parts))
    return out


def corpus_runs(path: Path) -> list[Path]:
    """The completed runs of a corpus folder, the run folder itself, or the run folders inside a folder."""
    from surrogate.pretrain import corpus_run_dirs

    path = Path(path)
    if (path / "corpus.json").is_file():
        return corpus_run_dirs(path)
    if (path / "iterations.parquet").is_file():
        return [path]
    inside = sorted(p for p in path.iterdir() if (p / "iterations.parquet").is_file()) if path.is_dir() else []
    if not inside:
        raise SystemExit(f"{path}: neither a corpus folder (corpus.json), a run folder (iterations.parquet) nor a "
                         "folder of run folders")
    return inside


def training_rows(tables: list[JobTable]) -> tuple[np.ndarray, np.ndarray]:
    """``(X, r)`` of every iteration with a finite time and flow value: the correction's features
    (:func:`surrogate.flow_correction.features`) and the residual ``log(y / flow)`` it learns."""
    from surrogate.flow_correction import features

    X, r = [], []
    for tb in tables:
        if tb.info is None:
            continue
        for t in range(len(tb.y)):
            if np.isfinite(tb.y[t]) and tb.y[t] > 0 and np.isfinite(tb.flow[t]) and tb.flow[t] > 0:
                X.append(features(tb.info, tb.flow[t], tb.load[t], t))
                r.append(np.log(tb.y[t] / tb.flow[t]))
    return np.asarray(X).reshape(-1, len(X[0]) if X else 0), np.asarray(r)


def fit_calibration(tables: list[JobTable]) -> tuple[dict, dict]:
    """``(scale, first)`` per workload kind, fitted on the tables' (built ``with_parts``) iterations: ``scale[kind]`` =
    the (latency, bandwidth) scales ``(a, b)`` of :attr:`hybridsim.flow.FlowModel.scale` that minimise the relative
    error of ``compute + a latency + b bandwidth`` against the engine over every iteration after a job's first (least
    squares of ``(y - C - a L - b B) / y``; a and b kept in [0.25, 4]); ``first[kind]`` = the median over the jobs of
    the first iteration's time over that fit's of the start's parts (the last row of :attr:`JobTable.parts`)."""
    rows: dict = {}
    for tb in tables:
        if tb.parts is None or tb.info is None:
            continue
        k = tb.info.workload
        for t in range(1, min(len(tb.y), len(tb.parts) - 1)):
            if np.isfinite(tb.y[t]) and tb.y[t] > 0 and np.isfinite(tb.parts[t]).all():
                rows.setdefault(k, []).append((tb.y[t], *tb.parts[t]))
    scale = {}
    for k, r in rows.items():
        r = np.asarray(r)
        y, C, L, B = r.T
        A = np.stack([L / y, B / y], axis=1)
        coef, *_ = np.linalg.lstsq(A, 1.0 - C / y, rcond=None)
        scale[k] = tuple(float(np.clip(c, 0.25, 4.0)) for c in coef)
    first: dict = {}
    for tb in tables:
        k = tb.info.workload if tb.info is not None else None
        if k in scale and tb.parts is not None and len(tb.y) and np.isfinite(tb.y[0]) and tb.y[0] > 0:
            C, L, B = tb.parts[-1]
            a, b = scale[k]
            first.setdefault(k, []).append(tb.y[0] / (C + a * L + b * B))
    return scale, {k: float(np.median(v)) for k, v in first.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="fit the flow surrogate's learned correction on pure runs")
    ap.add_argument("paths", nargs="+", type=Path, metavar="CORPUS_OR_RUNS")
    ap.add_argument("-o", "--output", type=Path, required=True, help="checkpoint folder (config.json)")
    ap.add_argument("--ridge", type=float, default=1.0, help="ridge penalty (the features are O(1))")
    args = ap.parse_args(argv)
    from surrogate.flow_correction import Correction

    runs = [r for p in args.paths for r in corpus_runs(p)]
    tables = [tb for r in runs for tb in run_tables(r)]
    X, r = training_rows(tables)
    corr = Correction.fit(X, r, ridge=args.ridge)
    corr.provenance = {"runs": len(runs), "rows": int(len(r)), "sources": [str(p) for p in args.paths],
                       "ridge": args.ridge}
    corr.save(args.output)
    print(json.dumps({"runs": len(runs), "rows": int(len(r)), "coef": corr.coef.round(4).tolist()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
