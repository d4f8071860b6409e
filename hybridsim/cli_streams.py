"""``hybridsim scenario-from-swf``: a job-stream scenario from a Standard Workload Format trace."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

from .errors import EXIT_OK, CliError
from .topology import DragonflyShape


def load_system(path: str | os.PathLike) -> tuple[dict, DragonflyShape]:
    """A base scenario's sections (its ``jobs`` and ``placement`` are dropped: the trace and the scheduler replace
    them) and the shape of its topology. Errors name file, line and field."""
    from pydantic import ValidationError

    from .scenario import Scenario, format_validation_error
    from .yamlio import YamlInputError, load, read_text

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
    return base, sc.topology.shape


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
    from .units import parse_time_ns

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


def cmd_scenario_from_swf(args) -> int:
    import yaml

    from .scheduler import dry_run, stream_metrics
    from .swf import SwfError, SwfMapping, read_swf, scenario_from_swf
    from .units import parse_time_ns

    out = Path(args.output)
    if out.exists() and not args.force:
        raise CliError(f"{out} already exists (use --force to overwrite)")
    try:
        time_scale = parse_time_ns(args.time_scale)
    except ValueError as exc:
        raise CliError(f"--time-scale: {exc}") from None
    base, shape = load_system(args.system)
    n_terminals = shape.groups * shape.routers_per_group * shape.terminals_per_router
    try:
        mapping = SwfMapping(from_job=args.from_job, jobs=args.jobs, window=_window(args.window),
                             time_scale=time_scale, size_scale=args.size_scale,
                             templates=tuple(t.strip() for t in args.templates.split(",") if t.strip()),
                             assign=args.assign, iteration_time=_iteration_times(args.iteration_time),
                             walltime_factor=args.walltime_factor, lammps_replicas=args.lammps_replicas,
                             seed=args.seed if args.seed is not None else int(base.get("seed", 1)),
                             queue=args.queue, allocation=args.allocation)
        mapping.check()
        trace = read_swf(args.trace)
        made = scenario_from_swf(trace, base, n_terminals, mapping)
    except SwfError as exc:
        raise CliError(str(exc)) from None
    scen, notes = made.data, list(made.notes)
    outcomes = dry_run(made.stream, shape, mapping.queue, mapping.allocation, mapping.seed)
    m = stream_metrics(outcomes, n_terminals, made.slowdown_tau)
    estimate = (f"dry run with the estimated run times: makespan {_human(m['makespan'])}, mean wait "
                f"{_human(m['mean_wait'])}, mean bounded slowdown {m['mean_bounded_slowdown']:.2f}, "
                f"utilisation {100 * m['utilisation']:.1f} %")
    notes.append(estimate)
    head = ["written by hybridsim scenario-from-swf",
            "command: hybridsim " + shlex.join(sys.argv[1:]), *notes,
            "trace header (its ';' lines, kept as provenance):"]
    text = "".join(f"# {h}\n" for h in head) + "".join(f"#   {h}\n" for h in trace.header)
    jobs = scen.pop("jobs")
    text += yaml.safe_dump(scen, sort_keys=False, default_flow_style=None, width=120)
    text += "jobs:\n" + "".join(f"- {flow_yaml(j)}\n" for j in jobs)  # one job a line: a stream has thousands
    scen["jobs"] = jobs
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    ranks = [j["ranks"] for j in scen["jobs"]]
    print(f"{out}: {len(ranks)} jobs ({min(ranks)}..{max(ranks)} ranks) on {n_terminals} terminals, "
          f"last arrival {scen['jobs'][-1]['arrival']}, scheduler {mapping.queue}/{mapping.allocation}")
    print(f"  {estimate}")
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("scenario-from-swf",
                       help="a job-stream scenario from a Standard Workload Format trace")
    p.add_argument("trace", metavar="TRACE.swf")
    p.add_argument("--system", metavar="BASE.yaml", required=True,
                   help="scenario whose topology and other sections are kept (its jobs and placement are replaced)")
    p.add_argument("-o", "--output", metavar="OUT.yaml", required=True)
    p.add_argument("--force", action="store_true", help="overwrite OUT.yaml if it exists")
    g = p.add_argument_group("slice (applied in this order: window, from-job, then the first --jobs)")
    g.add_argument("--window", metavar="START:END", help="submit times in [START, END) of trace time since the "
                   "first submit: seconds or 90m / 36h / 2d; either side may be empty")
    g.add_argument("--from-job", type=int, metavar="N", help="first SWF job number kept")
    g.add_argument("--jobs", type=int, metavar="K", help="keep the first K jobs")
    g = p.add_argument_group("scaling")
    g.add_argument("--time-scale", default="1us", metavar="TIME",
                   help="simulated time per trace second (default 1us)")
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
    g.add_argument("--walltime-factor", type=float, default=2.0,
                   help="walltime = this x the estimated run time where the trace has no requested time (default 2)")
    g.add_argument("--lammps-replicas", type=int, default=2, help="LAMMPS num_{x,y,z}_replicas (default 2)")
    g.add_argument("--seed", type=int, help="scenario seed and template draws (default: the base scenario's seed)")
    g = p.add_argument_group("scheduler")
    g.add_argument("--queue", default="easy", choices=("fcfs", "easy"), help="default easy")
    g.add_argument("--allocation", default="contiguous",
                   choices=("contiguous", "random", "random-router", "random-group"), help="default contiguous")
    p.set_defaults(func=cmd_scenario_from_swf)
