"""``hybridsim calibrate``, ``hybridsim overlap`` and ``hybridsim machine show``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hybridsim_common.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, CliError


def cmd_machine_show(args) -> int:
    from .machine import MachineError, load_machine

    try:
        m = load_machine(args.file)
    except (MachineError, ValueError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    info = m.describe()
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    print(f"{info['model name']}: {m.sockets} socket(s) x {m.cores_per_socket} cores at {info['clock_GHz']:.4g} GHz, "
          f"compute model {m.compute_model}")
    for p in m.precisions:
        print(f"  peak {p}: {info['peak_GFLOPs'][p]:.6g} GFLOP/s   tau_flop {info['tau_flop_ps'][p]:.4g} ps/FLOP   "
              f"eps_flop {info['energy_per_flop_pJ'][p]:.4g} pJ/FLOP")
    print(f"  {'level':<6} {'GB/s':>10} {'tau ps/B':>10} {'eps pJ/B':>10}  ridge FLOP/B")
    for name, lv in info["levels"].items():
        ridge = "  ".join(f"{p} {v:.4g}" for p, v in lv["ridge_FLOP_per_B"].items())
        print(f"  {name:<6} {lv['bandwidth_GBs']:>10.5g} {lv['tau_ps_per_B']:>10.4g} {lv['energy_pJ_per_B']:>10.4g}"
              f"  {ridge}")
    print(f"  static power P0: package {m.static_power.package:g} W, DRAM {m.static_power.DRAM:g} W; "
          f"network {info['network_pJ_per_byte_hop']:g} pJ/B/hop")
    if "gpu" in info:
        g = info["gpu"]
        print(f"  gpu: {g['count']} x {g['model name']}, idle {g['idle_W']:g} W, active {g['active_W']:g} W, "
              f"host link {g['host_link_GBs']:.4g} GB/s")
        for p, v in g["peak_GFLOPs"].items():
            print(f"    peak {p}: {v:.6g} GFLOP/s")
        for name, lv in g["levels"].items():
            ridge = "  ".join(f"{p} {v:.4g}" for p, v in lv["ridge_FLOP_per_B"].items())
            print(f"    {name:<6} {lv['bandwidth_GBs']:>10.5g} GB/s  tau {lv['tau_ps_per_B']:.4g} ps/B  ridge {ridge}")
    return EXIT_OK


def cmd_calibrate(args) -> int:
    from .calibrate import CalibrationError, calibrate, fitted_machine, format_calibration, read_measurements
    from .machine import MachineError, load_machine, machine_to_yaml

    try:
        machine = load_machine(args.machine)
        meas = read_measurements(args.measurements, machine)
        res = calibrate(meas, machine, model=args.model, precision=args.precision, loo=not args.no_loo)
    except (MachineError, CalibrationError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    if args.json:
        print(json.dumps(res.summary(), indent=2))
    else:
        print(format_calibration(res))
    if args.output:
        fitted = fitted_machine(machine, res)
        Path(args.output).write_text(machine_to_yaml(
            fitted, header=f"fitted by: hybridsim calibrate {args.measurements} --machine {args.machine}"))
        print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_overlap(args) -> int:
    from ..scenario import ScenarioError, load_scenario
    from .overlap import format_overlap_table, run_overlap
    from .roofline import check_scenario

    try:
        scenario = load_scenario(args.scenario)
        check_scenario(scenario)
    except ScenarioError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    try:
        from ..engine import Engine  # noqa: F401
    except ImportError as exc:
        raise CliError(f"the embedded engine is not available: {exc}", EXIT_FAIL) from None
    report = run_overlap(scenario)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_overlap_table(report))
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a machine's time/energy coefficients to measurements (NNLS)")
    p.add_argument("measurements", metavar="MEASUREMENTS.csv",
                   help="CSV with W, Q_<level>..., time (s) and/or energy (J) per measured kernel")
    p.add_argument("--machine", required=True, metavar="M.yaml", help="machine file (levels, starting values)")
    p.add_argument("--model", choices=["roofline", "ecm"], help="time model (default: the machine's)")
    p.add_argument("--precision", default="DP", choices=["DP", "SP", "HP"], help="precision of W (default DP)")
    p.add_argument("--no-loo", action="store_true", help="skip the leave-one-out errors")
    p.add_argument("-o", "--output", metavar="FITTED.yaml", help="write the fitted machine file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("overlap", help="simulated iteration times vs the perfect-overlap model; fit alpha per job")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_overlap)

    p = sub.add_parser("machine", help="machine descriptions (node compute/energy model)")
    msub = p.add_subparsers(dest="machine_command", metavar="ACTION")
    msub.required = True
    q = msub.add_parser("show", help="print derived tau per level, peaks and ridge points")
    q.add_argument("file", metavar="M.yaml", help="machine file, or a scenario with a machine: section")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=cmd_machine_show)
