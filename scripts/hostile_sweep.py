#!/usr/bin/env python3
"""Re-run the classes of the hostile-input sweep of issue 35 and count the outcomes.

Each case is a command (or, for a scenario, ``validate`` then ``run``) that must be refused: exit 2 with a message
and no traceback, before any work. Every command runs as ``python -m hybridsim`` in a subprocess with a wall-clock
timeout and an address-space cap, and is classed:

* ``clean``: exit 2 (or, for ``report``/``run``, the refusal the case expects), no traceback;
* ``traceback``: a Python traceback on stderr;
* ``hang``: killed at the timeout, or out of memory under the cap (``MemoryError``, signal);
* ``silent``: exit 0 where a refusal was due;
* ``late``: ``validate`` said ok and ``run`` then failed (exit 1, a failed run directory).

Usage (from the repository root; about 2-4 min on 2 cores)::

    PYTHONPATH=$PWD python scripts/hostile_sweep.py [--timeout 60] [--memory-gb 8] [-k SUBSTRING] [--list] [--repo DIR]

Exit status 0 when every case is clean, 1 otherwise. Item 4 (schedule speed) and item 9 (director quotas) are
measured by their own benchmarks and tests, not here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOPO = "topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2%s}\n"
JOB = "  - {name: a, ranks: 4, iterations: 3, workload: {kind: allreduce, size: 1024}}\n"
TINY = TOPO % "" + "jobs:\n" + JOB


@dataclass
class Case:
    item: int
    name: str
    #: the commands, in order (``{d}``: the case's folder); a scenario case is ``validate`` then ``run``
    commands: list[list[str]]
    #: files to write first: name -> text, bytes, or a callable(folder) that makes it
    files: dict = field(default_factory=dict)
    #: the exit status of a clean refusal (``run`` of a started run that is stopped by a limit: 1)
    want: int = 2


def _scenario(item: int, name: str, text: str, files: dict | None = None, mode: str = "simulate",
              extra: list[str] | None = None) -> Case:
    files = {"s.yaml": text, **(files or {})}
    return Case(item, name, [["validate", "s.yaml", *(extra or [])],
                             ["run", "s.yaml", "-o", "out", "--no-progress", "--mode", mode, *(extra or [])]], files)


def _connections(cut: bool):
    def make(d: Path) -> None:
        import numpy as np

        from hybridsim_common.topology import Dragonfly, DragonflyShape

        t = Dragonfly(DragonflyShape(9, 4, 2, 2))
        t.write_codes_files(d / "intra", d / "inter")
        if cut:
            links = np.fromfile(d / "inter", dtype="<i4").reshape(-1, 2).tolist()
            keep = [(s, e) for s, e in links if {s // 4, e // 4} != {0, 1}]
            np.asarray(keep, "<i4").tofile(d / "inter")
    return make


def _bomb(lines: bool):
    def make(d: Path) -> None:
        with gzip.open(d / "t.swf.gz", "wb", compresslevel=9) as fh:
            chunk = b"0\n" * (1 << 21) if lines else b"0" * (1 << 22)
            for _ in range(16):
                fh.write(chunk)
    return make


def _device(target: str):
    def make(d: Path) -> None:
        for name in ("t.swf", "s.yaml"):
            if target == "fifo":
                os.mkfifo(d / name)
            else:
                (d / name).symlink_to(target)
    return make


def _pure(edit):
    """A completed pure run of TINY in ``pure/`` whose table is edited (``edit(columns)``, digest recorded again),
    and a scenario using it as its oracle."""
    def make(d: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from hybridsim_common.rundir import refresh_digest

        (d / "p.yaml").write_text(TINY)
        subprocess.run([sys.executable, "-m", "hybridsim", "run", "p.yaml", "-o", "pure", "--no-progress"], cwd=d,
                       check=True, capture_output=True, env=_env())
        t = pq.read_table(d / "pure" / "iterations.parquet")
        cols = edit({c: t.column(c).to_numpy(zero_copy_only=False).copy() for c in t.column_names})
        pq.write_table(pa.table(cols), d / "pure" / "iterations.parquet")
        refresh_digest(d / "pure", "iterations.parquet")
        (d / "s.yaml").write_text(TINY + f"surrogate: {{model: 'oracle:run={d / 'pure'}'}}\n"
                                  "controller: {policy: periodic, params: {ft: 2}}\n")
    return make


def _x10(c):
    c["end"] = c["start"] + (c["end"] - c["start"]) * 10
    return c


def _nan(c):
    import numpy as np

    c["end"][0] = np.nan
    return c


def _relabel(c):
    c["job"] = c["job"].astype(object)
    c["job"][c["rank"] == 0] = "b"
    return c


def _run_dir(edit):
    def make(d: Path) -> None:
        (d / "p.yaml").write_text(TINY)
        subprocess.run([sys.executable, "-m", "hybridsim", "run", "p.yaml", "-o", "r", "--no-progress"], cwd=d,
                       check=True, capture_output=True, env=_env())
        edit(d / "r")
    return make


def _half(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _fifo_in(name: str):
    def edit(r: Path) -> None:
        (r / name).unlink()
        os.mkfifo(r / name)
    return edit


def cases() -> list[Case]:
    bg = TINY + "  - {name: bg, ranks: 16, workload: {kind: uniform_random, msg_size: 100000, interval: 1}}\n"
    bench = ["bench", "s.yaml", "-o", "b", "--no-progress"]
    out = [
        # 1: an offered load above what the network carries
        _scenario(1, "uniform_random 100000 B every 1 ns", bg),
        _scenario(1, "uniform_random 4096 B every 700 ns (1.04 x a link)",
                  TINY + "  - {name: bg, ranks: 16, workload: {kind: uniform_random, interval: 700}}\n"),
        Case(1, "overload let through by hand: stopped at the queue cap", [
            ["run", "s.yaml", "-o", "out", "--no-progress", "--limit", "max_offered_load=1e6"]], {"s.yaml": bg}, 1),
        # 2 and 8: bench options checked before the pure run
        *[Case(2, f"bench {' '.join(a)}", [bench + a], {"s.yaml": TINY}) for a in (
            ["--policy", "periodc"], ["--policy", "confident:target_error=0"], ["--policy", "nosuchmodule:P"],
            ["--policy", "periodic:ft=0"], ["--sweep-ft", "4,0"], ["--sweep-ft", "1"], ["--surrogate", "ridg"],
            ["--surrogate", "lstm:hidden=0"], ["--policy", "periodic:ft=["])],
        Case(2, "bench on CODES with a policy its director refuses", [bench + ["--policy", "confident"]],
             {"s.yaml": TINY + "backend: {kind: codes}\n"}),
        Case(8, "bench --seeds 1000000000", [bench + ["--seeds", "1000000000"]], {"s.yaml": TINY}),
        # 3: devices, FIFOs and bombs wherever a path is read
        *[Case(3, f"{cmd} on {what}", [args], {"base.yaml": TINY, "_": _device(target)})
          for what, target in (("/dev/zero", "/dev/zero"), ("/dev/urandom", "/dev/urandom"), ("a FIFO", "fifo"))
          for cmd, args in (("schedule", ["schedule", "t.swf", "-o", "o"]),
                            ("scenario-from-swf", ["scenario-from-swf", "t.swf", "--system", "base.yaml", "-o",
                                                   "o.yaml"]),
                            ("validate", ["validate", "s.yaml"]))],
        *[Case(3, f"{cmd} on a gzip bomb ({kind})", [args], {"base.yaml": TINY, "_": _bomb(lines)})
          for kind, lines in (("one endless line", False), ("endless short lines", True))
          for cmd, args in (("schedule", ["schedule", "t.swf.gz", "-o", "o"]),
                            ("scenario-from-swf", ["scenario-from-swf", "t.swf.gz", "--system", "base.yaml", "-o",
                                                   "o.yaml"]))],
        # 5: oracle:run= on a tampered run (digests forged)
        *[_scenario(5, f"oracle:run= on a run with {what}", "", {"_": _pure(fn)}, mode="hybrid")
          for what, fn in (("end times x10", _x10), ("a NaN time", _nan), ("relabelled rows", _relabel))],
        # 6: report on broken run and bench directories
        *[Case(6, f"report: {what}", [["report", "r", "-o", "rep"]], {"_": _run_dir(fn)}) for what, fn in (
            ("half-written iterations.parquet", lambda r: _half(r / "iterations.parquet")),
            ("summary.json not JSON", lambda r: (r / "summary.json").write_text("{")),
            ("ports.parquet of random bytes", lambda r: (r / "ports.parquet").write_bytes(os.urandom(999))),
            ("summary.json a FIFO", _fifo_in("summary.json")),
            ("iterations.parquet a FIFO", _fifo_in("iterations.parquet")))],
        *[Case(6, f"report: bench.json {what}", [["report", "b", "-o", "rep"]], {"b/bench.json": text})
          for what, text in (("a list", "[]"), ("cut short", '{"runs": ['), ("with a bare run", '{"runs": [{}]}'))],
        # 7: what run refused late
        _scenario(7, "vc_buffer 2^53", TOPO % ", vc_buffer: {local: 9007199254740992}" + "jobs:\n" + JOB),
        _scenario(7, "packet_size 2^31", TOPO % ", packet_size: 2147483648" + "jobs:\n" + JOB),
        _scenario(7, "a plug-in tag of 2^63", TINY.replace("kind: allreduce, size: 1024",
                                                           "kind: custom, function: 'bigtag:two'"),
                  {"bigtag.py": "from hybridsim.workloads import Program\n"
                                "def two(rank, iteration, n_ranks):\n    p = Program(rank, n_ranks)\n"
                                "    p.sendrecv((rank + 1) % n_ranks, 64, (rank - 1) % n_ranks, 2**63)\n"
                                "    return p.ops\n"}, extra=["--plugin-path", "."]),
        _scenario(7, "connection files whose groups are not all linked",
                  TOPO % ", connections: {intra: intra, inter: inter}" + "jobs:\n"
                  "  - {name: a, ranks: 72, iterations: 2, workload: {kind: allreduce, size: 1024}}\n",
                  {"_": _connections(cut=True)}),
        Case(7, "topology on connection files whose groups are not all linked", [["topology", "s.yaml"]],
             {"s.yaml": TOPO % ", connections: {intra: intra, inter: inter}" + "jobs:\n" + JOB,
              "_": _connections(cut=True)}),
        _scenario(7, "only background jobs, no end",
                  TOPO % "" + "jobs:\n  - {name: bg, ranks: 4, workload: {kind: uniform_random}}\n"),
        _scenario(7, "a job stream on the remote backend", TINY + "scheduler: {queue: fcfs}\n"
                                                               "backend: {remote: 'localhost:1'}\n"),
        # 10: files the project writes, read back
        Case(10, "corpus into a folder with another program's corpus.json",
             [["corpus", "spec.yaml", "-o", "c", "--no-progress"]],
             {"c/corpus.json": '{"runs": [{"id": 0, "dir": "runs/0000"}]}', "c/mine.txt": "x",
              "spec.yaml": "name: t\nseed: 1\nruns: 1\nspace:\n  topology:\n    - {groups: 3, routers_per_group: 2, "
                           "terminals_per_router: 2, global_channels_per_router: 1}\n"}),
        Case(10, "pretrain on another program's corpus.json", [["pretrain", "c", "-o", "ck", "--no-progress"]],
             {"c/corpus.json": '{"runs": [{"dir": "runs/0000", "status": "completed"}]}'}),
        Case(10, "schedule --limit yaml_bytes below the scenario", [["schedule", "s.yaml", "-o", "o", "--limit",
                                                                    "yaml_bytes=100"]], {"s.yaml": TINY}),
    ]
    return out


#: the checkout whose code the commands run (``--repo``; default this one)
CODE = [REPO]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(CODE[0]) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")


def _limit(memory_gb: float):
    def pre() -> None:
        cap = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return pre


def run_case(case: Case, root: Path, timeout: float, memory_gb: float) -> tuple[str, str, float]:
    """(class, the last stderr line, seconds) of one case."""
    d = root / f"{case.item:02d}-{abs(hash(case.name)) % 10**8}"
    d.mkdir(parents=True)
    for name, content in case.files.items():
        if callable(content):
            try:
                content(d)
            except (OSError, subprocess.CalledProcessError, ImportError) as exc:  # the code under test failed it
                return "other", f"setting the case up failed: {exc}"[:200], 0.0
            continue
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    t0 = time.perf_counter()
    validated, said = False, ""
    for k, args in enumerate(case.commands):
        try:
            r = subprocess.run([sys.executable, "-m", "hybridsim", *args], cwd=d, env=_env(), capture_output=True,
                               text=True, timeout=timeout, preexec_fn=_limit(memory_gb))
        except subprocess.TimeoutExpired:
            return "hang", f"{args[0]}: no answer in {timeout:g} s", time.perf_counter() - t0
        last = (r.stderr.strip().splitlines() or [""])[-1][:160]
        if "Traceback" in r.stderr:
            return "traceback", f"{args[0]}: {last}", time.perf_counter() - t0
        if r.returncode < 0 or "MemoryError" in r.stderr:
            return "hang", f"{args[0]}: killed (signal {-r.returncode}) or out of memory", time.perf_counter() - t0
        if args[0] == "validate" and r.returncode == 0 and k + 1 < len(case.commands):
            validated = True
            continue
        if r.returncode == 0:
            return "silent", f"{args[0]}: exit 0", time.perf_counter() - t0
        if validated and r.returncode == 1:
            return "late", f"{args[0]}: {last}", time.perf_counter() - t0
        if r.returncode != case.want:
            return "late" if r.returncode == 1 else "other", f"{args[0]}: exit {r.returncode}: {last}", \
                time.perf_counter() - t0
        said = said or f"{args[0]}: {last}"  # a scenario: run must refuse it as validate did, writing nothing
    if case.want == 2 and (d / "out").exists():
        return "late", "run: refused after writing a run directory", time.perf_counter() - t0
    return "clean", said, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a command may take (a hang past it)")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap of each command")
    ap.add_argument("-k", metavar="SUBSTRING", help="only the cases whose name contains it")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--repo", metavar="DIR", help="run another checkout's code (e.g. an older commit's worktree, "
                                                  "for a before/after count)")
    args = ap.parse_args(argv)
    if args.repo:
        CODE[0] = Path(args.repo).resolve()
    todo = [c for c in cases() if not args.k or args.k in c.name]
    if args.list:
        for c in todo:
            print(f"item {c.item:>2}  {c.name}")
        return 0
    counts = {k: 0 for k in ("clean", "traceback", "hang", "silent", "late", "other")}
    root = Path(tempfile.mkdtemp(prefix="hostile-sweep-"))
    try:
        for c in todo:
            cls, why, s = run_case(c, root, args.timeout, args.memory_gb)
            counts[cls] += 1
            print(f"{cls:<9} item {c.item:>2}  {c.name:<62} {s:5.1f} s  {why}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{len(todo)} cases: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    print(json.dumps(counts))
    return 0 if counts["clean"] == len(todo) else 1


if __name__ == "__main__":
    sys.exit(main())
