"""Rebuild tests/data/ from the full reference data (HYBRIDSIM_REFERENCE_DATA): the subset of the recorded CODES runs
and the SWF trace that the suite reads without the variable.

    HYBRIDSIM_REFERENCE_DATA=/path/to/data python tests/data/bundle.py

Kept: every file of the reference CODES runs that the parsers, importer and writers read, except the large sample
tables of the long runs (listed in ``LEFT_OUT``; the tests that need them are marked ``reference_data``) and the
reference folder's own prose (README, FORMATS). The NASA trace is stored gzipped. ``tests/test_refdata.py`` checks,
with the variable set, that every file here is a byte copy of the reference.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: runs of the reference codes/ folder that the suite reads (run D is read by no test)
RUNS = ("A-72node-synthetic-uniform", "B-72node-milc", "C-1056node-milc-lammps-nn", "E-72node-milc-lammps-syn",
        "F-1056node-milc-lammps-syn", "optrace")

#: paths (relative to codes/, regular expressions) left out: the big tables of runs C, E, F and the 1,056-node op trace
LEFT_OUT = (
    r"^(C-1056node-milc-lammps-nn/hf-random-seq|E-72node-milc-lammps-syn/hf-random-seq|"
    r"F-1056node-milc-lammps-syn/hf-random-opt-np2)/ross-stats-decoded/",
    r"^C-1056node-milc-lammps-nn/hf-random-seq/lp-io/dragonfly-router-(traffic|busytime)-sample",
    r"^(E-72node-milc-lammps-syn/hf-random-seq|F-1056node-milc-lammps-syn/hf-random-opt-np2)/iteration-logs/",
    r"^optrace/r1056/mpi-op-logs",
    r"/packet-latency-trace/",
    r"(^|/)(README[^/]*|FORMATS\.txt|[^/]*\.md)$",
)

TRACE = "NASA-iPSC-1993-3.1-cln.swf"


def selected(codes: Path) -> list[str]:
    out = []
    for run in RUNS:
        for p in sorted((codes / run).rglob("*")):
            rel = p.relative_to(codes).as_posix()
            if p.is_file() and not any(re.search(x, rel) for x in LEFT_OUT):
                out.append(rel)
    out += [p.name for p in sorted(codes.glob("dfdally-72-*"))]
    return out


def main() -> int:
    root = os.environ.get("HYBRIDSIM_REFERENCE_DATA")
    if not root or not (Path(root) / "codes").is_dir():
        print("set HYBRIDSIM_REFERENCE_DATA to the reference data folder (with codes/ and traces/)", file=sys.stderr)
        return 2
    codes = Path(root) / "codes"
    shutil.rmtree(HERE / "codes", ignore_errors=True)
    for rel in selected(codes):
        dst = HERE / "codes" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(codes / rel, dst)
    (HERE / "traces").mkdir(exist_ok=True)
    with open(Path(root) / "traces" / TRACE, "rb") as src, open(HERE / "traces" / (TRACE + ".gz"), "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
