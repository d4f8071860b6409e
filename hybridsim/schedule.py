"""``hybridsim schedule``: a trace (or a stream scenario) scheduled with its own run times, no network.

What a scheduling researcher compares with AccaSim, Batsim or the Slurm simulator: every job of the input gets a
start time from :func:`hybridsim.scheduler.dry_run` on ``nodes`` nodes (one rank a node), with

* run time: the trace's (field 4), or a scenario job's declared estimate (:func:`declared_run_time`);
* walltime: the trace's requested time (field 9) where it is given, else :data:`WALLTIME_RULES` -- ``exact`` (the
  run time: perfect estimates) or ``factor`` (``factor`` x the run time); a scenario job's ``walltime`` (or its
  default estimate);
* optionally the job killed at its walltime (``kill_at_walltime``);
* partitions (``partitions``): the jobs of each value of SWF field 16 (or 15, the queue) scheduled on their own
  disjoint nodes (:func:`parse_partitions`), node ids numbered partition after partition;
* dependencies (SWF fields 17-18): a job whose preceding job is scheduled is submitted at ``max(its submit time,
  the preceding job's end + think time)`` -- its wait counts from its own submit time, as the archive's does;
* the queue policy sees each job's user, group, queue and partition (fields 12, 13, 15, 16) and the usage history
  (:mod:`hybridsim.queues`: fair-share);
* node failures (``failures``: from a file or drawn at a rate): the job on a failed node is killed and requeued
  at once with its whole run time; the node is out of service until repaired;
* energy (``machine``): each job's nodes x run time x the node's static power (the machine file's ``static power``
  plus its GPUs' idle power) -- a trace gives no FLOP or byte counts, so no dynamic energy.

Times stay in the input's unit for the scheduler and are written in seconds. A trace job of unknown size or run time
(-1) is not scheduled; it is still written to ``schedule.swf`` unchanged (wait -1), and counted in the summary.

Output folder (a run directory: manifest, staged, ``--force`` rules of :mod:`hybridsim_common.rundir`)::

    DIR/manifest.json   kind "schedule", command line, status
    DIR/schedule.swf    every input job, original fields, wait (field 3) filled in; killed jobs: run time as run,
                        status 0
    DIR/jobs.csv        one row per scheduled job in Batsim's ``_jobs.csv`` columns (:data:`BATSIM_COLUMNS`, the
                        table evalys and Batsim's tools read; ``allocated_resources``: the node ids as an interval
                        set), then hybridsim's own (:data:`EXTRA_COLUMNS`); seconds, SWF job numbers
    DIR/jobs.parquet    hybridsim's table (:data:`TABLE_COLUMNS`; what ``report`` reads), with the node ids
    DIR/utilisation.csv the busy nodes, utilisation, running and queued jobs after every change (a step function:
                        each row holds until the next row's time)
    DIR/summary.json    input, scheduler, options, the metrics of :func:`hybridsim.scheduler.stream_metrics`
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
                 "input_run_time", "walltime", "response", "bounded_slowdown", "killed", "user", "group", "queue",
                 "partition", "nodes", "energy_j")
#: Batsim's ``_jobs.csv`` columns, in its order (``consumed_energy`` -1 without a machine, as Batsim writes it)
BATSIM_COLUMNS = ("job_id", "workload_name", "profile", "submission_time", "requested_number_of_resources",
                  "requested_time", "success", "final_state", "starting_time", "execution_time", "finish_time",
                  "waiting_time", "turnaround_time", "stretch", "allocated_resources", "consumed_energy", "metadata")
#: hybridsim's columns after Batsim's in ``jobs.csv``
EXTRA_COLUMNS = ("swf_line", "size_class", "input_run_time", "bounded_slowdown", "killed", "user", "group", "queue",
                 "partition", "requeued")
UTILISATION_COLUMNS = ("time", "busy_nodes", "utilisation", "running_jobs", "queued_jobs", "queued_nodes")
PARTITION_FIELDS = ("partition", "queue")
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
    user: np.ndarray | None = None             # SWF fields 12, 13, 15, 16 per job (-1 unknown)
    group: np.ndarray | None = None
    queue: np.ndarray | None = None
    partition: np.ndarray | None = None
    after: np.ndarray | None = None            # index of the job that must end first (-1: none)
    think: np.ndarray | None = None            # seconds after that end
    part_index: np.ndarray | None = None       # index into partition_nodes per job (None: one machine)
    partition_nodes: list[int] = field(default_factory=list)
    partition_names: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def attrs(self) -> dict:
        """What the queue policy sees beyond size, walltime and arrival."""
        return {k: getattr(self, k) for k in ("user", "group", "queue", "partition") if getattr(self, k) is not None}


def parse_partitions(text: str | None) -> "str | dict[int, int] | None":
    """``--partitions``: ``None`` (one machine), ``auto`` (each partition as large as its largest job) or
    ``P=N,P=N`` (partition number P of the trace field -> N nodes)."""
    if text is None or text == "":
        return None
    if text == "auto":
        return "auto"
    out: dict[int, int] = {}
    for item in text.split(","):
        k, sep, v = item.partition("=")
        try:
            key, nodes = int(k), int(v)
        except ValueError:
            raise SwfError(f"--partitions: expected auto or P=N,... (partition number = nodes), got {item!r}") from None
        if not sep or nodes < 1 or key in out:
            raise SwfError(f"--partitions: expected P=N with N >= 1, each P once, got {item!r}")
        out[key] = nodes
    return out

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
               walltime_factor: float = 2.0, partitions: "str | dict[int, int] | None" = None,
               partition_field: str = "partition", dependencies: bool = True) -> ScheduleInput:
    """The jobs of ``trace`` of known size (allocated, else requested processors) and run time (>= 0), on ``nodes``
    (default: the header's ``MaxNodes``, else ``MaxProcs``, else the largest job). A job larger than ``nodes`` (or
    than its partition) is an error naming its line. ``partitions`` (:func:`parse_partitions`) splits the machine by
    ``partition_field`` (``partition``: SWF field 16, or ``queue``: field 15); ``dependencies`` honours fields 17-18."""
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
    inp = ScheduleInput(trace.source, "swf", int(nodes), procs[rows].astype(np.int64), submit[rows], wall,
                        run[rows], numbers, [str(n) for n in numbers.tolist()], trace.lines[rows], trace, rows,
                        {k: v for k, v in skipped.items() if v}, note)
    for k in ("user", "group", "queue", "partition"):
        setattr(inp, k, trace.col(k)[rows].astype(np.int64))
    if dependencies:
        _dependencies(inp, trace)
    if partitions is not None:
        _partitions(inp, partitions, partition_field)
    else:
        seen = np.unique(getattr(inp, partition_field))
        if len(seen[seen >= 0]) > 1:
            inp.notes.append(f"the trace has {len(seen[seen >= 0])} {partition_field} numbers; scheduled as one "
                             "machine (give --partitions to schedule them apart)")
    return inp


def _dependencies(inp: ScheduleInput, trace: SwfTrace) -> None:
    """SWF field 17 (preceding job number) -> index of that job among the scheduled ones; 18: think time (s)."""
    prev = trace.col("prev_job")[inp.rows].astype(np.int64)
    think = trace.col("think")[inp.rows]
    has = prev > 0
    if not has.any():
        return
    order = np.argsort(inp.numbers, kind="stable")
    pos = np.searchsorted(inp.numbers[order], prev)
    pos = np.minimum(pos, len(order) - 1)
    found = has & (inp.numbers[order][pos] == prev)
    after = np.where(found, order[pos], -1)
    after[after == np.arange(len(after))] = -1  # a job preceding itself: ignored
    inp.after, inp.think = after, np.where(think > 0, think, 0.0)
    lost = int((has & (after < 0)).sum())
    inp.notes.append(f"dependencies (SWF fields 17-18): {int((after >= 0).sum())} job(s) submitted after their "
                     "preceding job's end + think time" + (f"; {lost} preceding job(s) not scheduled: ignored"
                                                          if lost else ""))


def _partitions(inp: ScheduleInput, spec: "str | dict[int, int]", fld: str) -> None:
    if fld not in PARTITION_FIELDS:
        raise SwfError(f"--partition-field must be one of {', '.join(PARTITION_FIELDS)}, got {fld!r}")
    values = getattr(inp, fld)
    names = sorted(set(values.tolist()))
    if spec == "auto":
        sizes = {v: int(inp.size[values == v].max()) for v in names}
        how = "auto: each as large as its largest job"
    else:
        missing = [v for v in names if v not in spec]
        if missing:
            i = int(np.flatnonzero(values == missing[0])[0])
            raise SwfError(f"{inp.source}:{int(inp.lines[i])}: {fld} {missing[0]} is not in --partitions "
                           f"({', '.join(f'{k}={v}' for k, v in spec.items())}); {len(missing)} such value(s)")
        sizes = {v: spec[v] for v in names}
        how = "given"
    idx = np.searchsorted(np.array(names), values)
    caps = np.array([sizes[v] for v in names], dtype=np.int64)
    big = np.flatnonzero(inp.size > caps[idx])
    if len(big):
        i = int(big[0])
        raise SwfError(f"{inp.source}:{int(inp.lines[i])}: {int(inp.size[i])} processors, more than the "
                       f"{caps[idx[i]]} nodes of {fld} {values[i]} ({len(big)} such job(s))")
    inp.part_index, inp.partition_names = idx, names
    inp.partition_nodes = caps.tolist()
    inp.nodes = int(caps.sum())
    inp.notes.append(f"{len(names)} partition(s) by SWF field {fld} ({how}): " +
                     ", ".join(f"{v}={sizes[v]} nodes" for v in names))


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
    """Start and end of every job of a :class:`ScheduleInput` (same order), whether it was killed, its node ids
    (interval sets) and energy (J; NaN without a machine)."""

    start: np.ndarray
    end: np.ndarray
    killed: np.ndarray
    nodes: list[str] = field(default_factory=list)
    energy: np.ndarray | None = None
    requeued: np.ndarray | None = None  # times each job was killed by a node failure and requeued

    def __len__(self) -> int:
        return len(self.start)


def run_schedule(inp: ScheduleInput, queue: str = "easy", kill_at_walltime: bool = False,
                 node_power_w: float | None = None, failures: np.ndarray | None = None) -> Schedule:
    """Schedule ``inp`` (:func:`hybridsim.scheduler.dry_run_times`, contiguous allocation); with ``node_power_w``
    each job's energy is nodes x run time x that power (the last attempt's); ``failures``: ``(time, node,
    repaired at)`` rows (:func:`read_failures`, :func:`draw_failures`), each killing and requeueing the job on the
    node."""
    nodes: list = [""] * len(inp.size)
    requeued = np.zeros(len(inp.size), dtype=np.int64)
    start, end, killed = dry_run_times(inp.size, inp.arrival, inp.walltime, inp.run_time, inp.nodes, queue,
                                       "contiguous", 0, kill_at_walltime, partition=inp.part_index,
                                       partition_nodes=inp.partition_nodes, after=inp.after, think=inp.think,
                                       attrs=inp.attrs(), intervals=nodes, failures=failures, requeued=requeued)
    energy = None if node_power_w is None else inp.size * (end - start) * node_power_w
    return Schedule(start, end, killed, nodes, energy, requeued)


def read_failures(path, nodes: int) -> np.ndarray:
    """A failure file: one failure a line, ``TIME NODE REPAIR`` (seconds since the trace's time 0, node id,
    seconds until it is back); ``#`` starts a comment. Errors name the file, line and field."""
    from pathlib import Path

    from hybridsim_common.yamlio import YamlInputError, read_text

    p = Path(path)
    try:
        text = read_text(p)
    except YamlInputError as exc:
        raise SwfError(str(exc)) from None
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        if len(parts) != 3:
            raise SwfError(f"{p}:{no}: expected TIME NODE REPAIR, got {len(parts)} field(s)")
        try:
            t, x, r = float(parts[0]), int(parts[1]), float(parts[2])
        except ValueError:
            raise SwfError(f"{p}:{no}: expected numbers TIME NODE REPAIR, got {line.strip()!r}") from None
        for name, ok in (("TIME", math.isfinite(t) and t >= 0), ("NODE", 0 <= x < nodes),
                         ("REPAIR", math.isfinite(r) and r > 0)):
            if not ok:
                raise SwfError(f"{p}:{no}: field {name} = {parts[('TIME', 'NODE', 'REPAIR').index(name)]} out of "
                               f"range (time >= 0, node in 0..{nodes - 1}, repair > 0)")
        rows.append((t, x, t + r))
    return np.array(rows, dtype=float).reshape(-1, 3)


def draw_failures(rate_per_node_day: float, repair: float, nodes: int, t0: float, t1: float, seed: int
                  ) -> np.ndarray:
    """Failures as a Poisson process: ``rate_per_node_day`` per node per day over ``[t0, t1)``, each on a node
    drawn uniformly, back after ``repair`` seconds (``numpy.random.default_rng(seed)``)."""
    if not (math.isfinite(rate_per_node_day) and rate_per_node_day >= 0) or not (math.isfinite(repair) and repair > 0):
        raise SwfError(f"failure rate must be >= 0 and repair time > 0, got {rate_per_node_day} and {repair}")
    rng = np.random.default_rng(seed)
    k = int(rng.poisson(rate_per_node_day * nodes * max(t1 - t0, 0.0) / 86400.0))
    if k > 10**7:
        raise SwfError(f"{k} failures drawn: lower --failure-rate")
    t = np.sort(rng.uniform(t0, t1, k))
    return np.column_stack([t, rng.integers(0, nodes, k), t + repair]).astype(float)


def node_static_power(machine) -> float:
    """Watts one node draws whatever it runs: the machine's static power plus its GPUs' idle power."""
    gpu = machine.gpu
    return machine.static_power.total + (gpu.count * gpu.idle_power if gpu is not None else 0.0)


def utilisation_series(inp: ScheduleInput, out: Schedule) -> dict[str, np.ndarray]:
    """The step function of busy nodes, running and queued jobs (and the nodes they ask for): one row per time
    something changes, the state right after every arrival, start and end at that time."""
    n = len(out)
    t = np.concatenate([inp.arrival, out.start, out.end])
    busy = np.concatenate([np.zeros(n), inp.size, -inp.size])
    running = np.concatenate([np.zeros(n), np.ones(n), -np.ones(n)])
    queued = np.concatenate([np.ones(n), -np.ones(n), np.zeros(n)])
    qnodes = np.concatenate([inp.size, -inp.size, np.zeros(n)])
    keep = np.isfinite(t)
    order = np.argsort(t[keep], kind="stable")
    t = t[keep][order]
    cols = [np.cumsum(x[keep][order]) for x in (busy, running, queued, qnodes)]
    last = np.r_[t[1:] != t[:-1], True] if len(t) else np.zeros(0, bool)  # the state after every change at a time
    busy_c, run_c, q_c, qn_c = (c[last] for c in cols)
    return {"time": t[last], "busy_nodes": busy_c.astype(np.int64), "utilisation": busy_c / inp.nodes,
            "running_jobs": run_c.astype(np.int64), "queued_jobs": q_c.astype(np.int64),
            "queued_nodes": qn_c.astype(np.int64)}


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
        **{k: pa.array(_or_unknown(getattr(inp, k), len(out)), pa.int64()) for k in ("user", "group", "queue",
                                                                                   "partition")},
        "nodes": pa.array(out.nodes, pa.string()),
        "energy_j": pa.array(out.energy if out.energy is not None else np.full(len(out), np.nan)),
    }
    return pa.table(cols)


def _workload_name(source: str) -> str:
    """The input file's name less ``.gz`` and ``.swf`` / ``.yaml`` (Batsim's ``workload_name``)."""
    from pathlib import Path

    name = Path(source).name
    for suffix in (".gz", ".swf", ".yaml", ".yml"):
        name = name[:-len(suffix)] if name.lower().endswith(suffix) else name
    return name or "workload"


def _or_unknown(x: np.ndarray | None, n: int) -> np.ndarray:
    return x if x is not None else np.full(n, -1, dtype=np.int64)


def batsim_table(inp: ScheduleInput, out: Schedule, tau: float):
    """``jobs.csv``: Batsim's columns (:data:`BATSIM_COLUMNS`), then :data:`EXTRA_COLUMNS`. ``final_state`` is
    ``COMPLETED_SUCCESSFULLY`` or, for a job killed at its walltime, ``COMPLETED_WALLTIME_REACHED`` (success 0);
    ``stretch`` = turnaround / execution time (empty for a job of run time 0)."""
    import pyarrow as pa
    from pathlib import Path

    run, wait = out.end - out.start, out.start - inp.arrival
    turnaround = out.end - inp.arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        stretch = np.where(run > 0, turnaround / np.where(run > 0, run, 1), np.nan)
    n = len(out)
    cols = {
        "job_id": pa.array(inp.numbers, pa.int64()),
        "workload_name": pa.array([_workload_name(inp.source)] * n, pa.string()),
        "profile": pa.array(inp.names, pa.string()),
        "submission_time": pa.array(inp.arrival), "requested_number_of_resources": pa.array(inp.size, pa.int64()),
        "requested_time": pa.array(inp.walltime),
        "success": pa.array((~out.killed).astype(np.int64), pa.int64()),
        "final_state": pa.array(np.where(out.killed, "COMPLETED_WALLTIME_REACHED", "COMPLETED_SUCCESSFULLY"),
                                pa.string()),
        "starting_time": pa.array(out.start), "execution_time": pa.array(run), "finish_time": pa.array(out.end),
        "waiting_time": pa.array(wait), "turnaround_time": pa.array(turnaround),
        "stretch": pa.array(stretch, from_pandas=True),
        "allocated_resources": pa.array(out.nodes, pa.string()),
        "consumed_energy": pa.array(out.energy if out.energy is not None else np.full(n, -1.0)),
        "metadata": pa.array([""] * n, pa.string()),
        "swf_line": pa.array(inp.lines, pa.int64()),
        "size_class": pa.array([size_class(s) for s in inp.size.tolist()], pa.string()),
        "input_run_time": pa.array(inp.run_time),
        "bounded_slowdown": pa.array(np.atleast_1d(bounded_slowdown(wait, run, tau))),
        "killed": pa.array(out.killed, pa.bool_()),
        **{k: pa.array(_or_unknown(getattr(inp, k), n), pa.int64()) for k in ("user", "group", "queue", "partition")},
        "requeued": pa.array(_or_unknown(out.requeued, n) if out.requeued is not None else np.zeros(n, np.int64),
                             pa.int64()),
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

    import pyarrow as pa

    table = jobs_table(inp, out, summary["slowdown_tau_s"])
    batsim = batsim_table(inp, out, summary["slowdown_tau_s"])
    util = pa.table(utilisation_series(inp, out))

    def swf(path):
        with open(path, "w") as fh:
            fh.writelines(swf_text(inp, out, header))

    for name, write in (("jobs.parquet", lambda p: pq.write_table(table, p)),
                        ("jobs.csv", lambda p: pacsv.write_csv(batsim, p)),
                        ("utilisation.csv", lambda p: pacsv.write_csv(util, p)), ("schedule.swf", swf)):
        tmp = rd.file(name + ".partial")
        write(str(tmp))
        os.replace(tmp, rd.file(name))
    write_json_atomic(rd.file("summary.json"), summary)


def summarise(inp: ScheduleInput, out: Schedule, queue: str, kill: bool, tau: float, options: dict | None = None
              ) -> dict:
    """``summary.json``: the input, the scheduler, the options and the metrics (seconds)."""
    extra = {}
    if inp.partition_nodes:
        extra["partitions"] = {str(k): v for k, v in zip(inp.partition_names, inp.partition_nodes)}
    if out.energy is not None:
        extra["energy_j"] = float(out.energy.sum())
    if out.requeued is not None and out.requeued.any():
        extra["requeued_jobs"] = int((out.requeued > 0).sum())
        extra["requeues"] = int(out.requeued.sum())
    return {"source": inp.source, "input": inp.kind, "nodes": inp.nodes, "queue": queue,
            "walltime": inp.walltime_note, "kill_at_walltime": kill, "slowdown_tau_s": tau,
            "options": options or {}, "notes": inp.notes, **extra,
            "jobs_in_input": len(inp.trace.jobs) if inp.trace is not None else len(out) + sum(inp.skipped.values()),
            "jobs_scheduled": len(out), "not_scheduled": inp.skipped,
            "metrics": metrics_of(inp.arrival, out.start, out.end, inp.size, out.killed, inp.nodes, tau)}


def _note_blocks(header: list[str]) -> list[tuple[int, int]]:
    """``(first, end)`` line ranges of the header's ``; Note:`` blocks (a note and its indented continuation)."""
    blocks, i = [], 0
    while i < len(header):
        if header[i].lstrip(";").strip().lower().startswith("note:"):
            j = i + 1
            while j < len(header) and header[j].startswith(";") and header[j][1:].strip() and \
                    header[j][1:2].isspace() and header[j][1:].startswith(("  ", "\t")) and \
                    ":" not in header[j][1:].strip().split()[0]:
                j += 1
            blocks.append((i, j))
            i = j
        else:
            i += 1
    return blocks


#: words of an input note that a new schedule makes false (the wait times, the scheduler that made them)
STALE_NOTE_WORDS = ("wait", "scheduler", "start times")


def output_header(header: list[str], producer: str, command: str, options: dict) -> tuple[list[str], list[str]]:
    """``schedule.swf``'s header: the input's ``;`` lines less the notes this schedule makes false (about wait
    times or the scheduler that produced them: :data:`STALE_NOTE_WORDS`), then lines naming the producer, the
    command and the options. Returns the header and the first line of each note dropped."""
    drop, dropped = set(), []
    for a, b in _note_blocks(header):
        text = " ".join(h.lstrip(";").strip() for h in header[a:b]).lower()
        if any(w in text for w in STALE_NOTE_WORDS):
            drop.update(range(a, b))
            dropped.append(header[a].lstrip(";").strip())
    out = [h for i, h in enumerate(header) if i not in drop]
    out += [f"; Producer: {producer}", f"; Command: {command}",
            "; Options: " + ", ".join(f"{k}={v}" for k, v in options.items()),
            "; Note: field 3 (wait) is this schedule's; a job killed at its walltime has its run time (field 4) cut "
            "and status (field 11) 0"]
    if dropped:
        out.append("; Note: dropped from the input's header (no longer true): " + " | ".join(dropped))
    return out, dropped
