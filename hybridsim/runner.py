"""The controller loop: scenario -> backend (+ director) -> records -> run directory.

``run_scenario`` is the one entry point ``hybridsim run`` and ``hybridsim bench`` use. In ``simulate`` mode the
backend runs the whole scenario packet by packet; in ``hybrid`` mode a :class:`~hybridsim.hybrid.HybridController`
(policy + surrogate) decides per job and iteration. The run directory is created before the run (manifest
``running``), tables are written only once complete, and any failure or Ctrl-C marks the manifest ``failed`` with the
reason (SIGTERM and SIGHUP too, see :mod:`hybridsim_common.interrupts`). ``limits.deadline`` counts from the run's start: a
:class:`~hybridsim.engine.core.RunStop` made active on the thread is checked between the run's phases and, by the
engine, while it builds the workloads and every few events.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import hybridsim_common.plugins as plugins
from hybridsim_common.backend import Backend, SimulationResult
from hybridsim_common.interrupts import failure_reason
from hybridsim_common.records import IterationColumns, IterationRecord
from hybridsim_common.rundir import ITERATIONS, JOBS, PORTS, SUMMARY, RunDir, write_description, write_json_atomic
from hybridsim.description import describe_scenario
from hybridsim.scenario import BACKEND_ENTRY_POINT_GROUP as BACKEND_GROUP

from .workloads import workload_volumes  # noqa: F401  (re-exported; its home is hybridsim.workloads)


class RunError(RuntimeError):
    """The run started but failed; the run directory's manifest says why."""


def default_outdir(scenario, path: str | os.PathLike | None) -> Path:
    if scenario.output.dir is not None:
        return scenario.resolve(scenario.output.dir)
    stem = Path(path).stem if path else (scenario.name or "run")
    return Path("results") / stem


def build_controller(scenario, n_iterations: list[int | None] | None = None, placement=None):
    """The :class:`HybridController` of a scenario's ``surrogate`` and ``controller`` sections. Every job gets its
    own model instance (fitted and tuned on that job only) from :func:`surrogate.load`: a registered name is
    instantiated per job; a checkpoint folder of ``hybridsim train`` gives each job its trained model (a single-model
    checkpoint is copied per job).

    What each model reads is its feed's business (:class:`surrogate.online.Feeds`: graph models get port graphs fed
    by the backend's port samples, on the jobs' terminals: ``placement``, the run's per-job terminal arrays, default
    ``place_jobs(scenario)``); a model whose feed wants port samples runs only on a backend that streams them."""
    import surrogate
    from controllers import load_policy
    from surrogate.base import SurrogateError
    from surrogate.loading import checkpoint_folder
    from surrogate.online import feed_class

    from .hybrid import HybridController
    from .scenario import scenario_to_dict

    sec = scenario.surrogate
    spec = sec.model
    policy = load_policy(scenario.controller.policy, scenario.controller.params)
    truth_reason = None
    if "controller" not in scenario.model_fields_set or "policy" not in scenario.controller.model_fields_set:
        # the default controller runs the truth where a hybrid run cannot save what its loop costs (estimate.py)
        from .estimate import estimate

        est = estimate(scenario)
        if not est.pays:
            policy, truth_reason = load_policy("pdes", {}), est.reason
    # surrogate.config configures a named model; a checkpoint's own config.json holds its options
    config = {} if checkpoint_folder(spec, scenario.base_dir) is not None else sec.config
    source = surrogate.load(spec, config, base_dir=scenario.base_dir)
    from surrogate.base import JobInfo

    if placement is None and not scenario.is_stream:
        from .placement import place_jobs

        placement = place_jobs(scenario, scenario.build_topology())
    jobs, volumes, models, infos = [], {}, {}, {}
    for i, j in enumerate(scenario.jobs):
        n_it = None if j.is_background else (n_iterations[i] if n_iterations else j.iterations)
        jobs.append((j.name, j.workload.kind, j.ranks, n_it))
        if n_it is None:
            continue
        # a stream job's groups are set from the terminals it gets when it starts (HybridController.on_job_start)
        vol = workload_volumes(scenario, i, n_it)
        infos[i] = JobInfo.of(j.workload.kind, j.ranks, n_it, vol, None if placement is None else placement[i],
                              scenario.topology.shape)
        model = source.for_job(j.name)
        if feed_class(model).wants_samples and not backend_class(scenario.backend.kind).streams_samples:
            raise SurrogateError(f"surrogate.model {spec}: {model.name!r} needs port graphs, which the hybrid loop "
                                 f"builds from the port samples the backend streams during the run; backend "
                                 f"{scenario.backend.kind!r} does not stream them (use backend.kind: embedded, or a "
                                 "history model: ridge, lstm, ewma, mean, last)")
        models[i] = model
        if sec.volume_scaling:
            volumes[i] = vol
    for m in models.values():
        m.check_run(scenario_to_dict(scenario))  # a model tied to one run (oracle) refuses another scenario here
    from .corunners import flow_for
    from .hybrid import ControllerSettings

    flow = flow_for(scenario, models.values(), placement)   # a stream job is placed when it starts (on_job_start)
    settings = ControllerSettings(keep_background=scenario.controller.keep_background, lookback=sec.lookback,
                                  tune=sec.tune, history=sec.history, policy_name=scenario.controller.policy,
                                  sync=scenario.controller.sync, stream=scenario.is_stream, truth_reason=truth_reason)
    return HybridController(jobs, policy, models, settings, volumes=volumes, shape=scenario.topology.shape,
                            placement=None if placement is None else dict(enumerate(placement)), infos=infos,
                            flow=flow)


#: backends hybridsim ships (``backend.kind`` -> ``module:Class``, imported on first use); an installed package adds its
#: own through the entry-point group ``hybridsim.backends`` (as the CODES bridge registers ``codes``)
BUILTIN_BACKENDS = {"embedded": "hybridsim.engine:Engine", "remote": "hybridsim.service.remote:RemoteBackend"}

#: entry-point group of backend plug-ins (pyproject ``[project.entry-points."hybridsim.backends"]``)
BACKEND_ENTRY_POINT_GROUP = BACKEND_GROUP

#: the backends' registry: the scenario schema's (:func:`hybridsim.scenario.backend_registry`: the same names and
#: entry points, the built-ins being its own sections) with the built-ins' classes
BACKENDS = plugins.Registry(BACKEND_GROUP, "backend", BUILTIN_BACKENDS, base=Backend)


def backend_class(kind: str) -> type[Backend]:
    """The :class:`~hybridsim_common.backend.Backend` implementation of ``backend.kind`` (imported on demand): a built-in
    (:data:`BUILTIN_BACKENDS`) or a ``hybridsim.backends`` entry point."""
    if kind not in BACKENDS.builtin and kind not in BACKENDS.entry_points():
        known = sorted(BACKENDS.names())
        raise RunError(f"unknown backend {kind!r}{plugins.did_you_mean(kind, known)} (installed: {', '.join(known)})")
    try:
        return BACKENDS.load(kind)
    except (ImportError, ValueError) as exc:
        ep = BACKENDS.entry_points().get(kind)
        where = f" ({ep.value}, a {BACKEND_ENTRY_POINT_GROUP} entry point)" if ep is not None else ""
        raise RunError(f"backend {kind!r}{where} cannot be loaded: {exc}; reinstall the package that provides "
                       "it") from None


def make_backend(scenario, topology, placement, progress: bool | str, run_dir: Path, mode: str = "simulate",
                 keep_ports: bool = True) -> Backend:
    """The scenario's backend, ready to ``run``. A plug-in backend is built as ``cls(scenario, run_dir, progress=,
    mode=)`` (``run_dir``: where a backend that writes files, such as CODES, works; ``mode``: for a backend that
    ``runs_policy`` itself). ``keep_ports`` False: the run's port samples are neither written nor read, and the
    embedded engine does not keep them (they grow with simulated time; its results are the same)."""
    cls = backend_class(scenario.backend.kind)
    if scenario.backend.kind == "embedded":
        return cls(scenario, topology=topology, placement=placement, progress=progress, keep_ports=keep_ports)
    if scenario.backend.kind == "remote":
        return cls(scenario.backend.remote, scenario)
    return cls(scenario, run_dir, progress=progress, mode=mode)


def job_summary(scenario, records: list[IterationRecord], job_end: dict[str, float] | None = None) -> dict:
    """Per-job counts and times. ``job_end``: completion times the backend itself reported (CODES prints them,
    also for jobs without iteration marks); otherwise a job completes with its last iteration."""
    job_end = job_end or {}
    out = {}
    if isinstance(records, IterationColumns):   # a job's records in their order, read from the columns
        c = records.columns()
        by_job = {}
        for jid in range(len(scenario.jobs)):
            sel = np.flatnonzero(c["job_id"] == jid)
            if len(sel):
                by_job[jid] = (c["end"][sel] - c["start"][sel], c["end"][sel])
    else:
        recs_of: dict[int, list[IterationRecord]] = {}
        for r in records:
            recs_of.setdefault(r.job_id, []).append(r)
        by_job = {jid: (np.array([r.end - r.start for r in recs]), np.array([r.end for r in recs]))
                  for jid, recs in recs_of.items()}
    for jid, job in enumerate(scenario.jobs):
        if jid not in by_job:
            out[job.name] = {"ranks": job.ranks, "iterations_recorded": 0,
                             "completion_time_ns": job_end.get(job.name)}
            continue
        dur, ends = by_job[jid]
        out[job.name] = {
            "ranks": job.ranks,
            "workload": job.workload.kind,
            "iterations_recorded": len(dur),
            "completion_time_ns": float(job_end.get(job.name, ends.max())),
            "mean_iteration_ns": float(dur.mean()),
            "std_iteration_ns": float(dur.std()),
        }
    return out


def run_scenario(scenario, outdir: str | os.PathLike, *, force: bool = False, mode: str = "simulate",
                 progress: bool | str = True, argv: list[str] | None = None, controller=None,
                 write_ports: bool | None = None, backend=None,
                 said: set | None = None) -> tuple[RunDir, SimulationResult, dict]:
    """Run ``scenario`` into ``outdir``. Returns (run dir, backend result, summary dict). ``progress``: a progress
    display on stderr; a string turns it on with that label (``hybridsim bench``: "run k/N: NAME"). ``said``: the
    one-line notices already printed (a bench's runs share one set, so each is said once), added to.

    One path for every backend: :func:`make_backend` builds the scenario's :class:`~hybridsim_common.backend.Backend`
    (``backend`` overrides it, e.g. tests' stand-ins); its declared abilities decide whether hybrid mode can run
    (``no_director``) and whose job completion times count (``reports_job_end``)."""
    from .engine.core import RunStop

    if mode not in ("simulate", "hybrid", "floor"):
        raise RunError(f"unknown mode {mode!r}")
    stop = RunStop(scenario.limits.deadline)
    with stop.active():
        return _run(scenario, outdir, stop, force=force, mode=mode, progress=progress, argv=argv,
                    controller=controller, write_ports=write_ports, backend=backend,
                    said=set() if said is None else said)


def _run(scenario, outdir, stop, *, force, mode, progress, argv, controller, write_ports, backend, said):
    from .placement import place_jobs
    from hybridsim_common.records import write_iterations, write_ports as _write_ports
    from .scenario import scenario_to_dict

    cls = type(backend) if backend is not None else backend_class(scenario.backend.kind)
    from .preflight import check_hybrid, check_plugins

    if mode == "floor" and not cls.runs_policy:  # see Backend.runs_policy
        raise RunError(f"mode 'floor' (the hybrid machinery with nothing predicted) is for a backend that runs the "
                       f"policy itself; backend {scenario.backend.kind!r} does not")
    refusal = cls.run_refusal(scenario)
    if refusal is not None:  # before any run directory exists, as validate says
        raise scenario.error(("scheduler",) if scenario.is_stream else ("backend",), refusal)
    if mode == "hybrid":
        refusal = cls.hybrid_refusal(scenario)
        if refusal is not None:  # before any run directory exists
            raise scenario.error(("backend",), f"hybrid mode refused: {refusal}")
    if mode == "hybrid" and controller is None:
        check_hybrid(scenario)  # bad policy / surrogate settings: a ScenarioError before any run directory exists
    else:
        check_plugins(scenario)  # custom workload modules (hybridsim_common.plugins' rule), before any run directory
    topology = scenario.build_topology()
    # a job stream's terminals are allocated by its scheduler as jobs start
    placement = None if scenario.is_stream else place_jobs(scenario, topology)
    rd = RunDir.create(outdir, kind=f"run-{mode}", scenario=scenario_to_dict(scenario), seed=scenario.seed,
                       force=force, argv=argv, extra={"backend": scenario.backend.kind, "mode": mode})
    t0, c0 = time.perf_counter(), cpu_time()
    try:
        stop.check("before the run started")
        if mode == "hybrid" and controller is None and not cls.runs_policy:
            controller = build_controller(scenario, placement=placement)
            stop.check("while building the surrogates")
        director = controller
        if controller is not None and controller.truth_reason:
            director = None   # the truth, run as the pure run is: no loop to pay for
            line = (f"{scenario.name}: hybrid mode runs the truth: {controller.truth_reason} (hybridsim.estimate; set "
                    "a controller section to run a policy anyway)")
            if line not in said:   # a bench's seeds and surrogates all say the same
                said.add(line)
                print(line, file=sys.stderr)
        wants_samples = director is not None and director.wants_samples
        if backend is None:
            run_sc = scenario
            if wants_samples and not scenario.sampling.ports:
                # graph surrogates need the port samples even when the scenario records none
                run_sc = scenario.model_copy(deep=True)
                run_sc.sampling.ports = True
            # the port samples are kept only where they are written (ports.parquet, description.json) or read
            backend = make_backend(run_sc, topology, placement, progress, rd.path, mode,
                                   keep_ports=wants_samples or _ports_written(scenario, write_ports))
        on_record = director.on_record if director is not None else None
        on_samples = director.on_samples if wants_samples else None
        result = backend.run(director=director, on_record=on_record, on_samples=on_samples)
        stop.check("once the backend had finished")
        wall = time.perf_counter() - t0
        cpu = cpu_time() - c0  # CPU time of the run (CODES' too): what a shared machine's load does not inflate
        extra = director.per_iteration_columns(result.records) if director is not None else None
        if extra is None and not all(result.simulated):  # predicted by a backend that runs the policy itself
            extra = {"mode": ["simulate" if s else "predict" for s in result.simulated]}
        write_iterations(result.records, rd.file(ITERATIONS), extra=extra)
        outcomes = stream_outcomes(scenario, result) if scenario.is_stream else None
        if outcomes is not None:
            from hybridsim_common.records import write_jobs

            write_jobs([j.name for j in scenario.jobs], outcomes, scenario.scheduler.slowdown_tau, rd.file(JOBS),
                       [j.swf_id for j in scenario.jobs])
        ports_on = _ports_written(scenario, write_ports)
        if ports_on and result.ports is not None:
            _write_ports(result.ports, rd.file(PORTS))
        if scenario.is_stream:  # the terminals each job ran on (none for a job a partial run never started)
            placement = [result.job_terminals.get(j.name, np.zeros(0, np.int64)) for j in scenario.jobs]
        write_description(rd.path, describe_scenario(scenario, placement, result.ports if ports_on else None))
        summary = {
            "mode": mode,
            "backend": scenario.backend.kind,
            "partial": result.partial,
            "end_time_ns": result.end_time,
            "events": result.events,
            "wall_s": wall,
            "cpu_s": cpu,
            # what the backend spent before simulating (CODES: loading the director's surrogate), inside wall_s
            "startup_s": result.stats.get("startup_s", 0.0),
            "jobs": job_summary(scenario, result.records, job_end=result.job_end if cls.reports_job_end else None),
            "backend_stats": result.stats,
        }
        standin = result.standin if controller is None else director_standin(controller)
        if standin is not None:  # what stood in for the predicted jobs' traffic (also in the manifest)
            summary["standin"] = standin
        if controller is not None:
            hs = controller.summary()
            if director is None:   # ran the truth as a pure run: the loop saw nothing
                hs["jobs"] = {}
            summary["hybrid"] = hs
            w = hs["wall"]  # the director's share of the wall: inference, tuning and the controller's own work
            summary["wall_split_s"] = {
                "simulation": max(wall - w["inference"] - w["tuning"] - w.get("controller", 0.0), 0.0),
                "controller": w.get("controller", 0.0), "inference": w["inference"], "tuning": w["tuning"]}
            for name, js in hs["jobs"].items():
                summary["jobs"].setdefault(name, {}).update(js)
        else:
            summary["wall_split_s"] = {"simulation": wall, "controller": 0.0, "inference": 0.0, "tuning": 0.0}
        if outcomes is not None:
            summary["stream"] = stream_summary(scenario, outcomes)
            tau = scenario.scheduler.slowdown_tau
            for o in outcomes:
                row = o.row(tau)
                job = scenario.jobs[o.job_id]
                summary["jobs"].setdefault(job.name, {}).update(
                    {k: (row[k] if math.isfinite(row[k]) else None)
                     for k in ("arrival", "start", "end", "wait", "run_time", "bounded_slowdown")},
                    killed=bool(o.killed), **({"swf_id": job.swf_id} if job.swf_id is not None else {}))
        energy = _energy_summary(scenario, result)
        if energy is not None:
            summary["energy"] = energy
        write_json_atomic(rd.file(SUMMARY), summary)
        said = {"standin": standin} if standin is not None else {}
        if result.partial:
            rd.complete(partial=True, reason="the backend stopped early (end_time / max_events reached)", **said)
        else:
            rd.complete(**said)
        return rd, result, summary
    except BaseException as exc:
        reason = failure_reason(exc)
        rd.fail(reason)
        if isinstance(exc, RunError) or not isinstance(exc, Exception):  # Ctrl-C, SIGTERM, SystemExit go on as such
            raise
        raise RunError(f"run failed: {reason} (run directory {rd.path} marked failed{_kept(rd)})") from exc


def release_memory() -> None:
    """Give back what a finished run left, before the next run of the same process (``hybridsim bench``): collect
    its cycles (an embedded engine and its native core refer to each other, so only the cyclic collector frees them)
    and, on glibc, return the freed heap to the system (``malloc_trim``: a core's many small allocations otherwise
    stay in the process, and the next run's peak is added to them)."""
    import gc

    gc.collect()
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            trim = ctypes.CDLL(None).malloc_trim   # glibc only: musl and others have none
        except (OSError, AttributeError):
            return
        trim(0)


def _ports_written(scenario, write_ports: bool | None) -> bool:
    """Whether a run writes its port samples (``ports.parquet``): ``write_ports``, else ``output.ports``, and only
    where ``sampling.ports`` takes them."""
    return bool((scenario.output.ports if write_ports is None else write_ports) and scenario.sampling.ports)


def cpu_time() -> float:
    """CPU seconds of this process and of its children that have ended (a backend that runs a simulator as a
    process, CODES, spends its CPU there: ``time.process_time`` alone would leave it out)."""
    import resource

    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


#: an in-process director's ``keep_background`` -> the stand-in it runs (``SimulationResult.standin``'s ``mode``)
KEEP_BACKGROUND_STANDIN = {False: "none", True: "load", "profile": "profile"}


def director_standin(director) -> dict:
    """What stands in for a predicted job's traffic under an in-process director (the embedded engine): its
    ``keep_background`` as a ``SimulationResult.standin`` (``load``: the job's last simulated iteration's mean
    per-port load; ``profile``: that iteration's per-port load phase by phase; ``none``: nothing)."""
    kb = director.keep_background  # declared on hybridsim_common.backend.Director
    return {"mode": KEEP_BACKGROUND_STANDIN.get(kb, str(kb)), "keep_background": kb}


def stream_outcomes(scenario, result: SimulationResult) -> list:
    """A job stream's :class:`~hybridsim.scheduler.JobOutcome` per started job (scenario order); ``end`` is ``inf``
    for a job that did not end (background, or a partial run); ``killed`` for a job killed at its walltime."""
    from .scheduler import JobOutcome

    out = []
    killed = set(result.job_killed)
    for i, job in enumerate(scenario.jobs):
        if job.name not in result.job_start:
            continue
        end = result.job_end.get(job.name, math.inf)
        out.append(JobOutcome(i, job.ranks, job.arrival, job.estimated_walltime(), result.job_start[job.name], end,
                              np.asarray(result.job_terminals[job.name], dtype=np.int64), job.name in killed))
    return out


def stream_summary(scenario, outcomes: list) -> dict:
    """``summary.json``'s ``stream`` section: the scheduler and :func:`hybridsim.scheduler.stream_metrics`."""
    from .scheduler import stream_metrics

    sec = scenario.scheduler
    return {"queue": sec.queue, "allocation": sec.allocation, "seed": scenario.scheduler_seed,
            "kill_at_walltime": sec.kill_at_walltime, "killed_jobs": [scenario.jobs[o.job_id].name
                                                                      for o in outcomes if o.killed],
            "slowdown_tau_ns": sec.slowdown_tau, "terminals": scenario.topology.n_terminals,
            "jobs_started": len(outcomes),
            **stream_metrics(outcomes, scenario.topology.n_terminals, sec.slowdown_tau)}


def _kept(rd: RunDir) -> str:
    return "" if rd.path == rd.staged.dest else f"; the completed run in {rd.staged.dest} is kept"


def _energy_summary(scenario, result: SimulationResult) -> dict | None:
    """Time/energy-to-solution when the scenario describes a machine (hybridsim.energy)."""
    if scenario.machine is None:
        return None
    from .energy.energy import energy_report

    return energy_report(scenario, result.records, link_bytes=result.link_totals)


def run_scenario_file(path, outdir=None, force=False, mode="simulate", progress=True, argv=None, limits=None):
    from .scenario import load_scenario

    scenario = load_scenario(path, limits=limits)
    out = Path(outdir) if outdir else default_outdir(scenario, path)
    return run_scenario(scenario, out, force=force, mode=mode, progress=progress, argv=argv)
