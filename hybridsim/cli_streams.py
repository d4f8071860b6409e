"""``hybridsim scenario-from-swf``: a job-stream scenario from a Standard Workload Format trace; ``hybridsim
schedule``: a trace or a stream scenario scheduled with its own run times (:mod:`hybridsim.schedule`)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from hybridsim_common.errors import EXIT_OK, CliError

if TYPE_CHECKING:  # the CLI lists this module's command without importing numpy
    from hybridsim_common.topology import DragonflyShape


def load_system(path: str | os.PathLike) -> tuple[dict, DragonflyShape, object]:
    """A base scenario's sections (its ``jobs`` and ``placement`` are dropped: the trace and the scheduler replace
    them), the shape of its topology and its :class:`~hybridsim.scenario.Limits`. Errors name file, line and
    field."""
    from pydantic import ValidationError

    from .scenario import Scenario, format_validation_error
    from hybridsim_common.yamlio import YamlInputError, load, read_text

    p = Path(path)
    try:  # the scenario loader's safe reader: size, depth, aliases, duplicate keys, UTF-8 -- located
        data, root = load(read_text(p), str(p))
    except YamlInputError as exc:
        raise CliError(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CliError(f"{p}:1:1: expected a scenario mapping, got {type(data).__name__}")
    base = {k: v for k, v in data.items() if k not in ("jobs", "placement")}
    # validated as a whole scenario with one stand-in job, so every copied section is known to be valid
    probe = {**base, "jobs": [{"name": "probe", "ranks": 1, "iterations": 1, "workload": {"kind": "allreduce"}}]}
    try:
        sc = Scenario.model_validate(probe)
    except ValidationError as exc:
        raise CliError("\n".join(format_validation_error(exc, root, str(p)))) from None
    conn = base.get("topology", {}).get("connections") if isinstance(base.get("topology"), dict) else None
    if conn:  # the output lives elsewhere: keep the connection files reachable
        base["topology"] = {**base["topology"],
                            "connections": {k: str((p.parent / v).resolve()) for k, v in conn.items()}}
    return base, sc.topology.shape, sc.limits


_PLAIN = re.compile(r"^[A-Za-z0-9_.\-]*[A-Za-z][A-Za-z0-9_.\-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "inf", "nan", ".inf", ".nan"}


def flow_yaml(x) -> str:
    """``x`` (dicts, lists, str, int, float) as one line of YAML flow style; what yaml.safe_dump writes, without its
    cost per line (a stream has thousands of jobs). Strings that could read as anything else are quoted."""
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {flow_yaml(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(flow_yaml(v) for v in x) + "]"
    if isinstance(x, bool) or x is None:
        raise TypeError(f"flow_yaml: unsupported value {x!r}")
    if isinstance(x, (int, float)):
        return repr(x)
    if _PLAIN.match(x) and x.lower() not in _YAML_WORDS and not _is_float(x):
        return x
    return json.dumps(x)  # a JSON string is a YAML double-quoted scalar


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _human(ns: float) -> str:
    for unit, f in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= f:
            return f"{ns / f:.4g} {unit}"
    return f"{ns:.4g} ns"


def _iteration_times(text: str | None) -> dict[str, float]:
    from hybridsim_common.units import parse_time_ns

    out: dict[str, float] = {}
    for item in filter(None, (text or "").split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--iteration-time: expected TEMPLATE=TIME, got {item!r}")
        try:
            out[name.strip()] = parse_time_ns(value.strip())
        except ValueError as exc:
            raise CliError(f"--iteration-time {name}: {exc}") from None
    return out


def _window(text: str | None) -> tuple[float | None, float | None]:
    from .swf import parse_trace_seconds

    if not text:
        return (None, None)
    lo, sep, hi = text.partition(":")
    if not sep:
        raise CliError(f"--window: expected START:END in trace time (e.g. 0:24h, 2d:), got {text!r}")
    return (parse_trace_seconds(lo) if lo.strip() else None, parse_trace_seconds(hi) if hi.strip() else None)


def distortion_path(out: Path) -> Path:
    """Where the per-job distortion table of scenario ``out`` goes: ``stream.yaml`` -> ``stream.distortion.csv``."""
    return out.with_name(out.stem + ".distortion.csv")


def _distortion_lines(mj, tolerance: float, table: Path) -> list[str]:
    import numpy as np

    d = mj.distortion
    err, within = np.abs(d["run_error_pct"]), d["within"]
    n, ok = len(err), int(within.sum())
    out = [f"run times: {ok} of {n} jobs within {100 * tolerance:g} % of their scaled trace run time (|error| median "
           f"{np.median(err):.3g} %, max {err.max():.3g} %); sizes: |error| median "
           f"{np.median(np.abs(d['size_error_pct'])):.3g} %, max {np.abs(d['size_error_pct']).max():.3g} % "
           f"(table: {table.name})"]
    if ok < n:
        bad = np.flatnonzero(~within)
        out.append(f"{n - ok} job(s) cannot fit: " + "; ".join(
            f"{d['name'][i]} (line {d['line'][i]}): {d['why'][i]}" for i in bad[:5].tolist())
            + (f"; ... {n - ok - 5} more" if n - ok > 5 else ""))
    return out


def _write_distortion(mj, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from .swf import DISTORTION_COLUMNS

    pacsv.write_csv(pa.table({c: mj.distortion[c] for c in DISTORTION_COLUMNS}), str(path))


def cmd_scenario_from_swf(args) -> int:
    import yaml

    from .scheduler import dry_run_times, metrics_of
    from .swf import SwfError, SwfMapping, job_lines, read_swf, scenario_from_swf
    from hybridsim_common.units import parse_time_ns

    out = Path(args.output)
    table = distortion_path(out)
    if out.is_dir():
        raise CliError(f"{out} is a directory: -o names the scenario file to write (e.g. {out / 'stream.yaml'})")
    for p in (out, table):
        if os.path.lexists(p) and not args.force:
            raise CliError(f"{p} already exists (use --force to overwrite)")
        if p.is_symlink() or (os.path.lexists(p) and not p.is_file()):
            raise CliError(f"{p} is not a regular file; refusing to replace it")
    if not out.parent.is_dir() and os.path.lexists(out.parent):
        raise CliError(f"cannot write {out}: {out.parent} is not a directory")
    time_scale = None
    if args.time_scale != "auto":
        try:
            time_scale = parse_time_ns(args.time_scale)
        except ValueError as exc:
            raise CliError(f"--time-scale: {exc}") from None
    base, shape, limits = load_system(args.system)
    n_terminals = shape.groups * shape.routers_per_group * shape.terminals_per_router
    try:
        mapping = SwfMapping(from_job=args.from_job, jobs=args.jobs, window=_window(args.window),
                             time_scale=time_scale, size_scale=args.size_scale,
                             templates=tuple(t.strip() for t in args.templates.split(",") if t.strip()),
                             assign=args.assign, iteration_time=_iteration_times(args.iteration_time),
                             walltime_rule=args.walltime_rule, walltime_factor=args.walltime_factor,
                             tolerance=args.tolerance / 100.0, max_rank_iterations=limits.max_rank_iterations,
                             lammps_replicas=args.lammps_replicas,
                             seed=args.seed if args.seed is not None else int(base.get("seed", 1)),
                             queue=args.queue, allocation=args.allocation)
        mapping.check()
        trace = read_swf(args.trace)
        made = scenario_from_swf(trace, base, n_terminals, mapping)
    except SwfError as exc:
        raise CliError(str(exc)) from None
    scen, notes, mj = made.data, list(made.notes), made.mapped
    notes += _distortion_lines(mj, mapping.tolerance, table)
    start, end, killed = dry_run_times(mj.ranks, mj.arrival, mj.walltime, mj.estimate, shape, mapping.queue,
                                       mapping.allocation, mapping.seed)
    m = metrics_of(mj.arrival, start, end, mj.ranks, killed, n_terminals, made.slowdown_tau, by_size=False)
    estimate = (f"dry run with the estimated run times: makespan {_human(m['makespan'])}, wait mean "
                f"{_human(m['mean_wait'])}, p95 {_human(m['p95_wait'])}, max {_human(m['max_wait'])}; mean "
                f"bounded slowdown {m['mean_bounded_slowdown']:.2f}, utilisation {100 * m['utilisation']:.1f} %")
    notes.append(estimate)
    head = ["written by hybridsim scenario-from-swf",
            "command: hybridsim " + shlex.join(sys.argv[1:]), *notes,
            "trace header (its ';' lines, kept as provenance):"]
    tmps = []
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for target in (table, out):
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            os.close(fd)
            tmps.append((tmp, target))
        _write_distortion(mj, Path(tmps[0][0]))
        with open(tmps[1][0], "w") as fh:
            fh.write("".join(f"# {h}\n" for h in head) + "".join(f"#   {h}\n" for h in trace.header))
            fh.write(yaml.safe_dump(scen, sort_keys=False, default_flow_style=None, width=120))
            fh.write("jobs:\n")
            fh.writelines(job_lines(mj, mapping, flow_yaml))  # one job a line: a stream has thousands
        for tmp, target in tmps:
            os.replace(tmp, target)
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        for tmp, _ in tmps:
            Path(tmp).unlink(missing_ok=True)
    print(f"{out}: {len(mj)} jobs ({mj.ranks.min()}..{mj.ranks.max()} ranks) on {n_terminals} terminals, "
          f"last arrival {_human(float(mj.arrival[-1]))}, scheduler {mapping.queue}/{mapping.allocation}")
    from hybridsim_common.yamlio import YamlLimits

    size = out.stat().st_size
    if size > YamlLimits().max_bytes:  # say how to read it back (run, validate, schedule take --limit)
        need = -(-size // 2**20) * 2**20
        print(f"  {out.name} is {size} bytes, over the default YAML bound of {YamlLimits().max_bytes}: read it with "
              f"--limit yaml_bytes={need}" + (f" --limit yaml_nodes={20 * len(mj)}"
                                              if 20 * len(mj) > YamlLimits().max_nodes else ""))
    for line in notes[1:2] + [n for n in notes if n.startswith("time-scale trade-off")] + notes[-4:]:
        if line.startswith(("time:", "run times:", "dry run", "time-scale trade-off")) or "cannot fit" in line:
            print(f"  {line}")
    from hybridsim_common.yamlio import YamlLimits

    size, cap = out.stat().st_size, YamlLimits().max_bytes
    if size > cap:  # the readers' default bound on a scenario's text: say how to read this one
        print(f"  note: {out} is {size:,} bytes, over the {cap:,} a scenario file may have by default: give "
              f"--limit yaml_bytes={size} to validate, run or schedule", file=sys.stderr)
    return EXIT_OK


def _fmt_s(x: float) -> str:
    return f"{x:.4g} s" if abs(x) < 1e5 else f"{x / 3600:.4g} h"


def cmd_schedule(args) -> int:
    import time

    from .queues import QueuePolicyError, queue_policy
    from hybridsim_common.rundir import RunDir, RunDirError
    from .scenario import ScenarioError, load_scenario, parse_limit_args
    from . import __version__
    from .energy.machine import load_machine, machine_for_scenario
    from .schedule import (draw_failures, from_scenario, from_trace, node_static_power, output_header,
                           parse_partitions, read_failures, run_schedule, summarise, write_schedule)
    from .scheduler import SchedulerError
    from .swf import SwfError, read_swf

    t0 = time.perf_counter()
    if args.nodes is not None and not 1 <= args.nodes <= 10**8:
        raise CliError(f"--nodes must be in 1..{10**8}, got {args.nodes}")
    if args.tau is not None and not (args.tau > 0 and args.tau < 1e9):
        raise CliError(f"--tau must be > 0 seconds, got {args.tau}")
    src = Path(args.input)
    is_scenario = src.suffix.lower() in (".yaml", ".yml")
    machine = None
    try:
        partitions = parse_partitions(args.partitions)
        if args.machine:
            machine = load_machine(args.machine)
        if is_scenario:
            if partitions is not None:
                raise CliError("--partitions is for a trace (SWF fields 15-16); a scenario's jobs have none")
            # schedule simulates no network: the bounds on what a run builds do not apply (--limit still wins)
            lifted = dict.fromkeys(("max_rank_iterations", "max_ops", "max_packets", "max_packets_per_message",
                                    "max_samples"), 2**62)
            sc = load_scenario(src, limits={**lifted, **parse_limit_args(args.limit)})
            inp = from_scenario(sc, args.nodes)
            queue = args.queue or (sc.scheduler.queue if sc.is_stream else "fcfs")
            tau = args.tau if args.tau is not None else (sc.scheduler.slowdown_tau / 1e9 if sc.is_stream else 10.0)
            machine = machine or machine_for_scenario(sc)
            header = []
        else:
            trace = read_swf(src)
            inp = from_trace(trace, args.nodes, args.walltime_rule, args.walltime_factor, partitions,
                             args.partition_field, not args.no_dependencies)
            queue = args.queue or "easy"
            tau = args.tau if args.tau is not None else 10.0
            header = trace.header
        queue_policy(queue)
        failures = None
        if args.failures and args.failure_rate is not None:
            raise CliError("give --failures FILE or --failure-rate, not both")
        if args.failures:
            failures = read_failures(args.failures, inp.nodes)
        elif args.failure_rate is not None:
            t1 = float((inp.arrival + inp.run_time).max())
            failures = draw_failures(args.failure_rate, args.repair, inp.nodes, float(inp.arrival.min()), t1,
                                     args.seed)
    except (ScenarioError, SwfError, QueuePolicyError) as exc:
        raise CliError(str(exc)) from None
    options = {"queue": queue, "nodes": inp.nodes, "walltime": args.walltime_rule if not is_scenario else "scenario",
               "walltime_factor": args.walltime_factor, "kill_at_walltime": args.kill_at_walltime,
               "slowdown_tau_s": tau, "partitions": args.partitions or "none",
               "partition_field": args.partition_field, "dependencies": not args.no_dependencies,
               "machine": args.machine or ("scenario" if machine is not None else "none"),
               "failures": (args.failures or (f"rate {args.failure_rate:g}/node/day, repair {args.repair:g} s, seed "
                                              f"{args.seed}" if args.failure_rate is not None else "none"))
               + (f" ({len(failures)} failures)" if failures is not None else "")}
    command = "hybridsim " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["schedule"] else \
        f"hybridsim schedule {shlex.quote(str(src))} -o {shlex.quote(str(args.output))}"
    header, dropped = output_header(header, f"hybridsim {__version__} schedule", command, options)
    try:
        rd = RunDir.create(args.output, kind="schedule", force=args.force,
                           extra={"input": str(src), "queue": queue})
    except RunDirError as exc:
        raise CliError(str(exc)) from None
    try:
        outcomes = run_schedule(inp, queue, args.kill_at_walltime,
                                node_static_power(machine) if machine is not None else None, failures)
        summary = summarise(inp, outcomes, queue, args.kill_at_walltime, tau, options)
        summary["header_notes_dropped"] = dropped
        write_schedule(rd, inp, outcomes, summary, header)
        if args.plot:
            from .report import plot_gantt_chart, plot_queue_over_time

            plot_gantt_chart(rd.file("jobs.parquet"), rd.file("gantt.png"), nodes=inp.nodes)
            plot_queue_over_time(rd.file("jobs.parquet"), rd.file("utilisation.png"), nodes=inp.nodes)
        summary["wall_s"] = time.perf_counter() - t0
        rd.complete(wall_s=summary["wall_s"])
    except SchedulerError as exc:
        rd.fail(str(exc))
        raise CliError(str(exc)) from None
    except BaseException as exc:
        rd.fail(f"{type(exc).__name__}: {exc}")
        raise
    m = summary["metrics"]
    skipped = ", ".join(f"{v} {k}" for k, v in inp.skipped.items())
    print(f"{rd.path}: {len(outcomes)} jobs on {inp.nodes} nodes, {queue}"
          + (f" (not scheduled: {skipped})" if skipped else "") + f", {summary['wall_s']:.2f} s")
    print(f"  wait mean {_fmt_s(m['mean_wait'])}, median {_fmt_s(m['median_wait'])}, p95 {_fmt_s(m['p95_wait'])}, "
          f"max {_fmt_s(m['max_wait'])}; bounded slowdown mean {m['mean_bounded_slowdown']:.3g} (tau {tau:g} s)"
          f"; utilisation {100 * m['utilisation']:.1f} %; makespan {_fmt_s(m['makespan'])}"
          + (f"; {m['killed']} killed at their walltime" if args.kill_at_walltime else ""))
    return EXIT_OK


def register(sub) -> None:
    from .cli_run import add_limit_argument

    p = sub.add_parser("schedule", help="schedule an SWF trace (or a stream scenario) with its own run times, no "
                                        "network: schedule.swf, per-job table, metrics")
    p.add_argument("input", metavar="TRACE.swf|SCENARIO.yaml",
                   help="an SWF trace (.swf, .swf.gz) or a scenario (.yaml: its declared run times)")
    p.add_argument("-o", "--output", metavar="DIR", required=True)
    p.add_argument("--force", action="store_true", help="replace DIR if it holds an earlier hybridsim output")
    p.add_argument("--nodes", type=int, metavar="N",
                   help="nodes of the machine (default: the trace header's MaxNodes, else MaxProcs; a scenario's "
                        "terminals)")
    p.add_argument("--queue", metavar="POLICY",
                   help="fcfs, easy, conservative, an installed hybridsim.queues entry point (sjf) or module:Class "
                        "(default: easy for a trace, the scenario's own)")
    p.add_argument("--walltime-rule", choices=("exact", "factor"), default="exact",
                   help="walltime where the trace gives no requested time (field 9): the run time (exact, default) "
                        "or --walltime-factor x the run time")
    p.add_argument("--walltime-factor", type=float, default=2.0, metavar="F", help="for --walltime-rule factor (2)")
    p.add_argument("--kill-at-walltime", action="store_true",
                   help="end a job at its walltime when its run time is longer (a batch system's limit)")
    p.add_argument("--tau", type=float, metavar="SECONDS",
                   help="bounded-slowdown floor (default: a scenario's scheduler.slowdown_tau, else 10 s)")
    p.add_argument("--partitions", metavar="auto|P=N,...",
                   help="schedule each partition of the trace on its own nodes: P=N gives partition number P N "
                        "nodes; auto: each as large as its largest job (default: one machine)")
    p.add_argument("--partition-field", choices=("partition", "queue"), default="partition",
                   help="SWF field that names a job's partition: 16 (partition, default) or 15 (queue)")
    p.add_argument("--no-dependencies", action="store_true",
                   help="ignore SWF fields 17-18 (by default a job is submitted no earlier than its preceding "
                        "job's end + think time)")
    p.add_argument("--machine", metavar="MACHINE.yaml",
                   help="machine file: each job's energy = nodes x run time x the node's static power (a "
                        "scenario's machine section is used by default)")
    p.add_argument("--plot", action="store_true", help="also draw gantt.png and utilisation.png")
    p.add_argument("--failures", metavar="FILE",
                   help="node failures, one a line: TIME NODE REPAIR (seconds, node id, seconds until back); the job "
                        "on the node is killed and requeued")
    p.add_argument("--failure-rate", type=float, metavar="PER_NODE_DAY",
                   help="node failures drawn as a Poisson process (failures per node per day), each back after "
                        "--repair seconds")
    p.add_argument("--repair", type=float, default=3600.0, metavar="SECONDS", help="for --failure-rate (3600)")
    p.add_argument("--seed", type=int, default=0, help="for --failure-rate (0)")
    add_limit_argument(p)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("scenario-from-swf",
                       help="a job-stream scenario from a Standard Workload Format trace")
    p.add_argument("trace", metavar="TRACE.swf")
    p.add_argument("--system", metavar="BASE.yaml", required=True,
                   help="scenario whose topology and other sections are kept (its jobs and placement are replaced)")
    p.add_argument("-o", "--output", metavar="OUT.yaml", required=True,
                   help="the scenario; the per-job distortion table goes beside it (OUT.distortion.csv)")
    p.add_argument("--force", action="store_true", help="overwrite OUT.yaml and OUT.distortion.csv if they exist")
    g = p.add_argument_group("slice (applied in this order: window, from-job, then the first --jobs)")
    g.add_argument("--window", metavar="START:END", help="submit times in [START, END) of trace time since the "
                   "first submit: seconds or 90m / 36h / 2d; either side may be empty")
    g.add_argument("--from-job", type=int, metavar="N", help="first SWF job number kept")
    g.add_argument("--jobs", type=int, metavar="K", help="keep the first K jobs")
    g = p.add_argument_group("scaling")
    g.add_argument("--time-scale", default="auto", metavar="TIME|auto",
                   help="simulated time per trace second; auto (default): the smallest that fits every job's run "
                        "time within --tolerance (at least 0.5/tolerance iterations), capped so the stream lasts at "
                        "most 10^6 simulated s")
    g.add_argument("--tolerance", type=float, default=5.0, metavar="PCT",
                   help="largest per-job run-time error (simulated estimate vs scaled trace run time), percent "
                        "(default 5); jobs past it are named, all are in OUT.distortion.csv")
    g.add_argument("--size-scale", type=float, metavar="F",
                   help="ranks per trace processor (default: terminals / the trace's MaxProcs)")
    g = p.add_argument_group("workloads")
    g.add_argument("--templates", default="milc,lammps,nn",
                   help="comma-separated templates among milc, lammps, nn (default milc,lammps,nn)")
    g.add_argument("--assign", default="random", choices=("random", "cycle", "application", "user"),
                   help="template per job: seeded draw, round robin, or SWF application / user number modulo the "
                        "template count (unknown: drawn); default random")
    g.add_argument("--iteration-time", metavar="T=TIME,...",
                   help="simulated time of one iteration per template, turning run times into iterations "
                        "(defaults milc=430us, lammps=1.7ms, nn=90us, uniform-random=4us)")
    g.add_argument("--walltime-rule", choices=("factor", "exact"), default="factor",
                   help="walltime where the trace has no requested time (field 9): --walltime-factor x the estimated "
                        "run time (factor, default) or the estimated run time itself (exact)")
    g.add_argument("--walltime-factor", type=float, default=2.0,
                   help="for --walltime-rule factor (default 2, at least 1)")
    g.add_argument("--lammps-replicas", type=int, default=2,
                   help="LAMMPS num_{x,y,z}_replicas (default 2, at most 64)")
    g.add_argument("--seed", type=int, help="scenario seed and template draws (default: the base scenario's seed)")
    g = p.add_argument_group("scheduler")
    g.add_argument("--queue", default="easy", choices=("fcfs", "easy", "conservative"), help="default easy")
    g.add_argument("--allocation", default="contiguous",
                   choices=("contiguous", "random", "random-router", "random-group"), help="default contiguous")
    p.set_defaults(func=cmd_scenario_from_swf)
