"""Benchmarks where truth is dear (issue 31, item 6): pure + hybrid with the defaults on the scenarios whose pure run
is expensive, one table into benchmarks/RESULTS.md.

    python benchmarks/truth_dear.py [--seeds N] [--scenarios NAME[,NAME...]] [--out DIR] [--results FILE]

Scenarios (benchmarks/scenarios/, none an example the defaults were tuned on, no controller or surrogate section):
``dfdally-8k-3jobs-long`` (8,320 nodes, three jobs of 60 iterations), ``stream-8k-curie`` (8,320 nodes, 119 jobs of
the CEA-Curie log), ``mix-1056-dear`` (1,056 nodes, four jobs); ``--scenarios`` also takes a scenario file.

Each (scenario, seed) is one ``hybridsim bench`` (the bench API, :func:`hybridsim.bench.run_bench`: the pure run and
the default hybrid run in one process, so the CPU ratio is taken in one process) in a child process of its own, so
its peak memory (the child's ``ru_maxrss``) is its own; seeds are the scenario's seed + 0 .. N-1. Its directory
``OUT/<scenario>/seed<S>`` holds the bench and ``peak_memory.json``; a completed one is reused, so an interrupted
command resumes where it stopped and ``--scenarios`` runs or skips scenarios one by one. The table is rebuilt from
every completed bench under ``OUT`` and replaces the one between this script's markers in ``--results`` (the section
"Where truth is dear (issue 31)"); ``--no-write`` prints it only.

Columns (hybridsim.bench's definitions): pure and hybrid CPU seconds (each run's own ``summary.json`` ``cpu_s``), CPU
ratio = pure CPU / hybrid CPU, event ratio = pure events / hybrid events, f = predicted / all job iterations, worst
job completion error %, for streams the makespan error % and the worst job run-time error %, peak memory (GB) of the
process that ran both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere: the checkout's packages first
    sys.path.insert(0, str(REPO))

SCENARIOS = {
    "dfdally-8k-3jobs-long": REPO / "benchmarks/scenarios/dfdally-8k-3jobs-long.yaml",
    "stream-8k-curie": REPO / "benchmarks/scenarios/stream-8k-curie.yaml",
    "mix-1056-dear": REPO / "benchmarks/scenarios/mix-1056-dear.yaml",
}
BEGIN = "<!-- truth_dear.py table: begin -->"
END = "<!-- truth_dear.py table: end -->"
SECTION = "## Where truth is dear (issue 31)"
PEAK = "peak_memory.json"
COLUMNS = ("scenario", "seed", "pure CPU s", "hybrid CPU s", "CPU ratio", "event ratio", "f", "worst job error %",
           "makespan error %", "worst job run-time error %", "peak memory GB")


def scenario_path(name: str) -> Path:
    """A name of :data:`SCENARIOS` or a scenario file."""
    if name in SCENARIOS:
        return SCENARIOS[name]
    p = Path(name)
    if not p.is_file():
        raise SystemExit(f"truth_dear: {name!r} is neither one of {', '.join(SCENARIOS)} nor a scenario file")
    return p


def bench_dir(out: Path, name: str, seed: int) -> Path:
    return Path(out) / name / f"seed{seed}"


def done(d: Path) -> bool:
    """A completed bench with its peak memory: reused as it is."""
    return (d / "bench.json").is_file() and (d / PEAK).is_file()


def bench_one(path: str | Path, seed: int, outdir: str | Path) -> dict:
    """``hybridsim bench`` of the scenario at ``path`` with its seed set to ``seed``, its own defaults (no policy or
    surrogate given), into ``outdir``; writes ``peak_memory.json`` (this process's peak resident set) beside
    ``bench.json`` and returns the bench's result."""
    from hybridsim.bench import run_bench
    from hybridsim.scenario import load_scenario

    sc = load_scenario(str(path))
    sc.seed = int(seed)
    sc.backend.embedded.progress = False
    outdir = Path(outdir)
    result = run_bench(sc, outdir, force=True, argv=[sys.argv[0], "--one", str(path), str(seed), str(outdir)])
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # kB on Linux
    (outdir / PEAK).write_text(json.dumps({"peak_rss_bytes": peak_kb * 1024, "scenario": str(path),
                                           "seed": int(seed)}) + "\n")
    return result


def rows_of(d: Path, name: str) -> list[dict]:
    """The table's rows of one completed bench directory: one per hybrid run."""
    bench = json.loads((d / "bench.json").read_text())
    peak = json.loads((d / PEAK).read_text())["peak_rss_bytes"]
    pure_cpu = bench["pure"]["cpu_s"]
    rows = []
    for r in bench["runs"]:
        hsum = json.loads((d / r["run"] / "summary.json").read_text())
        rows.append({
            "scenario": name, "seed": r["seed"], "policy": r["policy"], "surrogate": r["surrogate_spec"],
            "pure CPU s": pure_cpu, "hybrid CPU s": hsum["cpu_s"],
            "CPU ratio": pure_cpu / hsum["cpu_s"] if hsum["cpu_s"] else None,
            "event ratio": r["theoretical_speedup"], "f": r["surrogate_fraction"],
            "worst job error %": r["max_completion_error_pct"],
            "makespan error %": r.get("makespan_error_pct"),
            "worst job run-time error %": r.get("max_run_time_error_pct"),
            "peak memory GB": peak / 1e9,
            "events pure": r["events_pure"], "events hybrid": r["events_hybrid"],
        })
    return rows


def _cell(v, col: str) -> str:
    if v is None:
        return "-"
    if col in ("scenario", "seed"):
        return str(v)
    if col in ("pure CPU s", "hybrid CPU s"):
        return f"{v:.1f}"
    if col == "f":
        return f"{v:.2f}"
    return f"{v:.2f}"


def format_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * (len(COLUMNS) - 1)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r[c], c) for c in COLUMNS) + " |")
    return "\n".join(lines)


def collect(out: Path, names: list[str]) -> list[dict]:
    """Rows of every completed bench under ``out``: the named scenarios first, in order, then any others."""
    out = Path(out)
    found = sorted(p.name for p in out.iterdir() if p.is_dir()) if out.is_dir() else []
    rows = []
    for name in list(dict.fromkeys(names + found)):
        base = out / name
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir(), key=lambda p: (len(p.name), p.name)):
            if d.is_dir() and done(d):
                rows += rows_of(d, name)
    return rows


def write_results(path: Path, table: str, command: str) -> None:
    """Replace the table between the markers of the issue-31 section of ``path`` (the section and markers are
    appended where missing); the rest of the file is left as it is."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    block = f"{BEGIN}\n`{command}` ({time.strftime('%Y-%m-%d', time.gmtime())}):\n\n{table}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        if SECTION not in text:
            text = text.rstrip("\n") + f"\n\n{SECTION}\n"
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3, help="seeds per scenario: its seed + 0 .. N-1 (default 3)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated names ({', '.join(SCENARIOS)}) or scenario files (default: all)")
    p.add_argument("--out", default=str(REPO / "results" / "truth-dear"), help="bench directories (default "
                   "results/truth-dear)")
    p.add_argument("--results", default=str(REPO / "benchmarks" / "RESULTS.md"), help="file the table goes into")
    p.add_argument("--no-write", action="store_true", help="print the table, leave --results alone")
    p.add_argument("--one", nargs=3, metavar=("SCENARIO", "SEED", "DIR"), help=argparse.SUPPRESS)  # the child
    a = p.parse_args(argv)
    if a.one:
        bench_one(a.one[0], int(a.one[1]), a.one[2])
        return 0
    if a.seeds < 1:
        p.error("--seeds must be >= 1")
    from hybridsim.scenario import load_scenario

    names = [n.strip() for n in a.scenarios.split(",") if n.strip()]
    out = Path(a.out)
    keys = []
    for name in names:
        path = scenario_path(name)
        key = name if name in SCENARIOS else path.stem
        keys.append(key)
        seed0 = load_scenario(str(path)).seed
        for k in range(a.seeds):
            d = bench_dir(out, key, seed0 + k)
            if done(d):
                print(f"{key} seed {seed0 + k}: done before ({d}), reused", flush=True)
                continue
            d.parent.mkdir(parents=True, exist_ok=True)
            print(f"{key} seed {seed0 + k}: bench into {d}", flush=True)
            rc = subprocess.call([sys.executable, __file__, "--one", str(path), str(seed0 + k), str(d)])
            if rc != 0:
                print(f"{key} seed {seed0 + k}: bench failed (exit {rc}); the others go on", file=sys.stderr)
    table = format_table(collect(out, keys))
    print(table)
    if not a.no_write:
        cmd = "python benchmarks/truth_dear.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_results(Path(a.results), table, cmd.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
