"""hybridsim's CODES director server driven over loopback by a ZeroMQ REQ client sending byte-exact messages."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import zmq

from codes_bridge.director import (CodesDirectorServer, IterationTimeService, handle_request, make_model,
                                   real_args)


def dreq(op: str, args: list, data: bytes = b"", family: str = "iteration-time") -> bytes:
    """A request exactly as CODES' zmqml_director_request builds it (rapidjson writer: no spaces)."""
    head = json.dumps({"cmd": "director-request", "surrogate_family": family, "surrogate_backend": "director",
                       "operation": op, "args": [str(a) for a in args]}, separators=(",", ":"))
    return head.encode() + b"\x00" + data


class Client:
    def __init__(self, endpoint: str):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.setsockopt(zmq.RCVTIMEO, 20000)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def __call__(self, raw: bytes) -> dict:
        self.sock.send(raw)
        reply = json.loads(self.sock.recv())
        assert all(isinstance(v, str) for v in reply.values()), reply
        assert reply["status"] in ("done", "failed") and float(reply["et"]) >= 0
        return reply

    def close(self):
        self.sock.close(0)
        self.ctx.term()


@pytest.fixture
def served(tmp_path):
    """(client, server, thread) for a ridge(k=4, alpha=1e-9) director on an ephemeral loopback port that may open
    files in tmp_path."""
    service = IterationTimeService(make_model("ridge", alpha=1e-9), allowed_dirs=[tmp_path])
    server = CodesDirectorServer(service, "tcp://127.0.0.1:*")
    endpoint = server.bind()
    assert endpoint.startswith("tcp://127.0.0.1:")
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_ms": 20}, daemon=True)
    th.start()
    client = Client(endpoint)
    try:
        yield client, server, th
    finally:
        server.stop()
        th.join(10)
        client.close()
        assert not th.is_alive()


def _alive(client):
    assert client(b'{"cmd":"nothing"}\x00') ["status"] == "done"


BAD = [
    (b'{"cmd":"director-request","operation":"inference",\x00', "malformed JSON"),
    (b'{"cmd":"nothing"}', "missing NUL separator"),
    (b'["nothing"]\x00', "must be an object"),
    (b'\xff\xfe{}\x00', "not UTF-8"),
    (b'{"args":[]}\x00', "no 'cmd'"),
    (b'{"cmd":"launch","args":["sleep","1"]}\x00', "unknown cmd"),
    (dreq("frobnicate", ["1", "x"]), "unknown operation 'frobnicate'"),
    (b'{"cmd":"director-request","surrogate_family":"iteration-time","args":[]}\x00', "no 'operation'"),
    (dreq("send-records", []), "missing argument 1 (client)"),
    (dreq("send-records", ["0"]), "missing argument 2 (number of records)"),
    (dreq("inference", ["7"]), "missing argument 2 (number of steps)"),
    (dreq("inference", ["4", "7", "5", "1"]), "too many arguments"),
    (dreq("inference", ["2", "7", "nan"]), "finite integer"),
    (dreq("inference", ["2", "7", "0"]), "number of steps must be 1..10000"),
    (dreq("inference", ["2", "inf", "3"]), "client must be a finite integer"),
    (dreq("send-records", ["3", "5", "3"], b"nan inf -7"), "no finite positive iteration time"),
    (dreq("send-records", ["3", "5", "2"], b"100 abc"), "data value 2 ('abc') is not a number"),
    (b'{"cmd":"director-request","operation":"send-records","args":["5","1"]}\x00NaN', "no finite positive"),
    (b'{"cmd":"director-request","operation":"send-records","args":[NaN,"1"]}\x00', "non-finite number NaN"),
    (b'{"cmd":"director-request","operation":"inference","args":"5"}\x00', "'args' must be a list"),
    (dreq("inference", ["2", "1", "3"], family="event-time"), "surrogate_family 'event-time'"),
    (dreq("inference", ["2", "1", "3"], family="weather"), "unknown surrogate_family"),
    (dreq("train-model", ["1", "7"]), "target 'all'"),
    (dreq("train-model", ["1", "all"]), "not enough records"),
    (dreq("load-model", ["1", "/nonexistent/ckpt"]), "refused: the path is not inside a folder"),
    (dreq("save-model", []), "missing argument 1 (output model path)"),
    (dreq("load-records-csv", ["1", "/nonexistent.csv"]), "refused: the path is not inside a folder"),
    (dreq("model-status", ["1", "abc"]), "client must be a finite integer"),
]


def test_bad_requests_fail_and_server_keeps_serving(served):
    client, server, th = served
    for raw, needle in BAD:
        r = client(raw)
        assert r["status"] == "failed", (raw, r)
        assert needle in r["error"], (raw, r["error"])
        _alive(client)
    assert th.is_alive()
    assert server.requests == 2 * len(BAD)


def test_round_trip_send_train_infer_save_load(served, tmp_path):
    client, server, th = served
    r, a = 1.05, {0: 1000.0, 1: 2500.0}
    for c, scale in a.items():
        series = scale * r ** np.arange(10)
        # first half in CODES' form (leading count), second half hand-written (no count)
        r1 = client(dreq("send-records", ["3", c, 5], " ".join(repr(float(v)) for v in series[:5]).encode()))
        assert r1["status"] == "done" and r1["accepted"] == "5" and r1["ignored"] == "0"
        r2 = client(dreq("send-records", [c, 5], " ".join(repr(float(v)) for v in series[5:]).encode() + b" nan -1"))
        assert r2["accepted"] == "5" and r2["ignored"] == "2" and r2["total_records"] == "10"

    st = client(dreq("status", ["1", "all"]))
    assert (st["total_clients"], st["total_records"], st["trained_clients"], st["model_version"]) == \
        ("2", "20", "0", "0")
    tr = client(dreq("train-model", ["1", "all"]))
    assert tr["status"] == "done" and tr["training_examples"] == str(2 * (10 - 4)) and tr["model_version"] == "1"
    assert client(dreq("model-status", ["1", "1"]))["clients"] == "1:records=10,trained=1"

    # geometric series: the next values are a * r^10, r^11, r^12 (autoregressive multi-step)
    inf = client(dreq("inference", ["2", 1, 3]))
    assert inf["status"] == "done"
    pred = np.array([float(x) for x in inf["predictions"].split(" ")])
    assert pred == pytest.approx(a[1] * r ** np.arange(10, 13), rel=1e-6)
    # the stock aliases and old command names give the same answer
    alias = client(dreq("do-inference", ["2", 1, 3]))
    legacy = client(b'{"cmd":"iteration-time-inference","args":["3","1","3"]}\x00')
    assert alias["predictions"] == legacy["predictions"] == inf["predictions"]
    # context values in the data extend the history for this inference only
    ctx = client(dreq("inference", [0, 1], repr(float(a[0] * r ** 10)).encode()))
    assert float(ctx["predictions"]) == pytest.approx(a[0] * r ** 11, rel=1e-6)

    ckpt = tmp_path / "ckpt"
    sv = client(dreq("save-model", ["1", str(ckpt)]))
    assert sv["status"] == "done" and (ckpt / "config.json").is_file()
    # a different model in between, then the saved one back
    server.service.model = make_model("last")
    assert float(client(dreq("inference", [1, 1]))["predictions"]) == pytest.approx(a[1] * r ** 9)
    ld = client(dreq("load", ["1", str(ckpt)]))
    assert ld["status"] == "done" and ld["model"] == "ridge"
    assert client(dreq("inference", ["2", 1, 3]))["predictions"] == inf["predictions"]

    # exit: replied, then the server stops
    ex = client(b'{"cmd":"exit","args":["dummy"]}\x00')
    assert ex["status"] == "done"
    th.join(10)
    assert not th.is_alive()


def test_records_csv_and_auto_train(tmp_path):
    csv_path = tmp_path / "records.csv"
    rows = ["client,value"] + [f"7,{v}" for v in 3000.0 * 0.9 ** np.arange(8)] + ["7,-1", "7,nan"]
    csv_path.write_text("\n".join(rows) + "\n")
    service = IterationTimeService(make_model("ridge", alpha=1e-9), auto_train=True, allowed_dirs=[tmp_path])
    rep, _ = handle_request(service, dreq("load-records", ["1", str(csv_path)]))
    assert rep["status"] == "done" and (rep["loaded_rows"], rep["loaded_clients"], rep["ignored"]) == ("8", "1", "2")
    # no explicit train: auto-train fits before the inference, as CODES never sends train-model by default
    rep, _ = handle_request(service, dreq("inference", ["2", 7, 2]))
    assert [float(x) for x in rep["predictions"].split()] == pytest.approx(3000.0 * 0.9 ** np.arange(8, 10), rel=1e-6)
    assert rep["model_version"] == "1"

    bad = tmp_path / "bad.csv"
    bad.write_text("client,value\n1,100\nx,200\n")
    rep, _ = handle_request(service, dreq("load-records-csv", ["1", str(bad)]))
    assert rep["status"] == "failed" and f"{bad}:3: bad row" in rep["error"]


def test_records_log_roundtrip(tmp_path):
    log = tmp_path / "log.csv"
    a = IterationTimeService(make_model("last"), records_log=log)
    handle_request(a, dreq("send-records", ["3", 4, 2], b"10 20"))
    handle_request(a, dreq("send-records", ["3", 5, 1], b"30"))
    b = IterationTimeService(make_model("last"), allowed_dirs=[tmp_path])
    rep, _ = handle_request(b, dreq("load-records-csv", ["1", "log.csv"]))  # relative: inside the allowed folder
    assert rep["loaded_rows"] == "3"
    assert [list(b.clients[4].records), list(b.clients[5].records)] == [[10.0, 20.0], [30.0]]


def test_nothing_set_debug_and_exit_replies():
    s = IterationTimeService(make_model("last"))
    for raw, stop in ((b'{"cmd":"nothing"}\x00', False), (b'{"cmd":"set-debug","args":["1","0"]}\x00', False),
                      (b'{"cmd":"exit"}\x00', True)):
        rep, st = handle_request(s, raw)
        assert rep["status"] == "done" and "et" in rep and st is stop


def test_leading_count_rule():
    assert real_args(["2", "17", "60"], 2, 2) == ["17", "60"]  # docs/design.md §6: count of what follows
    assert real_args(["3", "17", "60"], 2, 2) == ["17", "60"]  # what CODES' director sends (counts itself)
    assert real_args(["17", "60"], 2, 2) == ["17", "60"]
    assert real_args(["1", "7"], 2, 2) == ["1", "7"]  # would leave too few arguments: not a count
    assert real_args(["1", "all"], 0, 1) == ["all"]
    assert real_args(["dummy"], 0, 1) == []
    assert real_args([3, 1, 2, 3]) == ["1", "2", "3"]


def test_graph_models_are_refused():
    from codes_bridge.director import DirectorError

    class FakeGraph:
        name, needs_graphs = "graphy", True

    import surrogate.registry as reg

    reg._REGISTRY["graphy-test"] = lambda **kw: FakeGraph()
    try:
        with pytest.raises(DirectorError, match="needs port graphs"):
            make_model("graphy-test")
    finally:
        del reg._REGISTRY["graphy-test"]


def test_cli_serve_end_to_end():
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "serve", "--codes-director", "tcp://127.0.0.1:*",
                             "--model", "ridge", "--model-option", "k=4"],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.search(r"on (tcp://127\.0\.0\.1:\d+)", line)
        assert m, line
        client = Client(m.group(1))
        try:
            r = client(dreq("send-records", ["3", 0, 4], b"100 100 100 100 100 100"))
            assert r["status"] == "done"
            assert client(dreq("inference", ["2", 0, 2]))["predictions"] == "100.0 100.0"
            assert client(b'{"cmd":"exit"}\x00')["status"] == "done"
        finally:
            client.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_serve_needs_a_service_and_a_known_model():
    from hybridsim.cli import main

    assert main(["serve"]) == 2
    assert main(["serve", "--codes-director", "tcp://127.0.0.1:*", "--model", "no-such-model"]) == 2


def test_auto_train_refits_after_two_percent_new_records():
    s = IterationTimeService(make_model("ridge"), auto_train=True)

    def send(n):
        rep, _ = handle_request(s, dreq("send-records", [0, n], " ".join(["1000"] * n).encode()))
        assert rep["status"] == "done"

    def version():
        rep, _ = handle_request(s, dreq("inference", [0, 1]))
        return rep["model_version"]

    send(100)
    assert version() == "1"      # never fitted: fit now
    send(1)
    assert version() == "1"      # 1 new of 101 < 2 %: keep the fit
    send(2)
    assert version() == "2"      # 3 new of 103 >= 2 %: refit
    assert version() == "2"      # nothing new


def _codes_inference_ok(reply: dict, steps: int) -> list[float]:
    """What CODES' director client requires of an inference reply (it aborts otherwise with '[DIR] iteration-time-
    inference returned too few fields'): status done and ``steps`` positive predictions."""
    assert reply["status"] == "done", reply
    vals = [float(x) for x in reply["predictions"].split()]
    assert len(vals) == steps and all(v > 0 for v in vals), reply
    return vals


def test_optimistic_codes_asks_before_sending_records():
    """Replays the order optimistic CODES uses (predictions asked at once, records only from committed events): the
    first inference of every client comes before its records. Each is answered done with a fallback: the fixed
    default while no client has records, then the median of the other clients' recent records; model-status counts
    them."""
    from codes_bridge.director import DEFAULT_FALLBACK_NS

    s = IterationTimeService(make_model("ridge"))
    logged = []
    s.log = logged.append
    rep, _ = handle_request(s, dreq("iteration-time-inference", ["3", 0, 1]))
    assert _codes_inference_ok(rep, 1) == [DEFAULT_FALLBACK_NS] and rep["fallback"] == "default"
    for c, times in ((0, b"1000 1010 990"), (1, b"2000 2100"), (2, b"1500")):
        assert handle_request(s, dreq("send-records", ["3", c, len(times.split())], times))[0]["status"] == "done"
    rep, _ = handle_request(s, dreq("iteration-time-inference", ["3", 7, 2]))
    # median of 1000 1010 990 2000 2100 1500 = (1010 + 1500) / 2
    assert _codes_inference_ok(rep, 2) == [1255.0, 1255.0] and rep["fallback"] == "median of 6 recent records"
    assert 7 not in s.clients  # a fallback stores nothing for the client
    # once a client's records are in, its own history is used again
    rep, _ = handle_request(s, dreq("iteration-time-inference", ["3", 2, 1]))
    assert _codes_inference_ok(rep, 1) == [1500.0] and "fallback" not in rep
    st, _ = handle_request(s, dreq("model-status", ["2", "all"]))
    assert st["fallbacks"] == "2"
    assert len(logged) == 2 and "client 7" in logged[1] and "1255.0" in logged[1]


def test_inference_only_checkpoint_without_context(tmp_path):
    """Inference-only CODES (training_enabled=0, a checkpoint served frozen) sends no records and no context: every
    inference is answered done with the fallback instead of aborting CODES."""
    m = make_model("ridge")
    m.fit_series([np.full(12, 1000.0)])
    m.save(tmp_path / "ckpt")
    s = IterationTimeService(make_model(str(tmp_path / "ckpt")), auto_train=False)
    for c in range(3):
        rep, _ = handle_request(s, dreq("inference", ["3", c, 1]))
        assert _codes_inference_ok(rep, 1) and rep["fallback"] == "default"
    assert handle_request(s, dreq("status", ["1", "all"]))[0]["fallbacks"] == "3"


@pytest.mark.parametrize("args, client", [(["0"], 0), (["1"], 1), (["1", "0"], 0), (["2", "1"], 1), (["1", "1"], 1),
                                          ([0], 0), ([1], 1)])
def test_model_status_of_client_zero_or_one(args, client):
    """A lone "0" or "1" is the client id, not CODES' argument count."""
    s = IterationTimeService(make_model("last"))
    for c in (0, 1, 2):
        handle_request(s, dreq("send-records", ["3", c, c + 1], b"100 " * (c + 1)))
    rep, _ = handle_request(s, dreq("model-status", args))
    assert rep["status"] == "done" and rep["total_clients"] == "1", rep
    assert rep["clients"] == f"{client}:records={client + 1},trained=0"
    assert handle_request(s, dreq("model-status", ["1", "all"]))[0]["total_clients"] == "3"
    assert handle_request(s, dreq("model-status", []))[0]["total_clients"] == "3"


def test_a_job_s_clients_are_answered_the_job_s_iteration_time():
    """With groups (a hybrid CODES run under controller.sync skew, the default), every client of a job gets the mean
    of the model's predictions for the job's clients, each from its own history: ``mean`` here, so the job's answer
    is the mean of the per-client means, hand-computed. A client of another job, and every client without groups,
    gets its own."""
    svc = IterationTimeService(make_model("mean"))
    svc.send_records(["1", "2"], b"100 300")        # mean 200
    svc.send_records(["2", "2"], b"500 700")        # mean 600
    svc.send_records(["9", "1"], b"50")             # another job: mean 50
    own = {c: float(svc.inference([str(c), "1"], b"")["predictions"]) for c in (1, 2, 9)}
    assert own == {1: 200.0, 2: 600.0, 9: 50.0}
    svc.set_groups({1: 0, 2: 0, 3: 0, 9: 1})        # client 3 (job 0) has no records yet: not in the mean
    assert [float(svc.inference([str(c), "1"], b"")["predictions"]) for c in (1, 2, 3, 9)] == [400.0] * 3 + [50.0]
    got = svc.inference(["1", "3"], b"")["predictions"].split()   # three steps: mean keeps its level
    assert [float(v) for v in got] == [400.0, 400.0, 400.0]
    svc.send_records(["3", "1"], b"1000")           # the job's answer follows its clients' new records
    assert float(svc.inference(["2", "1"], b"")["predictions"]) == pytest.approx((200 + 600 + 1000) / 3)
    svc.set_groups(None)
    assert float(svc.inference(["2", "1"], b"")["predictions"]) == 600.0
