"""Time-, energy-to-solution and EDP of one small scenario on the two example machines (embedded engine).

The 72-node Dragonfly runs a 3D stencil job (nearest_neighbor, 16 ranks) and a 4D MILC-like job (16 ranks); each
rank's compute phase is a kernel list (W, Q per level) timed by the machine's roofline. Three node configurations:
Haswell-EP (CPU kernels), EPYC 7742 + A100 with the kernels on the CPU (GPU idle but powered), and the same node with
the kernels on the GPU (host<->device halo copies). Alpha of the overlap model is fitted against a communication-only
run.

    python benchmarks/energy_tts.py     # prints a table, writes benchmarks/out/energy_tts.json
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim.energy.energy import energy_report  # noqa: E402
from hybridsim.energy.overlap import comm_only_scenario, modelled_compute_scenario, overlap_report  # noqa: E402
from hybridsim.engine import Engine  # noqa: E402
from hybridsim.scenario import Scenario  # noqa: E402

N = 64 ** 3            # grid points per rank (stencil)
HALO = 6 * 64 ** 2 * 8  # bytes of the six faces

# 7-point stencil, double precision: 8 FLOP/point; L1 loads 7 x 8 B, L2 ~ 3 planes, L3 ~ 2, DRAM 24 B/point
# (read + write + write-allocate). MILC-like su3 mat-vec: ~1.2 FLOP/B against DRAM.
STENCIL = {"name": "stencil", "W": 8.0 * N, "Q": {"L1": 64.0 * N, "L2": 24.0 * N, "L3": 16.0 * N, "DRAM": 24.0 * N}}
SU3 = {"name": "su3", "W": 6.6e7, "Q": {"L1": 2.2e8, "L2": 1.1e8, "L3": 8.0e7, "DRAM": 5.5e7}}

BASE = {
    "name": "energy-tts",
    "seed": 1,
    "topology": {"groups": 9, "routers_per_group": 4, "terminals_per_router": 2, "global_channels_per_router": 2},
    "jobs": [
        {"name": "stencil", "ranks": 16, "iterations": 8,
         "workload": {"kind": "nearest_neighbor", "dimension_sizes": [4, 2, 2], "msg_size": HALO // 6}},
        {"name": "milc", "ranks": 16, "iterations": 8,
         "workload": {"kind": "milc", "dimension_sizes": [2, 2, 2, 2], "msg_size": 49152}},
    ],
    "placement": {"policy": "random"},
    "sampling": {"interval": "250us", "ports": True},
}


def scenario(machine_file: str, gpu: bool) -> Scenario:
    d = copy.deepcopy(BASE)
    d["machine"] = yaml.safe_load((ROOT / "examples" / "machines" / machine_file).read_text())
    for job, k in zip(d["jobs"], (STENCIL, SU3)):
        k = dict(k)
        if gpu:
            k["device"] = "gpu"
            k["Q"] = {"DRAM": k["Q"]["DRAM"]}
            k["h2d"] = k["d2h"] = float(HALO if job["name"] == "stencil" else 8 * 49152)
        job["compute"] = {"kernels": [k]}
    return Scenario.model_validate(d)


def main() -> int:
    configs = [("Haswell-EP, CPU kernels", "haswell-ep.yaml", False),
               ("EPYC 7742 + A100, CPU kernels", "cpu-gpu-node.yaml", False),
               ("EPYC 7742 + A100, GPU kernels", "cpu-gpu-node.yaml", True)]
    comm = None
    out = []
    for label, mf, gpu in configs:
        sc = scenario(mf, gpu)
        if comm is None:
            comm = Engine(comm_only_scenario(sc)).run()
        t0 = time.perf_counter()
        res = Engine(modelled_compute_scenario(sc)).run()
        wall = time.perf_counter() - t0
        rep = energy_report(sc, res.records, link_bytes=res.link_totals)
        ov = overlap_report(sc, res.records, comm.records)
        out.append({"config": label, "energy": rep, "overlap": ov, "engine_wall_s": wall, "events": res.events})
    print(f"{'configuration':<31} {'job':<8} {'T_comp us':>10} {'T_iter us':>10} {'a=1 err%':>8} {'alpha':>6} "
          f"{'TTS ms':>8} {'E J':>9} {'EDP J*s':>10}")
    for o in out:
        rep = o["energy"]
        for name, j in rep["jobs"].items():
            a = o["overlap"][name]
            print(f"{o['config']:<31} {name:<8} {j['compute_phase_s'] * 1e6:>10.1f} "
                  f"{j['mean_iteration_s'] * 1e6:>10.1f} {a['mape_alpha1_pct']:>8.1f} {a['alpha']:>6.3f} "
                  f"{j['time_to_solution_s'] * 1e3:>8.3f} {j['energy_to_solution_J']:>9.3f} {j['edp_Js']:>10.5f}")
        t = rep["total"]
        print(f"{o['config']:<31} {'total':<8} {'':>10} {'':>10} {'':>8} {'':>6} {t['time_to_solution_s'] * 1e3:>8.3f} "
              f"{t['energy_to_solution_J']:>9.3f} {t['edp_Js']:>10.5f}   (network {t['network_unattributed_J']:.4f} J;"
              f" engine {o['engine_wall_s']:.1f} s)")
    dest = ROOT / "benchmarks" / "out"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "energy_tts.json").write_text(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
