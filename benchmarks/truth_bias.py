"""Truth that is true (issue 22, item 5): the bias of a hybrid run's own simulated iterations against the pure run's
same iterations, for each ``controller.keep_background`` stand-in, on one scenario.

One pure run, then one hybrid run per stand-in (false: a predicted co-runner is silent; true: its last measured
mean per-port load; profile: its phase-resolved per-port load replayed at the predicted pace), each with the
scenario's policy and its defaults and the surrogate given (default LAST), judged with ``hybridsim bench``'s
figures (:func:`hybridsim.bench.compare`, :func:`hybridsim.bench.truth_bias`)::

    nice -n 5 python benchmarks/truth_bias.py examples/quickstart.yaml [--surrogate last] [--modes false,true,profile] \\
        [--seed N] [-o OUTDIR]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hybridsim

from hybridsim.bench import compare, predictions_of, truth_bias, truth_bias_summary, with_surrogate  # noqa: E402
from hybridsim.runner import build_controller, run_scenario  # noqa: E402
from hybridsim.scenario import load_scenario  # noqa: E402

MODES = {"false": False, "true": True, "profile": "profile"}


def _f(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else "-"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--surrogate", default="last")
    ap.add_argument("--modes", default="false,true,profile")
    ap.add_argument("--seed", type=int, default=None, help="the scenario's seed instead of its own")
    ap.add_argument("-o", "--output", default=None, help="folder for the runs (default: a temporary one)")
    args = ap.parse_args(argv)
    base = with_surrogate(load_scenario(args.scenario), args.surrogate)
    if args.seed is not None:
        base.seed = args.seed
    out = Path(args.output or tempfile.mkdtemp(prefix="truth-bias-"))
    _, pres, psum = run_scenario(base, out / "pure", mode="simulate", progress=False, force=True)
    rows = []
    for mode in args.modes.split(","):
        sc = base.model_copy(deep=True)
        sc.controller.keep_background = MODES[mode]
        ctl = build_controller(sc)
        _, hres, hsum = run_scenario(sc, out / f"hybrid-{mode}", mode="hybrid", progress=False, force=True,
                                     controller=ctl)
        m = compare(sc, pres.records, psum, hsum, predictions_of(ctl))
        bias = truth_bias(sc, pres.records, hres.records, hres.simulated)
        beside = truth_bias(sc, pres.records, hres.records, hres.simulated, beside_predicted=True)
        m.update(truth_bias_summary(bias))
        m.update(truth_bias_summary(beside, "beside"))
        rows.append((mode, m, bias, beside))
    print(f"scenario {base.name} ({args.scenario}, seed {base.seed}), surrogate {args.surrogate}, policy {base.controller.policy} "
          f"{base.controller.params}; pure {psum['events']:,} events")
    print("| keep_background | worst truth bias % | mean abs % | beside predicted: worst % | mean abs % | per-job "
          "truth bias % (beside predicted) | max completion error % | max run-time error % | events x |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, m, bias, beside in rows:
        per_job = ", ".join(f"{k} {_f(v, '+.2f')} ({_f(beside[k], '+.2f')})" for k, v in bias.items())
        print(f"| {mode} | {_f(m['worst_truth_bias_pct'], '+.2f')} | {_f(m['mean_abs_truth_bias_pct'], '.2f')} | "
              f"{_f(m['worst_beside_pct'], '+.2f')} | {_f(m['mean_abs_beside_pct'], '.2f')} | "
              f"{per_job} | {_f(m['max_completion_error_pct'], '.2f')} | {_f(m.get('max_run_time_error_pct'), '.2f')}"
              f" | {_f(m['theoretical_speedup'], '.1f')} |")


if __name__ == "__main__":
    main()
