"""Speed of the embedded engine beside CODES' sequential wall times (reference runs: HYBRIDSIM_REFERENCE_DATA).

    python benchmarks/engine_speed.py                 # all cases
    python benchmarks/engine_speed.py --cases quickstart B-72node-milc

Each case runs in its own subprocess (so peak RSS is its own). Printed table and ``benchmarks/out/engine_speed.json``:
events, events per wall second and per CPU second, wall and CPU seconds, wall seconds per simulated ms, peak RSS,
and CODES' wall time (``time.txt``) for the same scenario where one exists. The machine is shared: CPU seconds are
the steadier figure; wall is what a user waits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.reference_data import CODES, require  # noqa: E402

CASES = {
    # name: (scenario path, CODES run dir with time.txt / ross.csv or None)
    "quickstart": (REPO / "examples" / "quickstart.yaml", None),
    "B-72node-milc": (REPO / "benchmarks" / "scenarios" / "B-72node-milc.yaml", CODES / "B-72node-milc" / "hf-seq"),
    "C-1056node-3jobs": (REPO / "examples" / "dragonfly-1056-3jobs.yaml",
                         CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq"),
}


def codes_times(run_dir: Path | None) -> dict:
    if run_dir is None or not run_dir.is_dir():
        return {}
    out = {}
    txt = (run_dir / "time.txt").read_text() if (run_dir / "time.txt").is_file() else ""
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", txt)
    if m:
        out["codes_wall_s"] = int(m[1] or 0) * 3600 + int(m[2]) * 60 + float(m[3])
    m = re.search(r"^real\s+(\d+)m([\d.]+)s", txt, re.M)
    if m:
        out["codes_wall_s"] = int(m[1]) * 60 + float(m[2])
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", txt)
    if m:
        out["codes_peak_rss_mb"] = int(m[1]) / 1024
    if (run_dir / "ross.csv").is_file():
        lines = (run_dir / "ross.csv").read_text().splitlines()
        cols = dict(zip(lines[0].split(","), lines[1].split(",")))
        out["codes_events"] = int(cols["net_events"])
        out["codes_runtime_s"] = float(cols["runtime"])
    return out


def child(path: str) -> None:
    """Run one scenario; print one JSON line."""
    import resource

    from hybridsim.engine import Engine
    from hybridsim.scenario import load_scenario

    sc = load_scenario(path)
    eng = Engine(sc, progress=False, debug=False)
    c0, w0 = time.process_time(), time.perf_counter()
    res = eng.run()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    per_job = {}
    for rec in res.records:
        per_job.setdefault(rec.job, []).append(rec.duration)
    print(json.dumps({
        "events": res.events, "wall_s": wall, "cpu_s": cpu, "sim_ms": res.end_time / 1e6,
        "events_per_s": res.events / wall, "events_per_cpu_s": res.events / cpu,
        "wall_s_per_sim_ms": wall / (res.end_time / 1e6), "peak_rss_mb": rss,
        "packets": res.stats["packets"], "job_end_ms": {k: v / 1e6 for k, v in res.job_end.items()},
        "mean_iteration_us": {k: sum(v) / len(v) / 1e3 for k, v in per_job.items()},
    }))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "engine_speed.json"))
    args = ap.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    require()
    rows = {}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in args.cases:
        path, codes_dir = CASES[name]
        proc = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True,
                              env=env, cwd=REPO)
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            raise SystemExit(f"{name}: failed")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update(codes_times(codes_dir))
        if "codes_wall_s" in row:
            row["wall_ratio_vs_codes"] = row["wall_s"] / row["codes_wall_s"]
            row["cpu_ratio_vs_codes"] = row["cpu_s"] / row["codes_wall_s"]
        rows[name] = row
        print(f"{name}: done", file=sys.stderr)
    hdr = f"{'case':18} {'events':>11} {'ev/s':>9} {'ev/cpu-s':>9} {'wall s':>8} {'cpu s':>8} {'s/sim-ms':>9} " \
          f"{'RSS MB':>7} {'CODES s':>8} {'ratio':>6}"
    print(hdr)
    for name, r in rows.items():
        print(f"{name:18} {r['events']:>11,} {r['events_per_s']:>9,.0f} {r['events_per_cpu_s']:>9,.0f} "
              f"{r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['wall_s_per_sim_ms']:>9.2f} {r['peak_rss_mb']:>7.0f} "
              f"{r.get('codes_wall_s', float('nan')):>8.1f} {r.get('wall_ratio_vs_codes', float('nan')):>6.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
