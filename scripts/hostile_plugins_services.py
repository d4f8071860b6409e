"""Hostile inputs of issue 21 (items 4 and 5, and the import-codes / gRPC surrogate cases) against one checkout:
scenario plug-ins, checkpoints, the CODES director, the gRPC surrogate service and ``import-codes``.

    python scripts/hostile_plugins_services.py --root /path/to/checkout     # prints a markdown table

Every case runs in a subprocess with ``PYTHONPATH=ROOT`` (and nothing else) under a timeout, in a fresh temporary
folder, and is classified: ``clean`` (refused with a message, exit 2 / a failed reply / INVALID_ARGUMENT, or the
valid input accepted), ``traceback``, ``hang`` (timeout) or ``wrong`` (hostile input accepted, code run that was not
asked for, valid input refused, a failed run directory left behind). Needs no reference data."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

BASE = ("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
        "jobs:\n  - {name: a, ranks: 4, iterations: 2, workload: {kind: milc, dimension_sizes: [2, 2], "
        "msg_size: 4096}}\n")
MARKING = ("import pathlib\npathlib.Path(__file__).with_name('IMPORTED').write_text('x')\n"
           "from controllers import Policy\nclass P(Policy):\n    def decide(self, view):\n        return 'simulate'\n"
           "def ring(rank, iteration, n_ranks):\n    from hybridsim.workloads import compute\n"
           "    return [compute(1.0)]\n")


def sh(root: Path, args: list[str], cwd: Path, timeout: float = 60) -> tuple[int | None, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    try:
        r = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return None, ""


def classify(rc, out: str, ok_rc=(2,), wrong: bool = False) -> str:
    if rc is None:
        return "hang"
    if "Traceback" in out:
        return "traceback"
    if wrong or rc not in ok_rc:
        return "wrong"
    return "clean"


# ------------------------------------------------------------------------------------------------ scenario plug-ins
def plugin_cases(root: Path, tmp: Path) -> dict[str, str]:
    out = {}
    for name, scen, args, where in (
            ("validate: policy module beside the scenario, run from its folder", "pol.yaml", ["validate"], "scen"),
            ("validate: policy module beside the scenario, run elsewhere", "pol.yaml", ["validate"], "other"),
            ("validate: custom workload module beside the scenario", "wl.yaml", ["validate"], "scen"),
            ("run (simulate): custom workload module in the working directory", "wl.yaml",
             ["run", "-o", "out", "--no-progress"], "scen"),
            ("run --mode hybrid: policy module in the working directory", "pol.yaml",
             ["run", "-o", "out", "--mode", "hybrid", "--no-progress"], "scen")):
        d = tmp / f"p{len(out)}"
        (d / "scen").mkdir(parents=True)
        (d / "other").mkdir()
        (d / "scen" / "evilmod.py").write_text(MARKING)
        (d / "scen" / "pol.yaml").write_text(BASE + "controller: {policy: 'evilmod:P'}\n")
        (d / "scen" / "wl.yaml").write_text(BASE.replace("kind: milc, dimension_sizes: [2, 2], msg_size: 4096",
                                                         "kind: custom, function: 'evilmod:ring'"))
        rc, text = sh(root, ["-m", "hybridsim", args[0], str(d / "scen" / scen), *args[1:]], d / where)
        out[name] = classify(rc, text, wrong=(d / "scen" / "IMPORTED").exists() or (d / "scen" / "out").exists())
    return out


# ------------------------------------------------------------------------------------------------ checkpoints
def _safetensors(name: str, raw: bytes) -> bytes:
    h = json.dumps({name: {"dtype": "F32", "shape": [len(raw) // 4], "data_offsets": [0, len(raw)]}}).encode()
    return len(h).to_bytes(8, "little") + h + raw


PRE = '{"model": "pretrained", "config": {"weights": "none"}}'
CHECKPOINTS = {
    "garbage config.json": {"config.json": bytes(range(256))},
    "deep config.json": {"config.json": "[" * 100_000 + "]" * 100_000},
    "config.json a list": {"config.json": "[1, 2]"},
    "model not a name": {"config.json": '{"model": [1], "config": {}}'},
    "config not a mapping": {"config.json": '{"model": "ridge", "config": [1]}'},
    "bad option value": {"config.json": '{"model": "ridge", "config": {"k": "many"}}'},
    "unknown option": {"config.json": '{"model": "ridge", "config": {"kk": 3}}'},
    "pickle as model.safetensors": {"config.json": PRE, "model.safetensors": pickle.dumps({"a": 1})},
    "weights of another net": {"config.json": PRE, "model.safetensors": _safetensors("x", bytes(8))},
    "train.json job folder /etc": {"train.json": json.dumps({"format": "hybridsim-surrogate-checkpoints",
                                                             "model": "ridge", "jobs": {"a": "/etc"}})},
}


def checkpoint_cases(root: Path, tmp: Path) -> dict[str, str]:
    out = {}
    for i, (name, files) in enumerate(CHECKPOINTS.items()):
        d = tmp / f"c{i}"
        (d / "ck").mkdir(parents=True)
        for f, c in files.items():
            (d / "ck" / f).write_bytes(c if isinstance(c, bytes) else c.encode())
        (d / "s.yaml").write_text(BASE + "surrogate: {model: ./ck}\n")
        rc, text = sh(root, ["-m", "hybridsim", "validate", "s.yaml"], d)
        out[f"validate: checkpoint with {name}"] = classify(rc, text)
    d = tmp / "etc"
    d.mkdir()
    (d / "s.yaml").write_text(BASE + "surrogate: {model: /etc}\n")
    rc, text = sh(root, ["-m", "hybridsim", "validate", "s.yaml"], d)
    out["validate: /etc as checkpoint"] = classify(rc, text)
    d = tmp / "c0"
    rc, text = sh(root, ["-m", "hybridsim", "run", "s.yaml", "-o", "out", "--mode", "hybrid", "--no-progress"], d)
    out["run --mode hybrid: garbage checkpoint (no run directory)"] = classify(rc, text, wrong=(d / "out").exists())
    weights = root / "surrogate" / "checkpoints" / "pretrained" / "model.safetensors"
    d = tmp / "w"
    d.mkdir()
    (d / "s.yaml").write_text(BASE + f"surrogate: {{model: 'pretrained:weights={weights}'}}\n")
    rc, text = sh(root, ["-m", "hybridsim", "validate", "s.yaml"], d)
    out["validate: pretrained:weights=/abs/path (valid)"] = classify(rc, text, ok_rc=(0,))
    return out


# ------------------------------------------------------------------------------------------------ CODES director
DIRECTOR = textwrap.dedent("""
    import json, sys, tempfile
    from codes_bridge.director import IterationTimeService, handle_request, make_model
    def req(op, args, data=b""):
        head = json.dumps({"cmd": "director-request", "surrogate_family": "iteration-time",
                           "surrogate_backend": "director", "operation": op, "args": [str(a) for a in args]})
        return head.encode() + b"\\0" + data
    case = sys.argv[1]
    d = tempfile.mkdtemp()
    svc = IterationTimeService(make_model("ridge"), allowed_dirs=[d])
    if case == "flood":
        for i in range(70_000):
            handle_request(svc, req("send-records", [10_000_000 + i, 1], b"1000"))
        r, _ = handle_request(svc, req("send-records", [5, 1], b"1000"))
        print("RESULT", r["status"] == "done")
    else:
        handle_request(svc, req("save-model", ["ck"]))
        r, _ = handle_request(svc, req("save-model", ["ck"]))
        print("RESULT", r["status"] == "failed")
""")


def director_cases(root: Path, tmp: Path) -> dict[str, str]:
    out = {}
    for case, name in (("flood", "70,000 client ids, then a new client is served"),
                       ("save", "save-model onto an existing checkpoint is refused")):
        rc, text = sh(root, ["-c", DIRECTOR, case], tmp, timeout=300)
        out[f"director: {name}"] = classify(rc, text, ok_rc=(0,), wrong="RESULT True" not in text)
    return out


# ------------------------------------------------------------------------------------------------ gRPC surrogate
GRPC = textwrap.dedent("""
    import random, sys, grpc, numpy as np
    from hybridsim.service.surrogate_server import SurrogateServer
    from hybridsim.service._gen import surrogate_pb2, surrogate_pb2_grpc
    from surrogate.registry import create
    with SurrogateServer(create("mean")) as srv, grpc.insecure_channel(srv.address) as ch:
        s = surrogate_pb2_grpc.SurrogateStub(ch)
        s.OpenJob(surrogate_pb2.OpenJobRequest(job="j", workload="milc", ranks=2), timeout=10)
        if sys.argv[1] == "nan":
            try:
                s.Tune(surrogate_pb2.TuneRequest(job="j", window=3, durations=[np.nan] * 6, fit=True), timeout=10)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            v = s.Status(surrogate_pb2.StatusRequest(), timeout=10).model_version
            print("RESULT", code == "INVALID_ARGUMENT" and v == 0)
        else:
            raw = ch.unary_unary("/hybridsim.v1.Surrogate/Predict")
            rng, codes = random.Random(7), set()
            for n in (1, 7, 64, 1000) * 5:
                try:
                    raw(bytes(rng.getrandbits(8) for _ in range(n)), timeout=10)
                    codes.add("OK")
                except grpc.RpcError as e:
                    codes.add(e.code().name)
            print("RESULT", "INTERNAL" not in codes, sorted(codes))
""")


def grpc_cases(root: Path, tmp: Path) -> dict[str, str]:
    out = {}
    for case, name in (("nan", "Tune(fit=True) with all-NaN durations: INVALID_ARGUMENT, version kept"),
                       ("bytes", "20 random-byte Predict requests: none INTERNAL")):
        rc, text = sh(root, ["-c", GRPC, case], tmp, timeout=120)
        text = "\n".join(ln for ln in text.splitlines() if "Traceback" not in ln or "RESULT" in text)
        out[f"gRPC surrogate: {name}"] = classify(rc, text, ok_rc=(0,), wrong="RESULT True" not in text)
    return out


# ------------------------------------------------------------------------------------------------ import-codes
SYNTH = textwrap.dedent("""
    import sys
    import numpy as np
    from pathlib import Path
    from codes_bridge.conf import parse_conf
    from codes_bridge.parsers.ross_vt import HEADER_SIZE, router_dtype
    from codes_bridge.writers import write_codes_inputs
    from hybridsim.scenario import parse_scenario
    d = Path(sys.argv[1])
    ci = write_codes_inputs(parse_scenario(sys.argv[2]), d)
    (d / "command.txt").write_text("mpirun -np 1 model-net-mpi-replay " + " ".join(ci.args) + "\\n")
    conf = parse_conf(ci.conf)
    routers = sorted(conf.lp_layout()["modelnet_dragonfly_dally_router"])
    dt = router_dtype(conf.shape().radix)
    rec = np.zeros(4 * len(routers), dtype=dt)
    for s in range(4):
        for i, lp in enumerate(routers):
            r = rec[s * len(routers) + i]
            r["lpid"], r["ts"], r["sample_sz"], r["flag"] = lp, (s + 1) * 250000.0, dt.itemsize - HEADER_SIZE, 3
            r["router_id"], r["end_time"], r["busy_time"] = i, (s + 1) * 250000.0, 1000.0 + i
            r["link_traffic"], r["stalled_chunks"], r["vc_occupancy_sum"] = 4096 * (1 + i % 3), 2, 4096
    (d / "ross-stats").mkdir()
    (d / "ross-stats" / "ross-stats-analysis-lps.bin").write_bytes(rec.tobytes())
""")


def codes_cases(root: Path, tmp: Path) -> dict[str, str]:
    def run_dir(name: str) -> Path:
        d = tmp / name
        rc, text = sh(root, ["-c", SYNTH, str(d), BASE], tmp)
        assert rc == 0, text
        return d

    def imp(d: Path, timeout: float = 30) -> tuple[int | None, str]:
        return sh(root, ["-m", "hybridsim", "import-codes", str(d), "-o", str(d) + "-out"], tmp, timeout)

    out = {}
    d = run_dir("ranks")
    (d / "workloads.conf").write_text("999999999999 ./a.json 0 0\n")
    (d / "iteration-logs").mkdir()
    (d / "iteration-logs" / "pe=0.txt").write_text("".join(f"ITERATION {i} node {r} job 0 rank {r} time "
                                                           f"{1000.0 * (i + 1)}\n" for r in range(4) for i in range(2)))
    out["import-codes: 999999999999 ranks in workloads.conf"] = classify(*imp(d))
    for where in ("iteration-logs/pe=0.txt", "dfdally-72.conf"):
        d = run_dir(f"fifo{len(out)}")
        p = d / where
        p.parent.mkdir(exist_ok=True)
        if p.exists():
            p.unlink()
        os.mkfifo(p)
        out[f"import-codes: a FIFO as {where}"] = classify(*imp(d, timeout=20))
    d = run_dir("time")
    (d / "time.txt").write_bytes(bytes(random.Random(1).getrandbits(8) for _ in range(300)))
    out["import-codes: garbage time.txt"] = classify(*imp(d))
    flips = {"refused": 0, "imported": 0, "traceback": 0, "hang": 0}
    base = run_dir("flip")
    binf = base / "ross-stats" / "ross-stats-analysis-lps.bin"
    good = binf.read_bytes()
    for seed in range(24):
        buf = bytearray(good)
        rng = random.Random(seed)
        for _ in range(8):
            buf[rng.randrange(len(buf))] ^= 0xFF
        binf.write_bytes(bytes(buf))
        rc, text = sh(root, ["-m", "hybridsim", "import-codes", str(base), "-o", str(tmp / f"flipout{seed}")], tmp)
        flips[{"clean": "refused", "wrong": "imported"}.get(classify(rc, text), classify(rc, text))] += 1
    out["import-codes: 8 flipped bytes in the VT .bin (24 seeds)"] = " / ".join(f"{v} {k}" for k, v in flips.items())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, type=Path, help="the checkout to try (its folder goes on PYTHONPATH)")
    args = ap.parse_args()
    root = args.root.resolve()
    rows = {}
    with tempfile.TemporaryDirectory() as t:
        for fn in (plugin_cases, checkpoint_cases, director_cases, grpc_cases, codes_cases):
            sub = Path(t) / fn.__name__
            sub.mkdir()
            rows.update(fn(root, sub))
    print(f"| case ({root}) | result |\n|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
