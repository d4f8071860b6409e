"""Evaluation with online tuning (SMART's protocol) and the MAPE metric.

Protocol for one job series and one model already fitted offline on the train split:
walk through the test iterations ``t = t0 .. T-1`` (``t0`` = start of the test split); before predicting ``y[:, t]``,
if ``ft`` is finite and ``(t - t0)`` is a positive multiple of ``ft``, the model is tuned on the ground truth of the
last ``ft`` iterations (targets ``t-ft .. t-1``); then it predicts ``y[:, t]`` from ``series.context(t - 1, ...)``
(history = true iteration times up to ``t - 1``). ``ft = inf`` never tunes.

MAPE = mean over (rank, test iteration) of ``|y_hat - y| / y * 100`` on raw times (docs/design.md §5).

Volume scaling (``volume_scaling=True``, ``hybridsim evaluate --volume-scaling``; :mod:`surrogate.volumes`): as in
the hybrid loop, every model is fitted, tuned and given histories on ``y[:, t] / v[t]`` (``v`` = the iteration's
relative message volume from the run scenario's workload definition, mean 1 over the job) and its prediction of
iteration ``t`` is multiplied by ``v[t]``; the MAPE is on raw times. Jobs with a constant volume are unchanged.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np

from .base import Surrogate, SurrogateError, UnknownModelError


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean absolute percentage error (%) over all elements; ``true`` must be positive."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    if pred.shape != true.shape:
        raise ValueError(f"mape: shapes differ {pred.shape} vs {true.shape}")
    if (true <= 0).any():
        raise ValueError("mape: true values must be positive")
    return float(np.mean(np.abs(pred - true) / true) * 100.0)


def parse_ft(v) -> float:
    if isinstance(v, (int, float)):
        f = float(v)
    else:
        s = str(v).strip().lower()
        f = math.inf if s in ("inf", "infinity", "none", "off") else float(s)
    if not (f >= 1):
        raise ValueError(f"Ft must be >= 1 or 'inf', got {v!r}")
    return f


def run_online(model: Surrogate, series, ft: float = 8, split: str = "test", progress: bool = False,
               desc: str = "", volumes: np.ndarray | None = None) -> dict:
    """Evaluate ``model`` (mutated by tuning; pass a copy) on ``series``' ``split`` with online tuning every ``ft``.
    With ``volumes`` (relative volume per iteration, (T,)) the model tunes and predicts on ``y / volumes`` and its
    predictions are multiplied by the target iteration's volume; ``true`` and the MAPE stay raw.
    Returns ``{"mape", "pred" (R, n), "true" (R, n), "tunes", "predict_ms" (mean per step), "tune_s"}``."""
    from tqdm import tqdm

    raw = series
    if volumes is not None:
        from .volumes import scaled_series

        volumes = np.asarray(volumes, dtype=np.float64)
        series = scaled_series(series, volumes)

    a, b = series.split[split]
    a = max(a, 1)
    if b <= a:
        raise SurrogateError(f"job {series.job!r}: empty {split} split")
    L = max(1, int(model.lookback))
    Lg = int(model.graph_lookback) if model.needs_graphs else 0
    if model.needs_graphs and Lg < 1:
        Lg = 1
    R = series.R
    pred = np.empty((R, b - a))
    tunes, tune_s, pred_s = 0, 0.0, 0.0
    for t in tqdm(range(a, b), desc=desc or f"{model.name} {series.job}", disable=not progress, leave=False):
        if math.isfinite(ft) and t > a and (t - a) % int(ft) == 0:
            t0 = time.perf_counter()
            model.tune(series, np.arange(t - int(ft), t))
            tune_s += time.perf_counter() - t0
            tunes += 1
        ctx = series.context(t - 1, L, Lg)
        t0 = time.perf_counter()
        p = np.asarray(model.predict(ctx), dtype=np.float64)
        pred_s += time.perf_counter() - t0
        if p.shape != (R,):
            raise SurrogateError(f"{model.name}: predict returned shape {p.shape}, expected ({R},)")
        if not np.isfinite(p).all():
            raise SurrogateError(f"{model.name}: non-finite prediction for job {series.job!r} iteration {t}")
        pred[:, t - a] = p if volumes is None else p * volumes[t]
    true = np.asarray(raw.y[:, a:b], dtype=np.float64)
    return {"mape": mape(pred, true), "pred": pred, "true": true, "tunes": tunes,
            "predict_ms": pred_s / (b - a) * 1e3, "tune_s": tune_s, "first": a, "stop": b}


def clone_model(model: Surrogate) -> Surrogate:
    """An independent copy (tuning one does not touch the other): deepcopy, or config + state round trip."""
    try:
        return copy.deepcopy(model)
    except Exception:
        from .registry import create

        m = create(model.name, **model.config())
        m._load_state({k: v.clone() for k, v in model._state().items()})
        return m


def resolve_model_spec(spec: str, dataset, progress: bool = False, seed: int = 0, config: dict | None = None):
    """``spec`` is a checkpoint folder, ``NAME=CKPT`` (checks the checkpoint holds model NAME), or a registered model
    name (fitted here on each job's train split, validation for early stopping). Returns
    ``(label, {job: Surrogate}, fit_info)``."""
    from .loading import load
    from .registry import available

    try:
        source = load(spec, config, dataset=dataset)
    except UnknownModelError:
        raise SurrogateError(f"--model {spec!r}: neither a checkpoint folder nor a model name "
                             f"(available: {', '.join(available())})") from None
    if source.is_checkpoint:
        if "*" in source.trained:  # one independent copy per job
            models = {job: clone_model(source.trained["*"]) for job in dataset.jobs}
        else:
            models = dict(source.trained)
            missing = [j for j in dataset.jobs if j not in models]
            if missing:
                raise SurrogateError(f"{source.path}: checkpoint has no model for job(s) {missing}")
        return f"{source.name}[{source.path.name}]", models, {}
    from .train import fit_jobs

    models, info = fit_jobs(dict(dataset.jobs), source.new, progress=progress, seed=seed)
    return spec, models, info


def evaluate(dataset, specs: list[str], fts=(8,), jobs: list[str] | None = None, progress: bool = False,
             seed: int = 0, volume_scaling: bool = False, volumes: dict | None = None) -> dict:
    """Evaluate every model spec at every Ft on every job. Returns a JSON-able dict
    ``{"results": [{"model", "ft", "job", "mape", "tunes", "predict_ms", "tune_s"}], "fit": {...}}``.
    ``volume_scaling``: normalise by the workload volumes of the dataset's source scenario (``volumes``:
    ``{job: relative volume (T,)}`` given directly instead; jobs left out are not scaled). Models named here are then
    fitted on the scaled train split; checkpoints are used as they are."""
    import dataclasses

    fts = [parse_ft(f) for f in fts]
    names = list(jobs) if jobs else list(dataset.jobs)
    for j in names:
        dataset[j]  # raises DatasetError for unknown jobs
    if volume_scaling and volumes is None:
        from .volumes import dataset_volumes

        volumes = dataset_volumes(dataset)
    volumes = {k: np.asarray(v, dtype=np.float64) for k, v in (volumes or {}).items()} if volume_scaling else {}
    fit_ds = dataset
    if volumes:
        from .volumes import scaled_series

        fit_ds = dataclasses.replace(dataset, jobs={n: scaled_series(js, volumes[n]) if n in volumes else js
                                                    for n, js in dataset.jobs.items()})
    results, fit_info = [], {}
    for spec in specs:
        label, models, info = resolve_model_spec(spec, fit_ds, progress=progress, seed=seed)
        fit_info[label] = info
        for ft in fts:
            for job in names:
                m = clone_model(models[job])
                r = run_online(m, dataset[job], ft, progress=progress, desc=f"{label} ft={ft} {job}",
                               volumes=volumes.get(job))
                results.append({"model": label, "ft": "inf" if math.isinf(ft) else int(ft), "job": job,
                                "workload": dataset[job].workload, "mape": r["mape"], "tunes": r["tunes"],
                                "predict_ms": r["predict_ms"], "tune_s": r["tune_s"],
                                "test_iterations": [r["first"], r["stop"]], "ranks": dataset[job].R,
                                "volume_scaled": job in volumes})
    return {"dataset": str(dataset.path) if dataset.path else None, "results": results, "fit": fit_info,
            "volume_scaling": bool(volume_scaling), "volume_scaled_jobs": sorted(volumes)}


def format_table(report: dict) -> str:
    """One row per (model, Ft), one MAPE column per job."""
    res = report["results"]
    jobs = list(dict.fromkeys(r["job"] for r in res))
    rows = list(dict.fromkeys((r["model"], str(r["ft"])) for r in res))
    val = {(r["model"], str(r["ft"]), r["job"]): r for r in res}
    w = max([len("model")] + [len(m) for m, _ in rows])
    head = f"{'model':<{w}}  {'Ft':>4}  " + "  ".join(f"{j[:14]:>14}" for j in jobs) + "  pred ms"
    lines = [head, "-" * len(head)]
    for m, ft in rows:
        cells = []
        ms = []
        for j in jobs:
            r = val.get((m, ft, j))
            cells.append(f"{r['mape']:>14.3f}" if r else f"{'-':>14}")
            if r:
                ms.append(r["predict_ms"])
        lines.append(f"{m:<{w}}  {ft:>4}  " + "  ".join(cells) + f"  {np.mean(ms) if ms else float('nan'):7.2f}")
    lines.append("(MAPE % per job on the test split; pred ms = mean wall time of one prediction step for all ranks)")
    return "\n".join(lines)
