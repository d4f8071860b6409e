"""``hybridsim run``: run a scenario on its backend and write a run directory."""

from __future__ import annotations

import sys
from pathlib import Path

from .cli import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, CliError


def cmd_run(args) -> int:
    from .rundir import RunDirError
    from .runner import RunError, run_scenario_file
    from .scenario import ScenarioError

    try:
        run_scenario_file(args.scenario, outdir=args.output, force=args.force, mode=args.mode,
                          progress=not args.no_progress, argv=sys.argv)
    except (ScenarioError, RunDirError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except RunError as exc:
        raise CliError(str(exc), EXIT_FAIL) from None
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("run", help="run a scenario (pure simulation or hybrid) into a run directory")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("-o", "--output", metavar="OUTDIR", help="run directory (default: output.dir or results/<name>)")
    p.add_argument("--force", action="store_true", help="overwrite an existing run directory")
    p.add_argument("--mode", choices=["simulate", "hybrid"], default="simulate",
                   help="simulate: pure simulation; hybrid: controller loop with the surrogate")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)
