"""The gRPC surrogate service (hybridsim.service.surrogate_server + client) on 127.0.0.1, ephemeral ports."""

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import grpc
import numpy as np
import pytest

from hybridsim.service._common import to_tensor
from hybridsim.service._gen import common_pb2, surrogate_pb2, surrogate_pb2_grpc
from hybridsim.service.client import RemoteError, RemoteSurrogate
from hybridsim.service.surrogate_server import SurrogateServer
from surrogate.base import Context, Surrogate, SurrogateError
from surrogate.loading import load_surrogate
from surrogate.registry import create

RNG = np.random.default_rng(7)


def fitted_ridge():
    m = create("ridge", k=4)
    t = np.arange(60)
    m.fit_series([1e5 * (1 + 0.05 * np.sin(t / 3 + r)) for r in range(6)])
    assert m.coef is not None
    return m


def history(R=32, L=8, nan_rows=(3,)):
    h = 1e5 * (1 + 0.1 * RNG.random((R, L)))
    for r in nan_rows:
        h[r, : L // 2] = np.nan   # a rank with a short history
    return h


@pytest.fixture
def ridge_server():
    with SurrogateServer(fitted_ridge()) as srv:
        yield srv


def stub_of(srv):
    ch = grpc.insecure_channel(srv.address)
    return ch, surrogate_pb2_grpc.SurrogateStub(ch)


def code_and_details(fn, req):
    with pytest.raises(grpc.RpcError) as ei:
        fn(req, timeout=10)
    return ei.value.code(), ei.value.details()


# ------------------------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name,config", [("last", {}), ("mean", {"k": 3}), ("ewma", {"alpha": 0.4, "k": 6}),
                                         ("ridge", None)])
def test_predictions_identical_to_in_process(name, config):
    model = fitted_ridge() if config is None else create(name, **config)
    h = history()
    ctx = Context("milc", "milc", h, iteration=9)
    with SurrogateServer(model) as srv, RemoteSurrogate(srv.address) as c:
        assert c.remote_model == name and c.lookback == model.lookback
        got = c.predict(ctx)
        assert got.dtype == np.float64
        assert np.array_equal(got, model.predict(ctx))          # bit for bit
        # explicit call with a subset of ranks: the model sees only those rows
        sub = [5, 0, 17]
        assert np.array_equal(c.predict_times("milc", h[sub], ranks=sub),
                              model.predict(Context("milc", "milc", h[sub])))
        st = c.status()
        assert st.predict_calls == 2 and st.predictions == 32 + 3 and st.job_names == ["milc"]


def test_server_side_truth_feeds_predict_when_history_is_empty():
    """Tune stores ground truth; Predict without history uses its last `lookback` iterations (LAST: the last one)."""
    with SurrogateServer(create("last")) as srv, RemoteSurrogate(srv.address) as c:
        c.open_job("nn", 4, "nearest_neighbor")
        y = np.array([[10.0, 11.0, 12.0], [20.0, 21.0, 22.0], [30.0, 31.0, 32.0], [40.0, 41.0, 42.0]])
        rep = c.tune_window("nn", y, first_iteration=0)
        assert rep["truth_values"] == 12 and rep["model_version"] == 1
        # iteration 3 known for ranks 1 and 3 only; NaN = unknown keeps nothing for the others
        c.tune_window("nn", np.array([[123.0], [np.nan]]), first_iteration=3, ranks=[1, 3])
        # the model's own look-back (1 for LAST) sees only iteration 3: nothing for rank 0, so no NaN answered with OK
        with pytest.raises(RemoteError) as ei:
            c.predict_times("nn", None)
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and "row 0 has no measured value" in str(ei.value)
        assert np.array_equal(c.predict_times("nn", None, ranks=[1]), [123.0])
        # a longer look-back reaches back to iteration 2
        assert np.array_equal(c.predict_times("nn", None, lookback=4), [12.0, 123.0, 32.0, 42.0])
        assert np.array_equal(c.predict_times("nn", None, ranks=[3, 1], lookback=2), [42.0, 123.0])
        assert c.status().truth_values == 13


def test_fit_and_tune_remote_equal_local():
    """The server's ridge, fitted through the service on a job's truth, predicts exactly like a local ridge fitted on
    the same table (the dataset the server builds has the same y)."""
    R, T = 6, 40
    t = np.arange(T)
    y = np.array([2e5 * (1 + 0.03 * np.sin(t / 2 + r)) for r in range(R)])
    y[2, 10:14] = np.nan     # predicted iterations: unknown truth
    ds = SimpleNamespace(job="lammps", workload="lammps", y=y)
    local, served = create("ridge", k=4), create("ridge", k=4)
    local.fit(ds, list(range(30)))
    local.tune(ds, list(range(30, 40)))
    with SurrogateServer(served) as srv, RemoteSurrogate(srv.address) as c:
        c.fit(ds, list(range(30)))
        rep = c.tune(ds, list(range(30, 40)))
        assert rep["model_version"] == 2 and rep["windows"] > 0
        ctx = Context("lammps", "lammps", y[:, -4:])
        assert np.array_equal(c.predict(ctx), local.predict(ctx))
    assert np.array_equal(served.coef, local.coef)


def test_contexts_of_a_subset_of_ranks_keep_the_job():
    """The controller may predict a subset of a job's ranks: the context goes as it is, the job and its truth stay."""
    R, T = 5, 12
    y = 1e3 * (1 + np.arange(R)[:, None] + 0.01 * np.arange(T)[None, :])
    ds = SimpleNamespace(job="a", workload="milc", y=y)
    model = create("mean", k=3)
    with SurrogateServer(model) as srv, RemoteSurrogate(srv.address) as c:
        c.fit(ds, list(range(T)))
        assert c.status().truth_values == R * T
        sub = Context("a", "milc", y[[4, 1], -3:])
        assert np.array_equal(c.predict(sub), model.predict(sub))
        full = Context("a", "milc", y[:, -3:])
        assert np.array_equal(c.predict(full), model.predict(full))
        st = c.status()
        assert st.truth_values == R * T and st.jobs == 1
        assert np.array_equal(c.predict_times("a", None, lookback=3), model.predict(full))


def test_save_round_trip_and_refusals(tmp_path):
    model = fitted_ridge()
    with SurrogateServer(model, save_dir=tmp_path) as srv, RemoteSurrogate(srv.address) as c:
        path = c.save_remote("ckpt/v1")
        assert path == str(tmp_path / "ckpt" / "v1")
        again = load_surrogate(path)
        ctx = Context("j", "milc", history())
        assert np.array_equal(again.predict(ctx), c.predict(ctx))
        for bad in ("../escape", "/abs", "", "a/../../b", "sp ace"):
            with pytest.raises(RemoteError) as ei:
                c.save_remote(bad)
            assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and "name" in ei.value.details
    with SurrogateServer(create("last")) as srv, RemoteSurrogate(srv.address) as c:
        with pytest.raises(RemoteError) as ei:
            c.save_remote("x")
        assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION and "--save-dir" in ei.value.details


class GraphProbe(Surrogate):
    """A graph model stand-in: last value + feature 0 of its rank's port in the newest graph."""

    name = "graph-probe"
    lookback = 2
    needs_graphs = True

    def predict(self, ctx):
        if ctx.graphs is None:
            raise SurrogateError("graph-probe: needs graphs")
        assert ctx.mask is not None and ctx.mask[ctx.rank_port].all()
        return ctx.history[:, -1] + ctx.graphs[-1, ctx.rank_port, 0]


def test_graphs_mask_and_rank_port_reach_the_model():
    P, F = 30, 5
    rank_port = np.array([4, 9, 21])
    mask = np.zeros(P, bool)
    mask[rank_port] = True
    graphs = RNG.random((2, P, F)).astype(np.float32)
    h = history(3, 2, ())
    ctx = Context("g", "milc", h, graphs=graphs, mask=mask, rank_port=rank_port)
    model = GraphProbe()
    with SurrogateServer(model) as srv, RemoteSurrogate(srv.address) as c:
        assert c.needs_graphs
        assert np.array_equal(c.predict(ctx), model.predict(ctx))
        part = Context("g", "milc", h[[2, 0]], graphs=graphs, mask=mask, rank_port=rank_port[[2, 0]])
        assert np.array_equal(c.predict(part), model.predict(part))    # a subset with its own ports
        with pytest.raises(RemoteError) as ei:
            c.predict_times("g", h)
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and ei.value.details.startswith("graphs:")
        with pytest.raises(RemoteError) as ei:   # graphs with the wrong number of ports for the job's mask
            c.predict_times("g", h, graphs=graphs[:, :20])
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and "graphs.shape" in ei.value.details


# ------------------------------------------------------------------------------------------------ errors
def _req(**kw):
    base = dict(job="milc", lookback=2, history=[1.0, 2.0, 3.0, 4.0], ranks=[0, 1])
    base.update(kw)
    return surrogate_pb2.PredictRequest(**base)


BAD_PREDICTS = [
    (_req(job=""), "job:"),
    (_req(ranks=[0, 99], history=[1.0] * 4), "ranks[1]:"),
    (_req(ranks=[1, 1]), "ranks:"),
    (_req(lookback=0), "lookback:"),
    (_req(lookback=5000, history=[1.0] * 10000), "lookback:"),
    (_req(history=[1.0, 2.0, 3.0]), "history:"),
    (_req(ranks=[], history=[1.0, 2.0, 3.0]), "history:"),
    (_req(rank_port=[1]), "rank_port:"),
    (_req(rank_port=[1, -1]), "rank_port[1]:"),
    (_req(history=[1.0, -2.0, 3.0, 4.0]), "history[1]:"),
    (_req(history=[1.0, 2.0, float("inf"), 4.0]), "history[2]:"),
    (_req(graphs=common_pb2.Tensor(dtype=common_pb2.Tensor.INT64, shape=[1, 2, 1], data=b"\0" * 16)),
     "graphs.dtype:"),
    (_req(graphs=common_pb2.Tensor(dtype=99, shape=[1, 2, 1], data=b"\0" * 16)), "graphs.dtype:"),
    (_req(graphs=common_pb2.Tensor(dtype=common_pb2.Tensor.FLOAT32, shape=[1, 2, 1], data=b"\0" * 7)),
     "graphs.data:"),
    (_req(graphs=common_pb2.Tensor(dtype=common_pb2.Tensor.FLOAT32, shape=[2, 1], data=b"\0" * 8)),
     "graphs.shape:"),
]


def test_malformed_requests_get_invalid_argument_naming_the_field(ridge_server):
    ch, stub = stub_of(ridge_server)
    with ch:
        stub.OpenJob(surrogate_pb2.OpenJobRequest(job="milc", ranks=4), timeout=10)
        for req, field in BAD_PREDICTS:
            code, details = code_and_details(stub.Predict, req)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, details)
            assert details.startswith(field), (field, details)
        bad_opens = [
            (surrogate_pb2.OpenJobRequest(job="x", ranks=0), "ranks:"),
            (surrogate_pb2.OpenJobRequest(job="x", ranks=2, rank_port=[1]), "rank_port:"),
            (surrogate_pb2.OpenJobRequest(job="x", ranks=2, rank_port=[1, 5],
                                          mask=to_tensor(np.ones(4, bool))), "rank_port[1]:"),
            (surrogate_pb2.OpenJobRequest(job="x" * 300, ranks=2), "job:"),
        ]
        for req, field in bad_opens:
            code, details = code_and_details(stub.OpenJob, req)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field), (field, details)
        bad_tunes = [
            (surrogate_pb2.TuneRequest(job="milc", window=0), "window:"),
            (surrogate_pb2.TuneRequest(job="milc", window=1, first_iteration=-1, durations=[1.0] * 4),
             "first_iteration:"),
            (surrogate_pb2.TuneRequest(job="milc", window=1, durations=[1.0] * 3), "durations:"),
            (surrogate_pb2.TuneRequest(job="milc", window=1, durations=[1.0, 0.0, 1.0, 1.0]), "durations[1]:"),
            (surrogate_pb2.TuneRequest(job="milc", ranks=[4], window=1, durations=[1.0]), "ranks[0]:"),
        ]
        for req, field in bad_tunes:
            code, details = code_and_details(stub.Tune, req)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field), (field, details)
        # nothing of the refused requests was kept
        st = stub.Status(surrogate_pb2.StatusRequest(), timeout=10)
        assert st.jobs == 1 and st.truth_values == 0 and st.predict_calls == 0 and st.model_version == 0


def test_unknown_job_is_not_found(ridge_server):
    ch, stub = stub_of(ridge_server)
    with ch:
        for fn, req in [(stub.Predict, _req(job="ghost")),
                        (stub.Tune, surrogate_pb2.TuneRequest(job="ghost", window=1, durations=[1.0])),
                        (stub.CloseJob, surrogate_pb2.CloseJobRequest(job="ghost"))]:
            code, details = code_and_details(fn, req)
            assert code == grpc.StatusCode.NOT_FOUND and "ghost" in details
        code, _ = code_and_details(stub.Predict, _req(job="milc", history=[]))
        assert code == grpc.StatusCode.NOT_FOUND


def test_job_count_and_message_size_are_bounded():
    with SurrogateServer(create("last"), max_jobs=2, max_message_bytes=64 * 1024) as srv:
        ch, stub = stub_of(srv)
        with ch:
            for j in ("a", "b"):
                stub.OpenJob(surrogate_pb2.OpenJobRequest(job=j, ranks=1), timeout=10)
            code, details = code_and_details(stub.OpenJob, surrogate_pb2.OpenJobRequest(job="c", ranks=1))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 jobs" in details
            stub.OpenJob(surrogate_pb2.OpenJobRequest(job="a", ranks=1), timeout=10)   # re-declaring is fine
            big = surrogate_pb2.PredictRequest(job="a", lookback=10000, history=[1.0] * 10000)   # 80 kB > 64 kB
            code, _ = code_and_details(stub.Predict, big)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stub.Status(surrogate_pb2.StatusRequest(), timeout=10).jobs == 2


# ------------------------------------------------------------------------------------------------ load
class Gate(Surrogate):
    """Blocks every predict until released; counts the calls inside."""

    name = "gate"

    def __init__(self):
        self.inside = threading.Semaphore(0)
        self.release = threading.Event()

    def predict(self, ctx):
        self.inside.release()
        assert self.release.wait(20)
        return ctx.history[:, -1] * 2


def test_requests_beyond_the_in_flight_bound_get_resource_exhausted():
    gate = Gate()
    with SurrogateServer(gate, max_in_flight=2, max_workers=4) as srv:
        ch, stub = stub_of(srv)
        with ch:
            stub.OpenJob(surrogate_pb2.OpenJobRequest(job="j", ranks=1), timeout=10)
            req = surrogate_pb2.PredictRequest(job="j", lookback=1, history=[21.0])
            held = [stub.Predict.future(req, timeout=30) for _ in range(2)]
            for _ in range(2):
                assert gate.inside.acquire(timeout=20)      # both are inside the model now
            code, details = code_and_details(stub.Predict, req)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 requests in flight" in details
            # probes still answer while the service is saturated
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            hs = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert hs.status == health_pb2.HealthCheckResponse.SERVING
            st = stub.Status(surrogate_pb2.StatusRequest(), timeout=10)
            assert st.in_flight == 2 and st.max_in_flight == 2
            gate.release.set()
            assert [list(f.result().durations) for f in held] == [[42.0], [42.0]]
            assert list(stub.Predict(req, timeout=10).durations) == [42.0]   # free again
            assert srv.limiter.rejected == 1 and srv.limiter.in_flight == 0
            # the client retries a refusal with back-off: once the gate opens, a refused call goes through
            gate.release.clear()
            with RemoteSurrogate(srv.address, retries=8) as c:
                ctx = Context("j", "", np.array([[5.0]]))
                held = [stub.Predict.future(req, timeout=30) for _ in range(2)]
                for _ in range(2):
                    assert gate.inside.acquire(timeout=20)
                threading.Timer(0.1, gate.release.set).start()
                assert list(c.predict(ctx)) == [10.0]
                assert [list(f.result().durations) for f in held] == [[42.0], [42.0]]
                assert srv.limiter.rejected >= 2


def test_burst_of_concurrent_clients_all_answered_correctly():
    """500 requests from 16 threads (one client each), every answer equal to the local model's."""
    model = fitted_ridge()
    with SurrogateServer(model, max_in_flight=64) as srv:
        clients = [RemoteSurrogate(srv.address) for _ in range(16)]
        hs = [1e5 * (1 + 0.1 * np.random.default_rng(i).random((8, 4))) for i in range(500)]

        def one(i):
            c = clients[i % 16]
            return c.predict(Context(f"job{i % 5}", "milc", hs[i]))

        with ThreadPoolExecutor(16) as ex:
            got = list(ex.map(one, range(500)))
        for i in range(500):
            assert np.array_equal(got[i], model.predict(Context("x", "milc", hs[i]))), i
        st = clients[0].status()
        assert st.predict_calls == 500 and st.predictions == 500 * 8 and st.jobs == 5
        for c in clients:
            c.close()


def test_health_and_reflection_are_visible(ridge_server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    ch, _ = stub_of(ridge_server)
    with ch:
        h = health_pb2_grpc.HealthStub(ch)
        for svc in ("", "hybridsim.v1.Surrogate"):
            assert h.Check(health_pb2.HealthCheckRequest(service=svc), timeout=10).status == \
                health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as ei:
            h.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
        assert ei.value.code() == grpc.StatusCode.NOT_FOUND
        db = ProtoReflectionDescriptorDatabase(ch)
        services = set(db.get_services())
        assert {"hybridsim.v1.Surrogate", "grpc.health.v1.Health"} <= services
        from google.protobuf.descriptor_pool import DescriptorPool

        pool = DescriptorPool(db)
        svc = pool.FindServiceByName("hybridsim.v1.Surrogate")
        assert {m.name for m in svc.methods} == {"OpenJob", "CloseJob", "Predict", "Tune", "Status", "Save"}
        assert pool.FindMessageTypeByName("hybridsim.v1.PredictRequest").fields_by_name["history"].number == 4


def test_default_address_is_loopback():
    with SurrogateServer(create("last"), address="0") as srv:
        assert srv.address.startswith("127.0.0.1:") and not srv.address.endswith(":0")


def test_trained_graph_model_dcrnn_identical_through_the_service(tmp_path):
    """A real graph model (DCRNN, trained briefly on a synthetic run): the service gives its predictions bit for bit
    from the job's graph look-back, mask and rank ports."""
    import torch

    from surrogate.dataset import build_dataset
    from surrogate.synthetic import make_synthetic_run
    from surrogate.train import train_dataset

    torch.set_num_threads(1)
    make_synthetic_run(tmp_path / "run", jobs=(("A", "milc", 3, 24),), period=4, noise=0.0)
    ds = build_dataset(tmp_path / "run", tmp_path / "ds", train_frac=0.5, val_frac=0.1)
    model = train_dataset(ds, "dcrnn", tmp_path / "dc", config={"epochs": 1, "hidden": 4})["models"]["A"]
    js = ds["A"]
    assert model.needs_graphs and model.net is not None
    with SurrogateServer(model) as srv, RemoteSurrogate(srv.address) as c:
        for t in (5, 12, js.T - 2):
            ctx = js.context(t, model.lookback, model.graph_lookback)
            assert ctx.graphs is not None
            assert np.array_equal(c.predict(ctx), model.predict(ctx))
        ctx = js.context(12, model.lookback, model.graph_lookback)
        with pytest.raises(RemoteError) as ei:       # the same context without its graphs
            c.predict_times(ctx.job, ctx.history)
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and ei.value.details.startswith("graphs:")


def test_registry_name_remote_builds_a_client(ridge_server):
    c = create("remote", address=ridge_server.address)
    try:
        assert isinstance(c, RemoteSurrogate) and c.config() == {"address": ridge_server.address}
        ctx = Context("r", "milc", history())
        assert np.array_equal(c.predict(ctx), ridge_server.model.predict(ctx))
        with pytest.raises(SurrogateError, match="save_remote"):
            c.save("/tmp/anything")
    finally:
        c.close()


def test_remote_fit_and_tune_of_smart_beyond_the_held_graphs():
    """SMART (tiny, 1 LM layer) fitted and tuned through the service on a 64-iteration job: the server holds the
    graphs of the last 32 iterations only, so the dataset it builds gives x[t] for column t (NaN before the held ones)
    and a fit or tune uses the targets whose graph look-back is held (t - Lg >= first held column). The result equals a
    local SMART fitted on the full series with exactly those targets, then tuned on the same window."""
    from hybridsim_common.topology import Dragonfly, DragonflyShape
    from surrogate.graphs import shape_dict
    from surrogate.online import OnlineSeries

    shape = DragonflyShape(2, 2, 2, 1)
    topo = Dragonfly(shape)
    R, T, F = 4, 64, 6
    rank_port = topo.terminal_port_ids[np.arange(R)].astype(np.int64)
    mask = np.zeros(topo.n_ports, bool)
    mask[rank_port] = True
    t = np.arange(T)
    y = np.array([1e5 * (1 + 0.05 * np.sin(t / 3 + r)) for r in range(R)])
    x = RNG.standard_normal((T, topo.n_ports, F)).astype(np.float32)
    ds = OnlineSeries("m", "milc", y, rank_port=rank_port, mask=mask, x=x, shape=shape)
    cfg = dict(lookback=4, graph_lookback=2, hidden=8, tf_ff=16, gcn_layers=1, epochs=2, tune_steps=1,
               llm_layers=1, llm_dtype="float32", d_model=8, n_prototypes=8, n_heads=2, d_keys=4,
               topology=shape_dict(shape), in_features=F)
    local, served = create("smart", **cfg), create("smart", **cfg)
    local.fit(ds, list(range(26, 56)))
    local.tune(ds, list(range(56, 64)))
    with SurrogateServer(served, max_graph_iterations=32) as srv, RemoteSurrogate(srv.address) as c:
        c.fit(ds, list(range(56)))            # one window of 56 columns: graphs of 24..55 held, targets 26..55
        rep = c.tune(ds, list(range(56, 64)))  # graphs of 32..63 held
        assert rep["model_version"] == 2 and rep["steps"] == 1
        ctx = ds.context(63, 4, 2)
        np.testing.assert_allclose(c.predict(ctx), local.predict(ctx), rtol=1e-6)
    for a, b in zip(served.net.state_dict().values(), local.net.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy())
