"""Port-level fidelity: the engine's per-port samples against CODES' ROSS virtual-time router samples.

    python benchmarks/engine_port_fidelity.py              # C-1056node-milc-lammps-nn, 100-us windows
    python benchmarks/engine_port_fidelity.py --case B     # B-72node-milc, 50-us windows (seconds)

CODES' run C (``hf-random-seq``) sampled every router port every 100 us of virtual time (``vt-router.csv.gz``:
``link_traffic`` bytes sent, ``busy_time`` ns blocked on credits, ``stalled_chunks``, snapshots of
``vc_occupancy_sum`` and ``queued_count`` in bytes). The engine runs the same scenario with ``sampling.interval =
100us`` and the windows are compared port by port while both simulators still run (windows that end before the
later of the two runs' ends). Output: a table per feature (totals per link class, engine/CODES ratio, Pearson
correlation over (window, port) cells and over per-port run totals) and ``benchmarks/out/engine_port_fidelity.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.reference_data import CODES, require  # noqa: E402
SCEN = REPO / "benchmarks" / "scenarios"
CASES = {
    # name: (scenario, CODES run dir, VT sampling interval ns, CODES' last job end ns)
    "C": (SCEN / "C-1056node-milc-lammps-nn.yaml", CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq", 100_000.0,
          11.0344e6),
    "B": (SCEN / "B-72node-milc.yaml", CODES / "B-72node-milc" / "hf-seq", 50_000.0, 8.93e6),
}

PAIRS = (("link_traffic", "bytes"), ("busy_time_ns", "busy_ns"), ("stalled_chunks", "stalled"),
         ("vc_occupancy_sum", "vc_occ"), ("queued_count", "queued"))


def read_codes(path: Path, n_routers: int, radix: int):
    """{codes feature: (W, n_routers * radix) array}, window end times (ns)."""
    with gzip.open(path, "rt") as fh:
        header = fh.readline().strip().split(",")
        col = {c: i for i, c in enumerate(header)}
        rows = [line.rstrip("\n").split(",") for line in fh]
    ts = sorted({float(r[col["ts"]]) for r in rows})
    w_of = {t: i for i, t in enumerate(ts)}
    out = {name: np.zeros((len(ts), n_routers * radix)) for name, _ in PAIRS}
    for r in rows:
        w = w_of[float(r[col["ts"]])]
        rid = int(r[col["router_id"]])
        for name, _ in PAIRS:
            for k in range(radix):
                out[name][w, rid * radix + k] = float(r[col[f"{name}_p{k}"]])
    return out, np.array(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), default="C")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    require()
    scen, run_dir, interval, codes_end = CASES[args.case]
    args.out = args.out or str(REPO / "benchmarks" / "out" / f"engine_port_fidelity_{args.case}.json")
    from hybridsim.engine import Engine
    from hybridsim.scenario import load_scenario

    sc = load_scenario(scen)
    sc.sampling.interval = interval
    t0 = time.perf_counter()
    res = Engine(sc).run()
    wall = time.perf_counter() - t0
    ports = res.ports
    radix = ports.radix
    n_routers = ports.n_ports // radix
    codes, ts = read_codes(run_dir / "ross-stats-decoded" / "vt-router.csv.gz", n_routers, radix)
    n_w = int(min(np.searchsorted(ts, max(res.end_time, codes_end)), len(ports.t_end)))
    cls = res.link_totals["port_class"]
    names = {0: "local", 1: "global", 2: "terminal"}
    results = {"windows": n_w, "engine_wall_s": wall, "features": {}}
    print(f"{n_w} windows of {interval / 1e3:g} us; engine run {wall:.0f} s wall")
    print(f"{'feature':18} {'class':9} {'engine total':>14} {'CODES total':>14} {'ratio':>7} {'corr cells':>11} "
          f"{'corr ports':>11}")
    for cname, ename in PAIRS:
        ours = ports.feature(ename)[:n_w].astype(np.float64)
        ref = codes[cname][:n_w]
        row = {}
        for c in (0, 1, 2):
            m = cls == c
            a, b = ours[:, m], ref[:, m]
            tot_a, tot_b = float(a.sum()), float(b.sum())
            corr_cells = float(np.corrcoef(a.ravel(), b.ravel())[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
            pa, pb = a.sum(axis=0), b.sum(axis=0)
            corr_ports = float(np.corrcoef(pa, pb)[0, 1]) if pa.std() > 0 and pb.std() > 0 else float("nan")
            ratio = tot_a / tot_b if tot_b else float("nan")
            row[names[c]] = {"engine": tot_a, "codes": tot_b, "ratio": ratio, "corr_cells": corr_cells,
                             "corr_ports": corr_ports}
            print(f"{cname:18} {names[c]:9} {tot_a:>14.4g} {tot_b:>14.4g} {ratio:>7.3f} {corr_cells:>11.3f} "
                  f"{corr_ports:>11.3f}")
        results["features"][cname] = row
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
