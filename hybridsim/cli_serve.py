"""``hybridsim serve``: run hybridsim as a service for another program.

One command, one service per invocation, chosen by its option::

    hybridsim serve --grpc 127.0.0.1:50051 --model CKPT|NAME        # gRPC surrogate service
    hybridsim serve --engine 127.0.0.1:50052                        # gRPC remote engine
    hybridsim serve --codes-director tcp://127.0.0.1:5555 ...       # CODES' hybrid director (the codes_bridge plug-in)

``--model`` and ``--model-option`` are shared. A service family is a flag plus a runner: hybridsim's own (the gRPC
services, :mod:`hybridsim.service.cli`) are added in :func:`register`; a plug-in adds its own from its
``hybridsim.commands`` registrar with :func:`add_service` (the CODES bridge adds ``--codes-director``), so this module
names no plug-in.
"""

from __future__ import annotations

import argparse
from typing import Callable

from hybridsim_common.errors import CliError


def parse_model_options(items: list[str] | None) -> dict:
    from surrogate.base import SurrogateError
    from surrogate.loading import parse_options

    try:
        return parse_options(items, "--model-option")
    except SurrogateError as exc:
        raise CliError(str(exc)) from None


def _serve_grpc(args) -> int:
    """``--grpc`` (surrogate service) and/or ``--engine`` (remote engine service)."""
    from .service.cli import serve_services

    args.grpc_model = args.model
    args.grpc_model_config = parse_model_options(args.model_option)
    return serve_services(args)


#: the ``serve`` parser's default holding its services: argparse dest of the service's flag -> (flag, runner(args))
SERVICES_DEFAULT = "serve_services"


def add_service(parser: argparse.ArgumentParser, flag: argparse.Action, runner: Callable[..., int]) -> None:
    """Offer one more service family on the ``serve`` parser: ``flag`` is the option the caller added for it (what
    ``add_argument`` returned); when it is given, ``runner(args)`` serves. Exactly one family runs per invocation."""
    parser.get_default(SERVICES_DEFAULT)[flag.dest] = (flag.option_strings[0], runner)


def serve_parser(subparsers) -> argparse.ArgumentParser:
    """The ``serve`` parser among ``subparsers`` (for a plug-in's registrar, which runs after :func:`register`)."""
    return subparsers.choices["serve"]


def cmd_serve(args) -> int:
    services = getattr(args, SERVICES_DEFAULT)
    chosen = [dest for dest in services if getattr(args, dest, None)]
    if set(chosen) == {"grpc_surrogate", "grpc_engine"}:  # the two gRPC services run together
        chosen = ["grpc_surrogate"]
    if len(chosen) != 1:
        opts = ", ".join(flag for flag, _runner in services.values())
        raise CliError(f"serve: choose exactly one service ({opts})" + (f"; got {len(chosen)}" if chosen else ""))
    return services[chosen[0]][1](args)


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve", help="serve hybridsim surrogates or its engine to other programs (gRPC, CODES' hybrid director, ...)",
        description="Serve hybridsim to another program: one service per invocation, chosen by its option.")
    p.add_argument("--model", metavar="NAME|CKPT", default=None,
                   help="surrogate: a registered name (default ridge, k=4 as CODES' stock predictor) or a checkpoint "
                        "folder written by save-model / surrogate training")
    p.add_argument("--model-option", metavar="KEY=VALUE", action="append",
                   help="constructor option of a named model, e.g. k=8 (repeatable)")
    from .cli_run import add_plugin_argument

    add_plugin_argument(p)  # where an allowed custom workload module (--allow-module) may be imported from
    from .service.cli import add_serve_options

    p.set_defaults(func=cmd_serve, **{SERVICES_DEFAULT: {}})
    for flag in add_serve_options(p):
        add_service(p, flag, _serve_grpc)
    return p
