"""The embedded engine against live CODES over routing seeds: each job's completion as a distribution, not one run.

    python benchmarks/engine_codes_seeds.py --engine-seeds 24                         # the engine only
    CODES_BIN_DIR=DIR/bin python benchmarks/engine_codes_seeds.py --codes-seeds 0 1 2 3 4 5 --engine-seeds 24

Both simulators draw at random where adaptive routing chooses (the intermediate group of a packet, ties): the engine
from the scenario's ``seed``, CODES from ROSS' four LP seeds (``--rng-seed1..4``, given here through
``backend.codes.extra_args``; CODES seed ``0`` is CODES' own default, the run every other comparison uses). One run
of each is one draw: on the 1,056-node three-job scenario a job's completion moves by a few per cent with the seed
alone, in both simulators. This script runs the same scenario and the same placement (the scenario's, written once
to an allocation file: ``random`` placement draws from ``seed`` too, and must not move here) under N seeds on each,
and prints per job the mean, the standard deviation and the range over seeds, and the engine's mean against CODES'
with the standard error of that difference. Also per run: MILC's first iteration (mean end over ranks) and the
nearest-neighbour mean rank finish, where the start-up contention of the three jobs shows.

CODES runs one at a time (``hybridsim run`` on ``backend: codes``, sequential, np 1: 2.6 GB and ~80 CPU-s each on
the 1,056-node scenario); the engine runs in this process on the native core (~4 CPU-s each). Output: a table and
``benchmarks/out/engine_codes_seeds.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT = REPO / "examples" / "dragonfly-1056-3jobs.yaml"


def ross_seed_args(seed: int) -> list[str]:
    """ROSS' four LP seeds for CODES seed ``seed`` (none for 0: CODES' default seeds)."""
    if seed == 0:
        return []
    return [f"--rng-seed{k + 1}={seed + 101 * k}" for k in range(4)]


def placement_file(path: Path, out: Path) -> Path:
    """The scenario's placement (as its ``seed`` draws it) written as a CODES allocation file."""
    from hybridsim.placement import place_jobs, write_alloc_file
    from hybridsim.scenario import load_scenario

    sc = load_scenario(path)
    write_alloc_file(place_jobs(sc, sc.build_topology()), out)
    return out


def fixed_doc(path: Path, alloc: Path) -> dict:
    """The scenario as a YAML document, its placement read from ``alloc``."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    doc["placement"] = {"policy": "file", "file": str(alloc)}
    for key in ("controller", "surrogate"):
        doc.pop(key, None)
    return doc


def per_run(job_end: dict, records) -> dict:
    """One run's figures: each job's completion (ms), MILC's first-iteration mean end and the nearest-neighbour mean
    rank finish (us), from (job, rank, iteration, end) tuples."""
    it0, fin = [], {}
    for job, rank, iteration, end in records:
        if job == "milc" and iteration == 0:
            it0.append(end)
        if job == "nn":
            fin[rank] = max(fin.get(rank, 0.0), end)
    out = {k: v / 1e6 for k, v in job_end.items()}
    if it0:
        out["milc_it0_us"] = float(np.mean(it0)) / 1e3
    if fin:
        out["nn_mean_us"] = float(np.mean(list(fin.values()))) / 1e3
    return out


def engine_run(doc: dict, seed: int, tmp: Path) -> dict:
    from hybridsim.engine import Engine
    from hybridsim.scenario import load_scenario
    import yaml

    p = tmp / f"engine-{seed}.yaml"
    p.write_text(yaml.safe_dump({**doc, "seed": seed}, sort_keys=False))
    sc = load_scenario(p)
    sc.backend.embedded.core = "native"
    res = Engine(sc, progress=False).run()
    return per_run(res.job_end, ((r.job, r.rank, r.iteration, r.end) for r in res.records))


def codes_run(doc: dict, seed: int, tmp: Path, bin_dir: str) -> dict:
    """One CODES run through the bridge; NN's rank finishes from CODES' "App <j> finished at" lines (it marks no
    iterations)."""
    import re

    import pyarrow.parquet as pq
    import yaml

    d = {**doc, "backend": {"kind": "codes", "codes": {"bin_dir": bin_dir, "synch": "sequential", "np": 1,
                                                      "extra_args": ross_seed_args(seed)}}}
    p = tmp / f"codes-{seed}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    run = tmp / f"codes-run-{seed}"
    proc = subprocess.run([sys.executable, "-m", "hybridsim", "run", str(p), "--mode", "simulate", "--no-progress",
                           "-o", str(run)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"CODES run (seed {seed}) failed:\n{proc.stderr[-4000:]}")
    summ = json.loads((run / "summary.json").read_text())
    t = pq.read_table(run / "iterations.parquet").to_pydict()
    recs = list(zip(t["job"], t["rank"], t["iteration"], t["end"]))
    out = per_run({k: v["completion_time_ns"] for k, v in summ["jobs"].items()}, recs)
    names = [j["name"] for j in doc["jobs"]]
    fin = [float(m[2]) for m in re.finditer(r"App (\d+) finished at ([\d.eE+-]+)",
                                            (run / "codes" / "model-output.txt").read_text())
           if names[int(m[1])] == "nn"]
    if fin:
        out["nn_mean_us"] = float(np.mean(fin)) / 1e3
    return out


def summary(runs: list[dict]) -> dict:
    out = {}
    for k in runs[0]:
        v = np.array([r[k] for r in runs])
        out[k] = {"n": len(v), "mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                  "min": float(v.min()), "max": float(v.max())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=DEFAULT)
    ap.add_argument("--engine-seeds", type=int, default=24, help="engine runs, seeds 1..N (default 24)")
    ap.add_argument("--codes-seeds", type=int, nargs="*", default=[],
                    help="CODES runs, one per ROSS seed (0 = CODES' default); needs CODES_BIN_DIR")
    ap.add_argument("--codes-json", type=Path, help="reuse the CODES runs of an earlier output of this script")
    ap.add_argument("-o", "--out", type=Path, default=REPO / "benchmarks" / "out" / "engine_codes_seeds.json")
    args = ap.parse_args()
    bin_dir = os.environ.get("CODES_BIN_DIR")
    if args.codes_seeds and not bin_dir:
        raise SystemExit("--codes-seeds needs CODES_BIN_DIR (a build by scripts/build-codes.sh)")
    res = {"scenario": str(args.scenario), "engine": [], "codes": []}
    if args.codes_json:
        res["codes"] = json.loads(args.codes_json.read_text())["codes"]
    with tempfile.TemporaryDirectory(prefix="engine-codes-seeds-") as tmp:
        tmp = Path(tmp)
        doc = fixed_doc(args.scenario, placement_file(args.scenario, tmp / "alloc.conf"))
        for s in args.codes_seeds:
            r = codes_run(doc, s, tmp, bin_dir)
            res["codes"].append({"seed": s, **r})
            print("codes ", s, json.dumps(r), flush=True)
        for s in range(1, args.engine_seeds + 1):
            r = engine_run(doc, s, tmp)
            res["engine"].append({"seed": s, **r})
            print("engine", s, json.dumps(r), flush=True)
    sides = {k: summary([{x: v for x, v in r.items() if x != "seed"} for r in res[k]]) for k in ("engine", "codes")
             if res[k]}
    res["summary"] = sides
    print(f"\n{'figure':14s} {'side':7s} {'n':>3s} {'mean':>10s} {'sd':>8s} {'min':>10s} {'max':>10s}")
    for k in sides.get("engine", sides.get("codes", {})):
        for side, s in sides.items():
            if k in s:
                x = s[k]
                print(f"{k:14s} {side:7s} {x['n']:3d} {x['mean']:10.4f} {x['sd']:8.4f} {x['min']:10.4f} {x['max']:10.4f}")
        if len(sides) == 2 and k in sides["codes"]:
            e, c = sides["engine"][k], sides["codes"][k]
            se = math.sqrt(e["sd"] ** 2 / e["n"] + c["sd"] ** 2 / c["n"]) / c["mean"] * 100
            diff = (e["mean"] / c["mean"] - 1) * 100
            res.setdefault("difference_pct", {})[k] = {"mean": diff, "se": se}
            print(f"{'':14s} engine - CODES: {diff:+.2f} % (standard error {se:.2f} %)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
