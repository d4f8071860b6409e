"""Speed of the command line: CPU seconds and peak RSS of ``hybridsim --help``, ``hybridsim validate
examples/quickstart.yaml`` and ``hybridsim validate`` of job streams of the NASA iPSC/860 trace (its first 1,000 jobs,
and the whole trace: 18,066 jobs).

Each command runs in a fresh ``python -m hybridsim`` process; its user + system CPU time and its peak RSS are that
child's own (``os.wait4``: the kernel's resource usage of the child, as ``resource.getrusage(RUSAGE_CHILDREN)``
would sum it), so interpreter start-up and every import count. Best (minimum) and median of ``--repeat`` runs:
on a shared machine the minimum is the cost of the command, the rest is other people's load.

The streams are written once by ``hybridsim scenario-from-swf`` from ``$HYBRIDSIM_REFERENCE_DATA/traces/
NASA-iPSC-1993-3.1-cln.swf`` onto ``examples/dragonfly-1056-3jobs.yaml`` (defaults otherwise: EASY, contiguous,
milc/lammps/nn drawn per job; ``--jobs 1000`` for the first) into ``--workdir`` and reused while the command that
wrote them is the same. The whole trace's rank-iterations (18.9 M) exceed the default
``limits.max_rank_iterations`` (10 M), so it is validated with ``--limit max_rank_iterations=100000000``: the whole
check runs (YAML, schema, limits, the scheduler's dry run of all 18,066 jobs) rather than stopping at that limit.
Run::

    HYBRIDSIM_REFERENCE_DATA=<reference data folder> python benchmarks/cli_speed.py [--repeat 5] [--workdir DIR]

Prints a Markdown table (benchmarks/RESULTS_cli.md holds the latest, with the command).
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
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TRACE = "traces/NASA-iPSC-1993-3.1-cln.swf"
SYSTEM = REPO / "examples" / "dragonfly-1056-3jobs.yaml"
#: targets of issue 26: CPU seconds (and MB for the full trace)
TARGETS = {"--help": (0.5, None), "validate quickstart": (0.5, None), "validate 1,000 trace jobs": (None, None),
           "validate full NASA trace": (10.0, 300)}


def reference_trace() -> Path:
    root = os.environ.get("HYBRIDSIM_REFERENCE_DATA")
    if not root:
        sys.exit("cli_speed: set HYBRIDSIM_REFERENCE_DATA to the reference-data folder (the one with traces/, "
                 "docs/reference-data.md); the full-trace stream is generated from its NASA iPSC/860 trace")
    trace = Path(root) / TRACE
    if not trace.is_file():
        sys.exit(f"cli_speed: no trace {trace} (HYBRIDSIM_REFERENCE_DATA={root} should hold {TRACE})")
    return trace


def hybridsim(*args: str) -> list[str]:
    return [sys.executable, "-m", "hybridsim", *args]


def child_env() -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def measure(cmd: list[str]) -> tuple[float, float, int]:
    """(CPU seconds, peak RSS MB, exit status) of one run of ``cmd`` (its output discarded)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=child_env(), cwd=REPO)
    err = proc.stderr.read()
    _pid, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"cli_speed: {shlex.join(cmd)} failed ({proc.returncode}):\n{err.decode(errors='replace')}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, proc.returncode


def trace_scenario(workdir: Path, jobs: int | None = None) -> Path:
    """The trace (whole, or its first ``jobs``) as one stream scenario, written once (kept while the command that
    wrote it is the same)."""
    stem = "nasa-full-stream" if jobs is None else f"nasa-{jobs}-stream"
    out = workdir / f"{stem}.yaml"
    cmd = hybridsim("scenario-from-swf", str(reference_trace()), "--system", str(SYSTEM), "-o", str(out), "--force",
                    *(["--jobs", str(jobs)] if jobs else []))
    stamp = workdir / f"{stem}.cmd"
    if out.is_file() and stamp.is_file() and stamp.read_text() == shlex.join(cmd):
        return out
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"writing {out} (once): {shlex.join(cmd[1:])}", file=sys.stderr)
    subprocess.run(cmd, check=True, env=child_env(), cwd=REPO, stdout=subprocess.DEVNULL)
    stamp.write_text(shlex.join(cmd))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per command (default 5; 3 for the full trace)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hybridsim-cli-speed",
                    help="where the trace scenarios are written and kept (default $TMPDIR/hybridsim-cli-speed)")
    args = ap.parse_args(argv)
    stream, first = trace_scenario(args.workdir), trace_scenario(args.workdir, 1000)
    cases = [
        ("--help", hybridsim("--help"), args.repeat),
        ("validate quickstart", hybridsim("validate", "examples/quickstart.yaml"), args.repeat),
        ("validate 1,000 trace jobs", hybridsim("validate", str(first)), args.repeat),
        ("validate full NASA trace", hybridsim("validate", str(stream), "--limit", "max_rank_iterations=100000000"),
         max(1, min(args.repeat, 3))),
    ]
    print(f"Python {platform.python_version()}, PyYAML {yaml.__version__} (libyaml: {yaml.__with_libyaml__}), "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start\n")
    print("| command | runs | CPU s best | CPU s median | peak RSS MB (best run) | target |")
    print("|---|---|---|---|---|---|")
    for name, cmd, n in cases:
        runs = [measure(cmd) for _ in range(n)]
        cpu = [r[0] for r in runs]
        best = min(runs)
        cpu_t, mb_t = TARGETS[name]
        target = (f"<= {cpu_t:g} s" if cpu_t else "") + (f", <= {mb_t} MB" if mb_t else "")
        shown = shlex.join(["hybridsim"] + [Path(a).name if a in (str(stream), str(first)) else a for a in cmd[3:]])
        print(f"| `{shown}` | {n} | {best[0]:.2f} | {statistics.median(cpu):.2f} | "
              f"{best[1]:.0f} | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
