"""Run time of the shipped scenarios whose comments say how long they take, measured, beside what they say.

Each case is a command a comment or doc names (the quickstart, the job stream on 72 nodes, the small training
corpus) and the places that state its run time as "about N s of CPU" (:data:`CLAIMS`). Each command runs in a fresh
``python -m hybridsim`` process into a temporary folder; CPU is the child's own user + system time (``os.wait4``,
which includes the corpus' worker processes it waited for), wall the elapsed time; median of ``--repeat`` runs.
``tests/test_runtime_comments.py`` checks each stated figure against the median recorded in
benchmarks/RESULTS_runtimes.md (within a factor of :data:`FACTOR`), so a comment cannot drift 10-100x again without
a test failing; rerun this script and update that file when a scenario or the engine changes. Run::

    python benchmarks/runtime_comments.py [--repeat 3]

Prints a Markdown table (benchmarks/RESULTS_runtimes.md holds the latest, with the command).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: a stated figure may be this many times off the measured median, either way
FACTOR = 3.0

#: case name -> (command after ``hybridsim``, with OUT for a fresh output folder; the files whose comments state its
#: run time as "about N s of CPU")
CLAIMS = {
    "quickstart": (["run", "examples/quickstart.yaml", "-o", "OUT", "--no-progress"],
                   ["examples/quickstart.yaml", "docs/design.md"]),
    "stream-72": (["run", "examples/stream-72.yaml", "-o", "OUT", "--no-progress"],
                  ["examples/stream-72.yaml", "README.md"]),
    "corpus small-72": (["corpus", "corpora/small-72.yaml", "-o", "OUT", "--workers", "2", "--no-progress"],
                        ["corpora/small-72.yaml"]),
}


def child_env() -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def measure(args: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``hybridsim ARGS`` into a fresh output folder."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "hybridsim"] + [str(Path(tmp) / "out") if a == "OUT" else a for a in args]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=child_env(), cwd=REPO)
        err = proc.stderr.read()
        _pid, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"runtime_comments: {shlex.join(cmd)} failed:\n{err.decode(errors='replace')}")
    return ru.ru_utime + ru.ru_stime, wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (default 3)")
    args = ap.parse_args(argv)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the "
          f"start\n")
    print("| case | command | runs | CPU s median | wall s median | stated in |")
    print("|---|---|---|---|---|---|")
    for name, (cmd, files) in CLAIMS.items():
        runs = [measure(cmd) for _ in range(args.repeat)]
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        shown = shlex.join(["hybridsim"] + cmd).replace("OUT", "DIR")
        print(f"| {name} | `{shown}` | {args.repeat} | {cpu:.2f} | {wall:.2f} | {', '.join(files)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
