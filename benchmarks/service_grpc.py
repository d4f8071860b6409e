"""gRPC service costs over loopback: Predict latency/throughput for the 1,056-node system's shapes, and the overhead
the remote engine (+ remote surrogate) adds to a small hybrid run.

Servers run as their own processes (``hybridsim serve --grpc/--engine``), as they would beside a controller. Run::

    OMP_NUM_THREADS=1 python benchmarks/service_grpc.py [--calls 300] [--threads 16] [--per-thread 40] [--repeats 3]

Predict cases (512 ranks = the largest job of the 1,056-node scenarios):
  * history: look-back 8 per rank (4,096 float64) -> 512 predictions (ridge, k=8, fitted);
  * graphs:  the same plus the job's last 2 port graphs (2 x 3,960 ports x 30 features float32, 950 kB), as SMART's
    GNN branch takes them (model LAST, so the figure is transport + validation, not model time).
Engine overhead: the same hybrid scenario (72-node system, 2 jobs, periodic policy, ridge) in-process vs through
``RemoteBackend`` to an engine server in the same process (threads: the protocol's CPU cost, GIL shared), to an engine
server process, and additionally with ``RemoteSurrogate`` (surrogate server process); records are checked identical. Prints tables; writes benchmarks/out/service_grpc.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HYBRID = """
seed: 3
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - name: milc
    ranks: 16
    iterations: 40
    workload: {kind: milc, dimension_sizes: [2, 2, 2, 2], msg_size: 16384}
  - name: nn
    ranks: 8
    iterations: 40
    workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 16384, max_dimension_distance: 1}
placement: {policy: random}
sampling: {interval: 50us}
surrogate: {model: ridge, config: {k: 4}}
controller: {policy: periodic, params: {warmup: 8, ft: 8, truth: 1}}
"""


def spawn(args: list[str]):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"listening on (\S+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r} {proc.stderr.read()}")
    return proc, m.group(1)


def stop(proc) -> int:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    return proc.returncode


def pct(x, q):
    return float(np.percentile(np.asarray(x) * 1e3, q))


def bench_predict(a) -> dict:
    from hybridsim.service.client import RemoteSurrogate
    from surrogate.base import Context
    from surrogate.registry import create

    R, L, P, F = 512, 8, 3960, 30
    rng = np.random.default_rng(0)
    hist = 4.3e5 * (1 + 0.05 * rng.random((R, L)))
    graphs = rng.random((2, P, F)).astype(np.float32)
    mask = np.zeros(P, bool)
    rank_port = rng.choice(P, R, replace=False)
    mask[rank_port] = True
    out = {}
    with tempfile.TemporaryDirectory() as td:
        ridge = create("ridge", k=8)
        t = np.arange(64)
        ridge.fit_series([4.3e5 * (1 + 0.05 * np.sin(t / 3 + r)) for r in range(32)])
        ridge.save(Path(td) / "ridge8")
        cases = [("history", ["--model", str(Path(td) / "ridge8")], None, ridge),
                 ("graphs", ["--model", "last"], graphs, create("last"))]
        for name, model_args, g, local in cases:
            proc, addr = spawn(["--grpc", "127.0.0.1:0", *model_args, "--max-in-flight", "64"])
            try:
                ctx = Context("milc", "milc", hist, graphs=g, mask=mask, rank_port=rank_port)
                c = RemoteSurrogate(addr)
                for _ in range(20):
                    c.predict(ctx)          # warm-up (and OpenJob)
                lat = []
                for _ in range(a.calls):
                    t0 = time.perf_counter()
                    y = c.predict(ctx)
                    lat.append(time.perf_counter() - t0)
                assert np.array_equal(y, local.predict(ctx)), "remote prediction differs from in-process"
                loc = []
                for _ in range(min(a.calls, 100)):
                    t0 = time.perf_counter()
                    local.predict(ctx)
                    loc.append(time.perf_counter() - t0)
                clients = [RemoteSurrogate(addr) for _ in range(a.threads)]
                for cl in clients:
                    cl.predict(ctx)

                def worker(i):
                    cl, ts = clients[i], []
                    for _ in range(a.per_thread):
                        t0 = time.perf_counter()
                        cl.predict(ctx)
                        ts.append(time.perf_counter() - t0)
                    return ts

                t0 = time.perf_counter()
                with ThreadPoolExecutor(a.threads) as ex:
                    conc = [x for ts in ex.map(worker, range(a.threads)) for x in ts]
                wall = time.perf_counter() - t0
                st = c.status()
                for cl in [c, *clients]:
                    cl.close()
            finally:
                rc = stop(proc)
            req_bytes = R * L * 8 + (g.nbytes if g is not None else 0)
            out[name] = {
                "ranks": R, "lookback": L, "request_bytes": req_bytes,
                "graphs_shape": None if g is None else list(g.shape),
                "sequential": {"calls": a.calls, "median_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                               "calls_per_s": a.calls / sum(lat), "rank_predictions_per_s": a.calls * R / sum(lat)},
                "in_process_median_ms": pct(loc, 50),
                "concurrent": {"threads": a.threads, "calls": len(conc), "median_ms": pct(conc, 50),
                               "p99_ms": pct(conc, 99), "calls_per_s": len(conc) / wall,
                               "rank_predictions_per_s": len(conc) * R / wall},
                "server_predict_calls": st.predict_calls, "server_exit": rc}
    return out


def bench_engine(a) -> dict:
    from hybridsim.engine import Engine
    from hybridsim.runner import build_controller
    from hybridsim.scenario import parse_scenario
    from hybridsim.service.client import RemoteSurrogate
    from hybridsim.service.remote import RemoteBackend

    sc = parse_scenario(HYBRID)
    eproc, eaddr = spawn(["--engine", "127.0.0.1:0"])
    sproc, saddr = spawn(["--grpc", "127.0.0.1:0", "--model", "ridge", "--model-option", "k=4"])
    from hybridsim.service.engine_server import EngineServer

    local_srv = EngineServer()            # same process, own threads: isolates the protocol's CPU cost
    laddr = local_srv.start()
    rows = {"in_process": [], "remote_engine_same_process": [], "remote_engine": [],
            "remote_engine_and_surrogate": []}
    cpu = {k: [] for k in rows}
    ref = None
    info = {}
    try:
        kinds = list(rows)
        for rep in range(a.repeats + 1):          # round 0 warms up both processes (imports, caches): not timed
            for kind in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:
                ctl = build_controller(sc)
                rs = None
                if kind == "remote_engine_and_surrogate":
                    rs = RemoteSurrogate(saddr)      # re-declares the jobs (OpenJob replaces them) on first use
                    ctl.surrogate = rs
                backend = (Engine(sc, progress=False) if kind == "in_process" else
                           RemoteBackend(laddr if kind == "remote_engine_same_process" else eaddr, sc))
                blocks = []
                t0, c0 = time.perf_counter(), time.process_time()
                res = backend.run(director=ctl, on_record=ctl.on_record, on_samples=blocks.append)
                if rep:
                    rows[kind].append(time.perf_counter() - t0)
                    cpu[kind].append(time.process_time() - c0)
                if rs is not None:
                    rs.close()
                if ref is None:
                    ref = res
                    info = {"records": len(res.records), "events": res.events,
                            "predicted_records": int(sum(not s for s in res.simulated)),
                            "sample_blocks": len(blocks), "ports_shape": list(res.ports.values.shape)}
                else:
                    assert res.records == ref.records and res.simulated == ref.simulated, kind
                if kind != "in_process":
                    info.setdefault("director_calls", res.stats["remote"]["director_calls"])
    finally:
        info["server_exit"] = [stop(eproc), stop(sproc)]
        local_srv.stop(0)
    base = float(np.min(rows["in_process"]))
    n_calls = max(1, info.get("director_calls", 1))
    return {"scenario": "72-node, milc 16 + nn 8 ranks x 40 iterations, periodic(warmup 8, ft 8), ridge k=4",
            **info, "repeats": a.repeats,
            "wall_s_min": {k: float(np.min(v)) for k, v in rows.items()},
            "wall_s_median": {k: float(np.median(v)) for k, v in rows.items()},
            # CPU of this process (all threads): the whole cost for in_process and remote_engine_same_process
            "cpu_s_median": {k: float(np.median(cpu[k])) for k in ("in_process", "remote_engine_same_process")},
            "overhead_s": {k: float(np.min(v)) - base for k, v in rows.items() if k != "in_process"},
            "overhead_ms_per_director_call": {k: (float(np.min(v)) - base) / n_calls * 1e3
                                              for k, v in rows.items() if k != "in_process"},
            "cpu_overhead_ms_per_director_call_same_process":
                (float(np.median(cpu["remote_engine_same_process"])) - float(np.median(cpu["in_process"])))
                / n_calls * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--per-thread", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "service_grpc.json"))
    a = ap.parse_args(argv)
    import gc

    import hybridsim.engine  # noqa: F401 - import the heavy modules, then keep them out of the GC's way
    import surrogate.models.history  # noqa: F401
    gc.collect()
    gc.freeze()
    res = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
           "predict": bench_predict(a), "engine": bench_engine(a)}
    print("Predict over loopback (512 ranks):")
    print(f"{'case':<9} {'req kB':>8} {'median ms':>10} {'p99 ms':>8} {'calls/s':>8} {'in-proc ms':>10} | "
          f"{'16 thr median':>13} {'p99':>7} {'calls/s':>8} {'rank-pred/s':>11}")
    for name, r in res["predict"].items():
        s, c = r["sequential"], r["concurrent"]
        print(f"{name:<9} {r['request_bytes'] / 1e3:>8.1f} {s['median_ms']:>10.2f} {s['p99_ms']:>8.2f} "
              f"{s['calls_per_s']:>8.0f} {r['in_process_median_ms']:>10.3f} | {c['median_ms']:>13.2f} "
              f"{c['p99_ms']:>7.2f} {c['calls_per_s']:>8.0f} {c['rank_predictions_per_s']:>11.0f}")
    e = res["engine"]
    print(f"\nHybrid run ({e['scenario']}; {e['records']} records, {e['director_calls']} director calls, "
          f"{e['repeats']} runs each after a warm-up round):")
    print(f"  {'backend':<28} {'min s':>7} {'median s':>9} {'overhead (min)':>15} {'ms/call':>8} {'cpu s':>7}")
    for k, v in e["wall_s_min"].items():
        ov = "" if k == "in_process" else f"{e['overhead_s'][k]:+15.3f} {e['overhead_ms_per_director_call'][k]:8.2f}"
        c = e["cpu_s_median"].get(k)
        print(f"  {k:<28} {v:7.3f} {e['wall_s_median'][k]:9.3f} {ov:>24} {'' if c is None else f'{c:7.3f}':>7}")
    print(f"  protocol CPU cost (same process): {e['cpu_overhead_ms_per_director_call_same_process']:.2f} ms per "
          f"director call")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
