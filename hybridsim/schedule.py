"""``hybridsim schedule``: a trace (or a stream scenario) scheduled with its own run times, no network.

What a scheduling researcher compares with AccaSim, Batsim or the Slurm simulator: every job of the input gets a
start time from :func:`hybridsim.scheduler.dry_run` on ``nodes`` nodes (one rank a node), with

* run time: the trace's (field 4), or a scenario job's declared estimate (:func:`declared_run_time`);
* walltime: the trace's requested time (field 9) where it is given, else :data:`WALLTIME_RULES` -- ``exact`` (the
  run time: perfect estimates) or ``factor`` (``factor`` x the run time); a scenario job's ``walltime`` (or its
  default estimate);
* optionally the job killed at its walltime (``kill_at_walltime``).

Times stay in the input's unit for the scheduler and are written in seconds. A trace job of unknown size or run time
(-1) is not scheduled; it is still written to ``schedule.swf`` unchanged (wait -1), and counted in the summary.

Output folder (a run directory: manifest, staged, ``--force`` rules of :mod:`hybridsim.rundir`)::

    DIR/manifest.json   kind "schedule", command line, status
    DIR/schedule.swf    every input job, original fields, wait (field 3) filled in; killed jobs: run time as run,
                        status 0
    DIR/jobs.csv        one row per scheduled job (columns: :data:`TABLE_COLUMNS`), seconds, SWF job numbers
    DIR/jobs.parquet    the same table
    DIR/summary.json    input, scheduler, the metrics of :func:`hybridsim.scheduler.stream_metrics` (seconds)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .scheduler import JobOutcome, StreamJob, dry_run, size_class, stream_metrics
from .swf import COL, FIELDS, SwfError, SwfTrace

WALLTIME_RULES = ("exact", "factor")
#: the per-job table: SWF job number (scenario: index + 1), its name, trace line (0 for a scenario), times in seconds
TABLE_COLUMNS = ("job", "name", "line", "size", "size_class", "submit", "start", "end", "wait", "run_time",
                 "input_run_time", "walltime", "response", "bounded_slowdown", "killed")
NS = 1e9


@dataclass
class ScheduleInput:
    """The jobs to schedule (``stream``: ``job_id`` = row index), in seconds; how many nodes; where they came from."""

    source: str
    kind: str                                  # "swf" or "scenario"
    nodes: int
    stream: list[StreamJob]
    numbers: np.ndarray                        # SWF job number per stream job
    names: list[str]
    lines: np.ndarray                          # trace line per stream job (0: scenario)
    trace: SwfTrace | None = None
    rows: np.ndarray | None = None             # trace row per stream job
    skipped: dict[str, int] = field(default_factory=dict)
    walltime_note: str = ""


def _walltimes(run: np.ndarray, requested: np.ndarray, rule: str, factor: float) -> tuple[np.ndarray, str]:
    if rule not in WALLTIME_RULES:
        raise SwfError(f"unknown walltime rule {rule!r} (valid: {', '.join(WALLTIME_RULES)})")
    if not (math.isfinite(factor) and factor >= 1):
        raise SwfError(f"walltime factor must be a number >= 1, got {factor}")
    fallback = run if rule == "exact" else factor * run
    note = ("requested time (field 9) where given, else " +
            ("the run time (exact)" if rule == "exact" else f"{factor:g} x the run time"))
    return np.where(requested > 0, requested, fallback), note


def from_trace(trace: SwfTrace, nodes: int | None = None, walltime_rule: str = "exact",
               walltime_factor: float = 2.0) -> ScheduleInput:
    """The jobs of ``trace`` of known size (allocated, else requested processors) and run time (>= 0), on ``nodes``
    (default: the header's ``MaxNodes``, else ``MaxProcs``, else the largest job). A job larger than ``nodes`` is an
    error naming its line."""
    from .swf import _procs

    procs, run, submit = _procs(trace), trace.col("run"), trace.col("submit")
    ok = (procs > 0) & (run >= 0) & (submit >= 0)
    skipped = {"unknown run time": int((run < 0).sum()), "unknown size": int(((procs <= 0) & (run >= 0)).sum()),
               "unknown submit time": int(((submit < 0) & (procs > 0) & (run >= 0)).sum())}
    rows = np.flatnonzero(ok)
    if not len(rows):
        raise SwfError(f"{trace.source}: no job with a known size, run time and submit time")
    if nodes is None:
        nodes = _header_nodes(trace) or int(procs[rows].max())
    big = rows[procs[rows] > nodes]
    if len(big):
        first = big[0]
        field_no = COL["procs"] + 1 if trace.jobs[first, COL["procs"]] > 0 else COL["req_procs"] + 1
        raise SwfError(f"{trace.source}:{trace.lines[first]}: field {field_no} ({FIELDS[field_no - 1]}) = "
                       f"{int(procs[first])} processors, more than the {nodes} nodes scheduled ({len(big)} such "
                       "job(s); give --nodes)")
    rows = rows[np.argsort(submit[rows], kind="stable")]  # the scheduler takes jobs in arrival order
    wall, note = _walltimes(run[rows], trace.col("req_time")[rows], walltime_rule, walltime_factor)
    stream = [StreamJob(i, int(p), float(s), float(w), float(r))
              for i, (p, s, w, r) in enumerate(zip(procs[rows].tolist(), submit[rows].tolist(), wall.tolist(),
                                                   run[rows].tolist()))]
    numbers = trace.col("job")[rows].astype(np.int64)
    return ScheduleInput(trace.source, "swf", int(nodes), stream, numbers, [str(n) for n in numbers.tolist()],
                         trace.lines[rows], trace, rows, {k: v for k, v in skipped.items() if v}, note)


def _header_nodes(trace: SwfTrace) -> int | None:
    for key in ("MaxNodes", "MaxProcs"):
        try:
            v = int(trace.keys[key])
        except (KeyError, ValueError):
            continue
        if v > 0:
            return v
    return None


def declared_run_time(job) -> float:
    """A scenario job's declared run time, ns: iterations x (its workload kind's typical iteration time + its
    compute delay) -- the estimate :meth:`hybridsim.scenario.Job.estimated_walltime` doubles."""
    from .workloads import ITERATION_TIME_NS

    return job.iterations * (ITERATION_TIME_NS[job.workload.kind] + job.compute.delay)


def from_scenario(scenario, nodes: int | None = None) -> ScheduleInput:
    """A stream scenario's jobs (background jobs left out: they never end), on its terminals (or ``nodes``), in s."""
    names, stream, skipped = [], [], 0
    for i, j in enumerate(scenario.jobs):
        if j.is_background or j.iterations is None:
            skipped += 1
            continue
        run = declared_run_time(j) / NS
        stream.append(StreamJob(len(stream), j.ranks, j.arrival / NS, j.estimated_walltime() / NS, run))
        names.append(j.name)
    if not stream:
        raise SwfError("the scenario has no job that ends (only background jobs)")
    n = int(nodes or scenario.topology.n_terminals)
    big = [s for s in stream if s.size > n]
    if big:
        raise SwfError(f"job {names[big[0].job_id]!r} needs {big[0].size} nodes, more than the {n} scheduled")
    order = sorted(range(len(stream)), key=lambda k: stream[k].arrival)
    stream = [StreamJob(new, stream[k].size, stream[k].arrival, stream[k].walltime, stream[k].run_time)
              for new, k in enumerate(order)]
    names = [names[k] for k in order]
    index = {j.name: k + 1 for k, j in enumerate(scenario.jobs)}
    return ScheduleInput(scenario.name if hasattr(scenario, "name") else "scenario", "scenario", n, stream,
                         np.array([index[nm] for nm in names], dtype=np.int64), names, np.zeros(len(names), np.int64),
                         skipped={"background job (never ends)": skipped} if skipped else {},
                         walltime_note="the job's walltime (default: its estimated_walltime)")


def run_schedule(inp: ScheduleInput, queue: str = "easy", kill_at_walltime: bool = False) -> list[JobOutcome]:
    """Start and end of every job of ``inp`` (order of ``inp.stream``)."""
    return dry_run(inp.stream, inp.nodes, queue, "contiguous", 0, kill_at_walltime)


def jobs_table(inp: ScheduleInput, outcomes: list[JobOutcome], tau: float):
    """The per-job table (:data:`TABLE_COLUMNS`) as a pyarrow Table, in seconds."""
    import pyarrow as pa

    arrival = np.array([o.arrival for o in outcomes])
    start = np.array([o.start for o in outcomes])
    end = np.array([o.end for o in outcomes])
    run = end - start
    wait = start - arrival
    size = np.array([o.size for o in outcomes], dtype=np.int64)
    from .scheduler import bounded_slowdown

    cols = {
        "job": pa.array(inp.numbers, pa.int64()),
        "name": pa.array(inp.names, pa.string()),
        "line": pa.array(inp.lines, pa.int64()),
        "size": pa.array(size, pa.int64()),
        "size_class": pa.array([size_class(s) for s in size.tolist()], pa.string()),
        "submit": pa.array(arrival), "start": pa.array(start), "end": pa.array(end), "wait": pa.array(wait),
        "run_time": pa.array(run),
        "input_run_time": pa.array(np.array([s.run_time for s in inp.stream])),
        "walltime": pa.array(np.array([o.walltime for o in outcomes])),
        "response": pa.array(end - arrival),
        "bounded_slowdown": pa.array(np.atleast_1d(bounded_slowdown(wait, run, tau))),
        "killed": pa.array([o.killed for o in outcomes], pa.bool_()),
    }
    return pa.table(cols)


def _num(v: float) -> str:
    return str(int(v)) if v == int(v) else f"{v:.10g}"


def swf_text(inp: ScheduleInput, outcomes: list[JobOutcome], header: list[str]) -> str:
    """``schedule.swf``: for a trace, every input line in the trace's order (job lines with the wait filled in, those
    not scheduled unchanged); for a scenario, one line per job (submit, run, size, requested time = walltime)."""
    lines = [h for h in header]
    if inp.trace is not None:
        jobs = inp.trace.jobs.copy()
        for o in outcomes:
            r = inp.rows[o.job_id]
            jobs[r, COL["wait"]] = o.start - o.arrival
            if o.killed:
                jobs[r, COL["run"]] = o.end - o.start
                jobs[r, COL["status"]] = 0
    else:
        jobs = np.full((len(outcomes), len(FIELDS)), -1.0)
        for o in outcomes:
            row = jobs[o.job_id]
            row[COL["job"]] = inp.numbers[o.job_id]
            row[COL["submit"]], row[COL["wait"]], row[COL["run"]] = o.arrival, o.start - o.arrival, o.end - o.start
            row[COL["procs"]] = row[COL["req_procs"]] = o.size
            row[COL["req_time"]] = o.walltime if math.isfinite(o.walltime) else -1
            row[COL["status"]] = 0 if o.killed else 1
    ints = (jobs == np.round(jobs)).all(axis=0)
    for row in jobs.tolist():
        lines.append(" ".join(str(int(v)) if ints[k] else _num(v) for k, v in enumerate(row)))
    return "\n".join(lines) + "\n"


def write_schedule(rd, inp: ScheduleInput, outcomes: list[JobOutcome], summary: dict, header: list[str]) -> None:
    """Write the tables and the SWF into the run directory ``rd`` (files atomically)."""
    import os

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from .rundir import write_json_atomic

    table = jobs_table(inp, outcomes, summary["slowdown_tau_s"])
    for name, write in (("jobs.parquet", lambda p: pq.write_table(table, p)),
                        ("jobs.csv", lambda p: pacsv.write_csv(table, p)),
                        ("schedule.swf", lambda p: Path(p).write_text(swf_text(inp, outcomes, header)))):
        tmp = rd.file(name + ".partial")
        write(str(tmp))
        os.replace(tmp, rd.file(name))
    write_json_atomic(rd.file("summary.json"), summary)


def summarise(inp: ScheduleInput, outcomes: list[JobOutcome], queue: str, kill: bool, tau: float) -> dict:
    """``summary.json``: the input, the scheduler and the metrics (seconds)."""
    return {"source": inp.source, "input": inp.kind, "nodes": inp.nodes, "queue": queue,
            "walltime": inp.walltime_note, "kill_at_walltime": kill, "slowdown_tau_s": tau,
            "jobs_in_input": (len(inp.trace.jobs) if inp.trace is not None else len(inp.stream)
                              + sum(inp.skipped.values())),
            "jobs_scheduled": len(outcomes), "not_scheduled": inp.skipped,
            "metrics": stream_metrics(outcomes, inp.nodes, tau)}
