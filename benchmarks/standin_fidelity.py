"""What a predicted co-runner leaves in the network, without a model's or a policy's error (issue 22, item 5).

For each job X of a scenario without a scheduler: one pure run, then one run per ``keep_background`` stand-in in
which X is predicted from iteration ``--from`` on with its own pure per-rank times (an oracle pace: a perfect
stand-in leaves the other jobs' iterations as in the pure run) and every other job is simulated; reported: the truth
bias (:func:`hybridsim.bench.truth_bias`, beside predicted co-runners) of the other jobs::

    nice -n 5 python benchmarks/standin_fidelity.py examples/quickstart.yaml [--from 2] [--modes false,true,profile]
"""

from __future__ import annotations

import argparse
import math


import sys
from pathlib import Path as _Path

sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # this checkout's hybridsim

from hybridsim.bench import _pure_tables, truth_bias  # noqa: E402
from hybridsim.engine import Engine  # noqa: E402
from hybridsim.scenario import load_scenario  # noqa: E402
from hybridsim_common.backend import Director, Mode  # noqa: E402

MODES = {"false": False, "true": True, "profile": "profile"}


class OracleOne(Director):
    """Job ``job`` predicted from iteration ``first`` on with its pure per-rank times; the others simulated."""

    def __init__(self, job, first, table, keep_background):
        self.job, self.first, self.table, self.keep_background = job, first, table, keep_background

    def mode_for(self, job_id, iteration):
        return Mode.PREDICT if job_id == self.job and iteration >= self.first else Mode.SIMULATE

    def predict(self, job_id, iteration, ranks, starts):
        return self.table[ranks, iteration]


def _f(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else "-"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--from", dest="first", type=int, default=2)
    ap.add_argument("--modes", default="false,true,profile")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    sc = load_scenario(args.scenario)
    if args.seed is not None:
        sc.seed = args.seed
    pure = Engine(sc).run()
    tables = _pure_tables(sc, pure.records)
    modes = args.modes.split(",")
    print(f"scenario {sc.name} ({args.scenario}, seed {sc.seed}); predicted job at its pure pace from iteration "
          f"{args.first}; truth bias % of the other jobs beside it")
    print("| predicted job | " + " | ".join(f"keep_background {m}" for m in modes) + " |")
    print("|---|" + "---|" * len(modes))
    for jid, tab in tables.items():
        cells = []
        for mode in modes:
            res = Engine(sc).run(director=OracleOne(jid, args.first, tab, MODES[mode]))
            bias = truth_bias(sc, pure.records, res.records, res.simulated, beside_predicted=True)
            cells.append(", ".join(f"{k} {_f(v, '+.2f')}" for k, v in bias.items() if k != sc.jobs[jid].name))
        print(f"| {sc.jobs[jid].name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
