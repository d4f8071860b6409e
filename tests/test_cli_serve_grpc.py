"""``hybridsim serve --grpc/--engine`` as real processes, and a hybrid run through ``backend: {remote: ...}`` equal to
the in-process run."""

import os
import re
import signal
import subprocess
import sys

import numpy as np

from hybridsim.runner import run_scenario
from hybridsim.scenario import parse_scenario

SC = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: m, ranks: 16, iterations: 12, workload: {kind: milc, dimension_sizes: [2, 2, 2, 2], msg_size: 8192}}
  - {name: n, ranks: 8, iterations: 12, workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 4096}}
placement: {policy: random}
surrogate: {model: ridge}
controller: {policy: periodic, params: {warmup: 4, ft: 4}}
"""


def test_serve_grpc_and_engine_then_remote_hybrid_run_matches_in_process(tmp_path):
    from hybridsim.service.client import RemoteSurrogate
    from surrogate.base import Context

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "serve", "--grpc", "127.0.0.1:0", "--model", "mean",
                             "--model-option", "k=2", "--engine", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        addr = {}
        for _ in range(2):
            line = proc.stdout.readline().strip()
            m = re.match(r"hybridsim: (surrogate|engine) service.* listening on (127\.0\.0\.1:\d+)$", line)
            assert m, line
            addr[m.group(1)] = m.group(2)
        with RemoteSurrogate(addr["surrogate"]) as c:
            got = c.predict(Context("j", "milc", np.array([[1.0, 3.0, 5.0]])))
            assert np.array_equal(got, [4.0])
        local = parse_scenario(SC)
        remote = parse_scenario(SC + f"backend: {{remote: '{addr['engine']}'}}\n")
        _, r1, s1 = run_scenario(local, tmp_path / "local", mode="hybrid", progress=False)
        _, r2, s2 = run_scenario(remote, tmp_path / "remote", mode="hybrid", progress=False)
        assert [(r.job, r.rank, r.iteration, r.start, r.end) for r in r1.records] == \
               [(r.job, r.rank, r.iteration, r.start, r.end) for r in r2.records]
        assert s1["hybrid"]["jobs"]["m"]["predicted_iterations"] > 0
        assert s1["events"] == s2["events"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_serve_refuses_two_service_families():
    r = subprocess.run([sys.executable, "-m", "hybridsim", "serve", "--codes-director", "tcp://127.0.0.1:0",
                        "--grpc", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "choose exactly one service" in r.stderr
