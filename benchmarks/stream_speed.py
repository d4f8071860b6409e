"""Job-stream tools at trace scale: ``hybridsim schedule`` on the whole NASA iPSC/860 trace, ``scenario-from-swf`` on a
synthetic 10^6-line SWF trace (time and peak memory), and how many of the NASA trace's first 1,000 jobs the default
``scenario-from-swf`` maps within 5 % of their scaled run time (against the old fixed 1 us per trace second).

    HYBRIDSIM_REFERENCE_DATA=/path/with/traces nice -n 5 python benchmarks/stream_speed.py [--lines 1000000]

The synthetic trace (:func:`write_synthetic_swf`): 128 nodes, Poisson arrivals, sizes 2^0..2^6, run times
log-uniform in 1 s .. 20,000 s, mean inter-arrival chosen for a load of about 0.7; seeded, so it is the same file on
every machine. Each command runs in its own process; its wall time, CPU time (user + sys) and peak RSS (``wait4``'s
``ru_maxrss`` of that child) are reported -- on a shared machine the CPU time is the figure to compare.
Results: benchmarks/RESULTS_streams.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NASA_NAME = "NASA-iPSC-1993-3.1-cln.swf"


def write_synthetic_swf(path: Path, n: int, seed: int = 0, nodes: int = 128, load: float = 0.7) -> None:
    """An SWF trace of ``n`` jobs (see the module docstring), written in chunks (bounded memory)."""
    rng = np.random.default_rng(seed)
    mean_size = np.mean(2.0 ** np.arange(7))
    mean_run = (20000 - 1) / np.log(20000)  # log-uniform on [1, 20000]
    gap = mean_size * mean_run / (load * nodes)
    with open(path, "w") as fh:
        fh.write(f"; Version: 2.2\n; Computer: synthetic (benchmarks/stream_speed.py, seed {seed})\n"
                 f"; MaxNodes: {nodes}\n; MaxProcs: {nodes}\n")
        t = 0
        for s in range(0, n, 100_000):
            m = min(100_000, n - s)
            submit = t + np.cumsum(rng.exponential(gap, m)).astype(np.int64)
            t = int(submit[-1])
            run = np.exp(rng.uniform(0, np.log(20000), m)).astype(np.int64)
            procs = 2 ** rng.integers(0, 7, m)
            ids = np.arange(s + 1, s + m + 1)
            fh.writelines(f"{i} {a} -1 {r} {p} -1 -1 {p} -1 -1 1 {i % 97} 1 -1 -1 -1 -1 -1\n"
                          for i, a, r, p in zip(ids.tolist(), submit.tolist(), run.tolist(), procs.tolist()))


def timed(cmd: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of the child process, its stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read()}")
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--trace", help=f"the NASA trace (default: $HYBRIDSIM_REFERENCE_DATA/traces/{NASA_NAME}, else "
                                    "the gzipped copy in tests/data/traces)")
    args = ap.parse_args()
    ref = os.environ.get("HYBRIDSIM_REFERENCE_DATA")
    bundled = REPO / "tests" / "data" / "traces" / (NASA_NAME + ".gz")
    nasa = Path(args.trace) if args.trace else (Path(ref) / "traces" / NASA_NAME if ref else bundled)
    hs = [sys.executable, "-m", "hybridsim"]
    system = str(REPO / "examples" / "hybrid-72-long.yaml")
    rows = []
    load0 = " ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # the same system with limits.max_rank_iterations raised (default 10^7): a faithful mapping of many jobs
        # needs more, and scenario-from-swf keeps its output loadable under the base's limits
        roomy = str(tmp / "roomy.yaml")
        Path(roomy).write_text(Path(system).read_text() + "\nlimits: {max_rank_iterations: 100000000000}\n")
        if nasa is not None and nasa.is_file():
            for queue in ("fcfs", "easy", "conservative"):
                wall, cpu, rss, out = timed(hs + ["schedule", str(nasa), "-o", str(tmp / f"s-{queue}"),
                                                  "--queue", queue])
                summary = json.loads((tmp / f"s-{queue}" / "summary.json").read_text())
                rows.append((f"schedule NASA ({summary['jobs_scheduled']} jobs), {queue}", wall, cpu, rss,
                             f"mean wait {summary['metrics']['mean_wait']:.2f} s, "
                             f"p95 {summary['metrics']['p95_wait']:.0f} s"))
            for label, scale, base in (("default (auto), base limits", "auto", system),
                                       ("default (auto), limit raised", "auto", roomy),
                                       ("old default 1us", "1us", system)):
                out = tmp / f"n1000-{scale}-{Path(base).stem}.yaml"
                wall, cpu, rss, _ = timed(hs + ["scenario-from-swf", str(nasa), "--system", base, "--jobs", "1000",
                                           "-o", str(out), "--time-scale", scale])
                with open(out.with_name(out.stem + ".distortion.csv")) as fh:
                    d = list(csv.DictReader(fh))
                err = np.abs([float(r["run_error_pct"]) for r in d])
                within = sum(r["within"] == "true" for r in d)
                scale_line = next(ln for ln in out.read_text().splitlines() if ln.startswith("# time:"))
                rows.append((f"scenario-from-swf NASA first 1,000 jobs, {label}", wall, cpu, rss,
                             f"{within} of {len(d)} within 5 %; abs. run-time error median {np.median(err):.3g} %, "
                             f"max {err.max():.3g} %; {scale_line[8:scale_line.index(' (')]}"))
        else:
            print(f"(NASA trace not found: set HYBRIDSIM_REFERENCE_DATA or --trace; its rows are left out)")
        big = tmp / "synthetic.swf"
        t0 = time.perf_counter()
        write_synthetic_swf(big, args.lines)
        gen = time.perf_counter() - t0
        rows.append((f"generate synthetic {args.lines:,}-line SWF ({big.stat().st_size / 2**20:.0f} MiB)", gen,
                     float("nan"), float("nan"), "in this process"))
        out = tmp / "big.yaml"
        wall, cpu, rss, stdout = timed(hs + ["scenario-from-swf", str(big), "--system", roomy, "-o", str(out)])
        first = stdout.splitlines()[0]
        fit = next((ln.strip() for ln in stdout.splitlines() if ln.strip().startswith("run times:")), "")
        first += "; " + fit[:fit.index(" (")] if " (" in fit else fit
        rows.append((f"scenario-from-swf {args.lines:,} lines (defaults, limit raised)", wall, cpu, rss,
                     first[first.index(":") + 2:]))
        wall, cpu, rss, _ = timed(hs + ["schedule", str(big), "-o", str(tmp / "big-sched")])
        summary = json.loads((tmp / "big-sched" / "summary.json").read_text())
        rows.append((f"schedule {args.lines:,} lines, easy", wall, cpu, rss,
                     f"utilisation {100 * summary['metrics']['utilisation']:.1f} %, mean wait "
                     f"{summary['metrics']['mean_wait']:.0f} s"))
    print(f"load average before/after: {load0} / {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} CPUs\n")
    print("| case | wall s | CPU s | peak RSS MiB | notes |\n|---|---:|---:|---:|---|")
    for name, wall, cpu, rss, note in rows:
        f = lambda x, fmt: "" if x != x else format(x, fmt)  # noqa: E731
        print(f"| {name} | {wall:.1f} | {f(cpu, '.1f')} | {f(rss, '.0f')} | {note} |")


if __name__ == "__main__":
    main()
