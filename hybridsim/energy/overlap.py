"""The perfect-overlap check: how well does ``T = T_comp + T_comm - alpha*min(T_comp, T_comm)`` describe iterations?

The ESCAPE D3.5 multinode model assumes computation hides communication completely (``alpha = 1``, so ``T =
max(T_comp, T_comm)``). Here ``T_comp`` is the modelled compute phase of the job (``job.compute.delay`` plus its
kernels, :func:`~hybridsim.energy.roofline.compute_phase_ns`), ``T_comm`` the iteration time of the same scenario
simulated with every job's compute phase removed, and ``T`` the simulated iteration time with it. Per job, ``alpha``
is fitted by least squares over all (rank, iteration) pairs::

    y = T_comp + T_comm - T,   x = min(T_comp, T_comm),   alpha = clip(sum(x*y) / sum(x*x), 0, 1)

``alpha`` near 0 means compute and communication add up (no overlap); near 1 means the seed's assumption holds.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

import numpy as np

from .roofline import compute_phase_ns


def overlap_prediction(t_comp, t_comm, alpha: float = 1.0) -> np.ndarray:
    """``T_comp + T_comm - alpha * min(T_comp, T_comm)`` (elementwise)."""
    t_comp = np.asarray(t_comp, dtype=np.float64)
    t_comm = np.asarray(t_comm, dtype=np.float64)
    return t_comp + t_comm - alpha * np.minimum(t_comp, t_comm)


def fit_alpha(t_comp, t_comm, t_sim) -> dict:
    """Least-squares ``alpha`` (clipped to [0, 1]) of the overlap model, with its fit quality.

    Returns ``alpha``, ``alpha_unclipped`` (``None`` when every ``min(T_comp, T_comm)`` is 0: alpha is then not
    identifiable and reported as 1), ``n``, ``rmse`` (same unit as the inputs) and ``mape`` (%) of the fitted model,
    and ``mape_alpha1`` of the perfect-overlap model."""
    t_comp = np.asarray(t_comp, dtype=np.float64).ravel()
    t_comm = np.asarray(t_comm, dtype=np.float64).ravel()
    t_sim = np.asarray(t_sim, dtype=np.float64).ravel()
    if not (t_comp.shape == t_comm.shape == t_sim.shape):
        raise ValueError(f"fit_alpha: arrays differ in length ({t_comp.size}, {t_comm.size}, {t_sim.size})")
    if t_sim.size == 0:
        raise ValueError("fit_alpha: no samples")
    x = np.minimum(t_comp, t_comm)
    y = t_comp + t_comm - t_sim
    sxx = float(np.dot(x, x))
    raw = float(np.dot(x, y) / sxx) if sxx > 0 else None
    alpha = 1.0 if raw is None else float(np.clip(raw, 0.0, 1.0))
    pred = overlap_prediction(t_comp, t_comm, alpha)
    pred1 = overlap_prediction(t_comp, t_comm, 1.0)
    pos = t_sim > 0
    mape = float(np.mean(np.abs(pred[pos] - t_sim[pos]) / t_sim[pos]) * 100) if pos.any() else None
    mape1 = float(np.mean(np.abs(pred1[pos] - t_sim[pos]) / t_sim[pos]) * 100) if pos.any() else None
    return {"alpha": alpha, "alpha_unclipped": raw, "n": int(t_sim.size),
            "rmse": float(np.sqrt(np.mean((pred - t_sim) ** 2))), "mape": mape, "mape_alpha1": mape1}


def _durations(records) -> dict[tuple[str, int, int], float]:
    return {(r.job, r.rank, r.iteration): r.end - r.start for r in records}


def overlap_report(scenario, records: Sequence, comm_records: Sequence,
                   t_comp_ns: dict[str, float] | None = None) -> dict:
    """Per job: simulated mean iteration time beside the overlap model's (``alpha = 1`` and fitted ``alpha``).

    ``records``: iterations simulated with the compute phases; ``comm_records``: the same scenario simulated without
    them. ``t_comp_ns``: job name -> compute phase (default :func:`compute_phase_ns`). A (rank, iteration) missing
    from ``comm_records`` uses the job's mean communication time."""
    comm = _durations(comm_records)
    comm_mean: dict[str, list] = defaultdict(list)
    for (job, _r, _i), d in comm.items():
        comm_mean[job].append(d)
    by_job: dict[str, list] = defaultdict(list)
    for r in records:
        by_job[r.job].append(r)
    out: dict[str, dict] = {}
    for j, job in enumerate(scenario.jobs):
        recs = by_job.get(job.name)
        if not recs:
            continue
        tc = (t_comp_ns or {}).get(job.name)
        if tc is None:
            tc = compute_phase_ns(scenario, j)
        mean_comm = float(np.mean(comm_mean[job.name])) if comm_mean.get(job.name) else None
        t_sim, t_comm, missing = [], [], 0
        for r in recs:
            d = comm.get((r.job, r.rank, r.iteration))
            if d is None:
                if mean_comm is None:
                    missing += 1
                    continue
                d = mean_comm
                missing += 1
            t_sim.append(r.end - r.start)
            t_comm.append(d)
        if not t_sim:
            out[job.name] = {"records": len(recs), "error": "no communication-only iterations to compare with"}
            continue
        t_sim_a = np.asarray(t_sim)
        t_comm_a = np.asarray(t_comm)
        t_comp_a = np.full_like(t_sim_a, tc)
        fit = fit_alpha(t_comp_a, t_comm_a, t_sim_a)
        out[job.name] = {
            "records": len(t_sim), "comm_matched_by_mean": missing,
            "t_comp_us": tc / 1e3, "t_comm_mean_us": float(t_comm_a.mean()) / 1e3,
            "t_sim_mean_us": float(t_sim_a.mean()) / 1e3,
            "t_alpha1_mean_us": float(overlap_prediction(t_comp_a, t_comm_a, 1.0).mean()) / 1e3,
            "t_alpha0_mean_us": float((t_comp_a + t_comm_a).mean()) / 1e3,
            "alpha": fit["alpha"], "alpha_unclipped": fit["alpha_unclipped"],
            "mape_alpha1_pct": fit["mape_alpha1"], "mape_fitted_pct": fit["mape"],
        }
    return out


def comm_only_scenario(scenario):
    """A deep copy of ``scenario`` whose jobs have no compute phase (no delay, no kernels)."""
    from ..scenario import Compute

    sc = scenario.model_copy(deep=True)
    for job in sc.jobs:
        job.compute = Compute()
    return sc


def modelled_compute_scenario(scenario):
    """A deep copy of ``scenario`` whose jobs' compute phases are plain delays equal to their modelled time
    (:func:`compute_phase_ns`), so any backend that honours ``compute.delay`` runs the kernels' time."""
    from ..scenario import Compute

    sc = scenario.model_copy(deep=True)
    for j, job in enumerate(sc.jobs):
        job.compute = Compute(delay=compute_phase_ns(scenario, j))
    return sc


def run_overlap(scenario, engine_factory: Callable | None = None) -> dict:
    """Simulate ``scenario`` with and without its compute phases and compare (see :func:`overlap_report`).

    ``engine_factory(scenario)`` returns an object with ``run()`` -> :class:`~hybridsim_common.backend.SimulationResult`;
    default: the embedded engine."""
    if engine_factory is None:
        from ..engine import Engine as engine_factory  # noqa: N813

    full = engine_factory(modelled_compute_scenario(scenario)).run()
    comm = engine_factory(comm_only_scenario(scenario)).run()
    return {"jobs": overlap_report(scenario, full.records, comm.records),
            "wall_s": {"with_compute": full.wall_s, "comm_only": comm.wall_s}}


def format_overlap_table(report: dict) -> str:
    rows = [("job", "T_comp us", "T_comm us", "T_sim us", "alpha=1 us", "err a=1 %", "alpha fit", "err fit %")]
    for name, j in report["jobs"].items():
        if "error" in j:
            rows.append((name, j["error"], "", "", "", "", "", ""))
            continue
        rows.append((name, f"{j['t_comp_us']:.3f}", f"{j['t_comm_mean_us']:.3f}", f"{j['t_sim_mean_us']:.3f}",
                     f"{j['t_alpha1_mean_us']:.3f}", f"{j['mape_alpha1_pct']:.2f}",
                     f"{j['alpha']:.3f}" if j["alpha_unclipped"] is not None else "n/a",
                     f"{j['mape_fitted_pct']:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)
