"""``hybridsim serve``: run hybridsim as a service for another program.

One command, one service per invocation, chosen by its option::

    hybridsim serve --codes-director tcp://127.0.0.1:5555 [--model ridge|CKPT] [--model-option k=4]
    hybridsim serve --grpc 127.0.0.1:50051 --model CKPT|NAME        # gRPC surrogate service
    hybridsim serve --engine 127.0.0.1:50052                        # gRPC remote engine

``--codes-director`` speaks CODES' hybrid-director ZeroMQ protocol (:mod:`codes_bridge.director`), so CODES'
application surrogate can use hybridsim's surrogates instead of its stock ML server. More services (e.g. gRPC
endpoints) plug in the same way: add their option in :func:`register` and a runner in :data:`SERVICES`; ``--model``
and ``--model-option`` are shared.
"""

from __future__ import annotations

import argparse
from typing import Callable

from .cli import EXIT_BAD_INPUT, CliError, add_plugin_argument


def parse_model_options(items: list[str] | None) -> dict:
    from surrogate.base import SurrogateError
    from surrogate.loading import parse_options

    try:
        return parse_options(items, "--model-option")
    except SurrogateError as exc:
        raise CliError(str(exc)) from None


def _serve_codes_director(args) -> int:
    from codes_bridge.director import DirectorError, DirectorLimits, serve
    from surrogate.base import SurrogateError

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


def _serve_grpc(args) -> int:
    """``--grpc`` (surrogate service) and/or ``--engine`` (remote engine service)."""
    import json

    from .service.cli import cmd_grpc_serve

    args.grpc_model = args.model
    opts = parse_model_options(args.model_option)
    args.grpc_model_config = json.dumps(opts) if opts else None
    return cmd_grpc_serve(args)


#: argparse dest -> runner; exactly one service family per invocation (--grpc and --engine may go together)
SERVICES: dict[str, Callable] = {
    "codes_director": _serve_codes_director,
    "grpc_surrogate": _serve_grpc,
    "grpc_engine": _serve_grpc,
}


def cmd_serve(args) -> int:
    chosen = [dest for dest in SERVICES if getattr(args, dest, None)]
    if set(chosen) == {"grpc_surrogate", "grpc_engine"}:
        chosen = ["grpc_surrogate"]
    if len(chosen) != 1:
        opts = ", ".join("--" + d.replace("_", "-") for d in SERVICES)
        raise CliError(f"serve: choose exactly one service ({opts})" + (f"; got {len(chosen)}" if chosen else ""))
    return SERVICES[chosen[0]](args)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve", help="serve hybridsim surrogates to other programs (CODES' hybrid director, ...)",
        description="Serve hybridsim to another program. --codes-director ENDPOINT answers CODES' application-"
                    "surrogate director (ZeroMQ REQ/REP, CODES' ZMQML_ENDPOINT; default port 5555) with any "
                    "history surrogate; it stops when a client sends {\"cmd\": \"exit\"}.")
    svc = p.add_argument_group("service (choose one)")
    svc.add_argument("--codes-director", metavar="ENDPOINT",
                     help="ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:5555 (tcp://*:5555 for all interfaces)")
    p.add_argument("--model", metavar="NAME|CKPT", default=None,
                   help="surrogate: a registered name (default ridge, k=4 as CODES' stock predictor) or a checkpoint "
                        "folder written by save-model / surrogate training")
    p.add_argument("--model-option", metavar="KEY=VALUE", action="append",
                   help="constructor option of a named model, e.g. k=8 (repeatable)")
    add_plugin_argument(p)  # where an allowed custom workload module (--allow-module) may be imported from
    p.add_argument("--auto-train", action=argparse.BooleanOptionalAction, default=None,
                   help="refit the model on all records received before answering an inference (default: on for a "
                        "named model, off for a checkpoint)")
    p.add_argument("--records-log", metavar="CSV",
                   help="append every received iteration time to this CSV (client,value) for offline training; "
                        "load it back with the load-records-csv operation")
    from codes_bridge.director import DirectorLimits

    d = p.add_argument_group("CODES director limits (--codes-director)")
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
    from .service.cli import add_serve_options

    add_serve_options(p, surrogate_flag="--grpc", engine_flag="--engine", shared_model=True)
    p.set_defaults(func=cmd_serve)
    return p
