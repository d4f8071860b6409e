"""``hybridsim run``: run a scenario on its backend and write a run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hybridsim_common.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, CliError


def add_limit_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", action="append", metavar="NAME=VALUE",
                   help="raise or lower a scenario limit (repeatable; overrides the file's limits: section): "
                        "max_nodes, max_ports, max_rank_iterations, max_ops, max_packets, max_packets_per_message, "
                        "max_offered_load, max_queued_packets, "
                        "max_samples, deadline (wall-clock s), yaml_bytes, yaml_depth, yaml_nodes")


def add_plugin_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin-path", action="append", metavar="DIR", default=[],
                   help="a folder to import the scenario's plug-ins (controller.policy / workload.function "
                        "'module:name') from (repeatable); without it they come only from installed packages, "
                        "never from the scenario's folder or the working directory")


def apply_plugin_paths(args) -> None:
    """Allow the ``--plugin-path`` folders (:mod:`hybridsim_common.plugins`); a missing folder is a :class:`CliError`."""
    from hybridsim_common import plugins
    for d in getattr(args, "plugin_path", None) or ():
        try:
            plugins.add_path(d)
        except NotADirectoryError as exc:
            raise CliError(str(exc)) from None


def cmd_run(args) -> int:
    from hybridsim_common.rundir import RunDirError
    from .runner import RunError, run_scenario_file
    from .scenario import ScenarioError, parse_limit_args

    try:
        rd, _result, summary = run_scenario_file(args.scenario, outdir=args.output, force=args.force,
                                                 mode=args.mode, progress=not args.no_progress, argv=sys.argv,
                                                 limits=parse_limit_args(args.limit))
    except (ScenarioError, RunDirError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except RunError as exc:
        raise CliError(str(exc), EXIT_FAIL) from None
    print(format_run_summary(rd.path, summary))
    return EXIT_OK


def format_run_summary(path, summary: dict) -> str:
    """A few lines for the terminal: where the run went, its cost, and each job's completion time."""
    state = "partial" if summary.get("partial") else "completed"
    lines = [f"{path}: {state} ({summary.get('mode')}, {summary.get('backend')}), {summary.get('wall_s', 0):.1f} s wall, "
             f"{summary.get('events') or 0:,} events"]
    for name, j in summary.get("jobs", {}).items():
        t = j.get("completion_time_ns")
        done = f"completion {t / 1e6:.3f} ms" if t is not None else "no iterations recorded"
        extra = ""
        if "predicted_iterations" in j:
            extra = f" ({j['simulated_iterations']} simulated, {j['predicted_iterations']} predicted)"
        if j.get("start") is not None:
            extra += f" [start {j['start'] / 1e6:.3f} ms, waited {j['wait'] / 1e6:.3f} ms]"
        lines.append(f"  {name:<12} {done}{extra}")
    st = summary.get("stream")
    if st:
        lines.append(f"  stream ({st['queue']}/{st['allocation']}): makespan {st['makespan'] / 1e6:.3f} ms, mean wait "
                     f"{st['mean_wait'] / 1e6:.3f} ms, mean bounded slowdown {st['mean_bounded_slowdown']:.2f}, "
                     f"utilisation {st['utilisation']:.1%}")
    return "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("run", help="run a scenario (pure simulation or hybrid) into a run directory")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("-o", "--output", metavar="OUTDIR", help="run directory (default: output.dir or results/<name>)")
    p.add_argument("--force", action="store_true", help="overwrite an existing run directory")
    p.add_argument("--mode", choices=["simulate", "hybrid"], default="simulate",
                   help="simulate: pure simulation; hybrid: controller loop with the surrogate")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_limit_argument(p)
    add_plugin_argument(p)
    p.set_defaults(func=cmd_run)
    _register_more(sub)


def _parse_policy(spec: str) -> tuple[str, dict]:
    """``periodic`` or ``periodic:ft=8,warmup=4`` (values parsed as YAML scalars). ``module:Class`` names keep
    their colon: parameters follow a second ``:``."""
    import yaml

    name, params = spec, {}
    if spec.count(":") >= 1 and "=" in spec.rsplit(":", 1)[-1]:
        name, _, tail = spec.rpartition(":")
        for kv in tail.split(","):
            k, eq, v = kv.partition("=")
            if not eq:
                raise CliError(f"--policy {spec!r}: expected key=value after ':', got {kv!r}")
            try:
                params[k.strip()] = yaml.safe_load(v)
            except yaml.YAMLError as exc:
                raise CliError(f"--policy {spec!r}: the value of {k.strip()!r} is not a YAML scalar: "
                               f"{str(exc).splitlines()[0]}") from None
    return name, params


def cmd_bench(args) -> int:
    from .bench import format_table, run_bench
    from hybridsim_common.rundir import RunDirError
    from .runner import RunError
    from .scenario import ScenarioError, load_scenario
    from surrogate.base import SurrogateError

    try:
        sc = load_scenario(args.scenario)
        sweep = [int(x) for x in args.sweep_ft.split(",")] if args.sweep_ft else None
    except ScenarioError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except ValueError:
        raise CliError(f"--sweep-ft expects integers like 4,8,16,32, got {args.sweep_ft!r}") from None
    policies = [_parse_policy(p) for p in args.policy] if args.policy else None
    out = Path(args.output or Path("results") / (Path(args.scenario).stem + "-bench"))
    try:
        result = run_bench(sc, out, policies=policies, sweep_ft=sweep, surrogates=args.surrogate, force=args.force,
                           progress=not args.no_progress, argv=sys.argv, pure_dir=args.pure, seeds=args.seeds,
                           baselines=args.baseline)
    except (RunDirError, SurrogateError, ValueError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except RunError as exc:
        raise CliError(str(exc), EXIT_FAIL) from None
    print(format_table(result, wide=args.wide))
    print(f"\nwritten: {out / 'bench.json'} (every figure{'' if args.wide else '; --wide prints them'}); "
          f"`hybridsim report {out}` writes report/index.html")
    return EXIT_OK


def cmd_describe_run(args) -> int:
    from hybridsim_common.rundir import RunDirError
    from hybridsim.description import describe_existing_run

    try:
        print(describe_existing_run(args.run_dir, force=args.force))
    except RunDirError as exc:
        raise CliError(str(exc)) from None
    return EXIT_OK


def cmd_report(args) -> int:
    from .report import report, status_warnings
    from hybridsim_common.rundir import RunDirError

    for w in status_warnings(args.run_dir):
        print(f"hybridsim: warning: {w}", file=sys.stderr)
    try:
        made = report(args.run_dir, args.output)
    except (FileNotFoundError, RunDirError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:  # an output folder that cannot be written, an unreadable file
        raise CliError(f"{exc.filename or args.output or args.run_dir}: {exc.strerror or exc}") from None
    for p in made:
        print(p)
    return EXIT_OK


def _register_more(sub) -> None:
    p = sub.add_parser("bench", help="pure simulation vs hybrid run(s) of one scenario: speedup and accuracy")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("-o", "--output", metavar="OUTDIR", help="bench directory (default results/<name>-bench)")
    p.add_argument("--policy", action="append", metavar="NAME[:k=v,...]",
                   help="policy to compare (repeatable), e.g. periodic:ft=8 or error-adaptive:threshold=2; "
                        "default: the scenario's controller section")
    p.add_argument("--sweep-ft", metavar="LIST",
                   help="also run the scenario's aligned/periodic policy (else periodic) at each Ft, e.g. 4,8,16,32, "
                        "then zero-shot (warm-up only), and draw the speedup-error curve (tradeoff-ft.png; report: "
                        "curves)")
    p.add_argument("--surrogate", action="append", metavar="SPEC",
                   help="surrogate to judge in the loop (repeatable): a model name, NAME:k=v,... or a checkpoint "
                        "folder; each policy runs once per surrogate, all against the one pure run; default: the "
                        "scenario's surrogate section; 'oracle' answers with the bench's own pure run (the floor)")
    p.add_argument("--pure", metavar="RUN_DIR",
                   help="judge against this completed pure run of the same scenario (e.g. an earlier bench's "
                        "OUTDIR/pure) instead of simulating it again; wall speedups then compare two processes. "
                        "Refused when its tables, summary or manifest changed since it completed (its recorded "
                        "digests) or do not fit the scenario")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="run the pure simulation and every hybrid run for the scenario's seed + 0 .. N-1 (placement, "
                        "background) and compare each surrogate with each baseline seed by seed (mean paired "
                        "difference and 95 %% t-interval)")
    p.add_argument("--baseline", action="append", metavar="SPEC",
                   help="baseline of the paired comparison (repeatable; default last and mean; give a model's "
                        "ablation to compare it with its own); added to the surrogates")
    p.add_argument("--force", action="store_true", help="overwrite an existing bench directory")
    p.add_argument("--wide", action="store_true", help="print every figure (the wide table, one line a job and run, "
                   "paired comparisons) instead of the narrow default")
    p.add_argument("--no-progress", action="store_true")
    add_plugin_argument(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("describe-run", help="write description.json of an engine run directory written before runs "
                                            "described themselves (what dataset build and volume scaling read)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--force", action="store_true", help="write it again when it exists")
    p.set_defaults(func=cmd_describe_run)

    p = sub.add_parser("report", help="PNG plots of a run or bench directory and an index.html that shows them all")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("-o", "--output", metavar="DIR", help="where to write the PNGs (default RUN_DIR/report)")
    p.set_defaults(func=cmd_report)
