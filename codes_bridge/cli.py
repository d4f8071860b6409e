"""The CODES bridge's commands: ``hybridsim import-codes``, ``hybridsim scenario-from-codes`` and ``hybridsim serve
--codes-director``.

:func:`register` is the bridge's ``hybridsim.commands`` entry point (pyproject), so hybridsim's CLI finds it without
naming it; it runs after hybridsim's own command modules and adds ``--codes-director`` to their ``serve``.
"""

from __future__ import annotations

import sys
import warnings as _warnings

from hybridsim_common.errors import EXIT_BAD_INPUT, EXIT_OK, CliError


def cmd_import_codes(args) -> int:
    from hybridsim_common.rundir import RunDirError

    from .importer import import_codes_run
    from .parsers.common import CodesWarning

    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore", CodesWarning)  # collected in run.warnings and printed below
        try:
            run = import_codes_run(args.codes_run_dir, args.output, force=args.force, argv=sys.argv)
        except (ValueError, OSError, RunDirError) as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
    for w in run.warnings:
        print(f"warning: {w}", file=sys.stderr)
    n_sim = sum(run.simulated)
    ports = ("no port samples" if run.ports is None else
             f"{run.ports.values.shape[0]} port samples x {run.ports.n_ports} ports from {run.port_source}")
    state = "PARTIAL run (CODES did not finish)" if run.partial else "complete run"
    print(f"{args.output}: {state}; {len(run.records)} iteration records ({n_sim} simulated) of "
          f"{len(run.job_names)} jobs; {ports}")
    for name, t in run.job_end.items():
        print(f"  {name}: completed at {t / 1e6:.6f} ms")
    return EXIT_OK


def cmd_scenario_from_codes(args) -> int:
    from .scenario_from_codes import scenario_from_codes, write_scenario_yaml

    try:
        sc = scenario_from_codes(args.codes_run_dir)
        write_scenario_yaml(sc, args.output, force=args.force)
    except (ValueError, OSError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    print(f"{args.output}: {len(sc.jobs)} jobs, {sc.topology.n_terminals} terminals")
    return EXIT_OK


def _serve_codes_director(args) -> int:
    from hybridsim.cli_serve import parse_model_options
    from surrogate.base import SurrogateError

    from .director import DirectorError, DirectorLimits, serve

    try:
        limits = DirectorLimits(max_request_bytes=args.max_request_bytes, max_clients=args.max_clients,
                                max_records_per_client=args.max_records_per_client,
                                max_total_records=args.max_total_records)
    except ValueError as exc:
        raise CliError(f"serve: {exc}", EXIT_BAD_INPUT) from None
    try:
        return serve(args.codes_director, args.model, model_options=parse_model_options(args.model_option),
                     auto_train=args.auto_train, records_log=args.records_log, allowed_dirs=args.grpc_allow_dir or (),
                     limits=limits)
    except (DirectorError, SurrogateError) as exc:
        msg = str(exc)
        raise CliError(msg if msg.startswith("--") else f"--model: {msg}", EXIT_BAD_INPUT) from None
    except OSError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None


def add_director_service(p) -> None:
    """``--codes-director`` and its options on the ``serve`` parser ``p`` (served by :func:`codes_bridge.director.serve`
    with the shared ``--model``)."""
    import argparse

    from hybridsim.cli_serve import add_service

    from .limits import DirectorLimits

    d = p.add_argument_group("CODES director (--codes-director)",
                             "Answer CODES' application-surrogate director (ZeroMQ REQ/REP, CODES' ZMQML_ENDPOINT; "
                             "default port 5555) with any history surrogate; it stops when a client sends "
                             "{\"cmd\": \"exit\"}.")
    flag = d.add_argument("--codes-director", metavar="ENDPOINT",
                   help="ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:5555 (tcp://*:5555 for all interfaces)")
    d.add_argument("--auto-train", action=argparse.BooleanOptionalAction, default=None,
                   help="refit the model on all records received before answering an inference (default: on for a "
                        "named model, off for a checkpoint)")
    d.add_argument("--records-log", metavar="CSV",
                   help="append every received iteration time to this CSV (client,value) for offline training; "
                        "load it back with the load-records-csv operation")
    d.add_argument("--max-request-bytes", type=int, default=DirectorLimits.max_request_bytes, metavar="N",
                   help="larger ZeroMQ messages are dropped and their connection closed (default 16 MiB)")
    d.add_argument("--max-clients", type=int, default=DirectorLimits.max_clients, metavar="N",
                   help="distinct client ids the server keeps records of; a new one beyond it evicts the least "
                        "recently used (default %(default)s)")
    d.add_argument("--max-records-per-client", type=int, default=DirectorLimits.max_records_per_client,
                   metavar="N", help="iteration times kept per client, older ones dropped (default %(default)s)")
    d.add_argument("--max-total-records", type=int, default=DirectorLimits.max_total_records, metavar="N",
                   help="iteration times kept over all clients; beyond it the least recently used clients are "
                        "evicted (default %(default)s)")
    add_service(p, flag, _serve_codes_director)


def register(sub) -> None:
    from hybridsim.cli_serve import serve_parser

    add_director_service(serve_parser(sub))

    p = sub.add_parser("import-codes", help="turn a CODES run directory into a hybridsim run directory")
    p.add_argument("codes_run_dir", metavar="CODES_RUN_DIR")
    p.add_argument("-o", "--output", metavar="OUTDIR", required=True, help="hybridsim run directory to write")
    p.add_argument("--force", action="store_true", help="overwrite OUTDIR if it exists")
    p.set_defaults(func=cmd_import_codes)

    p = sub.add_parser("scenario-from-codes",
                       help="write the hybridsim scenario equivalent to a CODES run's configuration")
    p.add_argument("codes_run_dir", metavar="CODES_RUN_DIR")
    p.add_argument("-o", "--output", metavar="SCENARIO_YAML", required=True)
    p.add_argument("--force", action="store_true", help="overwrite the YAML file if it exists")
    p.set_defaults(func=cmd_scenario_from_codes)
