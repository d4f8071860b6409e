"""Truth windows that start in lockstep: at each simulated iteration that follows a predicted one (a re-entry), the
spread of the job's rank start times (latest - earliest) in the hybrid run against the pure run's same iteration, and
the job time's bias there (mean over ranks, hybrid / pure - 1).

    python benchmarks/truth_skew.py BENCH_DIR [RUN ...]      # e.g. a `hybridsim bench` output folder

Prints one line per run: re-entries, their mean start spread in the pure run and in the hybrid run (us), and the
mean / worst job time bias at re-entries and at the other simulated iterations. With ``controller.sync: job`` the
ranks of a job end every predicted iteration together, so a re-entry starts with no spread at all and, for a job whose
ranks wait on late neighbours (nearest-neighbour exchanges), runs fast; ``sync: skew`` keeps the spread the last
simulated iteration left.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def _table(path: Path):
    t = pq.read_table(path, columns=None).to_pydict()
    modes = t.get("mode") or ["simulate"] * len(t["job"])
    starts, ends, sim = defaultdict(list), defaultdict(list), {}
    for job, it, s, e, m in zip(t["job"], t["iteration"], t["start"], t["end"], modes):
        starts[(job, it)].append(s)
        ends[(job, it)].append(e)
        sim[(job, it)] = sim.get((job, it), True) and m == "simulate"
    return starts, ends, sim


def reentries(pure_dir: Path, run_dir: Path) -> dict:
    ps, pe, _ = _table(pure_dir / "iterations.parquet")
    hs, he, hsim = _table(run_dir / "iterations.parquet")
    out = {"reentry": [], "other": []}
    for (job, it), sim in hsim.items():
        if not sim or (job, it) not in ps:
            continue
        kind = "reentry" if it > 0 and hsim.get((job, it - 1)) is False else "other"
        pure_t = np.mean(np.subtract(pe[(job, it)], ps[(job, it)]))
        hyb_t = np.mean(np.subtract(he[(job, it)], hs[(job, it)]))
        out[kind].append((job, it, np.ptp(ps[(job, it)]), np.ptp(hs[(job, it)]), 100.0 * (hyb_t / pure_t - 1.0)))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bench = Path(argv[0])
    runs = argv[1:] or sorted(p.name for p in bench.iterdir() if (p / "iterations.parquet").is_file()
                              and not p.name.endswith("pure"))
    print(f"{'run':44s} {'re-entries':>10s} {'spread pure us':>15s} {'spread hybrid us':>17s} "
          f"{'bias re-entry mean/worst %':>27s} {'bias other mean/worst %':>24s}")
    for name in runs:
        run = bench / name
        pure = bench / "pure"
        if name.startswith("seed"):                      # --seeds: seed<N>-<run> beside seed<N>-pure
            pure = bench / f"{name.split('-', 1)[0]}-pure"
        r = reentries(pure, run)
        def stats(rows):
            if not rows:
                return "-"
            b = np.array([x[4] for x in rows])
            return f"{b.mean():+.2f} / {b[np.argmax(np.abs(b))]:+.2f}"
        re = r["reentry"]
        sp = (f"{np.mean([x[2] for x in re]) / 1e3:15.1f} {np.mean([x[3] for x in re]) / 1e3:17.1f}" if re
              else f"{'-':>15s} {'-':>17s}")
        print(f"{name:44s} {len(re):10d} {sp} {stats(re):>27s} {stats(r['other']):>24s}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
