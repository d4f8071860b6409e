"""``hybridsim`` command line.

The core commands (``validate``, ``topology``) live here; every other layer adds its own commands from its own
package through a ``register(subparsers)`` function: hybridsim's own modules are listed in :data:`COMMAND_MODULES`,
and any installed package adds its commands through the entry-point group ``hybridsim.commands`` (``name =
"module:register"``, as the CODES bridge does), so the CLI grows without one file owning every layer and names no
plug-in. Command modules raise :class:`~hybridsim_common.errors.CliError` from :mod:`hybridsim_common.errors`, which they import
without importing this module. Exit status: 0 success, 1 run failure, 2 bad input (scenario, files, arguments, an
output that cannot be written), 130 Ctrl-C, 128 + N signal N (SIGTERM 143, SIGHUP 129; see
:mod:`hybridsim_common.interrupts`). A closed stdout (``| head``) ends the command quietly with 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import select
import sys
from pathlib import Path

from hybridsim_common.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, CliError  # noqa: F401  (re-exported)

#: hybridsim's modules that contribute subcommands (each defines ``register(subparsers)``); one that cannot be
#: imported is an error (:class:`CommandModuleError`), never silently skipped. Every command imports all of them, so
#: each is cheap to import: what a command needs beyond argparse is imported inside it (tests/test_fast_cli.py:
#: ``--help`` imports no numpy, pydantic or YAML)
COMMAND_MODULES = (
    "hybridsim.cli_run",
    "hybridsim.cli_serve",
    "hybridsim.cli_streams",
    "hybridsim.cli_corpus",
    "hybridsim.examples",
    "surrogate.cli",
    "hybridsim.energy.cli",
)

#: entry-point group of the plug-ins' command registrars (pyproject ``[project.entry-points."hybridsim.commands"]``);
#: they run after :data:`COMMAND_MODULES`, so a plug-in may add options to a core command (``serve``)
ENTRY_POINT_GROUP = "hybridsim.commands"


class CommandModuleError(RuntimeError):
    """A command module or plug-in registrar is missing or fails to import (a broken installation)."""


def command_registrars() -> list:
    """The ``register(subparsers)`` function of every command module: :data:`COMMAND_MODULES`, then the
    ``hybridsim.commands`` entry points."""
    from importlib.metadata import entry_points

    out = []
    for modname in COMMAND_MODULES:
        try:
            out.append(importlib.import_module(modname).register)
        except ImportError as exc:
            raise CommandModuleError(f"command module {modname} (hybridsim.cli.COMMAND_MODULES) cannot be imported: "
                                     f"{exc}; reinstall hybridsim") from exc
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            out.append(ep.load())
        except (ImportError, AttributeError) as exc:
            raise CommandModuleError(f"command plug-in {ep.name} = {ep.value} ({ENTRY_POINT_GROUP} entry point) "
                                     f"cannot be loaded: {exc}; reinstall the package that provides it") from exc
    return out


def _err(msg: str) -> None:
    print(f"hybridsim: error: {msg}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------------ validate
def cmd_validate(args) -> int:
    from .preflight import check_hybrid
    from .scenario import ScenarioError, load_scenario, parse_limit_args

    try:
        limits = parse_limit_args(args.limit)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    bad = 0
    for f in args.files:
        try:
            sc = load_scenario(f, limits=limits)
            check_hybrid(sc)
            _check_backend(sc)
        except ScenarioError as exc:
            bad += 1
            print(str(exc), file=sys.stderr)
            continue
        _backend_notes(f, sc)
        ranks = sum(j.ranks for j in sc.jobs)
        stream = f", a stream ({sc.scheduler.queue}/{sc.scheduler.allocation})" if sc.is_stream else ""
        print(f"{f}: ok ({len(sc.jobs)} jobs, {ranks} ranks on {sc.topology.n_terminals} terminals{stream}, "
              f"backend {sc.backend.kind})")
        _estimate_notes(f, sc)
    return EXIT_BAD_INPUT if bad else EXIT_OK


#: ``validate`` warns when a run is estimated to need more CPU than this (seconds)
LONG_RUN_S = 3600.0


def _estimate_notes(path, scenario) -> None:
    """The run's estimated events, CPU time and memory, pure and hybrid (:mod:`hybridsim.estimate`), one stdout line;
    a warning on stderr when the pure or the best hybrid run needs more than :data:`LONG_RUN_S` of CPU."""
    from .estimate import estimate

    est = estimate(scenario)
    print(f"{path}: {est.line()}")
    longest = max(est.cpu_s, est.hybrid_cpu_s)
    if longest > LONG_RUN_S:
        def hours(s):
            return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"

        print(f"{path}: warning: the run needs about {longest / 3600:.1f} h of CPU (pure {hours(est.cpu_s)}, hybrid "
              f"at best {hours(est.hybrid_cpu_s)}); try fewer iterations or jobs, or a smaller machine, first",
              file=sys.stderr)


def _check_backend(scenario) -> None:
    """What the scenario's backend refuses in every mode (a job stream on a backend without streams), as ``run`` will
    (:meth:`~hybridsim_common.backend.Backend.run_refusal`)."""
    from .runner import RunError, backend_class

    try:
        cls = backend_class(scenario.backend.kind)
    except RunError as exc:
        raise scenario.error(("backend", "kind"), str(exc)) from None
    refusal = cls.run_refusal(scenario)
    if refusal is not None:
        raise scenario.error(("scheduler",) if scenario.is_stream else ("backend",), refusal)


def _backend_notes(path, scenario) -> None:
    """What the scenario's backend will not do in hybrid mode (one stderr line each; not errors: simulate mode runs)."""
    from .runner import backend_class

    cls = backend_class(scenario.backend.kind)
    refusal = cls.hybrid_refusal(scenario)
    if refusal is not None:
        print(f"{path}: note: backend {scenario.backend.kind}: --mode hybrid is refused: {refusal}", file=sys.stderr)
    for job, why in cls.never_predicted(scenario).items():
        print(f"{path}: note: backend {scenario.backend.kind}: job {job!r} is never predicted in hybrid mode: {why}",
              file=sys.stderr)


# ------------------------------------------------------------------------------------------------------ topology
def cmd_topology(args) -> int:
    from .scenario import ScenarioError, load_scenario

    try:
        sc = load_scenario(args.scenario)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    topo = sc.build_topology()
    info = topo.summary()
    if args.write_graph:
        out = Path(args.write_graph)
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_port_graph(topo, out)
        except OSError as exc:
            raise CliError(f"--write-graph {out}: {exc.strerror or exc} ({exc.filename or out})") from None
        info["graph_dir"] = str(out)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        width = max(len(k) for k in info)
        for k, v in info.items():
            print(f"{k:<{width}}  {v}")
    return EXIT_OK


def write_port_graph(topo, out: Path) -> None:
    """``ports.csv`` (port id, router, group, port, class, peer) and ``edges.csv`` (SMART's port graph)."""
    from hybridsim_common.topology import LINK_CLASS_NAMES

    with open(out / "ports.csv", "w") as fh:
        fh.write("port_id,router,group,port,class,peer_router,peer_port\n")
        for pid in range(topo.n_ports):
            r, k = divmod(pid, topo.radix)
            fh.write(f"{pid},{r},{r // topo.a},{k},{LINK_CLASS_NAMES[topo.port_class[pid]]},"
                     f"{topo.peer_router[pid]},{topo.peer_port[pid]}\n")
    edges = topo.port_graph_edges()
    with open(out / "edges.csv", "w") as fh:
        fh.write("src,dst\n")
        for s, d in edges.T.tolist():
            fh.write(f"{s},{d}\n")


# ------------------------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridsim",
                                     description="Hybrid PDES-surrogate simulator for Dragonfly HPC interconnects.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"hybridsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("validate", help="check scenario files without running them")
    p.add_argument("files", nargs="+", metavar="FILE")
    from .cli_run import add_limit_argument, add_plugin_argument

    add_limit_argument(p)
    add_plugin_argument(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("topology", help="describe a scenario's Dragonfly (counts, radix, diameter)")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--write-graph", metavar="DIR", help="write the SMART port graph (ports.csv, edges.csv)")
    p.set_defaults(func=cmd_topology)

    for register in command_registrars():
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        parser = build_parser()
    except CommandModuleError as exc:
        _err(str(exc))
        return EXIT_FAIL
    args = parser.parse_args(argv)
    from .cli_run import apply_plugin_paths
    from hybridsim_common.interrupts import Terminated, terminate_like_ctrl_c

    try:
        with terminate_like_ctrl_c():
            apply_plugin_paths(args)
            code = int(args.func(args) or 0)
            sys.stdout.flush()
        return code
    except CliError as exc:
        _err(str(exc))
        return exc.code
    except Terminated as exc:
        _err(str(exc))
        return exc.exit_status
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # the reader went away (``| head``): nothing more to say; stdout to /dev/null so the exit flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _fd, ev in poll.poll(0))
    except (OSError, ValueError):
        return False


if __name__ == "__main__":  # pragma: no cover
    # re-import so that exception classes are the ones the command modules raise
    from hybridsim.cli import main as _main

    sys.exit(_main())
