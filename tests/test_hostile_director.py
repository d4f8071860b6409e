"""Hostile and careless clients against a real CODES director server (ZeroMQ REP on 127.0.0.1, ephemeral port):
multipart and oversized messages, undecodable or deeply nested requests, client-id and record floods, and file
paths outside the folders the operator allowed. Every case must get a ``failed`` reply (or, for an oversized
message, a dropped connection) while the server keeps serving everyone else. All waits are bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import zmq

from codes_bridge.director import CodesDirectorServer, DirectorLimits, IterationTimeService, make_model

RCV_MS = 10_000


def dreq(op: str, args: list, data: bytes = b"") -> bytes:
    head = json.dumps({"cmd": "director-request", "surrogate_family": "iteration-time",
                       "surrogate_backend": "director", "operation": op, "args": [str(a) for a in args]},
                      separators=(",", ":"))
    return head.encode() + b"\x00" + data


class Client:
    def __init__(self, endpoint: str, rcv_ms: int = RCV_MS):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.setsockopt(zmq.RCVTIMEO, rcv_ms)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def __call__(self, raw: bytes | list[bytes]) -> dict:
        if isinstance(raw, list):
            self.sock.send_multipart(raw)
        else:
            self.sock.send(raw)
        reply = json.loads(self.sock.recv())
        assert reply["status"] in ("done", "failed") and all(isinstance(v, str) for v in reply.values()), reply
        return reply

    def close(self):
        self.sock.close(0)
        self.ctx.term()


class Served:
    def __init__(self, service: IterationTimeService):
        self.server = CodesDirectorServer(service, "tcp://127.0.0.1:*")
        self.endpoint = self.server.bind()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_ms": 20}, daemon=True)
        self.thread.start()
        self.clients: list[Client] = []

    def client(self, rcv_ms: int = RCV_MS) -> Client:
        c = Client(self.endpoint, rcv_ms)
        self.clients.append(c)
        return c

    def alive(self) -> bool:
        c = self.client()
        return c(b'{"cmd":"nothing"}\x00')["status"] == "done"

    def close(self):
        self.server.stop()
        self.thread.join(10)
        for c in self.clients:
            c.close()
        assert not self.thread.is_alive()


@pytest.fixture
def serve_with():
    made = []

    def make(**kw):
        model = kw.pop("model", None) or make_model("ridge")
        s = Served(IterationTimeService(model, **kw))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_multipart_message_fails_and_the_server_keeps_serving(serve_with):
    s = serve_with()
    c = s.client()
    r = c([b'{"cmd": "nothing"}\x00', b"x"])
    assert r["status"] == "failed" and "multipart message of 2 frames" in r["error"]
    r = c([dreq("send-records", ["3", 0, 1], b"100"), b"200", b"300"])
    assert r["status"] == "failed" and "3 frames" in r["error"]
    assert 0 not in s.server.service.clients
    assert c(b'{"cmd":"nothing"}\x00')["status"] == "done" and s.thread.is_alive()


def test_oversized_message_is_dropped_without_stalling_others(serve_with):
    assert DirectorLimits().max_request_bytes == 16 * 1024 * 1024
    limit = 1 << 20
    s = serve_with(limits=DirectorLimits(max_request_bytes=limit))
    assert s.server._sock.getsockopt(zmq.MAXMSGSIZE) == limit
    big = s.client(rcv_ms=1500)
    t0 = time.monotonic()
    big.sock.send(dreq("send-records", ["3", 0, 1], b"1 " * limit))
    with pytest.raises(zmq.Again):  # ZeroMQ closes that connection: no reply ever comes
        big.sock.recv()
    other = s.client()
    assert other(b'{"cmd":"nothing"}\x00')["status"] == "done"
    assert time.monotonic() - t0 < 8
    assert s.server.service.total_records() == 0
    # just under the limit is served
    n = (limit - 200) // 8
    r = other(dreq("send-records", ["3", 1, n], b"1000000 " * n))
    assert r["status"] == "done" and r["accepted"] == str(n)


@pytest.mark.parametrize("raw, needle", [
    (b'\xff\xfe\xfd{"cmd":"nothing"}\x00', "not UTF-8"),
    (b'{"cmd":"director-request","operation":"send-records","args":["3","0","1"]}\x00\xff\xfe', "not UTF-8"),
    (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00', "malformed JSON"),
    (b'not json at all', "missing NUL separator"),
    (b"[" * 200_000 + b"]" * 200_000 + b"\x00", "nested too deeply"),
    (b'{"cmd":"nothing","x":' + b"{\"a\":" * 100_000 + b"1" + b"}" * 100_000 + b"}\x00", "nested too deeply"),
    (b'{"cmd":"director-request","operation":"inference","args":[' + b"9" * 10_000 + b',1]}\x00', "malformed JSON"),
    (b'{"cmd":"' + b"A" * 100_000 + b'"}\x00', "unknown cmd"),
    (dreq("inference", ["2", 0, 10_000_000]), "number of steps must be 1..10000"),
])
def test_undecodable_requests_fail_with_short_errors(serve_with, raw, needle):
    s = serve_with()
    c = s.client()
    r = c(raw)
    assert r["status"] == "failed" and needle in r["error"], r["error"][:200]
    assert len(r["error"]) < 700  # errors never echo a large request
    assert s.alive()


def test_client_ids_and_records_are_bounded(serve_with):
    s = serve_with(limits=DirectorLimits(max_clients=100, max_records_per_client=50, max_total_records=4_000))
    svc = s.server.service
    c = s.client()
    for i in range(100):
        assert c(dreq("send-records", ["3", 10_000_000 + i, 1], b"1000"))["status"] == "done"
    # a new client beyond the limit evicts the least recently used one (the first), not itself
    r = c(dreq("send-records", ["3", 5, 1], b"1000"))
    assert r["status"] == "done"
    assert 5 in svc.clients and 10_000_000 not in svc.clients and len(svc.clients) == 100
    assert svc.evicted_clients == 1 and svc.total_records() == 100
    # known clients still get records; each keeps only its last 50
    r = c(dreq("send-records", ["3", 10_000_001, 80], " ".join(str(1000 + i) for i in range(80)).encode()))
    assert r["status"] == "done" and r["total_records"] == "50"
    assert list(svc.clients[10_000_001].records)[-1] == 1079.0
    # the total over all clients is capped by evicting the least recently used clients
    for i in range(2, 100):
        assert c(dreq("send-records", ["3", 10_000_000 + i, 50], b"1000 " * 50))["status"] == "done"
    assert svc.total_records() <= 4_000
    assert svc.total_records() == sum(len(st.records) for st in svc.clients.values())
    assert c(dreq("inference", ["3", 10_000_099, 2]))["status"] == "done"
    # a request that cannot fit even alone still fails
    tiny = serve_with(limits=DirectorLimits(max_clients=10, max_records_per_client=50, max_total_records=20))
    r = tiny.client()(dreq("send-records", ["3", 1, 30], b"1000 " * 30))
    assert r["status"] == "failed" and "--max-total-records" in r["error"]
    # a huge client id is just another id, never an allocation
    assert c(dreq("model-status", ["2", 10 ** 18]))["status"] == "done"


def test_a_flood_of_client_ids_does_not_lock_real_clients_out(serve_with):
    # on main 70,000 ids filled --max-clients for the server's lifetime; now the flood evicts itself
    s = serve_with(limits=DirectorLimits(max_clients=64))
    svc = s.server.service
    c = s.client()
    real = [0, 1, 2]
    for r in real:
        assert c(dreq("send-records", ["3", r, 5], b"1000 1100 1200 1300 1400"))["status"] == "done"
    for i in range(1_000):
        assert c(dreq("send-records", ["3", 1_000_000 + i, 1], b"5"))["status"] == "done"
        if i % 50 == 0:  # the real clients keep working between the flood's requests, so they stay
            for r in real:
                assert c(dreq("inference", ["3", r, 1]))["status"] == "done"
    assert len(svc.clients) == 64 and svc.evicted_clients == 1_000 + 3 - 64
    assert all(len(svc.clients[r].records) == 5 for r in real)
    # a new real client after the flood gets in and is answered from its own records (last = 1500)
    assert c(dreq("send-records", ["3", 7, 1], b"1500"))["status"] == "done"
    status = c(dreq("model-status", ["1", "all"]))
    assert status["evicted_clients"] == str(svc.evicted_clients) and status["total_clients"] == "64"
    # least recently used: the flood's oldest ids are gone, its newest are still there
    assert 1_000_000 not in svc.clients and 1_000_999 in svc.clients


def test_save_model_never_overwrites(serve_with, tmp_path):
    s = serve_with(allowed_dirs=[tmp_path])
    c = s.client()
    assert c(dreq("save-model", ["1", "ckpt"]))["status"] == "done"
    before = (tmp_path / "ckpt" / "config.json").read_bytes()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "file.txt").write_text("keep me too")
    for name in ("ckpt", "mine", "file.txt", str(tmp_path / "ckpt")):
        r = c(dreq("save-model", ["1", name]))
        assert r["status"] == "failed" and "already exists" in r["error"] and "never overwrites" in r["error"], r
    assert (tmp_path / "ckpt" / "config.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json"]
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    assert (tmp_path / "file.txt").read_text() == "keep me too"
    assert c(dreq("save-model", ["1", "sub/ckpt2"]))["status"] == "done"
    assert (tmp_path / "sub" / "ckpt2" / "config.json").is_file()


@pytest.fixture
def secret(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    f = outside / "secret.csv"
    f.write_text("client,value\n1,31337\nTOP-SECRET-LINE\n")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "link.csv").symlink_to(f)
    (allowed / "ok.csv").write_text("client,value\n3,100\n3,110\n4,90\n")
    return tmp_path, allowed, f


def _refusals(c, op: str, paths: list[str]) -> set[str]:
    errors = set()
    for p in paths:
        r = c(dreq(op, ["1", p]))
        assert r["status"] == "failed", (op, p, r)
        assert "TOP-SECRET" not in r["error"] and "31337" not in r["error"] and p not in r["error"]
        errors.add(r["error"])
    return errors


def test_no_file_is_opened_without_allow_dir(serve_with, secret):
    tmp_path, allowed, f = secret
    s = serve_with()
    c = s.client()
    for op in ("load-records-csv", "load-model", "save-model"):
        errors = _refusals(c, op, [str(f), str(tmp_path / "missing.csv"), str(tmp_path / "outside"), "rel.csv"])
        assert len(errors) == 1 and "without --allow-dir" in errors.pop()
    assert s.server.service.total_records() == 0
    assert not (tmp_path / "rel.csv").exists() and not os.path.exists("rel.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["allowed", "outside"]


def test_paths_outside_the_allowed_folder_get_one_reply(serve_with, secret):
    tmp_path, allowed, f = secret
    s = serve_with(allowed_dirs=[allowed])
    c = s.client()
    outside = [str(f), str(tmp_path / "outside" / "missing.csv"), "../outside/secret.csv", "../outside/nope.csv",
               "link.csv", "/etc/passwd", "/nonexistent/x", "ok.csv\x00/etc/passwd", str(tmp_path / "outside")]
    for op in ("load-records-csv", "load-model", "save-model"):
        errors = _refusals(c, op, outside)
        assert len(errors) == 1 and "not inside a folder this server allows" in errors.pop(), op
    assert s.server.service.total_records() == 0
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret.csv"]
    # inside the allowed folder everything works, relative paths included
    r = c(dreq("load-records-csv", ["1", "ok.csv"]))
    assert r["status"] == "done" and (r["loaded_rows"], r["loaded_clients"]) == ("3", "2")
    r = c(dreq("load-records-csv", ["1", str(allowed / "ok.csv")]))
    assert r["status"] == "done"
    assert c(dreq("train-model", ["1", "all"]))["status"] == "failed"  # 3 records < k=4: nothing to fit, clean
    assert c(dreq("save-model", ["1", "ckpt"]))["status"] == "done" and (allowed / "ckpt" / "config.json").is_file()
    r = c(dreq("load-model", ["1", str(allowed / "ckpt")]))
    assert r["status"] == "done" and r["path"] == str(allowed / "ckpt")
    missing = c(dreq("load-records-csv", ["1", "missing.csv"]))
    assert missing["status"] == "failed" and "does not exist" in missing["error"]


def test_two_thousand_mixed_requests_in_bounded_time(serve_with):
    s = serve_with()
    c = s.client()
    junk = [b"\xff\x00", b'{"cmd":"director-request"}\x00', [b"a\x00", b"b"], dreq("inference", ["2", 999, 1]),
            b'{"cmd":"nothing"}']
    t0 = time.monotonic()
    done = failed = 0
    for i in range(2_000):
        k = i % 5
        if k == 0:
            r = c(dreq("send-records", ["3", i % 64, 2], b"1000 1010"))
        elif k == 1:
            r = c(dreq("inference", ["3", (i - 1) % 64, 1]))
        elif k == 2:
            r = c(junk[(i // 5) % len(junk)])
        elif k == 3:
            r = c(b'{"cmd":"nothing"}\x00')
        else:
            r = c(dreq("model-status", ["1", "all"]))
        done += r["status"] == "done"
        failed += r["status"] == "failed"
    elapsed = time.monotonic() - t0
    assert done + failed == 2_000 and failed >= 400 - 80  # the junk requests (one fallback inference may pass)
    assert elapsed < 10, elapsed
    assert s.alive() and s.server.requests >= 2_000


def test_model_options_over_their_bounds_are_refused_before_building(serve_with, tmp_path, monkeypatch):
    """make_model (the CLI's --model/--model-option, codes_bridge.hybrid) and load-model (a checkpoint's
    config.json) refuse an option over its bound before any network is built (issue 21)."""
    import torch

    from surrogate.base import OptionBoundError

    built = []
    init = torch.nn.Module.__init__
    monkeypatch.setattr(torch.nn.Module, "__init__", lambda self, *a, **kw: (built.append(1), init(self, *a, **kw)))
    for spec, opts in (("lstm", {"hidden": 10**8}), ("lstm:epochs=1000000000", {}), ("mean", {"k": 10**12})):
        with pytest.raises(OptionBoundError, match="must be a number at most"):
            make_model(spec, **opts)
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text('{"model": "lstm", "config": {"hidden": 100000000}}')
    s = serve_with(allowed_dirs=[tmp_path])
    r = s.client()(dreq("load-model", ["1", "ck"]))
    assert r["status"] == "failed" and "not a usable checkpoint" in r["error"], r
    assert s.server.service.model.name == "ridge" and not built


def test_cli_rejects_bad_model_options_and_allow_dirs(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for extra, needle in ((["--model-option", "k=abc"], "bad options for model 'ridge' (k=abc)"),
                          (["--allow-dir", str(tmp_path / "nope")], "--allow-dir"),
                          (["--max-clients", "0"], "max_clients must be >= 1")):
        p = subprocess.run([sys.executable, "-m", "hybridsim", "serve", "--codes-director", "tcp://127.0.0.1:*",
                            *extra], capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 2, p.stderr
        assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_flood_cannot_evict_an_active_clients_records(serve_with):
    """Issue 35, item 9: the real clients pause while 1,000 new ids flood in (each sends once); on main the flood
    evicted them (least recently used) and their next prediction came from the flood's values. A client that came
    back is evicted only once no one-shot client is left, so they keep their records and predictions."""
    s = serve_with(limits=DirectorLimits(max_clients=64))
    svc = s.server.service
    c = s.client()
    real = [0, 1, 2]
    for r in real:
        for _ in range(2):  # a CODES rank sends every iteration: it comes back
            assert c(dreq("send-records", ["3", r, 2], b"1200 1200"))["status"] == "done"
    for i in range(1_000):  # no real request in between
        assert c(dreq("send-records", ["3", 1_000_000 + i, 1], b"500"))["status"] == "done"
    assert len(svc.clients) == 64 and all(len(svc.clients[r].records) == 4 for r in real)
    for r in real:
        rep = c(dreq("inference", ["3", r, 1]))
        assert rep["status"] == "done" and "fallback" not in rep, rep
        assert abs(float(rep["predictions"].split()[0]) - 1200) < 1, rep
    # the flood churned among itself: its newest ids are there, its oldest gone
    assert 1_000_999 in svc.clients and 1_000_000 not in svc.clients


def test_when_every_client_came_back_the_least_recent_goes():
    from codes_bridge.director import IterationTimeService

    svc = IterationTimeService(limits=DirectorLimits(max_clients=2), auto_train=False)
    for client in (1, 2, 1, 2):
        svc.send_records([str(client), "1"], b"1000")
    svc.send_records(["3", "1"], b"1000")  # both came back: the least recently used (1) goes
    assert list(svc.clients) == [2, 3] and svc.evicted_clients == 1
    svc.send_records(["4", "1"], b"1000")  # 3 is on probation: it goes before 2
    assert list(svc.clients) == [2, 4] and svc.evicted_clients == 2
