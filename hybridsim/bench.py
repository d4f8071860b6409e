"""``hybridsim bench``: pure simulation vs hybrid runs of one scenario, in one process, with docs/design.md §5's
metrics.

* speedup = wall time of the pure run / wall time of the hybrid run (same scenario, same machine, same process);
* theoretical speedup = events of the pure run / events of the hybrid run; efficiency = speedup / theoretical;
* surrogate fraction f = predicted iterations / all iterations (jobs with iterations);
* per-job completion-time error % = |T_hybrid - T_pure| / T_pure x 100, and the number of jobs above 5 %;
* per-iteration MAPE = mean over predicted (rank, iteration) of |prediction - pure-run truth| / truth x 100, for the
  run, per job and per rank of each job;
* inference and tuning overhead: wall seconds and share of the hybrid run's wall time;
* job streams (a ``scheduler`` section): per-job run-time error % = |(end - start)_hybrid - (end - start)_pure| /
  (end - start)_pure x 100 (the completion-time error also carries the start, which moves with the jobs before it),
  its mean and max over jobs, and the makespan error % = |makespan_hybrid - makespan_pure| / makespan_pure x 100;
  beside each job's run-time error its start-time shift (start_hybrid - start_pure, ns), so an error that travels
  down the queue shows: :func:`start_shifts`.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np

from .interrupts import failure_reason
from .pure_run import check_not_input, read_pure_run
from .records import IterationRecord
from .report import SWEEPABLE
from .rundir import RunDir, write_json_atomic


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


def compare(scenario, pure_records: list[IterationRecord], psum: dict, hsum: dict, controller) -> dict:
    """Metrics of one hybrid run (summary ``hsum``, its :class:`HybridController`) against the pure run."""
    truth = _durations(pure_records)
    jobs = {}
    all_err = []
    n_pred = n_all = 0
    for jid, job in enumerate(scenario.jobs):
        if job.is_background:
            continue
        tp = psum["jobs"][job.name]["completion_time_ns"]
        th = hsum["jobs"][job.name]["completion_time_ns"]
        hj = hsum.get("hybrid", {}).get("jobs", {}).get(job.name, {})
        errs = []
        by_rank: dict[int, list[float]] = {}
        st = controller.states.get(jid)
        if st is not None:
            for (r, i) in zip(*np.nonzero(np.isfinite(st.pred))):
                if i < len(st.modes) and st.modes[i].value == "predict":
                    y = truth.get((jid, int(r), int(i)))
                    if y:
                        e = abs(st.pred[r, i] - y) / y * 100.0
                        errs.append(e)
                        by_rank.setdefault(int(r), []).append(e)
        all_err += errs
        n_pred += hj.get("predicted_iterations", 0)
        n_all += hj.get("predicted_iterations", 0) + hj.get("simulated_iterations", 0)
        jobs[job.name] = {
            "completion_pure_ns": tp,
            "completion_hybrid_ns": th,
            "completion_error_pct": abs(th - tp) / tp * 100.0 if tp else None,
            "iteration_mape_pct": float(np.mean(errs)) if errs else None,
            "rank_iteration_mape_pct": {r: float(np.mean(e)) for r, e in sorted(by_rank.items())},
            "surrogate_fraction": hj.get("surrogate_fraction", 0.0),
        }
        if "stream" in psum:
            rp, rh = psum["jobs"][job.name].get("run_time"), hsum["jobs"][job.name].get("run_time")
            jobs[job.name].update({
                "start_pure_ns": psum["jobs"][job.name].get("start"),
                "start_hybrid_ns": hsum["jobs"][job.name].get("start"),
                "run_time_error_pct": abs(rh - rp) / rp * 100.0 if rp and rh is not None else None})
            jobs[job.name]["start_shift_ns"] = _shift(jobs[job.name]["start_pure_ns"],
                                                      jobs[job.name]["start_hybrid_ns"])
    wp, wh = psum["wall_s"], hsum["wall_s"]
    ep, eh = psum["events"], hsum["events"]
    speedup = wp / wh if wh > 0 else math.inf
    theo = ep / eh if eh > 0 else math.inf
    split = hsum.get("wall_split_s", {})
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
        "surrogate_fraction": n_pred / n_all if n_all else 0.0,
        "wall_pure_s": wp,
        "wall_hybrid_s": wh,
        "events_pure": ep,
        "events_hybrid": eh,
        "inference_s": split.get("inference", 0.0),
        "tuning_s": split.get("tuning", 0.0),
        "overhead_pct": (split.get("inference", 0.0) + split.get("tuning", 0.0)) / wh * 100 if wh else None,
        "iteration_mape_pct": float(np.mean(all_err)) if all_err else None,
        "jobs_above_5pct": sum(1 for j in jobs.values() if (j["completion_error_pct"] or 0) > 5.0),
        "max_completion_error_pct": max((j["completion_error_pct"] or 0) for j in jobs.values()) if jobs else None,
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


def run_bench(scenario, outdir: Path, *, policies: list[tuple[str, dict]] | None = None,
              sweep_ft: list[int] | None = None, surrogates: list[str] | None = None, force: bool = False,
              progress: bool = False, argv: list[str] | None = None, backend_factory=None,
              pure_dir: str | Path | None = None) -> dict:
    """Pure run, then one hybrid run per policy (and per Ft of ``sweep_ft``), each with every surrogate of
    ``surrogates`` (default: the scenario's own), each a run directory inside the bench directory ``outdir`` (itself
    written like a run directory: manifest, staging, ``--force`` rules); writes ``bench.json``. All hybrid runs are
    judged against the one pure run; ``pure_dir``: an earlier pure run of the same scenario to judge against instead
    of simulating it again (its wall time was measured in another process). ``backend_factory(scenario)`` replaces
    the scenario's backend (tests)."""
    for spec in surrogates or []:  # a bad spec fails before the pure run, not after it
        with_surrogate(scenario, spec)
    if pure_dir is not None:
        check_not_input(outdir, pure_dir)
    pure = None if pure_dir is None else read_pure_run(scenario, pure_dir)
    from .runner import RunError
    from .scenario import scenario_to_dict

    rd = RunDir.create(outdir, kind="bench", scenario=scenario_to_dict(scenario), seed=scenario.seed, force=force,
                       argv=argv)
    staging = str(rd.path)
    try:
        result = _run_cases(scenario, rd, policies, sweep_ft, surrogates, progress, argv, backend_factory, pure,
                            pure_dir)
        rd.complete()
    except BaseException as exc:
        rd.fail(failure_reason(exc))
        if isinstance(exc, RunError):  # it names the staging folder, which has moved
            raise RunError(str(exc).replace(staging, str(rd.path))) from exc
        raise
    return result


def _run_cases(scenario, rd: RunDir, policies, sweep_ft, surrogates, progress, argv, backend_factory, pure,
               pure_dir) -> dict:
    from .runner import build_controller, run_scenario

    mk = backend_factory or (lambda sc: None)
    if pure is None:  # (records, summary), as read_pure_run gives them
        _, res, psum = run_scenario(scenario, rd.file("pure"), mode="simulate", progress=progress, argv=argv,
                                    backend=mk(scenario))
        pure = (res.records, psum)
    runs = []
    cases = list(policies) if policies is not None else [(scenario.controller.policy, scenario.controller.params)]
    # the Ft sweep varies the scenario's own policy when it has an ``ft`` (periodic, aligned), else periodic's
    sweep_policy = scenario.controller.policy if scenario.controller.policy in SWEEPABLE else "periodic"
    for ft in sweep_ft or []:
        params = dict(scenario.controller.params) if scenario.controller.policy == sweep_policy else {}
        params["ft"] = ft
        cases.append((sweep_policy, params))
    cases = [(pol, params, spec) for pol, params in cases for spec in (surrogates or [None])]
    for k, (pol, params, spec) in enumerate(cases):
        sc = _with_policy(scenario if spec is None else with_surrogate(scenario, spec), pol, params)
        ctl = build_controller(sc)
        tag = f"{k:02d}-{pol.replace(':', '_').replace('/', '_')}"
        for key, val in sorted(params.items()):
            tag += f"-{key}{val}".replace("/", "_").replace(" ", "")
        if spec is not None:
            tag += "-" + _label(spec)
        _, _, hsum = run_scenario(sc, rd.file(tag), mode="hybrid", progress=progress, argv=argv,
                                  controller=ctl, backend=mk(sc))
        m = compare(scenario, pure[0], pure[1], hsum, ctl)
        m["run"] = tag
        m["params"] = params
        m["surrogate_spec"] = spec if spec is not None else scenario.surrogate.model
        runs.append(m)
    result = {"scenario": scenario.name, "definitions": __doc__, "runs": runs,
              "pure": {"wall_s": pure[1]["wall_s"], "events": pure[1]["events"],
                       "run": str(Path(pure_dir).resolve()) if pure_dir is not None else "pure"}}
    write_json_atomic(rd.file("bench.json"), result)
    if sweep_ft:
        from .report import plot_tradeoff

        for spec in surrogates or [None]:  # one curve a surrogate: tradeoff-ft.png, or tradeoff-ft-SPEC.png
            name = "tradeoff-ft.png" if spec is None or len(surrogates) == 1 else f"tradeoff-ft-{_slug(spec)}.png"
            plot_tradeoff([r for r in runs if r["policy"] == sweep_policy and "ft" in r["params"]
                           and (spec is None or r["surrogate_spec"] == spec)], rd.file(name))
    return result


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


def format_table(result: dict) -> str:
    head = (f"{'run':<44} {'speedup':>8} {'theor.':>8} {'eff.':>6} {'f':>6} {'MAPE%':>7} {'maxErr%':>8} "
            f"{'>5%':>4} {'inf s':>7} {'tune s':>7}")
    lines = [head, "-" * len(head)]

    def f(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else "-"

    for r in result["runs"]:
        lines.append(f"{r['run']:<44} {f(r['speedup'], '8.2f')} {f(r['theoretical_speedup'], '8.2f')} "
                     f"{f(r['efficiency'], '6.2f')} {f(r['surrogate_fraction'], '6.2f')} "
                     f"{f(r['iteration_mape_pct'], '7.2f')} {f(r['max_completion_error_pct'], '8.2f')} "
                     f"{r['jobs_above_5pct']:>4} {f(r['inference_s'], '7.2f')} {f(r['tuning_s'], '7.2f')}")
    for r in result["runs"]:
        if "makespan_error_pct" in r:
            lines.append(f"{r['run']:<28} job stream: makespan error {f(r['makespan_error_pct'], '.2f')} % "
                         f"({f(r['makespan_pure_ns'] / 1e6, '.3f')} ms pure), run-time error mean "
                         f"{f(r['mean_run_time_error_pct'], '.2f')} % max {f(r['max_run_time_error_pct'], '.2f')} %, "
                         f"{r['jobs_run_time_above_5pct']} jobs above 5 %")
    lines.append("")
    for r in result["runs"]:
        for name, j in r["jobs"].items():
            rt = f"  run-time error {f(j['run_time_error_pct'], '.2f')} %" if "run_time_error_pct" in j else ""
            ranks = j.get("rank_iteration_mape_pct") or {}
            worst = max(ranks, key=ranks.get) if ranks else None
            per_rank = (f"  rank MAPE median {f(float(np.median(list(ranks.values()))), '.2f')} % "
                        f"max {f(ranks[worst], '.2f')} % (rank {worst})") if ranks else ""
            lines.append(f"  {r['run']:<42} {name:<12} completion error {f(j['completion_error_pct'], '.2f')} %  "
                         f"iteration MAPE {f(j['iteration_mape_pct'], '.2f')} %{per_rank}  "
                         f"f {f(j['surrogate_fraction'], '.2f')}{rt}")
    return "\n".join(lines)


