"""Workload generators: op-stream fidelity against CODES op traces and generation speed.

    python benchmarks/workloads_generate.py

Prints a table and writes benchmarks/out/workloads_generate.json. Fidelity: share of the (rank, iteration) op
sequences recorded by CODES (``optrace/`` of the reference data, docs/workloads.md §9) that the generators reproduce
exactly (kind, peer, tag, bytes, compute ns, order). Speed: wall seconds to build each reference job and generate every rank's ops of every
iteration (caches cold, then warm).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim.scenario import Job  # noqa: E402
from hybridsim.workloads import build_workload, from_codes_json  # noqa: E402
from hybridsim.workloads.optrace import (read_iteration_marks, read_optrace, split_iterations,  # noqa: E402
                                         trace_form)

from benchmarks.reference_data import CODES, require  # noqa: E402
OPT = CODES / "optrace"


def job(path: Path, ranks: int) -> Job:
    kind, params, its = from_codes_json(path)
    return Job.model_validate(dict(name=path.stem, ranks=ranks, iterations=its, workload=dict(kind=kind, **params)))


def fidelity(run: str, job_index: int, j: Job) -> tuple[int, int]:
    tr = read_optrace(OPT / run / "mpi-op-logs.gz", job_index)
    mk = read_iteration_marks(OPT / run / "iteration-logs" / "pe=0.txt", job_index)
    wl = build_workload(j, job_index, 1)
    n = ok = 0
    for r in range(j.ranks):
        for it, rec in enumerate(split_iterations(tr[r], mk.get(r, []))):
            n += 1
            ok += trace_form(wl.ops(r, it)) == rec
    return ok, n


def speed(j: Job) -> dict:
    from hybridsim.workloads.lammps import lammps_model
    lammps_model.cache_clear()  # cold: grids, FFT layouts and exchange lists are rebuilt
    t0 = time.perf_counter()
    wl = build_workload(j, 0, 1)
    t1 = time.perf_counter()
    nops = 0
    for it in range(wl.iterations):
        for r in range(wl.n_ranks):
            nops += len(wl.ops(r, it))
    t2 = time.perf_counter()
    for it in range(wl.iterations):
        for r in range(wl.n_ranks):
            wl.ops(r, it)
    t3 = time.perf_counter()
    return dict(build_s=t1 - t0, first_pass_s=t2 - t1, warm_pass_s=t3 - t2, ops=nops,
                warm_ops_per_s=nops / max(t3 - t2, 1e-9))


def main() -> None:
    require()
    rows = []
    for name, run, idx, path, ranks in [
        ("MILC 36 [3,3,2,2] x2", "r72", 0, OPT / "milc-36-2it.json", 36),
        ("LAMMPS 32 (2x2x2) x12", "r72", 1, OPT / "lammps-32-12st.json", 32),
        ("MILC 512 [4,4,4,8] x2", "r1056", 0, OPT / "milc-512-2it.json", 512),
        ("LAMMPS 256 (3x3x3), complete steps", "r1056", 1, OPT / "lammps-256-12st.json", 256),
    ]:
        j = job(path, ranks)
        ok, n = fidelity(run, idx, j)
        rows.append(dict(job=name, matched=ok, compared=n, **speed(j)))
    nn = job(CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq" / "nn-256.json", 256)
    rows.append(dict(job="NN 256 [8,8,4] x6 (no optrace)", matched=None, compared=None, **speed(nn)))
    print(f"{'job':38s} {'exact (rank,it)':>16s} {'build s':>8s} {'1st pass s':>10s} {'warm s':>8s} {'ops':>9s}"
          f" {'warm ops/s':>11s}")
    for r in rows:
        m = f"{r['matched']}/{r['compared']}" if r["compared"] else "-"
        print(f"{r['job']:38s} {m:>16s} {r['build_s']:8.3f} {r['first_pass_s']:10.3f} {r['warm_pass_s']:8.3f} "
              f"{r['ops']:9d} {r['warm_ops_per_s']:11.3g}")
    out = ROOT / "benchmarks" / "out" / "workloads_generate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
