"""The pure run a bench judges against (``hybridsim bench --pure RUN_DIR``), read only once it is shown to be a
completed, untouched pure simulation of the bench's scenario.

:func:`read_pure_run` checks, in order, and raises :class:`~hybridsim_common.rundir.RunDirError` (exit 2) naming the file
and what is wrong at the first failure:

1. the manifest: a completed, not partial, simulate-mode run whose recorded digests still match its tables and its
   identity (:func:`hybridsim_common.rundir.verify_digests`; a run written before digests existed is refused, with how to
   make it again);
2. the scenario: the manifest's, read through today's schema, equals the bench's (but for keys only hybrid runs
   read, :func:`hybrid_only_keys`); and the run's own
   ``description.json`` agrees with it (topology, each job's name, workload, ranks, iterations and, for a placed
   scenario, terminals), so a manifest whose scenario was pasted in from another run is caught even when its
   digests were rewritten;
3. ``summary.json``: a pure, complete run's object (``mode: simulate``, no ``hybrid`` section, not partial) with a
   finite, positive ``wall_s`` within the manifest's start and end times, a non-negative integer ``events`` and,
   per foreground job, a finite completion time;
4. ``iterations.parquet``: no predicted iteration; every foreground job has each of its ranks x iterations exactly
   once and no other rows, with finite times, ``0 <= start <= end``, and its last end is the summary's completion
   time.

The digests catch an accident or a careless edit; the checks of 2-4 hold whatever the digests say.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path

import numpy as np

from hybridsim_common.records import IterationRecord
from hybridsim_common.rundir import DESCRIPTION, ITERATIONS, SUMMARY, RunDirError, load_json_object, read_manifest, verify_digests

#: relative tolerance of "the last end is the completion time" (the summary holds the same float64)
_TOL = 1e-9


def check_not_input(outdir: str | os.PathLike, pure_dir: str | os.PathLike) -> None:
    """Refuse (:class:`RunDirError`) a bench directory ``outdir`` that is the pure run ``pure_dir``, lies inside it
    or holds it: writing it, with ``--force`` or not, would replace or change the run the bench reads."""
    out, pure = Path(os.path.realpath(outdir)), Path(os.path.realpath(pure_dir))
    if out == pure or pure in out.parents or out in pure.parents:
        how = "is" if out == pure else "lies inside" if pure in out.parents else "holds"
        raise RunDirError(f"-o {outdir} {how} the pure run {pure_dir} the bench reads (--pure); a bench never "
                          "writes over its own input: choose another -o")


def read_pure_run(scenario, path) -> tuple[list[IterationRecord], dict]:
    """Records and summary of a completed pure simulation of ``scenario`` in run directory ``path`` (a bench reuses
    it instead of simulating again: the engine is deterministic for a fixed seed), checked as the module docstring
    says. Raises :class:`~hybridsim_common.rundir.RunDirError` for anything else."""
    from hybridsim_common.records import read_iterations, records_from_table

    p = Path(path)
    m = read_manifest(p)
    if m.get("status") != "completed" or m.get("mode") != "simulate" or m.get("partial"):
        state = "partial" if m.get("partial") else f"status {m.get('status')!r}"
        raise RunDirError(f"{p}: not a completed pure simulation (mode {m.get('mode')!r}, {state})")
    redo = f"simulate it again (`hybridsim run SCENARIO -o {p} --force`), or run the bench without --pure"
    verify_digests(p, m, redo=redo)
    _check_scenario(scenario, p, m)
    summary = _check_summary(scenario, p, m)
    try:
        table = read_iterations(p / ITERATIONS)
    except (OSError, ValueError) as exc:  # pyarrow's errors are OSError or ValueError
        raise RunDirError(f"{p / ITERATIONS}: unreadable pure run table: {exc}") from None
    _check_iterations(scenario, p / ITERATIONS, table, summary)
    return records_from_table(table), summary


def hybrid_only_keys(d: dict) -> list[tuple]:
    """The keys of scenario ``d`` (as a dict) only hybrid runs read, a pure run being the same whatever they say: the
    options each installed backend declares hybrid-only (:attr:`~hybridsim_common.backend.Backend.hybrid_only_options`,
    CODES' stand-in settings)."""
    from .scenario import backend_registry

    registry = backend_registry()
    out = []
    for name in (d.get("backend") or {}):
        try:
            cls = registry.load(name) if name in registry.entry_points() else None
        except (ImportError, ValueError):
            cls = None
        out.extend(("backend", name, key) for key in (cls.hybrid_only_options if cls is not None else ()))
    return out


def _pure_relevant(d: dict) -> dict:
    """``d`` (a scenario as a dict) without its :func:`hybrid_only_keys`, so a bench may judge a scenario's stand-in
    settings against one pure run."""
    d = copy.deepcopy(d)
    for path in hybrid_only_keys(d):
        node = d
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return d


def _check_scenario(scenario, p: Path, m: dict) -> None:
    from pydantic import ValidationError

    from .scenario import Scenario, scenario_to_dict

    try:  # read through today's schema: a run written before a field existed holds its default
        theirs = _pure_relevant(scenario_to_dict(Scenario.model_validate(m.get("scenario"))))
    except (ValidationError, TypeError, ValueError):
        theirs = None
    if theirs != _pure_relevant(scenario_to_dict(scenario)):
        raise RunDirError(f"{p}: holds a pure run of another scenario: its manifest's scenario differs from "
                          f"{scenario.name!r}'s; run the bench without --pure")
    from hybridsim_common.rundir import read_description

    desc = read_description(p)
    other = f"{p / DESCRIPTION}: the run is not of scenario {scenario.name!r} (its manifest says it is): "
    s = scenario.topology.shape
    if (desc.shape.groups, desc.shape.routers_per_group, desc.shape.terminals_per_router,
            desc.shape.global_channels_per_router) != (s.groups, s.routers_per_group, s.terminals_per_router,
                                                         s.global_channels_per_router):
        raise RunDirError(other + "another topology")
    if len(desc.jobs) != len(scenario.jobs):
        raise RunDirError(other + f"{len(desc.jobs)} jobs, the scenario has {len(scenario.jobs)}")
    placement = None
    if not scenario.is_stream:
        from .placement import place_jobs

        placement = place_jobs(scenario, scenario.build_topology())
    for k, (d, job) in enumerate(zip(desc.jobs, scenario.jobs)):
        mine = (job.name, job.workload.kind, job.ranks, job.iterations)
        if (d.name, d.workload, d.ranks, d.iterations) != mine:
            raise RunDirError(other + f"job {k} is {(d.name, d.workload, d.ranks, d.iterations)} (name, workload, "
                                      f"ranks, iterations), the scenario's {mine}")
        if placement is not None and d.terminals is not None and \
                list(d.terminals) != [int(t) for t in placement[k]]:
            raise RunDirError(other + f"job {job.name!r} ran on other terminals than the scenario places it on "
                                      "(another seed or placement)")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _elapsed_s(m: dict) -> float | None:
    """Seconds between the manifest's ``start_time`` and ``end_time`` (None when either is missing or garbled)."""
    import datetime as dt

    try:
        return (dt.datetime.fromisoformat(m["end_time"]) - dt.datetime.fromisoformat(m["start_time"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def _check_summary(scenario, p: Path, m: dict) -> dict:
    f = p / SUMMARY
    summary = load_json_object(f, SUMMARY, "missing")
    if summary.get("mode") != "simulate" or "hybrid" in summary or summary.get("partial"):
        raise RunDirError(f"{f}: a hybrid run's or a partial run's summary (mode {summary.get('mode')!r}), not a "
                          "completed pure simulation's")
    wall, events, jobs = summary.get("wall_s"), summary.get("events"), summary.get("jobs")
    if not _number(wall) or wall <= 0:
        raise RunDirError(f"{f}: field 'wall_s' must be a finite number of seconds > 0, not {wall!r}")
    elapsed = _elapsed_s(m)
    if elapsed is None or wall > elapsed + 2.0:  # the manifest's times are whole seconds
        raise RunDirError(f"{f}: field 'wall_s' = {wall:g} s does not fit in the run's own time span (manifest "
                          f"start_time {m.get('start_time')!r} to end_time {m.get('end_time')!r})")
    if not isinstance(events, int) or isinstance(events, bool) or events < 0:
        raise RunDirError(f"{f}: field 'events' must be an integer >= 0, not {events!r}")
    if not isinstance(jobs, dict):
        raise RunDirError(f"{f}: field 'jobs' must be an object")
    for job in scenario.jobs:
        if job.is_background:
            continue
        j = jobs.get(job.name)
        t = j.get("completion_time_ns") if isinstance(j, dict) else None
        if not _number(t) or t < 0:
            raise RunDirError(f"{f}: field 'jobs.{job.name}.completion_time_ns' must be a finite time >= 0, not {t!r}")
        if "stream" in summary:
            for k in ("start", "run_time"):
                v = j.get(k)
                if v is not None and (not _number(v) or v < 0):
                    raise RunDirError(f"{f}: field 'jobs.{job.name}.{k}' must be a finite time >= 0, not {v!r}")
    return summary


def _check_iterations(scenario, f: Path, table, summary: dict) -> None:
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in ("job_id", "rank", "iteration", "start", "end")}
    if "mode" in table.column_names and "predict" in set(table.column("mode").to_pylist()):
        raise RunDirError(f"{f}: predicted iterations (a hybrid run's table), not a pure simulation's")
    jid, rank, it = (cols[c].astype(np.int64) for c in ("job_id", "rank", "iteration"))
    start, end = cols["start"].astype(np.float64), cols["end"].astype(np.float64)
    if not (np.isfinite(start).all() and np.isfinite(end).all()):
        raise RunDirError(f"{f}: non-finite start or end times")
    if (start < 0).any() or (end < start).any():
        raise RunDirError(f"{f}: an iteration ends before it starts, or starts before 0")
    counted = np.zeros(len(jid), bool)
    for k, job in enumerate(scenario.jobs):
        sel = jid == k
        counted |= sel
        if job.is_background:
            if sel.any():
                raise RunDirError(f"{f}: rows for background job {job.name!r}")
            continue
        n = int(sel.sum())
        want = job.ranks * job.iterations
        if n == 0:
            raise RunDirError(f"{f}: no rows for job {job.name!r} (it has {job.ranks} ranks x {job.iterations} "
                              "iterations)")
        r, i = rank[sel], it[sel]
        if (r < 0).any() or (r >= job.ranks).any() or (i < 0).any() or (i >= job.iterations).any():
            raise RunDirError(f"{f}: job {job.name!r} has a rank or iteration outside {job.ranks} ranks x "
                              f"{job.iterations} iterations")
        if n != want or len(np.unique(r * job.iterations + i)) != want:
            raise RunDirError(f"{f}: job {job.name!r} has {n} rows, not each of its {job.ranks} ranks x "
                              f"{job.iterations} iterations once")
        t = float(summary["jobs"][job.name]["completion_time_ns"])
        last = float(end[sel].max())
        ok = abs(last - t) <= _TOL * max(abs(t), 1.0) if summary.get("backend", "embedded") == "embedded" \
            else t >= last * (1 - _TOL)
        if not ok:
            raise RunDirError(f"{f}: job {job.name!r}: its last iteration ends at {last:g} ns, but {SUMMARY} says "
                              f"it completed at {t:g} ns")
    if not counted.all():
        raise RunDirError(f"{f}: rows of a job_id the scenario does not have ({int(jid[~counted][0])})")
