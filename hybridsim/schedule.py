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

Output folder (a run directory: manifest, staged, ``--force`` rules of :mod:`hybridsim_common.rundir`)::

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
import numpy as np

from .scheduler import bounded_slowdown, dry_run_times, metrics_of, size_class
from .swf import COL, FIELDS, SwfError, SwfTrace

WALLTIME_RULES = ("exact", "factor")
#: the per-job table: SWF job number (scenario: index + 1), its name, trace line (0 for a scenario), times in seconds
TABLE_COLUMNS = ("job", "name", "line", "size", "size_class", "submit", "start", "end", "wait", "run_time",
                 "input_run_time", "walltime", "response", "bounded_slowdown", "killed")
NS = 1e9


@dataclass
class ScheduleInput:
    """The jobs to schedule (arrays, arrival order), in seconds; how many nodes; where they came from."""

    source: str
    kind: str                                  # "swf" or "scenario"
    nodes: int
    size: np.ndarray
    arrival: np.ndarray
    walltime: np.ndarray
    run_time: np.ndarray
    numbers: np.ndarray                        # SWF job number per job
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
    numbers = trace.col("job")[rows].astype(np.int64)
    return ScheduleInput(trace.source, "swf", int(nodes), procs[rows].astype(np.int64), submit[rows], wall,
                         run[rows], numbers, [str(n) for n in numbers.tolist()], trace.lines[rows], trace, rows,
                         {k: v for k, v in skipped.items() if v}, note)


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
    keep = [(k, j) for k, j in enumerate(scenario.jobs) if not (j.is_background or j.iterations is None)]
    skipped = len(scenario.jobs) - len(keep)
    if not keep:
        raise SwfError("the scenario has no job that ends (only background jobs)")
    keep.sort(key=lambda kj: kj[1].arrival)  # stable: scenario order among equal arrivals
    n = int(nodes or scenario.topology.n_terminals)
    big = [j for _, j in keep if j.ranks > n]
    if big:
        raise SwfError(f"job {big[0].name!r} needs {big[0].ranks} nodes, more than the {n} scheduled")
    return ScheduleInput(
        scenario.name or "scenario", "scenario", n,
        np.array([j.ranks for _, j in keep], dtype=np.int64), np.array([j.arrival / NS for _, j in keep]),
        np.array([j.estimated_walltime() / NS for _, j in keep]),
        np.array([declared_run_time(j) / NS for _, j in keep]), np.array([k + 1 for k, _ in keep], dtype=np.int64),
        [j.name for _, j in keep], np.zeros(len(keep), np.int64),
        skipped={"background job (never ends)": skipped} if skipped else {},
        walltime_note="the job's walltime (default: its estimated_walltime)")


@dataclass
class Schedule:
    """Start and end of every job of a :class:`ScheduleInput` (same order), and whether it was killed."""

    start: np.ndarray
    end: np.ndarray
    killed: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


def run_schedule(inp: ScheduleInput, queue: str = "easy", kill_at_walltime: bool = False) -> Schedule:
    """Schedule ``inp`` (:func:`hybridsim.scheduler.dry_run_times`, contiguous allocation)."""
    return Schedule(*dry_run_times(inp.size, inp.arrival, inp.walltime, inp.run_time, inp.nodes, queue,
                                   "contiguous", 0, kill_at_walltime))


def jobs_table(inp: ScheduleInput, out: Schedule, tau: float):
    """The per-job table (:data:`TABLE_COLUMNS`) as a pyarrow Table, in seconds."""
    import pyarrow as pa

    run, wait = out.end - out.start, out.start - inp.arrival
    cols = {
        "job": pa.array(inp.numbers, pa.int64()),
        "name": pa.array(inp.names, pa.string()),
        "line": pa.array(inp.lines, pa.int64()),
        "size": pa.array(inp.size, pa.int64()),
        "size_class": pa.array([size_class(s) for s in inp.size.tolist()], pa.string()),
        "submit": pa.array(inp.arrival), "start": pa.array(out.start), "end": pa.array(out.end),
        "wait": pa.array(wait), "run_time": pa.array(run), "input_run_time": pa.array(inp.run_time),
        "walltime": pa.array(inp.walltime), "response": pa.array(out.end - inp.arrival),
        "bounded_slowdown": pa.array(np.atleast_1d(bounded_slowdown(wait, run, tau))),
        "killed": pa.array(out.killed, pa.bool_()),
    }
    return pa.table(cols)


def swf_text(inp: ScheduleInput, out: Schedule, header: list[str]):
    """``schedule.swf``, line by line: for a trace, every input line in the trace's order (job lines with the wait
    filled in, those not scheduled unchanged); for a scenario, one line per job (submit, run, size, requested time
    = walltime)."""
    if inp.trace is not None:
        jobs = inp.trace.jobs.copy()
        jobs[inp.rows, COL["wait"]] = out.start - inp.arrival
        k = inp.rows[out.killed]
        jobs[k, COL["run"]] = (out.end - out.start)[out.killed]
        jobs[k, COL["status"]] = 0
    else:
        jobs = np.full((len(out), len(FIELDS)), -1.0)
        jobs[:, COL["job"]] = inp.numbers
        jobs[:, COL["submit"]], jobs[:, COL["wait"]] = inp.arrival, out.start - inp.arrival
        jobs[:, COL["run"]] = out.end - out.start
        jobs[:, COL["procs"]] = jobs[:, COL["req_procs"]] = inp.size
        jobs[:, COL["req_time"]] = np.where(np.isfinite(inp.walltime), inp.walltime, -1)
        jobs[:, COL["status"]] = np.where(out.killed, 0, 1)
    yield from (h + "\n" for h in header)
    ints = (jobs == np.round(jobs)).all(axis=0)
    for lo in range(0, len(jobs), 65536):
        block = jobs[lo:lo + 65536]
        cols = [block[:, c].astype(np.int64).astype(str) if ints[c] else np.char.mod("%.10g", block[:, c])
                for c in range(len(FIELDS))]
        yield "\n".join(" ".join(row) for row in zip(*[c.tolist() for c in cols])) + "\n"


def write_schedule(rd, inp: ScheduleInput, out: Schedule, summary: dict, header: list[str]) -> None:
    """Write the tables and the SWF into the run directory ``rd`` (files atomically)."""
    import os

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from hybridsim_common.rundir import write_json_atomic

    table = jobs_table(inp, out, summary["slowdown_tau_s"])

    def swf(path):
        with open(path, "w") as fh:
            fh.writelines(swf_text(inp, out, header))

    for name, write in (("jobs.parquet", lambda p: pq.write_table(table, p)),
                        ("jobs.csv", lambda p: pacsv.write_csv(table, p)), ("schedule.swf", swf)):
        tmp = rd.file(name + ".partial")
        write(str(tmp))
        os.replace(tmp, rd.file(name))
    write_json_atomic(rd.file("summary.json"), summary)


def summarise(inp: ScheduleInput, out: Schedule, queue: str, kill: bool, tau: float) -> dict:
    """``summary.json``: the input, the scheduler and the metrics (seconds)."""
    return {"source": inp.source, "input": inp.kind, "nodes": inp.nodes, "queue": queue,
            "walltime": inp.walltime_note, "kill_at_walltime": kill, "slowdown_tau_s": tau,
            "jobs_in_input": len(inp.trace.jobs) if inp.trace is not None else len(out) + sum(inp.skipped.values()),
            "jobs_scheduled": len(out), "not_scheduled": inp.skipped,
            "metrics": metrics_of(inp.arrival, out.start, out.end, inp.size, out.killed, inp.nodes, tau)}
