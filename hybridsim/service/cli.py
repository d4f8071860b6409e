"""The gRPC surrogate service and/or the remote engine service, served by ``hybridsim serve --grpc/--engine``.

    hybridsim serve --grpc 127.0.0.1:50051 --model ridge            # or --model path/to/checkpoint
    hybridsim serve --engine 127.0.0.1:50052

Both listen on loopback unless a host is given (``--grpc 0.0.0.0:50051`` to serve the network), print one
``listening`` line per service on stdout (port 0 = ephemeral; the line has the real port) and stop cleanly on SIGTERM
or Ctrl-C (exit status 0). :mod:`hybridsim.cli_serve` adds :func:`add_serve_options` to ``serve`` and runs
:func:`serve_services`.
"""

from __future__ import annotations

import sys

from hybridsim_common.errors import EXIT_OK, CliError

from .limits import (DEFAULT_MAX_HISTORY, DEFAULT_MAX_JOBS, DEFAULT_MAX_PENDING, DEFAULT_MAX_RANKS, DEFAULT_MAX_STATE_BYTES,
                     DEFAULT_START_TIMEOUT, ScenarioLimits)

DEFAULT_SURROGATE_ADDRESS = "127.0.0.1:50051"
DEFAULT_ENGINE_ADDRESS = "127.0.0.1:50052"


def add_serve_options(parser) -> tuple:
    """Add the gRPC options (``--grpc``, ``--engine`` and their limits); returns the actions of the two service
    flags. The caller owns ``--model`` and ``--model-option`` and sets ``grpc_model`` / ``grpc_model_config`` (a dict
    or None) from them."""
    g = parser.add_argument_group("gRPC services")
    surrogate = g.add_argument("--grpc", dest="grpc_surrogate", nargs="?", const=DEFAULT_SURROGATE_ADDRESS,
                   metavar="HOST:PORT", help=f"serve a surrogate (hybridsim.v1.Surrogate); default address "
                                             f"{DEFAULT_SURROGATE_ADDRESS}")
    g.add_argument("--save-dir", dest="grpc_save_dir", metavar="DIR",
                   help="folder where Save writes checkpoints (Save is refused without it)")
    g.add_argument("--max-workers", dest="grpc_max_workers", type=int, default=16, metavar="N",
                   help="RPC threads of the surrogate server (default 16)")
    g.add_argument("--max-in-flight", dest="grpc_max_in_flight", type=int, default=64, metavar="N",
                   help="surrogate requests in progress at once; more get RESOURCE_EXHAUSTED (default 64)")
    engine = g.add_argument("--engine", dest="grpc_engine", nargs="?", const=DEFAULT_ENGINE_ADDRESS, metavar="HOST:PORT",
                   help=f"serve the embedded engine (hybridsim.v1.Engine); default address {DEFAULT_ENGINE_ADDRESS}")
    g.add_argument("--max-runs", dest="grpc_max_runs", type=int, default=4, metavar="N",
                   help="simulations the engine server runs at once (default 4)")
    g.add_argument("--start-timeout", dest="grpc_start_timeout", type=float, default=DEFAULT_START_TIMEOUT,
                   metavar="S", help=f"seconds an engine Run stream may wait before its Start message; at most "
                                     f"{DEFAULT_MAX_PENDING} wait at once, a new one evicts the longest waiting "
                                     f"(default {DEFAULT_START_TIMEOUT:g})")
    g.add_argument("--max-message-mb", dest="grpc_max_message_mb", type=float, default=64.0, metavar="MB",
                   help="largest message either way (default 64 MiB)")
    g.add_argument("--grace", dest="grpc_grace", type=float, default=5.0, metavar="S",
                   help="seconds in-flight requests get to finish on SIGTERM (default 5)")
    g.add_argument("--allow-module", dest="grpc_allow_module", action="append", default=[], metavar="PREFIX",
                   help="module (and its submodules) a client's custom workload may name (repeatable; default: none)")
    g.add_argument("--allow-dir", dest="grpc_allow_dir", action="append", default=[], metavar="DIR",
                   help="folder whose files a client may name: scenario files (engine), save-model / load-model / "
                        "load-records-csv paths (CODES director; relative paths go inside the first) (repeatable; "
                        "default: none, no client-named file is opened)")
    lim = ScenarioLimits()
    for flag, dest, default, what in [
        ("--max-jobs", "grpc_max_jobs", DEFAULT_MAX_JOBS, "jobs the surrogate server holds"),
        ("--max-ranks", "grpc_max_ranks", DEFAULT_MAX_RANKS, "ranks of one job (surrogate and engine)"),
        ("--max-history", "grpc_max_history", DEFAULT_MAX_HISTORY,
         "truth iterations the surrogate keeps per job (and the largest Tune window)"),
        ("--max-state-mb", "grpc_max_state_mb", DEFAULT_MAX_STATE_BYTES >> 20,
         "MiB of truth and graphs the surrogate holds over all jobs"),
        ("--max-scenario-kb", "grpc_max_scenario_kb", lim.max_scenario_bytes >> 10, "KiB of one scenario text"),
        ("--max-terminals", "grpc_max_terminals", lim.max_terminals, "terminals of a remote engine topology"),
        ("--max-ports", "grpc_max_ports", lim.max_ports, "router ports (routers x radix) of a remote engine topology"),
        ("--max-iterations", "grpc_max_iterations", lim.max_iterations, "iterations of one job on the remote engine"),
        ("--max-events", "grpc_max_events", lim.max_events,
         "events of one remote engine run (imposed when the scenario sets no backend.embedded.max_events)"),
        ("--max-samples-mb", "grpc_max_samples_mb", lim.max_sample_bytes >> 20,
         "MiB of port samples one remote engine run keeps (the run stops with RESOURCE_EXHAUSTED past it)"),
    ]:
        g.add_argument(flag, dest=dest, type=int, default=default, metavar="N", help=f"{what} (default {default})")
    return surrogate, engine


def _positive(args, *dests: str) -> None:
    for dest in dests:
        if getattr(args, dest) < 1:
            raise CliError(f"--{dest[5:].replace('_', '-')}: must be >= 1, got {getattr(args, dest)}")


def _access(args):
    from ._common import Access

    try:
        return Access(args.grpc_allow_module, args.grpc_allow_dir)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _max_bytes(args) -> int:
    mb = args.grpc_max_message_mb
    if not 0 < mb <= 2047:
        raise CliError(f"--max-message-mb: must be in (0, 2047], got {mb:g}")
    return int(mb * 1024 * 1024)


def start_surrogate_server(args):
    """Build and start the surrogate server the options describe; returns it (not blocking)."""
    from surrogate.base import SurrogateError

    from .surrogate_server import SurrogateServer, load_model

    if not args.grpc_model:
        raise CliError("--grpc needs --model CKPT|NAME")
    config = args.grpc_model_config or None
    _positive(args, "grpc_max_workers", "grpc_max_in_flight", "grpc_max_jobs", "grpc_max_ranks", "grpc_max_history",
              "grpc_max_state_mb")
    try:
        model = load_model(args.grpc_model, config)
    except (SurrogateError, ValueError, TypeError) as exc:
        raise CliError(f"--model {args.grpc_model}: {exc}") from None
    try:
        server = SurrogateServer(model, args.grpc_surrogate, max_workers=args.grpc_max_workers,
                                 max_in_flight=args.grpc_max_in_flight, max_message_bytes=_max_bytes(args),
                                 save_dir=args.grpc_save_dir, max_jobs=args.grpc_max_jobs,
                                 max_ranks=args.grpc_max_ranks, max_truth_iterations=args.grpc_max_history,
                                 max_state_bytes=args.grpc_max_state_mb << 20)
    except (ValueError, OSError, RuntimeError) as exc:
        raise CliError(f"--grpc {args.grpc_surrogate}: {exc}") from None
    server.start()
    print(f"hybridsim: surrogate service ({model.name}) listening on {server.address}", flush=True)
    return server


def start_engine_server(args):
    """Build and start the engine server the options describe; returns it (not blocking)."""
    from .engine_server import EngineServer

    if not 0 < args.grpc_start_timeout < float("inf"):
        raise CliError(f"--start-timeout: must be a number of seconds > 0, got {args.grpc_start_timeout}")
    _positive(args, "grpc_max_runs", "grpc_max_ranks", "grpc_max_scenario_kb", "grpc_max_terminals", "grpc_max_ports",
              "grpc_max_iterations", "grpc_max_events", "grpc_max_samples_mb")
    limits = ScenarioLimits(max_scenario_bytes=args.grpc_max_scenario_kb << 10, max_ranks=args.grpc_max_ranks,
                            max_terminals=args.grpc_max_terminals, max_ports=args.grpc_max_ports,
                            max_iterations=args.grpc_max_iterations, max_events=args.grpc_max_events,
                            max_sample_bytes=args.grpc_max_samples_mb << 20)
    try:
        server = EngineServer(args.grpc_engine, max_runs=args.grpc_max_runs, max_message_bytes=_max_bytes(args),
                              limits=limits, access=_access(args), start_timeout=args.grpc_start_timeout)
    except (ValueError, OSError, RuntimeError) as exc:
        raise CliError(f"--engine {args.grpc_engine}: {exc}") from None
    server.start()
    print(f"hybridsim: engine service listening on {server.address}", flush=True)
    return server


def _serve(servers, args) -> int:
    from ._common import wait_for_termination

    try:
        sig = wait_for_termination([s.stop for s in servers], grace=args.grpc_grace)
    except BaseException:
        for s in servers:
            s.stop(0)
        raise
    print(f"hybridsim: stopped (signal {sig})", file=sys.stderr, flush=True)
    return EXIT_OK


def serve_services(args) -> int:
    """Serve the surrogate (``--grpc``) and/or the engine (``--engine``) until SIGTERM/SIGINT."""
    servers = []
    try:
        if args.grpc_surrogate:
            servers.append(start_surrogate_server(args))
        if args.grpc_engine:
            servers.append(start_engine_server(args))
    except BaseException:
        for s in servers:
            s.stop(0)
        raise
    return _serve(servers, args)
