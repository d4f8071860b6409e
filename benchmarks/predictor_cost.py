"""The flow predictor's own cost inside a hybrid run (issue 32's target: at most 10 % of the hybrid's wall time).

Runs ``hybridsim run SCENARIO --mode hybrid`` in this process with the flow model's entry points timed (the model's
build, :meth:`~hybridsim.flow.FlowModel.place`, ``iteration_time``, ``start_time``, ``ratio``, ``set_period``; the
outermost call only, so nested calls are not counted twice) and prints their wall and CPU seconds beside the run's.
The scenario must use a model that reads the flow model (``surrogate: {model: flow}``) and a controller section (else
``hybridsim.estimate`` may run the truth without the loop).

    OMP_NUM_THREADS=1 python benchmarks/predictor_cost.py SCENARIO OUT [--no-replay]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("out", type=Path, help="the hybrid run's directory (overwritten)")
    ap.add_argument("--no-replay", action="store_true",
                    help="the flow model without its replay (hybridsim.flow.REPLAY)")
    args = ap.parse_args(argv)
    import hybridsim.flow as flow
    from hybridsim.cli import main as cli

    if args.no_replay:
        flow.REPLAY = False
    spent = {"cpu": 0.0, "wall": 0.0}
    per: dict = {}
    depth = [0]

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            if depth[0]:
                return fn(*a, **k)
            depth[0] += 1
            c, t = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                dc = time.process_time() - c
                spent["cpu"] += dc
                spent["wall"] += time.perf_counter() - t
                n, s = per.get(fn.__name__, (0, 0.0))
                per[fn.__name__] = (n + 1, s + dc)
                depth[0] -= 1
        return wrapper

    flow.flow_model = timed(flow.flow_model)
    for name in ("place", "iteration_time", "start_time", "ratio", "set_period"):
        setattr(flow.FlowModel, name, timed(getattr(flow.FlowModel, name)))
    c0, t0 = time.process_time(), time.perf_counter()
    rc = cli(["run", str(args.scenario), "--mode", "hybrid", "-o", str(args.out), "--force", "--no-progress"])
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(f"run wall {wall:.2f} s, CPU {cpu:.2f} s; predictor wall {spent['wall']:.3f} s, CPU {spent['cpu']:.3f} s: "
          f"{100 * spent['wall'] / wall:.1f} % of the wall, {100 * spent['cpu'] / cpu:.1f} % of the CPU")
    print("CPU s per entry point: " + ", ".join(f"{k} {s:.3f} ({n} calls)" for k, (n, s) in sorted(per.items())))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
