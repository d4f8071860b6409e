"""Hostile and careless input against the CODES interfaces (issue 12), one checkout at a time.

    python benchmarks/hostile_codes.py --tree /work/main        # before
    python benchmarks/hostile_codes.py --tree .                 # after

Runs every case in a subprocess of that checkout (``PYTHONPATH=<tree>``), bounded in time, and prints per interface
(director / codes-import) how many cases gave a clean error (a ``failed`` reply or a dropped oversized message with
the server still answering; an exit-2 error naming the damaged file), a traceback or crash, a hang or a blocked
server, and data lost or unsafe acceptance (an import reported complete after losing data, a file read outside the
allowed folders, an unbounded flood accepted)."""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.reference_data import CODES, require  # noqa: E402

B_OPT, B_SEQ = CODES / "B-72node-milc" / "hf-opt-np2", CODES / "B-72node-milc" / "hf-seq"
A_SEQ, C_NET = CODES / "A-72node-synthetic-uniform" / "seq", CODES / "C-1056node-milc-lammps-nn" / "netsurr-fixed-random-seq"
BIN = "ross-stats-raw/ross-stats-analysis-lps.bin.gz"


def copy_run(src: Path, dst: Path, skip=()) -> Path:
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n in skip])
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    os.chmod(dst, 0o755)
    return dst


# ------------------------------------------------------------------------------------------------ import cases
def _gz_trunc(run, rel, frac=0.5):
    p = run / rel
    data = gzip.compress(p.read_bytes())
    p.unlink()
    (run / (rel + ".gz")).write_bytes(data[: int(len(data) * frac)])
    return rel + ".gz"


def _bin_lpid(run, record, lpid):
    buf = bytearray(gzip.decompress((run / BIN).read_bytes()))
    off = 0
    for _ in range(record):
        off += 48 + struct.unpack_from("<i", buf, off + 40)[0]
    struct.pack_into("<Q", buf, off, lpid)
    (run / BIN).write_bytes(gzip.compress(bytes(buf)))
    return "ross-stats-analysis-lps.bin"


def _drop_line(run, prefix):
    log = run / "iteration-logs" / "pe=0.txt"
    lines = log.read_text().splitlines(keepends=True)
    i = next(k for k, l in enumerate(lines) if l.startswith(prefix))
    log.write_text("".join(lines[:i] + lines[i + 1:]))
    return "iteration-logs: job milc-72 rank"  # the lost line has no line number: the folder, job and rank


def _write(run, rel, data: bytes):
    (run / rel).write_bytes(data)
    return rel


IMPORT_CASES = {
    "truncated gz iteration log": (B_OPT, (), lambda r: _gz_trunc(r, "iteration-logs/pe=1.txt")),
    "truncated gz stdout": (B_SEQ, (), lambda r: _gz_trunc(r, "model-output.txt", 0.66)),
    "missing iteration log": (B_OPT, (), lambda r: ((r / "iteration-logs/pe=1.txt").unlink(), "pe=1.txt")[1]),
    "iteration line lost mid-log": (B_SEQ, (), lambda r: _drop_line(r, "ITERATION 7 node 3 ")),
    "iteration line lost at the end": (B_SEQ, (), lambda r: _drop_line(r, "ITERATION 19 node 5 ")),
    "dropped .bin (no decoded CSVs)": (A_SEQ, ("ross-stats-decoded",),
                                       lambda r: ((r / BIN).unlink(), "ross-stats-analysis-lps.bin")[1]),
    "corrupt .bin lpid 2^43": (A_SEQ, ("ross-stats-decoded",), lambda r: _bin_lpid(r, 0, 1 << 43)),
    "corrupt .bin lpid 2^64-1": (A_SEQ, ("ross-stats-decoded",), lambda r: _bin_lpid(r, 5, (1 << 64) - 1)),
    "truncated workload.conf": (B_SEQ, (), lambda r: _write(r, "workload.conf", b"72 ./milc-7")),
    "workload line lost": (C_NET, (), lambda r: _write(r, "workloads.conf", b"512 ./milc-512.json 0 0\n"
                                                                          b"256 ./lammps-256.json 0 0\n")),
    "binary garbage .conf": (B_SEQ, (), lambda r: _write(r, "dfdally-72-milc.conf", b"\x89PNG\r\n\x1a\n\xff\xfe")),
    "garbage .conf syntax": (B_SEQ, (), lambda r: _write(r, "dfdally-72-milc.conf", b"LPGROUPS\n{\n G\n {\n ???\n")),
    "implausible .conf sizes": (A_SEQ, ("ross-stats-decoded",), lambda r: _write(
        r, "dfdally-72-synthetic.conf", (A_SEQ / "dfdally-72-synthetic.conf").read_bytes().replace(
            b'repetitions="36"', b'repetitions="1000000000"'))),
    "binary garbage ross.csv": (B_SEQ, (), lambda r: _write(r, "ross.csv", bytes(range(256)) * 4)),
    "garbage ross.csv header": (B_SEQ, (), lambda r: _write(r, "ross.csv", b"a,b,c\n1,2,3\n")),
    "non-numeric ross.csv value": (B_SEQ, (), lambda r: _write(
        r, "ross.csv", (B_SEQ / "ross.csv").read_bytes().replace(b"\n1,", b"\nabc,", 1))),
    "binary garbage command.txt": (B_SEQ, (), lambda r: _write(r, "command.txt", b"\xff\xfe\x00garbage\x80")),
    "text garbage command.txt": (B_SEQ, (), lambda r: _write(r, "command.txt", b"hello world\n")),
    "non-numeric --vt-interval": (B_SEQ, (), lambda r: _write(
        r, "command.txt", (B_SEQ / "command.txt").read_bytes().replace(b"--vt-interval=50000", b"--vt-interval=abc"))),
}


def run_import_cases(tree: str, tmp: Path) -> list[tuple[str, str, str]]:
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
    out = []
    for name, (src, skip, damage) in IMPORT_CASES.items():
        run = copy_run(src, tmp / re.sub(r"\W+", "_", name), skip)
        named = damage(run)
        dst = run.parent / (run.name + "-out")
        try:
            p = subprocess.run([sys.executable, "-m", "hybridsim", "import-codes", str(run), "-o", str(dst)],
                               capture_output=True, text=True, timeout=120, env=env, cwd=tree)
        except subprocess.TimeoutExpired:
            out.append((name, "hang", "no answer in 120 s"))
            continue
        err = p.stderr.strip().splitlines()
        last = err[-1][:160] if err else ""
        if "Traceback" in p.stderr:
            out.append((name, "traceback", last))
        elif p.returncode == 0:
            man = json.loads((dst / "manifest.json").read_text())
            out.append((name, "partial" if man.get("partial") else "data lost (complete)", p.stdout.strip()[:120]))
        elif named.split("/")[-1].split(".gz")[0] in " ".join(p.stderr.split()):
            out.append((name, "clean error", last))
        else:
            out.append((name, "error not naming the file", last))
    return out


# ------------------------------------------------------------------------------------------------ director cases
def _req(op, args, data=b""):
    head = json.dumps({"cmd": "director-request", "surrogate_family": "iteration-time",
                       "surrogate_backend": "x", "operation": op, "args": [str(a) for a in args]})
    return head.encode() + b"\x00" + data


class Server:
    def __init__(self, tree: str, extra: list[str]):
        env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
        # the server's log goes to a file: a pipe nobody reads would block it once full
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "serve", "--codes-director",
                                      "tcp://127.0.0.1:*", *extra], stderr=self.log, text=True, env=env, cwd=tree)
        deadline = time.monotonic() + 120
        m = None
        while m is None and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.1)
            m = re.search(r"on (tcp://127\.0\.0\.1:\d+)", Path(self.log.name).read_text())
        if not m:
            raise RuntimeError(Path(self.log.name).read_text())
        self.endpoint = m.group(1)
        self.ctx = zmq.Context()

    def ask(self, raw, timeout_ms=10_000):
        s = self.ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, timeout_ms)
        s.connect(self.endpoint)
        try:
            s.send_multipart(raw) if isinstance(raw, list) else s.send(raw)
            return json.loads(s.recv())
        except zmq.Again:
            return None
        finally:
            s.close(0)

    def probe(self) -> float | None:
        t0 = time.monotonic()
        r = self.ask(b'{"cmd":"nothing"}\x00', 5_000)
        return time.monotonic() - t0 if r and r.get("status") == "done" else None

    def close(self):
        if self.proc.poll() is None:
            self.ask(b'{"cmd":"exit"}\x00', 2_000)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.ctx.term()
        self.log.close()


def run_director_cases(tree: str, tmp: Path, new: bool) -> list[tuple[str, str, str]]:
    allowed = tmp / "allowed"
    allowed.mkdir(exist_ok=True)
    secret = tmp / "secret.csv"
    secret.write_text("client,value\n1,31337\n")
    extra = ["--allow-dir", str(allowed), "--max-clients", "1000"] if new else []
    srv = Server(tree, extra)
    servers = [srv]
    out = []

    def case(name, raw, *, expect_fail=True, slow_s=2.0, timeout_ms=10_000, judge=None):
        nonlocal srv
        print(f"  ... {name}", file=sys.stderr, flush=True)
        if srv.proc.poll() is not None:  # the previous case killed it: a fresh server for this one
            srv.close()
            srv = Server(tree, extra)
            servers.append(srv)
        t0 = time.monotonic()
        r = srv.ask(raw, timeout_ms)
        dt = time.monotonic() - t0
        alive = srv.proc.poll() is None and srv.probe() is not None
        if not alive:
            out.append((name, "traceback" if srv.proc.poll() is not None else "hang", "server stopped answering"))
        elif judge is not None:
            out.append((name, *judge(r, dt)))
        elif r is None:
            out.append((name, "hang", "no reply"))
        elif dt > slow_s:
            out.append((name, "hang", f"blocked the server {dt:.1f} s"))
        elif expect_fail and r["status"] != "failed":
            out.append((name, "data lost / unsafe", f"accepted: {str(r)[:100]}"))
        elif len(json.dumps(r)) > 10_000:
            out.append((name, "data lost / unsafe", f"reply of {len(json.dumps(r))} bytes echoes the request"))
        else:
            out.append((name, "clean error", str(r.get("error", ""))[:100]))

    case("multipart", [b'{"cmd": "nothing"}\x00', b"x"])
    case("non-UTF-8", b'\xff\xfe{"cmd":"nothing"}\x00')
    case("non-JSON", b"GET / HTTP/1.1\r\n\r\n\x00")
    case("no NUL", b"hello")
    case("deep JSON", b"[" * 200_000 + b"]" * 200_000 + b"\x00")
    case("huge integer", b'{"cmd":"director-request","operation":"inference","args":[' + b"9" * 10_000 + b',1]}\x00')
    case("100 kB cmd echoed", b'{"cmd":"' + b"A" * 100_000 + b'"}\x00')
    case("100,000-step inference", _req("inference", ["3", 0, 100_000], b"1000 1000 1000 1000"))

    def oversized(r, dt):
        if r is None:
            return ("clean error", "dropped by ZMQ_MAXMSGSIZE; server still answering")
        return ("data lost / unsafe" if r["status"] == "done" else "hang" if dt > 2 else "clean error",
                f"{r['status']} after {dt:.1f} s")
    case("48 MB request", _req("send-records", ["3", 0, 1], b"1000 " * ((48 << 20) // 5)), judge=oversized,
         timeout_ms=30_000)

    def flood(r, dt):
        acc = 0
        for i in range(2_000):
            rr = srv.ask(_req("send-records", ["3", 1_000_000 + i, 1], b"1000"), 5_000)
            if rr is None:
                return ("hang" if srv.proc.poll() is None else "traceback", f"no reply after {acc} client ids")
            acc += rr["status"] == "done"
        return ("clean error" if acc < 2_000 else "data lost / unsafe", f"{acc} of 2,000 client ids accepted")
    case("2,000 client ids (limit 1,000)", b'{"cmd":"nothing"}\x00', judge=flood)

    for op in ("load-records-csv", "load-model", "save-model"):
        def files(r, dt, op=op):
            a = srv.ask(_req(op, ["1", str(secret)]))
            b = srv.ask(_req(op, ["1", str(tmp / "missing.csv")]))
            if a is None or b is None:
                return ("hang" if srv.proc.poll() is None else "traceback", "no reply")
            if a["status"] == "done" or (op == "save-model" and (tmp / "missing.csv").exists()):
                return ("data lost / unsafe", f"outside path accepted: {str(a)[:80]}")
            if a.get("error") != b.get("error"):
                return ("data lost / unsafe", "existing and missing files answered differently")
            return ("clean error", a.get("error", "")[:100])
        case(f"{op} outside allowed dirs", b'{"cmd":"nothing"}\x00', judge=files)
    for s in servers:
        s.close()
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "hybridsim", "serve", "--codes-director", "tcp://127.0.0.1:*",
                        "--model-option", "k=abc"], capture_output=True, text=True, timeout=120, env=env, cwd=tree)
    out.append(("serve --model-option k=abc", "traceback" if "Traceback" in p.stderr else
                "clean error" if p.returncode == 2 else "data lost / unsafe", p.stderr.strip().splitlines()[-1][:100]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True, help="checkout to test (its folder goes on PYTHONPATH)")
    ap.add_argument("--new", action="store_true",
                    help="start the server with --allow-dir and --max-clients 1000 (the flags of the fix)")
    a = ap.parse_args()
    require()
    tree = str(Path(a.tree).resolve())
    with tempfile.TemporaryDirectory() as t:
        res = {"director": run_director_cases(tree, Path(t), a.new),
               "codes-import": run_import_cases(tree, Path(t))}
    for iface, rows in res.items():
        print(f"\n== {iface} ({tree})")
        for name, kind, detail in rows:
            print(f"  {name:34s} {kind:22s} {detail}")
        c = collections.Counter(k for _, k, _ in rows)
        print(f"  -> {len(rows)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
