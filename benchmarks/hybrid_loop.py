"""Hybrid-loop benchmark: pure simulation vs hybrid runs (policies and an Ft sweep) of one or more scenarios, with
docs/design.md §5's metrics (hybridsim.bench). Prints the table of each and writes benchmarks/out/hybrid_<name>/.

    OMP_NUM_THREADS=1 python benchmarks/hybrid_loop.py                       # the 72-node long example
    OMP_NUM_THREADS=1 python benchmarks/hybrid_loop.py examples/dragonfly-1056-3jobs-long.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim.bench import format_table, run_bench  # noqa: E402
from hybridsim.scenario import load_scenario  # noqa: E402

# per-job schedules, then the shared schedule with its adaptive variant; the Ft sweep runs --sweep-policy
POLICIES = [("surrogate", {"warmup": 8}), ("error-adaptive", {"threshold": 2, "max_interval": 64}),
            ("budget", {"target_speedup": 10}), ("periodic", {"warmup": 8, "ft": 16, "truth": 1}),
            ("aligned", {"warmup": 1, "ft": 16, "threshold": 1})]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", default=[str(ROOT / "examples" / "hybrid-72-long.yaml")])
    ap.add_argument("--sweep-ft", default="8,16,32")
    ap.add_argument("--sweep-policy", default="aligned", choices=["aligned", "periodic"],
                    help="the policy whose ft the sweep varies (default: aligned)")
    ap.add_argument("--only-sweep", action="store_true", help="skip the POLICIES list, run the Ft sweep only")
    args = ap.parse_args(argv)
    out_all = {}
    for path in args.scenarios:
        sc = load_scenario(path)
        if sc.controller.policy != args.sweep_policy:
            sc.controller.policy, sc.controller.params = args.sweep_policy, {}
        out = ROOT / "benchmarks" / "out" / f"hybrid_{Path(path).stem}"
        policies = [] if args.only_sweep else POLICIES
        res = run_bench(sc, out, policies=policies, sweep_ft=[int(x) for x in args.sweep_ft.split(",")],
                        force=True, progress=False)
        print(f"== {path}")
        print(format_table(res))
        out_all[path] = res
    (ROOT / "benchmarks" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "benchmarks" / "out" / "hybrid_loop.json").write_text(json.dumps(out_all, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
