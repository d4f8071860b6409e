"""``hybridsim import-codes`` and ``hybridsim scenario-from-codes``."""

from __future__ import annotations

import sys
import warnings as _warnings

from hybridsim.cli import EXIT_BAD_INPUT, EXIT_OK, CliError


def cmd_import_codes(args) -> int:
    from hybridsim.rundir import RunDirError

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


def register(sub) -> None:
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
