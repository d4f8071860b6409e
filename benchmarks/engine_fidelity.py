"""Fidelity of the embedded engine against the recorded CODES dragonfly-dally runs (HYBRIDSIM_REFERENCE_DATA).

    python benchmarks/engine_fidelity.py                         # B, C and E (E shortened, see below)
    python benchmarks/engine_fidelity.py --cases B-72node-milc --e-fraction 0.05

Per job: the mean iteration time over the same (rank, iteration) set in both simulators (CODES' ``ITERATION`` log
lines; iteration 0 counted from t = 0), and the mean rank finish time (CODES' "App <j> finished at" lines; the only
measure for nearest-neighbour, which writes no iteration marks). Ratio = engine / CODES. The scenarios are hand-written
from the runs' .conf/.json/alloc files under ``benchmarks/scenarios/``. E (1,600 MILC iterations, 0.69 s of virtual
time, 394 M CODES events) runs only its first ``--e-fraction`` of iterations; its comparison then uses those leading
iterations only. Output: a table and ``benchmarks/out/engine_fidelity.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.reference_data import CODES, require  # noqa: E402
SCEN = REPO / "benchmarks" / "scenarios"

CASES = {
    "B-72node-milc": (SCEN / "B-72node-milc.yaml", CODES / "B-72node-milc" / "hf-seq"),
    "C-1056node-milc-lammps-nn": (SCEN / "C-1056node-milc-lammps-nn.yaml",
                                  CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq"),
    "E-72node-milc-lammps-syn": (SCEN / "E-72node-milc-lammps-syn.yaml",
                                 CODES / "E-72node-milc-lammps-syn" / "hf-random-seq"),
}

_IT = re.compile(r"ITERATION (\d+) node \d+ job (\d+) rank (\d+) time ([\d.eE+-]+)")
_FIN = re.compile(r"Rank \d+ App (\d+) finished at ([\d.eE+-]+)")


def _open(path: Path):
    if path.is_file():
        return open(path)
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gzip.open(gz, "rt")
    return None


def codes_marks(run_dir: Path) -> dict:
    """{(job, rank, iteration): end time} from every PE's iteration log."""
    marks = {}
    for f in sorted((run_dir / "iteration-logs").glob("*.txt*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            for line in fh:
                m = _IT.match(line)
                if m:
                    marks[(int(m[2]), int(m[3]), int(m[1]))] = float(m[4])
    return marks


def codes_finish(run_dir: Path) -> dict:
    """{job: [finish times of its ranks]} from model-output.txt."""
    out = defaultdict(list)
    fh = _open(run_dir / "model-output.txt")
    if fh is None:
        return {}
    with fh:
        for line in fh:
            m = _FIN.search(line)
            if m:
                out[int(m[1])].append(float(m[2]))
    return dict(out)


def durations(marks: dict, job: int, n_iter: int) -> list[float]:
    out = []
    for (j, r, i), t in marks.items():
        if j == job and i < n_iter:
            prev = 0.0 if i == 0 else marks.get((j, r, i - 1))
            if prev is not None:
                out.append(t - prev)
    return out


def run_case(name: str, e_fraction: float) -> dict:
    from hybridsim.engine import Engine
    from hybridsim.scenario import load_scenario

    path, run_dir = CASES[name]
    sc = load_scenario(path)
    full = {j.name: j.iterations for j in sc.jobs}
    truncated = False
    if name.startswith("E-") and e_fraction < 1:
        truncated = True
        for j in sc.jobs:
            if j.iterations:
                j.iterations = max(1, int(round(j.iterations * e_fraction)))
    c0, w0 = time.process_time(), time.perf_counter()
    res = Engine(sc).run()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    marks = codes_marks(run_dir)
    finish = codes_finish(run_dir)
    rows = {}
    for j, job in enumerate(sc.jobs):
        if job.iterations is None:
            continue
        ours = [r for r in res.records if r.job_id == j]
        row = {"iterations": job.iterations, "of": full[job.name]}
        ref = durations(marks, j, job.iterations)
        if ref:
            row["engine_mean_it_us"] = float(np.mean([r.duration for r in ours])) / 1e3
            row["codes_mean_it_us"] = float(np.mean(ref)) / 1e3
            row["ratio_it"] = row["engine_mean_it_us"] / row["codes_mean_it_us"]
        if not truncated and finish.get(j):
            last = defaultdict(float)
            for r in ours:
                last[r.rank] = max(last[r.rank], r.end)
            row["engine_mean_finish_us"] = float(np.mean(list(last.values()))) / 1e3
            row["codes_mean_finish_us"] = float(np.mean(finish[j])) / 1e3
            row["ratio_finish"] = row["engine_mean_finish_us"] / row["codes_mean_finish_us"]
        rows[job.name] = row
    return {"jobs": rows, "events": res.events, "wall_s": wall, "cpu_s": cpu, "truncated": truncated,
            "sim_ms": res.end_time / 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--e-fraction", type=float, default=0.05,
                    help="share of E's iterations to run (default 0.05: 80 MILC iterations, 12 LAMMPS steps)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "engine_fidelity.json"))
    args = ap.parse_args(argv)
    require()
    results = {}
    print(f"{'case':28} {'job':7} {'iters':>9} {'engine us':>10} {'CODES us':>10} {'ratio':>6} "
          f"{'finish ratio':>12}")
    for name in args.cases:
        res = results[name] = run_case(name, args.e_fraction)
        for job, r in res["jobs"].items():
            print(f"{name:28} {job:7} {r['iterations']:>4}/{r['of']:<4} {r.get('engine_mean_it_us', float('nan')):>10.1f} "
                  f"{r.get('codes_mean_it_us', float('nan')):>10.1f} {r.get('ratio_it', float('nan')):>6.3f} "
                  f"{r.get('ratio_finish', float('nan')):>12.3f}")
        print(f"{'':28} ({res['events']:,} events, {res['cpu_s']:.1f} CPU s, {res['wall_s']:.1f} wall s)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
