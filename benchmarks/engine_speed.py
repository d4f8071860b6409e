"""Speed of the embedded engine on its two cores, beside CODES' sequential wall times where reference runs exist.

    python benchmarks/engine_speed.py                                   # all cases, native and python core
    python benchmarks/engine_speed.py --cases quickstart corun-1056 --python-max-events 3000000
    python benchmarks/engine_speed.py --boundary                        # the binding's per-call cost only
    python benchmarks/engine_speed.py --cases corun-1056 --compare 5000000   # both cores, first N events, one process
    CODES_BIN_DIR=DIR/bin python benchmarks/engine_speed.py --cases C-1056node-3jobs --cores native codes   # live CODES

Each (case, core) runs in its own subprocess, so peak RSS (``ru_maxrss``: the C++ core's memory too, which
tracemalloc does not see) is its own. Printed table and ``benchmarks/out/engine_speed.json``: events, events per
wall second and per CPU second, wall and CPU seconds, wall seconds per simulated ms, peak RSS, the native core's
speedup in events per CPU second over the Python core, and CODES' wall time (``time.txt``) for the same scenario
where one exists (with ``HYBRIDSIM_REFERENCE_DATA`` set; without it those columns stay empty). ``--python-max-events``
caps the Python core's run (``backend.embedded.max_events``; the native core always runs to the end): the speedup
compares events per second then, which the cap leaves comparable as long as the capped run is past its start-up.
The machine is shared: CPU seconds are the steadier figure; wall is what a user waits.
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
from benchmarks.reference_data import CODES  # noqa: E402

CASES = {
    # name: (scenario path, CODES run dir with time.txt / ross.csv or None)
    "quickstart": (REPO / "examples" / "quickstart.yaml", None),
    "B-72node-milc": (REPO / "benchmarks" / "scenarios" / "B-72node-milc.yaml", CODES / "B-72node-milc" / "hf-seq"),
    "C-1056node-3jobs": (REPO / "examples" / "dragonfly-1056-3jobs.yaml",
                         CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq"),
    "corun-1056": (REPO / "examples" / "dragonfly-1056-3jobs-corun.yaml", None),
    "dfdally-8k": (REPO / "examples" / "dfdally-8k-3jobs.yaml", None),
}
#: ``codes``: the same scenario on a live CODES build through the bridge (sequential, ``CODES_BIN_DIR``), side by side
CORES = ("native", "python", "codes")


def codes_times(run_dir: Path | None) -> dict:
    if run_dir is None or not run_dir.is_dir():  # without HYBRIDSIM_REFERENCE_DATA: a placeholder path, no folder
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


def codes_child(path: str) -> None:
    """Run one scenario on a live CODES build (``CODES_BIN_DIR``, sequential) through the bridge, as ``hybridsim run``
    does; print one JSON line. Peak RSS: the largest process of the run (``RUSAGE_CHILDREN`` after CODES' mpirun and
    model-net-mpi-replay were reaped; Linux carries a child's own children's peak up)."""
    import resource
    import tempfile

    import yaml

    bin_dir = os.environ.get("CODES_BIN_DIR")
    if not bin_dir:
        raise SystemExit("--cores codes needs CODES_BIN_DIR (a build by scripts/build-codes.sh)")
    doc = yaml.safe_load(Path(path).read_text())
    doc["backend"] = {"kind": "codes", "codes": {"bin_dir": bin_dir, "synch": "sequential", "np": 1}}
    for key in ("controller", "surrogate"):
        doc.pop(key, None)
    with tempfile.TemporaryDirectory(prefix="engine-speed-codes-") as tmp:
        scen = Path(tmp) / Path(path).name
        scen.write_text(yaml.safe_dump(doc, sort_keys=False))
        c0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "hybridsim", "run", str(scen), "--mode", "simulate",
                               "--no-progress", "-o", str(Path(tmp) / "run")], capture_output=True, text=True)
        wall = time.perf_counter() - w0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode:
            raise SystemExit(f"CODES run failed:\n{proc.stderr[-4000:]}")
        summ = json.loads((Path(tmp) / "run" / "summary.json").read_text())
    cpu = (ru.ru_utime + ru.ru_stime) - (c0.ru_utime + c0.ru_stime)
    events = int(summ["events"])
    end_ms = summ["end_time_ns"] / 1e6
    print(json.dumps({
        "events": events, "wall_s": wall, "cpu_s": cpu, "sim_ms": end_ms, "events_per_s": events / wall,
        "events_per_cpu_s": events / cpu, "wall_s_per_sim_ms": wall / end_ms, "peak_rss_mb": ru.ru_maxrss / 1024,
        "core": "codes", "partial": bool(summ.get("partial")), "max_events": None,
        "job_end_ms": {k: v["completion_time_ns"] / 1e6 for k, v in summ["jobs"].items()},
        "mean_iteration_us": {k: (v.get("mean_iteration_ns") or 0) / 1e3 for k, v in summ["jobs"].items()},
    }))


def child(path: str, core: str, max_events: int | None) -> None:
    """Run one scenario on one core; print one JSON line."""
    import resource

    if core == "codes":
        codes_child(path)
        return

    from hybridsim.engine import Engine
    from hybridsim.scenario import load_scenario

    sc = load_scenario(path)
    sc.backend.embedded.core = core
    if max_events:
        sc.backend.embedded.max_events = max_events
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
        "core": eng.core, "partial": res.partial, "max_events": max_events,
        "packets": res.stats["packets"], "job_end_ms": {k: v / 1e6 for k, v in res.job_end.items()},
        "mean_iteration_us": {k: sum(v) / len(v) / 1e3 for k, v in per_job.items()},
    }))


def boundary(n: int = 1_000_000) -> dict:
    """The pybind11 boundary of the native core: calls per second of a trivial Python handler run from the native
    heap (C++ -> Python, what each engine event costs: iteration starts and ends, sampling) and of a trivial native
    method called from Python (Python -> C++, what ``loop.at`` and ``start_iteration`` cost), beside a plain Python
    call."""
    from hybridsim.engine import cores
    from hybridsim.scenario import load_scenario

    sc = load_scenario(REPO / "examples" / "quickstart.yaml")
    import random
    loop, net, _mpi = cores.build("native", sc.build_topology(), sc.topology, random.Random(0))
    core = net.core

    def nothing(t, a, b):
        pass
    at = loop.at
    t0 = time.perf_counter()
    for i in range(n):
        at(float(i), nothing, None, None)
    t_at = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop.run()
    t_cb = time.perf_counter() - t0
    noop = core.noop
    t0 = time.perf_counter()
    for _ in range(n):
        noop()
    t_noop = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n):
        nothing(0.0, None, None)
    t_py = time.perf_counter() - t0
    return {"cpp_to_python_calls_per_s": n / t_cb, "python_to_cpp_calls_per_s": n / t_noop,
            "python_at_calls_per_s": n / t_at, "plain_python_calls_per_s": n / t_py}


def compare(path: Path, max_events: int) -> dict:
    """Both cores on the first ``max_events`` events of one scenario in this process: events per second of each and
    whether everything they return is identical (records, events, job ends, link totals, port samples)."""
    import numpy as np

    from hybridsim.engine import Engine
    from hybridsim.scenario import load_scenario

    res = {}
    for core in ("native", "python"):  # the embedded cores (CORES' "codes" is a live build, not an engine core)
        sc = load_scenario(path)
        sc.backend.embedded.core = core
        sc.backend.embedded.max_events = max_events
        eng = Engine(sc, progress=False, debug=False)
        c0 = time.process_time()
        r = eng.run()
        res[core] = (r, time.process_time() - c0)
    (n, cn), (p, cp) = res["native"], res["python"]
    rec = lambda r: [(x.job_id, x.rank, x.iteration, x.start, x.end) for x in r.records]  # noqa: E731
    same = (rec(n) == rec(p) and n.events == p.events and n.end_time == p.end_time and n.job_end == p.job_end
            and all(np.array_equal(np.asarray(n.link_totals[k]), np.asarray(v)) for k, v in p.link_totals.items())
            and ((n.ports is None and p.ports is None)
                 or np.array_equal(n.ports.values, p.ports.values, equal_nan=True)))
    return {"events": n.events, "records": len(n.records), "identical": bool(same),
            "native_events_per_cpu_s": n.events / cn, "python_events_per_cpu_s": p.events / cp,
            "speedup": cp / cn}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--cores", nargs="*", default=["native", "python"], choices=list(CORES),
                    help="engine cores to run (default native python); codes: a live CODES build (CODES_BIN_DIR)")
    ap.add_argument("--python-max-events", type=int, default=None,
                    help="cap the Python core's runs at this many events (the speedup compares events/s)")
    ap.add_argument("--compare", type=int, metavar="N", default=None,
                    help="run both cores on the first N events of each case in this process and compare results")
    ap.add_argument("--boundary", action="store_true", help="measure the binding's per-call cost and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--core", default="native", help=argparse.SUPPRESS)
    ap.add_argument("--max-events", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "engine_speed.json"))
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.core, args.max_events)
        return 0
    if args.compare:
        for name in args.cases:
            print(name, json.dumps(compare(CASES[name][0], args.compare)))
        return 0
    if args.boundary:
        for k, v in boundary().items():
            print(f"{k:28} {v:>13,.0f}")
        return 0
    rows = {}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in args.cases:
        path, codes_dir = CASES[name]
        for core in args.cores:
            cmd = [sys.executable, __file__, "--child", str(path), "--core", core]
            if core == "python" and args.python_max_events:
                cmd += ["--max-events", str(args.python_max_events)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            if proc.returncode:
                print(proc.stderr, file=sys.stderr)
                raise SystemExit(f"{name} ({core}): failed")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            if row["core"] != core:
                raise SystemExit(f"{name}: asked for the {core} core, ran on {row['core']}")
            row.update(codes_times(codes_dir))
            if "codes_wall_s" in row and not row["partial"]:
                row["wall_ratio_vs_codes"] = row["wall_s"] / row["codes_wall_s"]
                row["cpu_ratio_vs_codes"] = row["cpu_s"] / row["codes_wall_s"]
            rows[f"{name}/{core}"] = row
            print(f"{name} ({core}): done", file=sys.stderr)
        nat, py = rows.get(f"{name}/native"), rows.get(f"{name}/python")
        if nat and py:
            nat["speedup_events_per_cpu_s"] = nat["events_per_cpu_s"] / py["events_per_cpu_s"]
            nat["speedup_events_per_s"] = nat["events_per_s"] / py["events_per_s"]
        live = rows.get(f"{name}/codes")
        if nat and live and not nat["partial"]:
            nat["codes_wall_s"] = live["wall_s"]  # the live run beside it replaces a recorded one
            nat["codes_cpu_s"] = live["cpu_s"]
            nat["wall_ratio_vs_codes"] = nat["wall_s"] / live["wall_s"]
            nat["cpu_ratio_vs_codes"] = nat["cpu_s"] / live["cpu_s"]
            # each job's completion on the engine against CODES', signed (late > 0)
            nat["job_end_vs_codes_pct"] = {j: (t - live["job_end_ms"][j]) / live["job_end_ms"][j] * 100
                                           for j, t in nat["job_end_ms"].items() if live["job_end_ms"].get(j)}
    hdr = f"{'case':18} {'core':7} {'events':>11} {'ev/s':>11} {'ev/cpu-s':>11} {'wall s':>8} {'cpu s':>8} " \
          f"{'s/sim-ms':>9} {'RSS MB':>7} {'speedup':>8} {'CODES s':>8} {'ratio':>6}"
    print(hdr)
    for key, r in rows.items():
        name, core = key.split("/")
        part = " (capped)" if r["partial"] else ""
        print(f"{name:18} {core:7} {r['events']:>11,} {r['events_per_s']:>11,.0f} {r['events_per_cpu_s']:>11,.0f} "
              f"{r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['wall_s_per_sim_ms']:>9.2f} {r['peak_rss_mb']:>7.0f} "
              f"{r.get('speedup_events_per_cpu_s', float('nan')):>7.1f}x "
              f"{r.get('codes_wall_s', float('nan')):>8.1f} {r.get('wall_ratio_vs_codes', float('nan')):>6.2f}{part}")
    for key, r in rows.items():
        if "job_end_vs_codes_pct" in r:  # side by side with a live CODES run
            jobs = ", ".join(f"{j} {e:+.2f} %" for j, e in r["job_end_vs_codes_pct"].items())
            print(f"{key} against CODES: {r['codes_wall_s'] / r['wall_s']:.1f}x wall, "
                  f"{r['codes_cpu_s'] / r['cpu_s']:.1f}x CPU; job completion {jobs}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
