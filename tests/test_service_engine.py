"""The remote engine (hybridsim.service.engine_server + remote.RemoteBackend) on 127.0.0.1, ephemeral ports: the
transport with a stand-in engine, then equivalence with the embedded engine in a hybrid run."""

import threading
import time

import grpc
import numpy as np
import pytest

from hybridsim_common.backend import Mode, SimulationResult
from hybridsim_common.records import IterationRecord, PortSamples
from hybridsim.scenario import parse_scenario
from hybridsim.service._gen import engine_pb2, engine_pb2_grpc
from hybridsim.service.engine_server import EngineServer
from hybridsim.service.remote import RemoteBackend, RemoteEngineError

SC = """
seed: 5
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 12, workload: {kind: allreduce}}
  - {name: b, ranks: 3, iterations: 12, workload: {kind: allreduce}}
"""


class StandInEngine:
    """The engine's run() contract with analytic times: rank r of job j, iteration i lasts 1000 (j+1) + 10 r + i ns
    (+ a seed-dependent offset); predicted iterations last what the director says. One PortSamples block (2 samples,
    2 routers x radix 3, 2 features) per iteration of job 0."""

    def __init__(self, scenario, gate=None, fail_at=None, pause_at=0):
        self.sc, self.gate, self.fail_at, self.pause_at = scenario, gate, fail_at, pause_at
        self.completed = False

    def run(self, director=None, on_record=None, on_samples=None):
        recs, sims, blocks = [], [], []
        t = {j: np.zeros(job.ranks) for j, job in enumerate(self.sc.jobs)}
        n_it = max(job.iterations for job in self.sc.jobs)
        for it in range(n_it):
            if self.gate is not None and it == self.pause_at:
                self.gate.wait()
            if self.fail_at == it:
                raise ValueError("stand-in engine failure")
            for j, job in enumerate(self.sc.jobs):
                mode = director.mode_for(j, it) if director is not None else Mode.SIMULATE
                if mode == Mode.PREDICT:
                    d = np.asarray(director.predict(j, it, np.arange(job.ranks), t[j].copy()))
                else:
                    d = np.array([1000.0 * (j + 1) + 10 * r + it + self.sc.seed for r in range(job.ranks)])
                for r in range(job.ranks):
                    rec = IterationRecord(job.name, j, r, it, float(t[j][r]), float(t[j][r] + d[r]))
                    recs.append(rec)
                    sims.append(mode == Mode.SIMULATE)
                    if on_record is not None:
                        on_record(rec, mode == Mode.SIMULATE)
                t[j] = t[j] + d
                if j == 0:
                    vals = np.arange(2 * 6 * 2, dtype=np.float32).reshape(2, 6, 2) + it
                    blk = PortSamples(np.array([2 * it + 1.0, 2 * it + 2.0]) * 1e3, 1e3, 3, ("bytes", "util_pct"),
                                      vals, {"it": it})
                    blocks.append(blk)
                    if on_samples is not None:
                        on_samples(blk)
        self.completed = True
        ports = PortSamples(np.concatenate([b.t_end for b in blocks]), 1e3, 3, ("bytes", "util_pct"),
                            np.concatenate([b.values for b in blocks]))
        return SimulationResult(recs, sims, ports, events=123, end_time=float(max(v.max() for v in t.values())),
                                job_end={job.name: float(t[j].max()) for j, job in enumerate(self.sc.jobs)},
                                wall_s=0.01, stats={"arr": np.arange(3)})


class EveryThirdPredicted:
    """Predicts iterations 2, 5, 8, ... as 777 + rank; remembers how many records it had seen at each call."""

    keep_background = False

    def __init__(self):
        self.seen = 0
        self.calls = []

    def on_record(self, rec, simulated):
        self.seen += 1

    def mode_for(self, job_id, iteration):
        self.calls.append(("mode", job_id, iteration, self.seen))
        return Mode.PREDICT if iteration % 3 == 2 else Mode.SIMULATE

    def predict(self, job_id, iteration, ranks, starts):
        self.calls.append(("predict", job_id, iteration, self.seen, list(ranks), list(starts)))
        return 777.0 + np.asarray(ranks, dtype=np.float64)


@pytest.fixture
def scenario():
    return parse_scenario(SC)


def wait_until(pred, what, limit=20.0):
    end = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


def test_transport_matches_in_process_stand_in(scenario):
    local_dir, local_blocks, local_recs = EveryThirdPredicted(), [], []

    def local_on_record(rec, sim):
        local_dir.on_record(rec, sim)
        local_recs.append((rec, sim))

    ref = StandInEngine(scenario).run(local_dir, local_on_record, local_blocks.append)
    with EngineServer(engine_factory=StandInEngine) as srv:
        remote_dir, blocks, recs = EveryThirdPredicted(), [], []

        def on_record(rec, sim):
            remote_dir.on_record(rec, sim)
            recs.append((rec, sim))

        res = RemoteBackend(srv.address, scenario, record_batch=5).run(remote_dir, on_record, blocks.append)
        assert srv.active_runs == 0
    # same callbacks in the same order, and every director call saw exactly the records it sees in-process
    assert recs == local_recs and len(recs) == 7 * 12
    assert remote_dir.calls == local_dir.calls
    assert any(c[0] == "predict" for c in remote_dir.calls)
    assert len(blocks) == len(local_blocks) == 12
    for b, lb in zip(blocks, local_blocks):
        assert np.array_equal(b.values, lb.values) and np.array_equal(b.t_end, lb.t_end) and b.meta == lb.meta
        assert b.features == lb.features and b.radix == lb.radix and b.interval == lb.interval
    assert res.records == ref.records and res.simulated == ref.simulated
    assert np.array_equal(res.ports.values, ref.ports.values) and np.array_equal(res.ports.t_end, ref.ports.t_end)
    assert (res.events, res.end_time, res.job_end) == (ref.events, ref.end_time, ref.job_end)
    assert res.stats["arr"] == [0, 1, 2] and res.stats["remote"]["director_calls"] == len(remote_dir.calls)


def test_result_not_as_streamed_is_sent_whole(scenario):
    """An engine whose result differs from what it streamed (reordered records, no streamed samples) still gives
    its result exactly."""

    class Reordering(StandInEngine):
        def run(self, director=None, on_record=None, on_samples=None):
            res = super().run(director, on_record, None)
            order = np.argsort([r.rank for r in res.records], kind="stable")
            res.records = [res.records[i] for i in order]
            res.simulated = [res.simulated[i] for i in order]
            return res

    ref = Reordering(scenario).run()
    with EngineServer(engine_factory=Reordering) as srv:
        res = RemoteBackend(srv.address, scenario, seed=5).run()
    assert res.records == ref.records and res.simulated == ref.simulated
    assert np.array_equal(res.ports.values, ref.ports.values)


def test_seed_override_and_pure_simulation(scenario):
    with EngineServer(engine_factory=StandInEngine) as srv:
        res = RemoteBackend(srv.address, SC, seed=11).run()     # YAML text, no director: all simulated
    assert all(res.simulated) and res.records[0].end == 1000.0 + 11


# ------------------------------------------------------------------------------------------------ errors
def raw_run(srv, messages):
    ch = grpc.insecure_channel(srv.address)
    stub = engine_pb2_grpc.EngineStub(ch)
    return ch, stub.Run(iter(messages), timeout=20)


def test_bad_scenario_and_bad_first_message_are_invalid_argument():
    with EngineServer(engine_factory=StandInEngine) as srv:
        with pytest.raises(RemoteEngineError) as ei:
            RemoteBackend(srv.address, "jobs:\n  - {name: a, ranks: -4, iterations: 2, workload: {kind: allreduce}}\n"
                          ).run()
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "start.scenario_yaml" in ei.value.details and "ranks" in ei.value.details and ":2:" in ei.value.details
        ch, call = raw_run(srv, [engine_pb2.EngineRequest(mode_answer=engine_pb2.ModeAnswer(call_id=1))])
        with ch, pytest.raises(grpc.RpcError) as ei:
            list(call)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and ei.value.details().startswith("start:")
        assert srv.active_runs == 0


def test_malformed_answers_are_invalid_argument(scenario):
    class WrongLength(EveryThirdPredicted):
        def predict(self, job_id, iteration, ranks, starts):
            return np.ones(len(ranks) + 1)

    class Negative(EveryThirdPredicted):
        def predict(self, job_id, iteration, ranks, starts):
            return -np.ones(len(ranks))

    with EngineServer(engine_factory=StandInEngine) as srv:
        for director, field in [(WrongLength(), "predict_answer.durations:"),
                                (Negative(), "predict_answer.durations[0]:")]:
            with pytest.raises(RemoteEngineError) as ei:
                RemoteBackend(srv.address, scenario).run(director)
            assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and ei.value.details.startswith(field)
        wait_until(lambda: srv.active_runs == 0, "the failed runs to be forgotten")


def test_engine_failure_is_internal(scenario):
    with EngineServer(engine_factory=lambda sc: StandInEngine(sc, fail_at=3)) as srv:
        with pytest.raises(RemoteEngineError) as ei:
            RemoteBackend(srv.address, scenario).run()
        assert ei.value.code == grpc.StatusCode.INTERNAL and "stand-in engine failure" in ei.value.details
        wait_until(lambda: srv.active_runs == 0, "the failed run to be forgotten")


def test_runs_beyond_max_runs_get_resource_exhausted(scenario):
    gate = threading.Event()
    with EngineServer(engine_factory=lambda sc: StandInEngine(sc, gate=gate), max_runs=1) as srv:
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("res", RemoteBackend(srv.address, scenario).run()))
        t.start()
        wait_until(lambda: srv.active_runs == 1, "the first run to start")
        with pytest.raises(RemoteEngineError) as ei:
            RemoteBackend(srv.address, scenario).run()
        assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        gate.set()
        t.join(20)
        assert len(out["res"].records) == 7 * 12 and srv.active_runs == 0


def test_client_failure_and_disconnect_leave_no_state(scenario):
    class Boom(EveryThirdPredicted):
        def predict(self, job_id, iteration, ranks, starts):
            raise KeyError("director broke")

    gate = threading.Event()
    gate.set()
    engines = []

    def factory(sc):
        engines.append(StandInEngine(sc, gate=gate, pause_at=2))
        return engines[-1]

    with EngineServer(engine_factory=factory) as srv:
        with pytest.raises(KeyError, match="director broke"):     # the director's own exception, unchanged
            RemoteBackend(srv.address, scenario).run(Boom())
        wait_until(lambda: srv.active_runs == 0, "the cancelled run to be forgotten")
        # raw clients that read a little and then go away mid-stream: (1) while the engine waits for a director
        # answer, (2) while the engine is busy outside any callback (paused at iteration 2): it stops at its next
        # callback once it goes on
        for director, stop_at in [(True, "mode_call"), (False, None)]:
            start = engine_pb2.EngineRequest(start=engine_pb2.Start(scenario_yaml=SC, director=director,
                                                                    record_batch=1))
            hold = threading.Event()

            def requests():
                yield start
                hold.wait(20)

            if not director:
                gate.clear()
            ch = grpc.insecure_channel(srv.address)
            call = engine_pb2_grpc.EngineStub(ch).Run(requests(), timeout=20)
            kinds = [next(call).WhichOneof("msg")]
            assert kinds[0] == "started"
            if stop_at:
                while kinds[-1] != stop_at:
                    kinds.append(next(call).WhichOneof("msg"))
            else:
                kinds += [next(call).WhichOneof("msg") for _ in range(2)]
                assert kinds[1:] == ["records", "records"]
            assert srv.active_runs == 1
            call.cancel()
            ch.close()
            hold.set()
            gate.set()
            wait_until(lambda: srv.active_runs == 0, "the disconnected run to be forgotten")
        for th in srv.servicer.threads:
            th.join(10)
            assert not th.is_alive()
        with grpc.insecure_channel(srv.address) as ch:
            st = engine_pb2_grpc.EngineStub(ch).Status(engine_pb2.EngineStatusRequest(), timeout=10)
        assert st.active_runs == 0 and st.total_runs == 3
    assert [e.completed for e in engines] == [False, False, False]     # every run was stopped, none ran on


def test_engine_health_and_reflection():
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with EngineServer(engine_factory=StandInEngine) as srv, grpc.insecure_channel(srv.address) as ch:
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="hybridsim.v1.Engine"),
                                                    timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        assert "hybridsim.v1.Engine" in set(ProtoReflectionDescriptorDatabase(ch).get_services())


# ------------------------------------------------------------------------------------------------ real engine
HYBRID = """
seed: 3
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - name: milc
    ranks: 16
    iterations: 14
    workload: {kind: milc, dimension_sizes: [2, 2, 2, 2], msg_size: 4096}
  - name: nn
    ranks: 8
    iterations: 14
    workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 4096, max_dimension_distance: 1}
placement: {policy: random}
sampling: {interval: 20us}
surrogate: {model: ridge, config: {k: 2}}
controller: {policy: periodic, params: {warmup: 4, ft: 4, truth: 1}}
"""


def test_hybrid_run_through_remote_engine_and_surrogate_equals_in_process(tmp_path):
    """Same scenario and seed: the embedded engine in-process with a local ridge vs the engine behind the Engine
    service and the ridge behind the Surrogate service (controller here) -> identical records, modes and samples."""
    from hybridsim.engine import Engine
    from hybridsim.runner import build_controller, run_scenario
    from hybridsim.service.client import RemoteSurrogate
    from hybridsim.service.surrogate_server import SurrogateServer
    from surrogate.registry import create

    sc = parse_scenario(HYBRID)
    _, ref, s_ref = run_scenario(sc, tmp_path / "local", mode="hybrid", progress=False,
                                 backend=Engine(sc, progress=False))
    assert 0 < s_ref["hybrid"]["jobs"]["milc"]["predicted_iterations"] < 14
    with EngineServer() as eng, SurrogateServer(create("ridge", k=2)) as sur, RemoteSurrogate(sur.address) as rs:
        controller = build_controller(sc)
        controller.models = {jid: rs for jid in controller.models}  # the service keeps one model per job
        _, res, s = run_scenario(sc, tmp_path / "remote", mode="hybrid", progress=False, controller=controller,
                                 backend=RemoteBackend(eng.address, sc))
        assert rs.status().tune_calls > 0
        assert eng.active_runs == 0
    assert res.records == ref.records and res.simulated == ref.simulated
    assert res.events == ref.events and res.job_end == ref.job_end
    assert np.array_equal(res.ports.values, ref.ports.values)
    assert s["hybrid"]["jobs"] == s_ref["hybrid"]["jobs"]


def test_stopping_the_server_mid_run_tells_the_client(scenario):
    class Slow(EveryThirdPredicted):
        def mode_for(self, job_id, iteration):
            time.sleep(0.05)
            return super().mode_for(job_id, iteration)

    srv = EngineServer(engine_factory=StandInEngine)
    srv.start()
    out = {}

    def client():
        try:
            RemoteBackend(srv.address, scenario).run(Slow())
            out["r"] = "finished"
        except RemoteEngineError as exc:
            out["r"] = exc.code

    t = threading.Thread(target=client)
    t.start()
    wait_until(lambda: srv.active_runs == 1, "the run to start")
    srv.stop(grace=1.0)
    t.join(20)
    assert out["r"] == grpc.StatusCode.UNAVAILABLE
    assert srv.active_runs == 0 and not any(th.is_alive() for th in srv.servicer.threads)
