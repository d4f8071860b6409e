"""``hybridsim serve --grpc/--engine``: real processes on 127.0.0.1 with ephemeral ports, stopped by SIGTERM."""

import io
import os
import re
import signal
import subprocess
import sys
from contextlib import redirect_stderr

import numpy as np
import pytest

from hybridsim.scenario import parse_scenario


def spawn(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "hybridsim", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_serve_both_services_then_sigterm_stops_cleanly():
    from hybridsim.service.client import RemoteSurrogate
    from hybridsim.service.remote import RemoteBackend
    from surrogate.base import Context

    proc = spawn("--grpc", "127.0.0.1:0", "--model", "mean", "--model-option", "k=2",
                 "--engine", "127.0.0.1:0")
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        addr = {}
        for line in lines:
            m = re.match(r"hybridsim: (surrogate|engine) service.* listening on (127\.0\.0\.1:\d+)$", line.strip())
            assert m, lines
            addr[m.group(1)] = m.group(2)
        with RemoteSurrogate(addr["surrogate"]) as c:
            assert c.remote_model == "mean"
            got = c.predict(Context("j", "milc", np.array([[1.0, 3.0, 5.0], [2.0, np.nan, 4.0]])))
            assert np.array_equal(got, [4.0, 4.0])       # mean of the last k=2
        sc = parse_scenario("""
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs: [{name: a, ranks: 4, iterations: 2, workload: {kind: allreduce}}]
""")
        res = RemoteBackend(addr["engine"], sc).run()
        assert len(res.records) == 4 * 2 and all(res.simulated)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped (signal 15)" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("args,msg", [
    (["--grpc", "127.0.0.1:0"], "--grpc needs --model"),
    (["--grpc", "127.0.0.1:0", "--model", "no-such-model"], "unknown surrogate model 'no-such-model'"),
    (["--grpc", "127.0.0.1:0", "--model", "mean", "--model-option", "k"], "--model-option"),
    (["--engine", "127.0.0.1:99999"], "port must be an integer in 0..65535"),
    ([], "choose exactly one service"),
])
def test_bad_options_exit_2_with_a_message(args, msg):
    from hybridsim.cli import main

    buf = io.StringIO()
    with redirect_stderr(buf):
        rc = main(["serve", *args])
    assert rc == 2 and msg in buf.getvalue(), buf.getvalue()
