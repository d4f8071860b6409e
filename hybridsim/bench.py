"""``hybridsim bench``: pure simulation vs hybrid runs of one scenario, in one process, with docs/design.md §5's
metrics.

* speedup = wall time of the pure run / wall time of the hybrid run (same scenario, same machine, same process);
* theoretical speedup = events of the pure run / events of the hybrid run; efficiency = speedup / theoretical;
* surrogate fraction f = predicted iterations / all iterations (jobs with iterations);
Primary, job-level figures (what a job's completion follows):

* per-job completion-time error % = (T_hybrid - T_pure) / T_pure x 100, signed (``completion_error_signed_pct``)
  and absolute (``completion_error_pct``); per run the worst (``max_completion_error_pct``; with its sign,
  ``worst_completion_error_signed_pct``) and the mean absolute one, and the number of jobs above 5 %; ``standin``:
  what stood in for the predicted jobs' traffic (the hybrid run's ``summary.json``);
* job iteration-time MAPE = mean over predicted iterations of |job time predicted - job time pure| / job time pure
  x 100, where a job time is the statistic the job's completion follows (``hybridsim.hybrid.job_time``: the mean
  over ranks) of the model's per-rank predictions and of the pure run's per-rank times; per job and pooled over the
  run's predicted job iterations (``job_iteration_mape_pct``);
* job streams (a ``scheduler`` section): per-job run-time error % = ((end - start)_hybrid - (end - start)_pure) /
  (end - start)_pure x 100, signed and absolute (the completion-time error also carries the start, which moves with
  the jobs before it), its mean and max over jobs, and the makespan error % = |makespan_hybrid - makespan_pure| /
  makespan_pure x 100; beside each job's run-time error its start-time shift (start_hybrid - start_pure, ns), so an
  error that travels down the queue shows: :func:`start_shifts`.

* truth bias (``truth_bias_pct``, per job, signed): the mean over the job's iterations that the hybrid run
  simulated of (job time hybrid - job time pure) / job time pure x 100 (job times as above, of the hybrid's own
  simulated per-rank times and the pure run's same iterations): how true the truth is beside predicted co-runners
  (what they leave in the network, ``controller.keep_background``); per run the job furthest from zero
  (``worst_truth_bias_pct``, signed) and the mean of |bias| (``mean_abs_truth_bias_pct``): :func:`truth_bias`;
  the same over the simulated iterations during which another job was predicted (``truth_bias_beside_predicted_pct``,
  ``worst_...``, ``mean_abs_...``), where the stand-in matters;

Secondary: per-rank iteration MAPE (``iteration_mape_pct``) = mean over predicted (rank, iteration) of |prediction -
pure-run truth| / truth x 100, for the run, per job and per rank of each job (it mostly measures the spread of the
ranks, which no model removes: the oracle scores like the others).

On a backend that runs the policy itself (CODES' director), the predictions are read from the hybrid run's records,
and the run with the hybrid machinery but nothing predicted (``mode="floor"``) gives each job's perturbation floor
(``perturbation_floor_pct``: its signed completion difference to the pure run), printed beside its error.

Speed: speedup = wall time of the pure run / wall time of the hybrid run (same scenario, same machine, same
process); theoretical speedup = events of the pure run / events of the hybrid run; efficiency = speedup /
theoretical (``cpu_speedup``, ``cpu_efficiency``: the same on the run's CPU time, its simulator process included
(CODES), which the load of a shared machine does not inflate); surrogate fraction f = predicted iterations / all
iterations (jobs with iterations); the hybrid run's wall split into simulation, controller, inference and tuning
(seconds and % of its wall time).

With ``seeds`` (``--seeds N``) every run is repeated for the scenario's seed + 0 .. N-1 (placement and background
traffic change) and each surrogate is compared with each baseline (default LAST and MEAN) seed by seed: the mean of
the paired differences of an error figure and its 95 % t-interval (``paired``).

Over 600 lines: the bench's metrics are defined here beside the loop that runs and judges the cases and the
:func:`preflight` that checks every bench option before the first run, so a figure and its definition stay together
and the case list is stated once; its tables live in hybridsim/bench_table.py.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np

from hybridsim_common.interrupts import failure_reason
from .bench_table import format_paired, format_table  # noqa: F401  (the bench's tables; callers import them here)
from .pure_run import check_not_input, read_pure_run
from hybridsim_common.records import IterationColumns, IterationRecord
from .report import SWEEPABLE
from hybridsim_common.rundir import RunDir, write_json_atomic


def _durations(records: list[IterationRecord]) -> dict[tuple[int, int, int], float]:
    return {(r.job_id, r.rank, r.iteration): r.end - r.start for r in records}


def _shift(pure, hybrid):
    return hybrid - pure if pure is not None and hybrid is not None else None


def start_shifts(jobs: dict) -> dict:
    """Stream keys from the per-job ``start_shift_ns``: the largest and mean |shift| and how many jobs started at
    another time in the hybrid run than in the pure one."""
    sh = [abs(j["start_shift_ns"]) for j in jobs.values() if j.get("start_shift_ns") is not None]
    return {"max_abs_start_shift_ns": max(sh) if sh else None,
            "mean_abs_start_shift_ns": float(np.mean(sh)) if sh else None,
            "jobs_start_shifted": sum(1 for x in sh if x > 0)}


def _pure_tables(scenario, pure_records: list[IterationRecord]) -> dict[int, np.ndarray]:
    """Job id -> (ranks, iterations) pure-run iteration times (NaN where missing)."""
    out = {}
    for jid, job in enumerate(scenario.jobs):
        if not job.is_background and job.iterations:
            out[jid] = np.full((job.ranks, job.iterations), np.nan)
    if isinstance(pure_records, IterationColumns):   # the columns at once (the same values: one record a cell)
        c = pure_records.columns()
        dur = c["end"] - c["start"]
        for jid, tab in out.items():
            sel = np.flatnonzero((c["job_id"] == jid) & (c["rank"] < tab.shape[0]) & (c["iteration"] < tab.shape[1]))
            tab[c["rank"][sel], c["iteration"][sel]] = dur[sel]
        return out
    for r in pure_records:
        tab = out.get(r.job_id)
        if tab is not None and r.rank < tab.shape[0] and r.iteration < tab.shape[1]:
            tab[r.rank, r.iteration] = r.end - r.start
    return out


def job_iteration_errors(pure: np.ndarray, predicted: np.ndarray, iterations) -> np.ndarray:
    """|job time predicted - job time pure| / job time pure x 100 for each of ``iterations``, where a job time is
    :func:`hybridsim.hybrid.job_time` of a column of per-rank times (``pure``, ``predicted``: (ranks, iterations))."""
    from .hybrid import job_time

    out = []
    for i in iterations:
        p, t = predicted[:, i], pure[:, i]
        if np.isfinite(p).all() and np.isfinite(t).all():
            jt = job_time(t)
            out.append(abs(job_time(p) - jt) / jt * 100.0)
    return np.asarray(out, dtype=np.float64)


def truth_bias(scenario, pure_records: list[IterationRecord], records: list[IterationRecord],
               simulated: list[bool], beside_predicted: bool = False) -> dict[str, float | None]:
    """Job name -> signed truth bias % (module docstring): the mean over the job's simulated iterations (every rank
    simulated, in both runs) of (job_time(hybrid) - job_time(pure)) / job_time(pure) x 100; None for a job with no
    such iteration. ``records``/``simulated``: the hybrid run's records and their simulated flags.
    ``beside_predicted``: only the iterations during which (first start to last end) another job was predicted for
    a while (``truth_bias_beside_predicted_pct``: where the stand-in for a predicted co-runner matters)."""
    from .hybrid import job_time

    pure = _pure_tables(scenario, pure_records)
    hyb = {jid: np.full(t.shape, np.nan) for jid, t in pure.items()}
    span: dict[int, dict[int, list[float]]] = {}  # job -> predicted iteration -> [first start, last end]
    first = {jid: np.full(t.shape[1], np.inf) for jid, t in pure.items()}
    last = {jid: np.full(t.shape[1], -np.inf) for jid, t in pure.items()}
    pred = None
    if isinstance(records, IterationColumns) and simulated is records.simulated:
        pred = _bias_tables(records, hyb, first, last)   # the same tables, spans and bounds as the loop below
    for r, sim in zip(records if pred is None else (), simulated):
        tab = hyb.get(r.job_id)
        if tab is None or r.rank >= tab.shape[0] or r.iteration >= tab.shape[1]:
            continue
        first[r.job_id][r.iteration] = min(first[r.job_id][r.iteration], r.start)
        last[r.job_id][r.iteration] = max(last[r.job_id][r.iteration], r.end)
        if sim:
            tab[r.rank, r.iteration] = r.end - r.start
        else:
            sp = span.setdefault(r.job_id, {}).setdefault(r.iteration, [r.start, r.end])
            sp[0], sp[1] = min(sp[0], r.start), max(sp[1], r.end)
    if pred is None:
        pred = {jid: np.array(list(d.values()), dtype=np.float64).reshape(-1, 2) for jid, d in span.items()}
    out: dict[str, float | None] = {}
    for jid, tab in hyb.items():
        ok = np.isfinite(tab).all(axis=0) & np.isfinite(pure[jid]).all(axis=0)
        errs = []
        for i in np.nonzero(ok)[0]:
            if beside_predicted and not any(((p[:, 0] < last[jid][i]) & (p[:, 1] > first[jid][i])).any()
                                            for k, p in pred.items() if k != jid):
                continue
            jp = job_time(pure[jid][:, i])
            if jp > 0:
                errs.append((job_time(tab[:, i]) - jp) / jp * 100.0)
        out[scenario.jobs[jid].name] = float(np.mean(errs)) if errs else None
    return out


def _bias_tables(records: IterationColumns, hyb: dict, first: dict, last: dict) -> dict[int, np.ndarray]:
    """:func:`truth_bias`' tables from the hybrid run's columns: ``hyb`` (simulated times), ``first`` and ``last``
    (each iteration's earliest start and latest end) filled in place; returns job id -> (k, 2) [first start, last
    end] of each predicted iteration (in ascending iteration order: only whether any overlaps is read)."""
    c = records.columns()
    dur = c["end"] - c["start"]
    pred = {}
    for jid, tab in hyb.items():
        sel = np.flatnonzero((c["job_id"] == jid) & (c["rank"] < tab.shape[0]) & (c["iteration"] < tab.shape[1]))
        if not len(sel):
            continue
        it, start, end, sim = c["iteration"][sel], c["start"][sel], c["end"][sel], c["simulated"][sel]
        np.minimum.at(first[jid], it, start)
        np.maximum.at(last[jid], it, end)
        tab[c["rank"][sel][sim], it[sim]] = dur[sel][sim]
        if not sim.all():
            its, inv = np.unique(it[~sim], return_inverse=True)
            lo, hi = np.full(len(its), np.inf), np.full(len(its), -np.inf)
            np.minimum.at(lo, inv, start[~sim])
            np.maximum.at(hi, inv, end[~sim])
            pred[jid] = np.stack([lo, hi], axis=1)
    return pred


def truth_bias_summary(bias: dict[str, float | None], key: str = "truth_bias") -> dict:
    """Run-level keys of :func:`truth_bias`: the job furthest from zero (signed, ``worst_<key>_pct``) and the mean
    |bias| over jobs (``mean_abs_<key>_pct``)."""
    vals = [b for b in bias.values() if b is not None]
    return {f"worst_{key}_pct": max(vals, key=abs) if vals else None,
            f"mean_abs_{key}_pct": float(np.mean(np.abs(vals))) if vals else None}


def _signed(h, p):
    return (h - p) / p * 100.0 if p and h is not None else None


#: job id -> (the model's own per-rank predictions, the per-rank times the run advanced by, the predicted iterations);
#: the tables are (ranks, iterations), NaN where nothing was predicted
Predictions = dict[int, tuple[np.ndarray, np.ndarray, list[int]]]


def predictions_of(controller) -> Predictions:
    """:data:`Predictions` of an in-process :class:`~hybridsim.hybrid.HybridController` (the model's own per-rank
    predictions, before ``controller.sync`` turns them into each rank's duration, beside the times the job advanced
    by)."""
    out = {}
    for jid, st in controller.states.items():
        if st is not None:
            model = np.where(np.isfinite(st.raw), st.raw, st.pred)
            out[jid] = (model, st.pred, [i for i, m in enumerate(st.modes) if m.value == "predict"
                                         and i < st.n_iterations])
    return out


def predictions_from_records(scenario, records: list[IterationRecord], simulated: list[bool]) -> Predictions:
    """:data:`Predictions` read from a hybrid run's records, for a backend that runs the policy itself (CODES: a
    predicted iteration's record lasts the director's answer)."""
    tabs: dict[int, np.ndarray] = {}
    for r, sim in zip(records, simulated):
        job = scenario.jobs[r.job_id] if r.job_id < len(scenario.jobs) else None
        if sim or job is None or job.is_background or not job.iterations:
            continue
        t = tabs.setdefault(r.job_id, np.full((job.ranks, job.iterations), np.nan))
        if r.rank < t.shape[0] and r.iteration < t.shape[1]:
            t[r.rank, r.iteration] = r.end - r.start
    return {jid: (t, t, np.nonzero(np.isfinite(t).any(axis=0))[0].tolist()) for jid, t in tabs.items()}


def compare(scenario, pure_records: list[IterationRecord], psum: dict, hsum: dict,
            predictions: Predictions) -> dict:
    """Metrics of one hybrid run (summary ``hsum``, its :data:`Predictions`) against the pure run."""
    tables = _pure_tables(scenario, pure_records)
    truth = None   # (job, rank, iteration) -> pure time, made only for a job without a table
    jobs = {}
    all_err = []
    all_job_err = []
    n_pred = n_all = 0
    for jid, job in enumerate(scenario.jobs):
        if job.is_background:
            continue
        tp = psum["jobs"][job.name]["completion_time_ns"]
        th = hsum["jobs"][job.name]["completion_time_ns"]
        hj = hsum.get("hybrid", {}).get("jobs", {}).get(job.name, {})
        errs = []
        job_errs = np.zeros(0)
        by_rank: dict[int, list[float]] = {}
        pr = predictions.get(jid)
        if pr is not None:
            model, pred, predicted = pr
            if jid in tables:  # the model's own per-rank predictions where it made them
                job_errs = job_iteration_errors(tables[jid], model, predicted)
                all_job_err.append(job_errs)
            its = set(predicted)
            tab = tables.get(jid)
            if tab is None and truth is None:
                truth = _durations(pure_records)
            for (r, i) in zip(*np.nonzero(np.isfinite(pred))):
                if i in its:
                    if tab is not None:   # the pure time as the table holds it (NaN: no record)
                        y = float(tab[r, i]) if r < tab.shape[0] and i < tab.shape[1] else None
                        y = None if y is None or y != y else y
                    else:
                        y = truth.get((jid, int(r), int(i)))
                    if y:
                        e = abs(pred[r, i] - y) / y * 100.0
                        errs.append(e)
                        by_rank.setdefault(int(r), []).append(e)
        all_err += errs
        if not hj and pr is not None and job.iterations:  # a backend that ran the policy itself: from its records
            hj = {"predicted_iterations": len(pr[2]), "simulated_iterations": job.iterations - len(pr[2]),
                  "surrogate_fraction": len(pr[2]) / job.iterations}
        n_pred += hj.get("predicted_iterations", 0)
        n_all += hj.get("predicted_iterations", 0) + hj.get("simulated_iterations", 0)
        signed = _signed(th, tp)
        jobs[job.name] = {
            "completion_pure_ns": tp,
            "completion_hybrid_ns": th,
            "completion_error_signed_pct": signed,
            "completion_error_pct": abs(signed) if signed is not None else None,
            "job_iteration_mape_pct": float(np.mean(job_errs)) if len(job_errs) else None,
            "iteration_mape_pct": float(np.mean(errs)) if errs else None,
            "rank_iteration_mape_pct": {r: float(np.mean(e)) for r, e in sorted(by_rank.items())},
            "surrogate_fraction": hj.get("surrogate_fraction", 0.0),
        }
        if "stream" in psum:
            rp, rh = psum["jobs"][job.name].get("run_time"), hsum["jobs"][job.name].get("run_time")
            rs = _signed(rh, rp)
            jobs[job.name].update({
                "start_pure_ns": psum["jobs"][job.name].get("start"),
                "start_hybrid_ns": hsum["jobs"][job.name].get("start"),
                "run_time_error_signed_pct": rs,
                "run_time_error_pct": abs(rs) if rs is not None else None})
            jobs[job.name]["start_shift_ns"] = _shift(jobs[job.name]["start_pure_ns"],
                                                      jobs[job.name]["start_hybrid_ns"])
    wp, wh = psum["wall_s"], hsum["wall_s"]
    cp, ch = psum.get("cpu_s"), hsum.get("cpu_s")
    ep, eh = psum["events"], hsum["events"]
    speedup = wp / wh if wh > 0 else math.inf
    theo = ep / eh if eh > 0 else math.inf
    split = hsum.get("wall_split_s", {})
    job_err = np.concatenate(all_job_err) if all_job_err else np.zeros(0)
    ce = [j["completion_error_pct"] for j in jobs.values() if j["completion_error_pct"] is not None]
    stream = {}
    if "stream" in psum and "stream" in hsum:
        mp, mh = psum["stream"]["makespan"], hsum["stream"]["makespan"]
        rt = [j["run_time_error_pct"] for j in jobs.values() if j.get("run_time_error_pct") is not None]
        stream = {"makespan_pure_ns": mp, "makespan_hybrid_ns": mh,
                  "makespan_error_pct": abs(mh - mp) / mp * 100.0 if mp else None,
                  "mean_run_time_error_pct": float(np.mean(rt)) if rt else None,
                  "max_run_time_error_pct": float(np.max(rt)) if rt else None,
                  "jobs_run_time_above_5pct": sum(1 for e in rt if e > 5.0),
                  **start_shifts(jobs)}
    return {
        "policy": hsum.get("hybrid", {}).get("policy"),
        "surrogate": hsum.get("hybrid", {}).get("surrogate"),
        "speedup": speedup,
        "theoretical_speedup": theo,
        "efficiency": speedup / theo if theo and math.isfinite(theo) else None,
        # the same on the process's CPU time (a shared machine's load inflates wall times, not CPU times)
        "cpu_speedup": cp / ch if cp and ch else None,
        "cpu_efficiency": cp / ch / theo if cp and ch and theo and math.isfinite(theo) else None,
        "surrogate_fraction": n_pred / n_all if n_all else 0.0,
        "wall_pure_s": wp,
        "wall_hybrid_s": wh,
        "events_pure": ep,
        "events_hybrid": eh,
        "inference_s": split.get("inference", 0.0),
        "tuning_s": split.get("tuning", 0.0),
        "controller_s": split.get("controller", 0.0),
        "simulation_s": split.get("simulation", 0.0),
        "overhead_pct": (split.get("inference", 0.0) + split.get("tuning", 0.0)) / wh * 100 if wh else None,
        "controller_pct": split.get("controller", 0.0) / wh * 100 if wh else None,
        "job_iteration_mape_pct": float(np.mean(job_err)) if len(job_err) else None,
        "iteration_mape_pct": float(np.mean(all_err)) if all_err else None,
        "jobs_above_5pct": sum(1 for j in jobs.values() if (j["completion_error_pct"] or 0) > 5.0),
        "max_completion_error_pct": max(ce) if ce else None,
        # the same job's error with its sign (late > 0, early < 0), as the printed table shows it
        "worst_completion_error_signed_pct": max(
            (j["completion_error_signed_pct"] for j in jobs.values() if j["completion_error_signed_pct"] is not None),
            key=abs, default=None),
        "standin": hsum.get("standin"),
        "mean_completion_error_pct": float(np.mean(ce)) if ce else None,
        **stream,
        "jobs": jobs,
    }


def _with_policy(scenario, policy: str, params: dict):
    sc = scenario.model_copy(deep=True)
    sc.controller.policy = policy
    sc.controller.params = copy.deepcopy(params)
    return sc


def with_surrogate(scenario, spec: str):
    """A copy of ``scenario`` whose ``surrogate.model`` is ``spec`` (anything :func:`surrogate.load` resolves: a name,
    ``NAME:k=v,...``, a checkpoint folder relative to the working directory, where the user named it) and whose
    ``surrogate.config`` is empty; lookback, tuning, history and volume scaling stay the scenario's. Raises
    :class:`~surrogate.base.SurrogateError` for an unknown name, bad options or a folder that is no checkpoint."""
    import surrogate

    source = surrogate.load(spec, check=True)
    sc = scenario.model_copy(deep=True)
    # a folder is pinned to its absolute path: the runner resolves relative ones beside the scenario file
    sc.surrogate.model = f"{source.name}={source.path.resolve()}" if source.is_checkpoint else spec
    sc.surrogate.config = {}
    return sc


def _label(spec: str) -> str:
    """Run-name part for a surrogate spec: the folder name of a checkpoint, else the spec."""
    import surrogate

    source = surrogate.load(spec)
    return _slug(source.path.name if source.is_checkpoint else spec)


def own_pure_oracle(spec: str | None) -> bool:
    """Whether ``spec`` is the oracle without a run: the bench gives it its own pure run (``oracle:run=PURE``)."""
    if spec is None:
        return False
    from surrogate.loading import split_spec

    name, opts = split_spec(spec) if ":" in spec else (spec.strip(), {})
    return name == "oracle" and "run" not in opts


#: baselines every surrogate is compared with, seed by seed, in a bench with several seeds
BASELINES = ("last", "mean")


def run_bench(scenario, outdir: Path, *, policies: list[tuple[str, dict]] | None = None,
              sweep_ft: list[int] | None = None, surrogates: list[str] | None = None, force: bool = False,
              progress: bool = False, argv: list[str] | None = None, backend_factory=None,
              pure_dir: str | Path | None = None, seeds: int = 1, baselines: list[str] | None = None) -> dict:
    """Pure run, then one hybrid run per policy (and per Ft of ``sweep_ft``, then zero-shot: the warm-up-only
    policy), each with every surrogate of ``surrogates`` (default: the scenario's own), each a run directory inside
    the bench directory ``outdir`` (itself written like a run directory: manifest, staging, ``--force`` rules);
    writes ``bench.json``. All hybrid runs are judged against the one pure run; ``pure_dir``: an earlier pure run of
    the same scenario to judge against instead of simulating it again (its wall time was measured in another
    process). ``oracle`` without a run answers with the bench's pure run. ``seeds`` > 1: all of it for the scenario's
    seed + 0 .. seeds-1, run directories prefixed ``seed<S>-``, the ``baselines`` (default :data:`BASELINES`) added to
    the surrogates, and ``paired`` comparisons (:func:`paired`). ``backend_factory(scenario)`` replaces the
    scenario's backend (tests). Every option is checked by :func:`preflight` before anything runs or is written."""
    seeds = int(seeds)
    surrogates = preflight(scenario, policies=policies, sweep_ft=sweep_ft, surrogates=surrogates, seeds=seeds,
                           baselines=baselines, pure_dir=pure_dir, backend_kind=None if backend_factory else
                           scenario.backend.kind)
    if pure_dir is not None:
        check_not_input(outdir, pure_dir)
    pure = None if pure_dir is None else read_pure_run(scenario, pure_dir)
    from .runner import RunError
    from .scenario import scenario_to_dict

    rd = RunDir.create(outdir, kind="bench", scenario=scenario_to_dict(scenario), seed=scenario.seed, force=force,
                       argv=argv)
    staging = str(rd.path)
    counter = RunCounter(count_runs(scenario, policies, sweep_ft, surrogates, seeds, pure is not None))
    try:
        result = None
        for k in range(seeds):
            sc = scenario
            if seeds > 1:
                sc = scenario.model_copy(deep=True)
                sc.seed = scenario.seed + k
            res = _run_cases(sc, rd, policies, sweep_ft, surrogates, progress, argv, backend_factory, pure, pure_dir,
                             prefix=f"seed{sc.seed}-" if seeds > 1 else "", counter=counter)
            if result is None:
                result = res
            else:
                result["runs"] += res["runs"]
                result["pures"].update(res["pures"])
        if seeds > 1:
            result["seeds"] = [scenario.seed + k for k in range(seeds)]
            result["paired"] = paired(result["runs"], list(baselines or BASELINES))
        write_json_atomic(rd.file("bench.json"), result)
        rd.complete()
    except BaseException as exc:
        rd.fail(failure_reason(exc))
        if isinstance(exc, RunError):  # it names the staging folder, which has moved
            raise RunError(str(exc).replace(staging, str(rd.path))) from exc
        raise
    return result


def policy_cases(scenario, policies, sweep_ft) -> list[tuple[str, dict, object]]:
    """The bench's hybrid cases as (policy, params, sweep label or None): ``policies`` (default the scenario's
    controller), then the Ft sweep of the scenario's own policy when it has an ``ft`` (periodic, aligned), else
    periodic's, whose far end is zero-shot: the warm-up-only policy with the sweep's warm-up."""
    cases = list(policies) if policies is not None else [(scenario.controller.policy, scenario.controller.params)]
    cases = [(pol, params, None) for pol, params in cases]
    sweep_policy = sweep_policy_of(scenario)
    base_params = dict(scenario.controller.params) if scenario.controller.policy == sweep_policy else {}
    for ft in sweep_ft or []:
        cases.append((sweep_policy, {**base_params, "ft": ft}, ft))
    if sweep_ft:
        cases.append(("surrogate", {"warmup": int(base_params.get("warmup", 1))}, "zero-shot"))
    return cases


def sweep_policy_of(scenario) -> str:
    """The policy an Ft sweep varies: the scenario's own when it has an ``ft``, else periodic."""
    return scenario.controller.policy if scenario.controller.policy in SWEEPABLE else "periodic"


def bench_cases(scenario, policies, sweep_ft, surrogates) -> tuple[list[tuple], str]:
    """The hybrid runs of a bench of ``scenario``, as (policy, params, sweep point or None, surrogate spec or None),
    in run order, and the policy the Ft sweep varies."""
    cases = [(pol, params, sweep, spec) for pol, params, sweep in policy_cases(scenario, policies, sweep_ft)
             for spec in (surrogates or [None])]
    return cases, sweep_policy_of(scenario)


class RunCounter:
    """A bench's runs as they go: numbered for the progress bars (:meth:`label` gives the next one's "run k/N:
    NAME"), and the one-line notices its runs printed (``said``: each is said once, not per seed and surrogate)."""

    def __init__(self, total: int):
        self.total, self.done = int(total), 0
        self.said: set[str] = set()

    def label(self, progress, name: str):
        self.done += 1
        return f"run {self.done}/{self.total}: {name}" if progress else False


def count_runs(scenario, policies, sweep_ft, surrogates, seeds: int, pure_given: bool) -> int:
    """How many simulations a bench runs: per seed the pure run (unless given), the floor run on a backend that
    runs the policy itself, and one per case of :func:`bench_cases`."""
    from .runner import backend_class

    per_seed = (0 if pure_given else 1) + int(backend_class(scenario.backend.kind).runs_policy)
    return seeds * (per_seed + len(bench_cases(scenario, policies, sweep_ft, surrogates)[0]))


#: the most seeds one bench runs: each seed is a pure run plus every hybrid run (a paired 95 % interval is already
#: tight at 30 pairs); more is refused before the first run
MAX_SEEDS = 100


class BenchOptionError(ValueError):
    """A ``bench`` option that cannot run (its message names the option), found by :func:`preflight` before the pure
    run."""


def option_cases(scenario, policies, sweep_ft) -> list[tuple[str, dict, object, str]]:
    """(policy, params, sweep mark, the option it came from) for every hybrid case of a bench, in run order."""
    cases = ([(pol, params, None, f"--policy {pol}" + (":" + ",".join(f"{k}={v}" for k, v in params.items())
                                                        if params else "")) for pol, params in policies]
             if policies is not None else
             [(scenario.controller.policy, scenario.controller.params, None, "the scenario's controller section")])
    # the Ft sweep varies the scenario's own policy when it has an ``ft`` (periodic, aligned), else periodic's; its far
    # end is zero-shot: the warm-up-only policy with the sweep's warm-up
    sweep_policy = scenario.controller.policy if scenario.controller.policy in SWEEPABLE else "periodic"
    base_params = dict(scenario.controller.params) if scenario.controller.policy == sweep_policy else {}
    for ft in sweep_ft or []:
        cases.append((sweep_policy, {**base_params, "ft": ft}, ft, f"--sweep-ft {ft}"))
    if sweep_ft:
        warmup = base_params.get("warmup", 1)  # a bad value is left for the policy's own check to name
        warmup = int(warmup) if isinstance(warmup, float) and warmup.is_integer() else warmup
        cases.append(("surrogate", {"warmup": warmup}, "zero-shot",
                      "--sweep-ft (its zero-shot end, controller.params.warmup)"))
    return cases


def preflight(scenario, *, policies=None, sweep_ft=None, surrogates=None, seeds: int = 1, baselines=None,
              pure_dir=None, backend_kind: str | None = None) -> list[str] | None:
    """Check every option of a bench before anything runs: ``seeds`` (1 .. :data:`MAX_SEEDS`, not with ``pure_dir``),
    every surrogate and baseline spec, every policy case (``--policy``, each ``--sweep-ft`` value and the zero-shot
    end) against every surrogate (the policy constructs with its parameters; the surrogate settings pass
    :func:`~hybridsim.preflight.check_hybrid`), the scenario's plug-ins, and the refusals of the backend
    ``backend_kind`` (hybrid mode, job streams; ``None``: a test's stand-in backend). Returns the surrogates the runs
    use (``seeds`` > 1 adds the baselines); raises :class:`BenchOptionError` naming the option."""
    from controllers import PolicyError, load_policy

    from .preflight import check_hybrid, check_plugins
    from .runner import backend_class
    from .scenario import ScenarioError
    from surrogate.base import SurrogateError

    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise BenchOptionError(f"--seeds {seeds}: expected a whole number from 1 to {MAX_SEEDS} (each seed is a pure "
                               "run plus every hybrid run)")
    if seeds > 1 and pure_dir is not None:
        raise BenchOptionError("--pure judges against one pure run, of one seed; --seeds needs a pure run per seed")
    for ft in sweep_ft or []:
        if isinstance(ft, bool) or not isinstance(ft, int) or ft < 1:
            raise BenchOptionError(f"--sweep-ft: every Ft must be a whole number of iterations >= 1, got {ft!r}")
    if seeds > 1:
        surrogates = list(surrogates or [scenario.surrogate.model])
        surrogates += [b for b in (baselines or BASELINES) if b not in surrogates]
    specs = {}
    for spec in surrogates or [None]:
        try:
            specs[spec] = scenario if spec is None or own_pure_oracle(spec) else with_surrogate(scenario, spec)
        except SurrogateError as exc:
            what = "--baseline" if spec in (baselines or BASELINES) and seeds > 1 else "--surrogate"
            raise BenchOptionError(f"{what} {spec}: {exc}") from None
    try:
        check_plugins(scenario)
    except ScenarioError as exc:
        raise BenchOptionError(str(exc)) from None
    cls = backend_class(backend_kind) if backend_kind is not None else None
    if cls is not None and (refusal := cls.run_refusal(scenario)) is not None:
        raise BenchOptionError(f"backend {backend_kind}: {refusal}")
    for pol, params, _sweep, option in option_cases(scenario, policies, sweep_ft):
        try:
            load_policy(pol, params)
        except PolicyError as exc:
            raise BenchOptionError(f"{option}: {exc}") from None
        for spec, base in specs.items():
            sc = _with_policy(base, pol, params)
            refusal = cls.hybrid_refusal(sc) if cls is not None else None
            if refusal is not None:
                raise BenchOptionError(f"{option}: backend {backend_kind} refuses hybrid mode (found before any run): "
                                      f"{refusal}")
            try:
                check_hybrid(sc)
            except ScenarioError as exc:
                raise BenchOptionError(f"{option}" + (f" with --surrogate {spec}" if spec else "") + f": {exc}") \
                    from None
    return surrogates


def _run_cases(scenario, rd: RunDir, policies, sweep_ft, surrogates, progress, argv, backend_factory, pure,
               pure_dir, prefix: str = "", counter: RunCounter | None = None) -> dict:
    counter = counter or RunCounter(count_runs(scenario, policies, sweep_ft, surrogates, 1, pure is not None))
    from .runner import backend_class, build_controller, release_memory, run_scenario

    mk = backend_factory or (lambda sc: None)
    pure_path = Path(pure_dir).resolve() if pure_dir is not None else rd.file(prefix + "pure")
    if pure is None:  # (records, summary), as read_pure_run gives them
        _, res, psum = run_scenario(scenario, pure_path, mode="simulate", progress=counter.label(progress, prefix + "pure"),
                                    argv=argv, backend=mk(scenario))
        pure = (res.records, psum)
        del res  # its port samples and the rest are written; only the records are judged against (memory)
        release_memory()  # the pure run's engine, before the hybrid runs start
    runs = []
    cases, sweep_policy = bench_cases(scenario, policies, sweep_ft, surrogates)
    # a backend that runs the policy itself (CODES' director) is run as a user runs it; the hybrid machinery alone
    # may move its simulation (the perturbation floor: a run with it and nothing predicted), measured once
    runs_policy = backend_class(scenario.backend.kind).runs_policy
    floor = None
    if runs_policy:
        _, _, fsum = run_scenario(scenario, rd.file(prefix + "floor"), mode="floor",
                                  progress=counter.label(progress, prefix + "floor"), argv=argv, backend=mk(scenario))
        release_memory()
        floor = {j.name: _signed(fsum["jobs"][j.name]["completion_time_ns"],
                                 pure[1]["jobs"][j.name]["completion_time_ns"])
                 for j in scenario.jobs if not j.is_background}
    for k, (pol, params, sweep, spec) in enumerate(cases):
        run_spec = f"oracle:run={Path(pure_path).resolve()}" if own_pure_oracle(spec) else spec
        sc = _with_policy(scenario if spec is None else with_surrogate(scenario, run_spec), pol, params)
        ctl = None if runs_policy else build_controller(sc)
        tag = f"{prefix}{k:02d}-{pol.replace(':', '_').replace('/', '_')}"
        for key, val in sorted(params.items()):
            tag += f"-{key}{val}".replace("/", "_").replace(" ", "")
        if spec is not None:
            tag += "-" + ("oracle" if own_pure_oracle(spec) else _label(spec))
        _, hres, hsum = run_scenario(sc, rd.file(tag), mode="hybrid", progress=counter.label(progress, tag),
                                     argv=argv, controller=ctl, backend=mk(sc), said=counter.said)
        preds = predictions_of(ctl) if ctl is not None else predictions_from_records(scenario, hres.records,
                                                                                        hres.simulated)
        m = compare(scenario, pure[0], pure[1], hsum, preds)
        for key, beside in (("truth_bias", False), ("truth_bias_beside_predicted", True)):
            bias = truth_bias(scenario, pure[0], hres.records, hres.simulated, beside_predicted=beside)
            for name, b in bias.items():
                if name in m["jobs"]:
                    m["jobs"][name][key + "_pct"] = b
            m.update(truth_bias_summary(bias, key))
        del hres, ctl, preds  # not held while the next case runs (memory: records and samples of a whole run)
        release_memory()
        if floor is not None:
            m["perturbation_floor_pct"] = floor
        m["run"] = tag
        m["runs_truth"] = hsum.get("hybrid", {}).get("runs_truth")
        m.update(coverage(m, pol, params))
        m["params"] = params
        m["seed"] = scenario.seed
        if sweep is not None:
            m["sweep"] = sweep
        m["surrogate_spec"] = spec if spec is not None else scenario.surrogate.model
        runs.append(m)
    pure_info = {"wall_s": pure[1]["wall_s"], "cpu_s": pure[1].get("cpu_s"), "events": pure[1]["events"],
                 "run": str(Path(pure_dir).resolve()) if pure_dir is not None else prefix + "pure"}
    result = {"scenario": scenario.name, "definitions": __doc__, "runs": runs, "pure": pure_info,
              "pures": {str(scenario.seed): pure_info}}
    if sweep_ft:
        from .report import plot_tradeoff

        for spec in surrogates or [None]:  # one curve a surrogate: tradeoff-ft.png, or tradeoff-ft-SPEC.png
            name = "tradeoff-ft.png" if spec is None or len(surrogates) == 1 else f"tradeoff-ft-{_slug(spec)}.png"
            plot_tradeoff([r for r in runs if r["policy"] == sweep_policy and "ft" in r["params"]
                           and (spec is None or r["surrogate_spec"] == spec)], rd.file(prefix + name))
    return result


def paired_interval(diffs) -> dict:
    """Mean of paired differences and its 95 % t-interval (two-sided, n - 1 degrees of freedom): mean +- t * sd /
    sqrt(n), sd with n - 1. ``ci95`` is None for fewer than two pairs."""
    d = np.asarray(diffs, dtype=np.float64)
    n = len(d)
    mean = float(d.mean()) if n else None
    if n < 2:
        return {"n": n, "mean_diff": mean, "ci95": None}
    from scipy.stats import t

    half = float(t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n))
    return {"n": n, "mean_diff": mean, "ci95": [mean - half, mean + half]}


#: error figures the paired comparison reports (lower is better)
PAIRED_METRICS = ("max_completion_error_pct", "mean_completion_error_pct", "job_iteration_mape_pct",
                  "max_run_time_error_pct")


def paired(runs: list[dict], baselines: list[str]) -> list[dict]:
    """For every policy case, surrogate and baseline: the paired differences (surrogate - baseline) over the seeds
    both ran, of each of :data:`PAIRED_METRICS` the runs have, as :func:`paired_interval` (negative: the surrogate
    has the lower error)."""
    by_case: dict[str, dict[str, dict[int, dict]]] = {}
    for r in runs:
        case = f"{r['policy']}:" + ",".join(f"{k}={v}" for k, v in sorted((r.get("params") or {}).items()))
        by_case.setdefault(case, {}).setdefault(r["surrogate_spec"], {})[r["seed"]] = r
    out = []
    for case, specs in by_case.items():
        for spec, mine in specs.items():
            for base in baselines:
                if base == spec or base not in specs:
                    continue
                if spec in baselines and baselines.index(base) > baselines.index(spec):
                    continue  # two baselines are compared once (the later one against the earlier)
                theirs = specs[base]
                common = sorted(set(mine) & set(theirs))
                for metric in PAIRED_METRICS:
                    d = [mine[s][metric] - theirs[s][metric] for s in common
                         if mine[s].get(metric) is not None and theirs[s].get(metric) is not None]
                    if d:
                        out.append({"case": case, "surrogate": spec, "baseline": base, "metric": metric,
                                    "seeds": common, **paired_interval(d)})
    return out


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


#: the default policy's promise: this share of jobs within its ``target_error`` (controllers.builtin.Confident)
DEFAULT_TARGET_ERROR, DEFAULT_COVERAGE = 2.0, 0.8


def coverage(m: dict, policy: str, params: dict) -> dict:
    """The share of a run's jobs within the error target (``coverage``): each job's run-time error in a stream (the
    start moves with the jobs before it), else its completion error, against the policy's ``target_error``
    (``confident``'s; 2 % for any other policy) and the share it promises (``coverage``, 0.8)."""
    target = float(params.get("target_error", DEFAULT_TARGET_ERROR)) if policy == "confident" \
        else DEFAULT_TARGET_ERROR
    promised = float(params.get("coverage", DEFAULT_COVERAGE)) if policy == "confident" else None
    errs = []
    for j in m["jobs"].values():
        e = j.get("run_time_error_pct", j.get("completion_error_pct"))
        if isinstance(e, (int, float)) and math.isfinite(e):
            errs.append(e)
    within = sum(1 for e in errs if e <= target)
    return {"coverage": within / len(errs) if errs else None, "coverage_within": within, "coverage_jobs": len(errs),
            "coverage_target_pct": target, "coverage_promised": promised}
