"""One hybrid run of a scenario against a pure run made earlier (``hybridsim run SCENARIO --mode simulate -o PURE``),
with ``hybridsim bench``'s metrics (hybridsim.bench.compare). For sweeping policies and settings on a long scenario
without re-running its pure simulation; wall-clock speedup then compares two processes, so the event ratio
(theoretical speedup) is the steadier figure.

    OMP_NUM_THREADS=1 python benchmarks/hybrid_against_pure.py SCENARIO PURE_DIR OUT_DIR TAG \\
        policy=aligned 'params={"ft": 16}' [keep_background=false] [model=mean] ['config={"k": 8}'] \\
        [history=truth|mixed|window] [sync=job|rank]

Prints the table rows and writes OUT_DIR/TAG.json (and the hybrid run directory OUT_DIR/TAG).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim.bench import compare, predictions_of  # noqa: E402
from hybridsim_common.records import read_iterations, records_from_table  # noqa: E402
from hybridsim_common.rundir import ITERATIONS  # noqa: E402
from hybridsim.runner import build_controller, run_scenario  # noqa: E402
from hybridsim.scenario import load_scenario  # noqa: E402

SETTERS = {
    "policy": lambda sc, v: setattr(sc.controller, "policy", v),
    "params": lambda sc, v: setattr(sc.controller, "params", json.loads(v)),
    "keep_background": lambda sc, v: setattr(sc.controller, "keep_background", v == "true"),
    "sync": lambda sc, v: setattr(sc.controller, "sync", v),
    "model": lambda sc, v: setattr(sc.surrogate, "model", v),
    "config": lambda sc, v: setattr(sc.surrogate, "config", json.loads(v)),
    "history": lambda sc, v: setattr(sc.surrogate, "history", v),
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 4:
        print(__doc__)
        return 2
    scenario, pure, out, tag, *kvs = argv
    sc = load_scenario(scenario)
    for kv in kvs:
        k, _, v = kv.partition("=")
        if k not in SETTERS:
            print(f"unknown setting {k!r} (one of {', '.join(SETTERS)})")
            return 2
        SETTERS[k](sc, v)
    pure, out = Path(pure), Path(out)
    recs = records_from_table(read_iterations(pure / ITERATIONS))
    psum = json.loads((pure / "summary.json").read_text())
    ctl = build_controller(sc)
    _, _, hsum = run_scenario(sc, out / tag, force=True, mode="hybrid", progress=False, controller=ctl)
    m = compare(sc, recs, psum, hsum, predictions_of(ctl))
    m["run"], m["argv"] = tag, kvs
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{tag}.json").write_text(json.dumps(m, indent=1, default=str))
    print(tag, " ".join(kvs))
    print(f"  speedup {m['speedup']:.2f} theoretical {m['theoretical_speedup']:.2f} f {m['surrogate_fraction']:.2f} "
          f"iteration MAPE {m['iteration_mape_pct']:.2f}")
    for j, d in m["jobs"].items():
        print(f"  {j:8s} completion error {d['completion_error_pct']:6.2f} %  f {d['surrogate_fraction']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
