"""Speed of reading / importing the reference CODES runs (``hybridsim import-codes``).

For each run: wall and CPU time of :func:`codes_bridge.importer.read_codes_run` (parsing), of writing the hybridsim
run directory (Parquet), record and port-sample counts, and peak RSS of the process so far. Also the raw ROSS VT
binary decoder on an E-sized file (run A's binary repeated to ~120 MB). Run::

    OMP_NUM_THREADS=1 python benchmarks/codes_import_speed.py [--runs A,B,C,E,F] [--repeat 1]

Prints a table and writes benchmarks/out/codes_import_speed.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.reference_data import CODES, require  # noqa: E402

RUNS = {
    "A": "A-72node-synthetic-uniform/seq",
    "B": "B-72node-milc/hf-seq",
    "C": "C-1056node-milc-lammps-nn/hf-random-seq",
    "E": "E-72node-milc-lammps-syn/hf-random-seq",
    "F": "F-1056node-milc-lammps-syn/hf-random-opt-np2",
}


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="A,B,C,E,F")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-bin", action="store_true", help="skip the large-binary decoder measurement")
    args = ap.parse_args(argv)
    require()
    from codes_bridge.importer import import_codes_run, read_codes_run
    from codes_bridge.parsers.common import CodesWarning

    warnings.simplefilter("ignore", CodesWarning)
    rows = []
    for key in args.runs.split(","):
        d = CODES / RUNS[key]
        best = None
        for _ in range(args.repeat):
            run, w, c = _timed(lambda: read_codes_run(d))
            with tempfile.TemporaryDirectory() as tmp:
                _, w2, c2 = _timed(lambda: import_codes_run(d, Path(tmp) / "out"))
            row = {"run": RUNS[key], "records": len(run.records),
                   "port_samples": None if run.ports is None else list(run.ports.values.shape[:2]),
                   "port_source": Path(run.port_source).name if run.port_source else None,
                   "read_wall_s": round(w, 3), "read_cpu_s": round(c, 3),
                   "import_wall_s": round(w2, 3), "import_cpu_s": round(c2, 3),
                   "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
            if best is None or row["import_cpu_s"] < best["import_cpu_s"]:
                best = row
        rows.append(best)
    binrow = None
    if not args.no_bin:
        from codes_bridge.conf import parse_conf
        from codes_bridge.parsers.ross_vt import read_vt_bin

        a = CODES / RUNS["A"]
        conf = parse_conf(a / "dfdally-72-synthetic.conf")
        kinds = {lp: n for n, lps in conf.lp_layout().items() for lp in lps}
        raw = gzip.open(a / "ross-stats-raw" / "ross-stats-analysis-lps.bin.gz").read()
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "ross-stats-analysis-lps.bin"
            p.write_bytes(raw * 170)
            vt, w, c = _timed(lambda: read_vt_bin(p, kinds, 7))
            binrow = {"bytes": p.stat().st_size, "records": 3420 * 170, "wall_s": round(w, 3), "cpu_s": round(c, 3)}
    print(f"{'run':48s} {'records':>8s} {'ports (S x P)':>14s} {'read s':>7s} {'cpu':>6s} {'import s':>8s} "
          f"{'cpu':>6s} {'RSS MB':>7s}  source")
    for r in rows:
        ps = "-" if r["port_samples"] is None else f"{r['port_samples'][0]}x{r['port_samples'][1]}"
        print(f"{r['run']:48s} {r['records']:8d} {ps:>14s} {r['read_wall_s']:7.2f} {r['read_cpu_s']:6.2f} "
              f"{r['import_wall_s']:8.2f} {r['import_cpu_s']:6.2f} {r['peak_rss_mb']:7.0f}  {r['port_source']}")
    if binrow:
        print(f"VT binary decoder: {binrow['bytes'] / 1e6:.0f} MB, {binrow['records']} records: "
              f"{binrow['wall_s']:.2f} s wall, {binrow['cpu_s']:.2f} s CPU")
    out = Path(__file__).resolve().parent / "out" / "codes_import_speed.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"host": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg(),
                               "runs": rows, "vt_binary": binrow}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
