"""What the hybrid loop's director costs a run, apart from everything else: a scenario's pure run, its hybrid run (the
default controller with ``--surrogate``), and the same hybrid schedule replayed by a director that answers every call
with the answer recorded from the hybrid run and does nothing else (the same events and records, checked). CPU time
of the backend's run only, median of ``--reps`` rounds in one process, each round pure, hybrid, replay:

    OMP_NUM_THREADS=1 python benchmarks/director_cost.py benchmarks/scenarios/defaults/mix-72-600-def.yaml --seed 11

prints the three CPU times, the director's cost (hybrid - replay) and the wall efficiency on CPU time (CPU speedup /
event speedup) of the hybrid run and of the replay: the replay's is the ceiling the engine's side of the loop leaves
(the stand-in load, the predicted iterations' bursts, parking and stretches, the native core's time per event).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim.bench import with_surrogate  # noqa: E402
from hybridsim.placement import place_jobs  # noqa: E402
from hybridsim.runner import build_controller, cpu_time, make_backend  # noqa: E402
from hybridsim.scenario import load_scenario  # noqa: E402
from hybridsim_common.backend import Director  # noqa: E402


class Recording(Director):
    """The hybrid controller, its answers recorded (every call passed on)."""

    def __init__(self, inner):
        self.inner, self.keep_background = inner, inner.keep_background
        self.modes, self.preds, self.plans, self.kept = {}, {}, {}, []

    def mode_for(self, j, it):
        self.modes[j, it] = m = self.inner.mode_for(j, it)
        return m

    def predict(self, j, it, ranks, starts):
        self.preds[j, it] = d = np.array(self.inner.predict(j, it, ranks, starts))
        return d

    def fast_forward(self, j, it, ends):
        p = self.inner.fast_forward(j, it, ends)
        self.plans[j, it] = None if p is None else np.array(p)
        return p

    def fast_forward_kept(self, j, reached):
        self.kept.append(k := self.inner.fast_forward_kept(j, reached))
        return k

    def fast_forwarded(self, *a):
        self.inner.fast_forwarded(*a)

    def on_record(self, rec, simulated):
        self.inner.on_record(rec, simulated)

    def on_records(self, records, simulated, spans=None):
        self.inner.on_records(records, simulated, spans)


class Replay(Director):
    """The recorded answers, nothing else."""

    def __init__(self, rec: Recording):
        self.rec, self.keep_background, self._kept = rec, rec.keep_background, iter(rec.kept)

    def mode_for(self, j, it):
        return self.rec.modes[j, it]

    def predict(self, j, it, ranks, starts):
        return self.rec.preds[j, it]

    def fast_forward(self, j, it, ends):
        return self.rec.plans[j, it]

    def fast_forward_kept(self, j, reached):
        return next(self._kept)

    def on_record(self, rec, simulated):
        pass

    def on_records(self, records, simulated, spans=None):
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--surrogate", default="ridge")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    pure_sc = load_scenario(args.scenario)
    if args.seed is not None:
        pure_sc.seed = args.seed
    sc = with_surrogate(pure_sc, args.surrogate)
    topo = sc.build_topology()
    placement = place_jobs(sc, topo)

    def run(scenario, director):
        backend = make_backend(scenario, topo, placement, False, Path("."), "hybrid", keep_ports=False)
        c0 = cpu_time()
        res = backend.run(director=director, on_record=None if director is None else director.on_record)
        return cpu_time() - c0, res

    cpu = {"pure": [], "hybrid": [], "replay": []}
    for _ in range(args.reps):
        c, pure = run(pure_sc, None)
        cpu["pure"].append(c)
        rec = Recording(build_controller(sc))
        c, hyb = run(sc, rec)
        cpu["hybrid"].append(c)
        c, rep = run(sc, Replay(rec))
        cpu["replay"].append(c)
        if rep.events != hyb.events or list(rep.records.columns()["end"]) != list(hyb.records.columns()["end"]):
            raise SystemExit("the replay is not the hybrid run: its events or records differ")
    med = {k: statistics.median(v) for k, v in cpu.items()}
    ev = pure.events / hyb.events
    print(f"{Path(args.scenario).name} seed {pure_sc.seed} {args.surrogate}: CPU s (median of {args.reps}) pure "
          f"{med['pure']:.4f}, hybrid {med['hybrid']:.4f}, replay {med['replay']:.4f}; events pure/hybrid {ev:.3f}")
    print(f"director {1e3 * (med['hybrid'] - med['replay']):.1f} ms; wall efficiency (CPU) hybrid "
          f"{med['pure'] / med['hybrid'] / ev:.3f}, replay (a director that costs nothing) "
          f"{med['pure'] / med['replay'] / ev:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
