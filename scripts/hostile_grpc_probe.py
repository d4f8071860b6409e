"""Hostile and careless gRPC clients against ``hybridsim serve --grpc/--engine`` (issue #12): run the same cases against any
checkout and count clean errors / UNKNOWN-INTERNAL / hangs / leaks / accepted-without-limit.

    PYTHONPATH=/work/main python scripts/hostile_grpc_probe.py            # before
    PYTHONPATH=$PWD python scripts/hostile_grpc_probe.py                  # after

The servers run as subprocesses on 127.0.0.1 (ephemeral ports) with ``--save-dir``; every call has a deadline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np

from hybridsim.service._gen import common_pb2, engine_pb2, engine_pb2_grpc, surrogate_pb2, surrogate_pb2_grpc

CLEAN = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.ALREADY_EXISTS,
         grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
         grpc.StatusCode.OUT_OF_RANGE}
SMALL_TOPO = "topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
SECRET = Path("/etc/passwd")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def spawn(tmp: Path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp / "mods"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "hybridsim", "serve", "--grpc", "127.0.0.1:0", "--model", "mean",
           "--save-dir", str(tmp / "ckpt"), "--engine", "127.0.0.1:0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
    addr = {}
    for _ in range(2):
        line = proc.stdout.readline()
        m = re.search(r"(surrogate|engine) service.* listening on (\S+)$", line.strip())
        if not m:
            raise SystemExit(f"server did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}")
        addr[m.group(1)] = m.group(2)
    return proc, addr


def run_start(stub, text: str, timeout: float = 10.0, base_dir: str = ""):
    """Send Start; drain until Done or an error. Returns (code, details, seconds)."""
    t0 = time.monotonic()
    req = engine_pb2.EngineRequest(start=engine_pb2.Start(scenario_yaml=text, base_dir=base_dir))
    try:
        for ev in stub.Run(iter([req]), timeout=timeout):
            if ev.WhichOneof("msg") == "done":
                break
        return grpc.StatusCode.OK, "", time.monotonic() - t0
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", time.monotonic() - t0


def main() -> int:
    results = []      # (name, category, note)

    def record(name, code, details, *, leaked=False, should_refuse=True, secs=0.0, note=""):
        if leaked:
            cat = "leaked"
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            cat = "hang"
        elif code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
            cat = "unknown/internal"
        elif code == grpc.StatusCode.OK:
            cat = "accepted" if should_refuse else "clean"
        elif code in CLEAN:
            cat = "clean"
        else:
            cat = f"other:{code.name}"
        results.append((name, cat, f"{code.name} {secs:.2f}s {note} {details[:110]!r}"))

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "mods").mkdir()
        marker = tmp / "imported.marker"
        (tmp / "mods" / "probe_hostile_mod.py").write_text(
            f"open({str(marker)!r}, 'w').write('imported')\n"
            "def work(rank, iteration, n_ranks):\n    return []\n")
        (tmp / "ckpt").mkdir()
        (tmp / "ckpt" / "taken").write_text("x")
        proc, addr = spawn(tmp)
        try:
            sch = grpc.insecure_channel(addr["surrogate"], options=[("grpc.max_send_message_length", 200 << 20)])
            s = surrogate_pb2_grpc.SurrogateStub(sch)
            ech = grpc.insecure_channel(addr["engine"], options=[("grpc.max_receive_message_length", 64 << 20)])
            e = engine_pb2_grpc.EngineStub(ech)

            def call(fn, req, timeout=10.0):
                t0 = time.monotonic()
                try:
                    fn(req, timeout=timeout)
                    return grpc.StatusCode.OK, "", time.monotonic() - t0
                except grpc.RpcError as exc:
                    return exc.code(), exc.details() or "", time.monotonic() - t0

            # ---------------------------------------------------------------------------- surrogate
            r0 = rss_mb(proc.pid)
            c, m, t = call(s.OpenJob, surrogate_pb2.OpenJobRequest(job="big", workload="milc", ranks=1_000_000))
            if c == grpc.StatusCode.OK:
                c, m, t = call(s.Tune, surrogate_pb2.TuneRequest(job="big", window=1,
                                                                  durations=np.full(1_000_000, 1e5).tolist()), 30)
                for k in range(8):
                    call(s.Tune, surrogate_pb2.TuneRequest(job="big", window=64, first_iteration=64 * k + 1,
                                                           ranks=[0], durations=[1e5] * 64), 30)
                c2, m2, _ = call(s.Predict, surrogate_pb2.PredictRequest(job="big", lookback=64), 30)
                c = grpc.StatusCode.OK if c == c2 == grpc.StatusCode.OK else c
            record("OpenJob ranks=1e6 (+Tune/Predict)", c, m, secs=t, note=f"rss +{rss_mb(proc.pid) - r0:.0f} MB")
            call(s.CloseJob, surrogate_pb2.CloseJobRequest(job="big"))
            call(s.OpenJob, surrogate_pb2.OpenJobRequest(job="j", workload="milc", ranks=2))
            c, m, t = call(s.Predict, surrogate_pb2.PredictRequest(
                job="j", lookback=2, history=[1e5, 1e5, 1e5, 1e5],
                graphs=common_pb2.Tensor(dtype=common_pb2.Tensor.FLOAT32, shape=[2**62, 2, 2], data=b"")))
            record("Predict graphs shape [2**62,2,2] (int64 overflow)", c, m, secs=t)
            c, m, t = call(s.Predict, surrogate_pb2.PredictRequest(job="j", lookback=2, history=[float("nan")] * 4))
            record("Predict all-NaN history", c, m, secs=t)
            c, m, t = call(s.Predict, surrogate_pb2.PredictRequest(job="j", lookback=2,
                                                                    history=[1e5] * (9 * 1024 * 1024)), 30)
            record("Predict 72 MB message", c, m, secs=t)
            c, m, t = call(s.OpenJob, surrogate_pb2.OpenJobRequest(job="x" * 100_000, workload="milc", ranks=1))
            record("OpenJob 100k-char job id", c, m, secs=t)
            c, m, t = call(s.Save, surrogate_pb2.SaveRequest(name="taken"))
            record("Save onto an existing file", c, m, secs=t)
            call(s.Save, surrogate_pb2.SaveRequest(name="v1"))
            c, m, t = call(s.Save, surrogate_pb2.SaveRequest(name="v1"))
            record("Save onto an existing checkpoint", c, m, secs=t)
            c, m, t = call(s.Save, surrogate_pb2.SaveRequest(name="../escape"))
            record("Save ../escape", c, m, secs=t)
            c, m, t = call(s.Tune, surrogate_pb2.TuneRequest(job="j", window=4_000_000_000, durations=[1.0]))
            record("Tune window=4e9", c, m, secs=t)
            codes = set()
            t0 = time.monotonic()
            for k in range(1100):
                cc, mm, _ = call(s.OpenJob, surrogate_pb2.OpenJobRequest(job=f"id{k}", workload="milc", ranks=1))
                codes.add(cc)
            for k in range(1100):
                call(s.CloseJob, surrogate_pb2.CloseJobRequest(job=f"id{k}"))
            c = grpc.StatusCode.RESOURCE_EXHAUSTED if grpc.StatusCode.RESOURCE_EXHAUSTED in codes else \
                grpc.StatusCode.OK
            record("1100 job ids", c, str(sorted(x.name for x in codes)), secs=time.monotonic() - t0)
            req = surrogate_pb2.PredictRequest(job="j", lookback=2, history=[1e5, 2e5, 1e5, 2e5])
            t0 = time.monotonic()
            with ThreadPoolExecutor(16) as pool:
                codes = list(pool.map(lambda _: call(s.Predict, req)[0], range(500)))
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            h = health_pb2_grpc.HealthStub(sch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            bad = [x for x in codes if x not in (grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED)]
            record("flood: 500 Predict, then health", grpc.StatusCode.INTERNAL if bad or h != 1 else
                   grpc.StatusCode.OK, f"health={h} bad={len(bad)}", should_refuse=False,
                   secs=time.monotonic() - t0)

            # ---------------------------------------------------------------------------- engine
            job = "jobs: [{name: a, ranks: 2, iterations: 2, workload: {kind: allreduce}}]\n"
            c, m, t = run_start(e, SMALL_TOPO + "jobs: [{name: a, ranks: 2, iterations: 2, workload: {kind: custom, "
                                               "function: 'probe_hostile_mod:work'}}]\n")
            record("custom workload module of the client's choosing", c, m, leaked=marker.exists(), secs=t,
                   note="imported" if marker.exists() else "not imported")
            c, m, t = run_start(e, SMALL_TOPO + "jobs: [{name: a, ranks: 2, iterations: 2, workload: {kind: custom, "
                                               "function: 'this:s'}}]\n")
            record("custom workload 'this:s'", c, m, secs=t)
            c1, m1, t = run_start(e, SMALL_TOPO + job + f"placement: {{policy: file, file: {SECRET}}}\n")
            c2, m2, _ = run_start(e, SMALL_TOPO + job + "placement: {policy: file, file: /nonexistent/passwd}\n")
            first = SECRET.read_text().splitlines()[0]
            record("placement file = system password file", c1, m1, leaked=first[:8] in m1, secs=t)
            same = m1.replace(str(SECRET), "P") == m2.replace("/nonexistent/passwd", "P") and c1 == c2
            record("placement file existing vs missing (probe)", c2, m2, leaked=not same,
                   note="same reply" if same else "different replies")
            c, m, t = run_start(e, SMALL_TOPO.rstrip("}\n") + ", connections: {intra: /etc/passwd, inter: /etc/hostname}}\n"
                                + job)
            record("topology.connections = system files", c, m, leaked=first[:8] in m, secs=t)
            c, m, t = run_start(e, SMALL_TOPO + job + f"machine: {{file: {SECRET}}}\n")
            record("machine.file = system password file", c, m, leaked=first[:8] in m, secs=t)
            c, m, t = run_start(e, SMALL_TOPO + job + "placement: {policy: file, file: passwd}\n", base_dir="/etc")
            record("base_dir=/etc + relative placement file", c, m, leaked=first[:8] in m, secs=t)
            c, m, t = run_start(e, "jobs: " + "[" * 100_000 + "]" * 100_000 + "\n")
            record("deep YAML (100k nested lists)", c, m, secs=t)
            bomb = "".join(f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else '1'] * 10)}]\n" for i in range(6))
            c, m, t = run_start(e, SMALL_TOPO + job + bomb, timeout=30)
            record("alias bomb (10^6 values, 6 levels)", c, m, secs=t)
            r0 = rss_mb(proc.pid)
            c, m, t = run_start(e, "topology: {groups: 513, routers_per_group: 64, terminals_per_router: 64, "
                                   "global_channels_per_router: 16}\n" + job, timeout=60)
            record("huge topology (2.1M terminals)", c, m, secs=t, note=f"rss +{rss_mb(proc.pid) - r0:.0f} MB")
            c, m, t = run_start(e, SMALL_TOPO + "jobs: [{name: a, ranks: 2, iterations: 1000000000000, "
                                               "workload: {kind: allreduce}}]\n", timeout=5)
            record("iterations 1e12 (5 s deadline)", c, m, secs=t)
            c, m, t = run_start(e, SMALL_TOPO + job + "backend: {embedded: {max_events: 1000000000000000}}\n"
                                + "# pad\n" * 10, timeout=10)
            record("max_events 1e15", c, m, secs=t)
            c, m, t = run_start(e, SMALL_TOPO + job + "#" * (2 << 20) + "\n", timeout=30)
            record("2 MiB scenario text", c, m, secs=t)
            r0 = rss_mb(proc.pid)
            c, m, t = run_start(e, SMALL_TOPO + job + "sampling: {interval: 1}\n", timeout=60)
            record("port samples every 1 ns", c, m, secs=t, should_refuse=False,
                   note=f"rss +{rss_mb(proc.pid) - r0:.0f} MB")
            import queue

            idle = [queue.Queue() for _ in range(12)]
            streams = [e.Run(iter(q.get, None), timeout=60) for q in idle]
            time.sleep(12.0)
            c, m, t = run_start(e, SMALL_TOPO + job, timeout=30)
            for q in idle:
                q.put(None)
            for st in streams:
                st.cancel()
            record("12 idle Run streams held open, a valid run 12 s later", c, m, secs=t, should_refuse=False)
            t0 = time.monotonic()
            with ThreadPoolExecutor(16) as pool:
                codes = list(pool.map(lambda k: run_start(e, "jobs: [" if k % 2 else "x: 1\n", timeout=10)[0],
                                      range(500)))
            h = health_pb2_grpc.HealthStub(ech).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            bad = [x for x in codes if x not in CLEAN]
            record("flood: 500 bad Starts, then health", grpc.StatusCode.INTERNAL if bad or h != 1 else
                   grpc.StatusCode.OK, f"health={h} bad={sorted({x.name for x in bad})}", should_refuse=False,
                   secs=time.monotonic() - t0)
        finally:
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
        if "Zen of Python" in out:
            results.append(("server imported `this` (stdout shows the Zen)", "leaked", ""))
    cats = ["clean", "unknown/internal", "hang", "leaked", "accepted"]
    for name, cat, note in results:
        print(f"{cat:17s} {name:52s} {note}")
    counts = {c: sum(1 for _, cat, _ in results if cat == c) for c in cats}
    other = len(results) - sum(counts.values())
    print(f"\ncases {len(results)}: " + ", ".join(f"{c} {n}" for c, n in counts.items()) + (f", other {other}"
                                                                                          if other else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
