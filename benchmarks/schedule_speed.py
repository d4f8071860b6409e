"""``hybridsim schedule`` speed: whole commands (imports, reading, scheduling, writing) and the scheduler alone.

Commands (from the repository root)::

    python benchmarks/schedule_speed.py command --jobs 100000 [--load 0.7] [--queue easy] [--repeat 3]
    python benchmarks/schedule_speed.py inprocess TRACE.swf --queue conservative --factor 0.5 [--repeat 1]

``command``: a synthetic trace of ``--jobs`` jobs (benchmarks/stream_speed.py's :func:`write_synthetic_swf`: 128
nodes, Poisson arrivals at ``--load``, sizes 2^0..2^6, run times log-uniform in 1..20,000 s, seed 0) through
``python -m hybridsim schedule``; CPU = user + sys of the child (``wait4``). ``inprocess``: a trace (e.g. KTH-SP2,
github.com/jad-darrous/predictsim ``experiments/data/KTH-SP2/swf_unfiltered/log.swf``) with inter-arrival times x
``--factor``, :func:`hybridsim.schedule.run_schedule` timed with ``time.process_time`` (the scheduler alone).
Prints the median and every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def _command(args) -> None:
    from stream_speed import write_synthetic_swf

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "synthetic.swf"
        write_synthetic_swf(trace, args.jobs, load=args.load)
        rows = []
        for k in range(args.repeat):
            out = Path(tmp) / f"out{k}"
            t0 = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "schedule", str(trace), "-o", str(out),
                                     "--queue", args.queue], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": str(REPO)})
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            text = proc.stdout.read().decode()
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(text)
            rows.append((wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024))
        _report(f"schedule {args.jobs} synthetic jobs (load {args.load}), {args.queue}", rows)


def _inprocess(args) -> None:
    import numpy as np

    from hybridsim.schedule import from_trace, run_schedule
    from hybridsim.swf import parse_swf, read_swf

    trace = read_swf(args.trace)
    if args.factor != 1:
        jobs = trace.jobs.copy()
        jobs[:, 1] = np.floor(jobs[:, 1] * args.factor)
        text = "\n".join(trace.header) + "\n" + "\n".join(" ".join(str(int(v)) for v in row) for row in jobs)
        trace = parse_swf(text + "\n", "scaled.swf")
    inp = from_trace(trace)
    rows = []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        s = run_schedule(inp, args.queue)
        rows.append((time.perf_counter() - t0, time.process_time() - c0, float("nan")))
    print(f"mean wait {np.mean(s.start - inp.arrival):.1f} s")
    _report(f"run_schedule {Path(args.trace).name} x{args.factor} ({len(inp.size)} jobs), {args.queue}", rows)


def _report(what: str, rows: list[tuple[float, float, float]]) -> None:
    wall, cpu, rss = zip(*rows)
    print(f"{what}: median wall {statistics.median(wall):.2f} s, CPU {statistics.median(cpu):.2f} s, peak RSS "
          f"{max(rss):.0f} MiB; runs (wall/CPU s): " + ", ".join(f"{w:.2f}/{c:.2f}" for w, c, _ in rows))
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("command")
    c.add_argument("--jobs", type=int, default=100_000)
    c.add_argument("--load", type=float, default=0.7)
    c.add_argument("--queue", default="easy")
    c.add_argument("--repeat", type=int, default=3)
    i = sub.add_parser("inprocess")
    i.add_argument("trace")
    i.add_argument("--queue", default="conservative")
    i.add_argument("--factor", type=float, default=0.5)
    i.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    (_command if args.what == "command" else _inprocess)(args)


if __name__ == "__main__":
    main()
