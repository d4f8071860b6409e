"""Latency of hybridsim's CODES director (``hybridsim serve --codes-director``) as CODES' client sees it.

The server runs as its own process (as beside CODES); a ZeroMQ REQ client sends the requests CODES' director LP
sends: ``send-records`` batches of 9 iteration times per rank (DIR_MAX_TRAINING_RECORDS - 1), ``inference`` of 5 steps
(DIR_MAX_PREDICTION) per rank, plus ``nothing`` probes and one ``train-model``. Run::

    OMP_NUM_THREADS=1 python benchmarks/codes_director_latency.py [--clients 72] [--rounds 20] [--model ridge]

Prints a table (median / p95 / mean ms per request) and writes benchmarks/out/codes_director_latency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zmq


def dreq(op: str, args: list, data: bytes = b"") -> bytes:
    head = json.dumps({"cmd": "director-request", "surrogate_family": "iteration-time",
                       "surrogate_backend": "director", "operation": op, "args": [str(a) for a in args]},
                      separators=(",", ":"))
    return head.encode() + b"\x00" + data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=72)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--probes", type=int, default=2000)
    ap.add_argument("--model", default="ridge")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "codes_director_latency.json"))
    a = ap.parse_args(argv)

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "serve", "--codes-director", "tcp://127.0.0.1:*",
                             "--model", a.model], stderr=subprocess.PIPE, text=True, env=env)
    t_start = time.perf_counter()
    line = proc.stderr.readline()
    startup = time.perf_counter() - t_start
    m = re.search(r"on (tcp://\S+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"server did not start: {line}")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.RCVTIMEO, 60000)
    sock.connect(m.group(1))

    def call(raw: bytes) -> tuple[float, dict]:
        t0 = time.perf_counter()
        sock.send(raw)
        rep = json.loads(sock.recv())
        dt = time.perf_counter() - t0
        if rep["status"] != "done":
            raise SystemExit(f"request failed: {rep}")
        return dt, rep

    rng = np.random.default_rng(0)
    lat: dict[str, list[float]] = {"nothing": [], "send-records (9 values)": [], "inference (5 steps)": [],
                                   "train-model (all)": []}
    server_et: dict[str, list[float]] = {k: [] for k in lat}
    for _ in range(a.probes):
        dt, rep = call(b'{"cmd":"nothing"}\x00')
        lat["nothing"].append(dt)
        server_et["nothing"].append(float(rep["et"]))
    base = 4.3e5 * (1 + 0.05 * rng.standard_normal(a.clients))
    for rnd in range(a.rounds):
        for c in range(a.clients):
            vals = base[c] * (1 + 0.02 * rng.standard_normal(9))
            dt, rep = call(dreq("send-records", [3, c, 9], " ".join(f"{v:.6f}" for v in vals).encode()))
            lat["send-records (9 values)"].append(dt)
            server_et["send-records (9 values)"].append(float(rep["et"]))
        for c in range(a.clients):
            dt, rep = call(dreq("inference", [3, c, 5]))
            lat["inference (5 steps)"].append(dt)
            server_et["inference (5 steps)"].append(float(rep["et"]))
    dt, rep = call(dreq("train-model", [1, "all"]))
    lat["train-model (all)"].append(dt)
    server_et["train-model (all)"].append(float(rep["et"]))
    call(b'{"cmd":"exit"}\x00')
    sock.close(0)
    ctx.term()
    proc.wait(30)

    rows = []
    print(f"hybridsim codes-director, model {a.model}, {a.clients} clients x {a.rounds} rounds "
          f"(server start-up {startup:.2f} s)")
    print(f"{'request':<26}{'n':>7}{'median ms':>11}{'p95 ms':>9}{'mean ms':>9}{'server ms':>11}")
    for k, v in lat.items():
        arr = np.asarray(v) * 1e3
        et = np.asarray(server_et[k]) * 1e3
        row = {"request": k, "n": len(arr), "median_ms": float(np.median(arr)),
               "p95_ms": float(np.percentile(arr, 95)), "mean_ms": float(arr.mean()),
               "server_mean_ms": float(et.mean())}
        rows.append(row)
        print(f"{k:<26}{row['n']:>7}{row['median_ms']:>11.3f}{row['p95_ms']:>9.3f}{row['mean_ms']:>9.3f}"
              f"{row['server_mean_ms']:>11.3f}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": a.model, "clients": a.clients, "rounds": a.rounds,
                               "startup_s": startup, "rows": rows, "machine": platform.platform(),
                               "cpus": os.cpu_count()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
