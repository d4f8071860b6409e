"""The flow model as a predictor before any truth (issue 32): per-hop and protocol latency, compute phases, the
ratio at a co-runner change, the learned correction and the ``flow`` surrogate's start prediction, against
hand-computed values."""

import numpy as np
import pytest

from hybridsim.flow import FlowModel, Phase, Routes, workload_profile
from hybridsim.workloads.ops import COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL
from hybridsim_common.topology import Dragonfly, DragonflyShape
from hybridsim_common.units import GIB
from surrogate.base import Context, JobInfo, SurrogateError
from surrogate.flow_correction import FEATURES, Correction, features
from surrogate.models.flow import Flow

# test_flow_model.py's tiny topology: router i of group G reaches group (G + i + 1) mod 3; one terminal per router
TINY = DragonflyShape(groups=3, routers_per_group=2, terminals_per_router=1, global_channels_per_router=1)
ONE = 1e9 / GIB   # GiB/s of 1 byte per ns


def tiny_routes(nonminimal=0.0):
    """Every link 1 B/ns; latencies local 10, global 20, terminal 5 ns; router delay 100 ns; packets of 100 B."""
    return Routes(Dragonfly(TINY), (ONE, ONE, ONE), nonminimal, latency_ns=(10.0, 20.0, 5.0), router_delay=100.0,
                  packet_size=100)


def test_first_packet_traversal_by_hand():
    """t0 -> t5: r0 -> r1 (local) -> r4 (global) -> r5 (local). A 50-B packet: injection and ejection 2 x (50 + 5),
    the first router 100, two local hops 2 x (50 + 10 + 100), one global 50 + 20 + 100 = 700 ns; t0 -> t1 (one
    local hop): 370 ns; a message of 500 B counts its first 100-B packet: 210 + 100 + 420 + 220 = 950 ns."""
    routes = tiny_routes()
    got = routes.traversal([0, 0, 0, 3], [5, 1, 5, 3], [50.0, 50.0, 500.0, 50.0])
    np.testing.assert_allclose(got, [700.0, 370.0, 950.0, 0.0])   # a message to its own terminal: never sent
    assert routes.hops(0, 5) == (2.0, 1.0)
    # half of the inter-group bytes routed non-minimally: half a global and half a local hop more on average
    assert tiny_routes(0.5).hops(0, 5) == (2.5, 1.5)
    assert tiny_routes(0.5).traversal([0], [1], 50.0)[0] == pytest.approx(370.0)   # intra-group: minimal


class _Pair:
    """Two ranks; each: 1000 ns of compute, an Isend of ``size`` B to the other (and its Irecv), 300 ns of compute
    while it is in flight, Waitall."""

    n_ranks = 2

    def __init__(self, size):
        self.size = size

    def ops(self, rank, iteration):
        o = 1 - rank
        return [(COMPUTE, 1000.0), (IRECV, o, 0, 0), (ISEND, o, self.size, 0, 1), (COMPUTE, 300.0),
                (WAITALL, (0, 1))]


@pytest.mark.parametrize("size, latency", [
    (50, 3510 + 0.55 * 50 + 700),               # eager: one offset, the copy, one traversal
    (10_000, 3 * 3510 + 2 * 770 + 950),        # rendezvous: three offsets, RTS and ACK (64 B: 770 ns), data
])
def test_phase_time_is_serial_compute_then_overlapped_compute_or_latency_plus_bandwidth(size, latency):
    """Ranks on t0 and t5 (both ways 2 local + 1 global hops). Alone, each phase's bandwidth time is its bytes on a
    1 B/ns channel but the first packet (100 B, already in the latency's traversal): the iteration takes
    1000 + max(300, latency + size - min(size, 100)) ns."""
    prof = workload_profile(_Pair(size), n_iterations=1)
    assert len(prof) == 1
    ph = prof[0]
    assert (ph.serial_ns, ph.overlap_ns, ph.largest) == (1000.0, 300.0, float(size))
    np.testing.assert_allclose(ph.msg, [size, size])
    m = FlowModel(tiny_routes())
    m.set_profile(0, prof)
    m.place(0, [0, 5])
    np.testing.assert_allclose(m.fixed[0][2], [[latency, latency]])
    rest = size - min(size, 100)
    assert m.alone(0) == pytest.approx(1000.0 + latency + rest)
    parts = m.components(0)
    assert parts["compute"] == 1300.0 and parts["latency"] == pytest.approx(latency)
    assert parts["bandwidth"] == pytest.approx(rest)
    # without latency (the model before issue 32): compute overlapped, bandwidth only
    bare = FlowModel(tiny_routes(), latency=False)
    bare.set_profile(0, prof)
    bare.place(0, [0, 5])
    assert bare.alone(0) == pytest.approx(1000.0 + max(300.0, size))


def test_each_rank_pays_its_own_messages_latency_and_the_ranks_mean_or_slowest_sets_the_time():
    """A blocking exchange in which rank 0 sends 50 B (eager) and rank 1 sends 10,000 B (rendezvous): each rank's
    latency is its own message's; the iteration is the ranks' mean (the default) or the slower rank's
    (``ranks="max"``), with the phase's bandwidth time (10,000 B less its first 100-B packet) on top."""

    class Uneven:
        n_ranks = 2

        def ops(self, rank, iteration):
            o = 1 - rank
            return [(IRECV, o, 0, 0), (SEND, o, 50 if rank == 0 else 10_000, 0), (WAITALL, (0,))]

    prof = workload_profile(Uneven(), 1)
    sends = [p for p in prof if len(p.w)]
    assert len(sends) == 1 and sorted(sends[0].msg.tolist()) == [50.0, 10_000.0]
    m = FlowModel(tiny_routes())
    m.set_profile(0, prof)
    m.place(0, [0, 5])
    lat = m.fixed[0][2].sum(axis=0)
    np.testing.assert_allclose(lat, [3510 + 0.55 * 50 + 700, 3 * 3510 + 2 * 770 + 950])
    assert m.alone(0) == pytest.approx(lat.mean() + 9_900.0)   # the busiest channel carries rank 1's 10,000 B
    slowest = FlowModel(tiny_routes(), ranks="max")
    slowest.set_profile(0, prof)
    slowest.place(0, [0, 5])
    assert slowest.alone(0) == pytest.approx(lat[1] + 9_900.0)


def test_a_collective_step_is_a_phase_and_blocking_ops_cut_phases():
    """SEND / RECV / WAITALL each end a phase: a sendrecv (Irecv, Send, Wait) is one phase with the send, one
    without; a compute after the last blocking op is a phase of compute only."""

    class Steps:
        n_ranks = 2

        def ops(self, rank, iteration):
            o = 1 - rank
            return [(IRECV, o, 0, 0), (SEND, o, 8, 0), (WAITALL, (0,)), (RECV, o, 1), (COMPUTE, 40.0)]

    prof = workload_profile(Steps(), 1)
    assert [len(p.w) for p in prof] == [2, 0]
    assert prof[-1].serial_ns == 40.0 and prof[0].largest == 8.0


def test_ratio_is_the_quotient_of_the_two_sets_times():
    m = FlowModel(tiny_routes())
    for j, terms in ((0, [0, 5]), (1, [1, 4])):
        m.set_profile(j, workload_profile(_Pair(10_000), 1))
        m.place(j, terms)
    m.set_rate(2, np.array([[0.0, 0.5], [0.5, 0.0]]))
    m.place(2, [0, 5])
    assert m.ratio(0, [], [2]) == pytest.approx(m.iteration_time(0, [2]) / m.iteration_time(0, []))
    assert m.ratio(0, [], [2]) > 1.0 and m.ratio(0, [2], []) == pytest.approx(1.0 / m.ratio(0, [], [2]))
    assert np.isnan(m.ratio(7, [], [2]))


INFO = JobInfo("milc", 64, 10, 1e5, 3, 9, 72)


def test_correction_features_and_fit_recover_a_known_residual():
    rng = np.random.default_rng(0)
    X = np.array([features(INFO if rng.random() < 0.5 else JobInfo("nearest_neighbor", 16, 10, 1e5, 1, 9, 72),
                           rng.uniform(2e4, 5e5), rng.uniform(0, 0.9), int(rng.integers(0, 3))) for _ in range(400)])
    beta = rng.normal(0, 0.1, len(FEATURES))
    r = X @ beta
    got = Correction.fit(X, r, ridge=1e-9)
    # the kind one-hots add up to the constant: only the fitted residual is identified, not each coefficient
    np.testing.assert_allclose(X @ got.coef, r, atol=1e-6)
    x = features(INFO, 1e5, 0.5, 0)
    assert x[FEATURES.index("first")] == 1.0 and x[FEATURES.index("log_flow")] == 0.0
    assert x[FEATURES.index("kind_milc")] == 1.0 and x[FEATURES.index("load")] == 0.5


def test_correction_checkpoint_round_trip_and_refusals(tmp_path):
    c = Correction(np.arange(len(FEATURES)) / 100.0, {"runs": 3})
    c.save(tmp_path / "c")
    back = Correction.load(tmp_path / "c")
    np.testing.assert_array_equal(back.coef, c.coef)
    assert back.provenance == {"runs": 3}
    with pytest.raises(SurrogateError, match="finite coefficients"):
        Correction([1.0, 2.0])
    (tmp_path / "c" / "config.json").write_text('{"model": "other"}')
    with pytest.raises(SurrogateError, match="not a flow-correction checkpoint"):
        Correction.load(tmp_path / "c")
    assert Correction.load("shipped").coef.shape == (len(FEATURES),)


def _ctx(history, flow, now, iteration, load=None, load_now=0.0, info=INFO):
    L = np.asarray(history).shape[1]
    return Context("j", "milc", np.asarray(history, np.float64), iteration=iteration, info=info,
                   columns=np.arange(iteration - L + 1, iteration + 1), flow=np.asarray(flow, np.float64),
                   flow_now=now, load=np.zeros(L) if load is None else np.asarray(load), load_now=load_now)


def test_the_surrogate_predicts_a_job_start_from_the_model_before_any_truth(tmp_path):
    """No truth yet (iteration 0 to predict, empty look-back): the flow model's time, times the correction's
    exp(beta . x) when one is given; a rank with truth keeps the ratio path."""
    c = _ctx(np.full((2, 1), np.nan), [np.nan], 250.0, iteration=-1)
    np.testing.assert_allclose(Flow(correction="none").predict(c), [250.0, 250.0])
    coef = np.zeros(len(FEATURES))
    coef[FEATURES.index("first")] = -0.2     # a first iteration runs 18 % faster than the model
    coef[FEATURES.index("load")] = 0.1
    Correction(coef).save(tmp_path / "corr")
    m = Flow(correction=str(tmp_path / "corr"))
    np.testing.assert_allclose(m.predict(c), 250.0 * np.exp(-0.2))
    # truth of iteration 0 (100 ns, model 250 ns, first); now iteration 1, a co-runner started: model 300 ns,
    # load 0.5: 100 x 300 / 250 x exp(0.1 x 0.5 - (-0.2))
    c1 = _ctx([[100.0]], [250.0], 300.0, iteration=0, load=[0.0], load_now=0.5)
    np.testing.assert_allclose(m.predict(c1), [100.0 * 300 / 250 * np.exp(0.05 + 0.2)])
    np.testing.assert_allclose(Flow(correction="none").predict(c1), [100.0 * 300 / 250])
    # a start with load 0.5: exp(-0.2 + 0.05); without the job's info the correction is 1
    np.testing.assert_allclose(m.predict(_ctx(np.full((1, 1), np.nan), [np.nan], 250.0, -1, load_now=0.5)),
                               [250.0 * np.exp(-0.15)])
    np.testing.assert_allclose(m.predict(_ctx(np.full((1, 1), np.nan), [np.nan], 250.0, -1, info=None)), [250.0])
    assert m.config()["correction"] == str(tmp_path / "corr")


def test_adaptive_routing_takes_the_non_minimal_share_that_drains_a_phase_fastest():
    """t0 -> t5 and t1 -> t4 both cross r1's global link (2 x 1000 B at 1 B/ns: 2000 ns minimally). Spreading a share
    q over the 6 global and 6 local channels (2 hops each) leaves (1 - q) 2000 + q 2000 / 3 on that link; the
    injection links carry 1000 B whatever q is, so q = 0.75 is the first share whose busiest channel is 1000 B."""
    m = FlowModel(tiny_routes(), latency=False)
    m.set_traffic(0, [(np.array([0, 1]), np.array([2, 3]), np.array([1000.0, 1000.0]))], 0.0)
    m.place(0, [0, 1, 5, 4])
    assert m.alone(0) == pytest.approx(2000.0)
    a = FlowModel(tiny_routes(), latency=False, adaptive=True)
    a.set_traffic(0, [(np.array([0, 1]), np.array([2, 3]), np.array([1000.0, 1000.0]))], 0.0)
    a.place(0, [0, 1, 5, 4])
    assert a.spread[0] == [0.75]
    assert a.alone(0) == pytest.approx(1000.0)


def test_change_prediction_scores_starts_and_changes_by_hand():
    """A job of 4 iterations, 100/110/120/121 ns; a co-runner starts at iteration 2 (model 200 -> 240 ns). The start
    is predicted by the model alone (200 vs 100: 100 % off), LAST has none; the change at 2 by LAST (110) and by
    the ratio (110 x 240 / 200 = 132); iteration 1 and 3 are steady."""
    import importlib.util
    from pathlib import Path

    from hybridsim.flow_tables import JobTable

    spec = importlib.util.spec_from_file_location(
        "change_prediction", Path(__file__).resolve().parents[1] / "benchmarks" / "change_prediction.py")
    cp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cp)
    tb = JobTable("r", "j", 0, np.array([100.0, 110.0, 120.0, 121.0]), np.array([200.0, 200.0, 240.0, 240.0]),
                  [(), (), (1,), (1,)], np.zeros(4), INFO)
    assert tb.events() == [("start", 0), ("change", 2)]
    rows = {r["t"]: r for r in cp.event_rows([tb], None)}
    assert rows[0]["kind"] == "start" and rows[0]["flow"] == 200.0 and np.isnan(rows[0]["last"])
    assert rows[2]["kind"] == "change" and rows[2]["last"] == 110.0 and rows[2]["flow"] == pytest.approx(132.0)
    assert rows[2]["mean"] == pytest.approx(105.0) and rows[1]["kind"] == rows[3]["kind"] == "steady"
    assert cp.cell([rows[2]], "flow").startswith("**0 %** (0/1)")       # 132 vs 120: 10 % off
    assert cp.cell([rows[3]], "last").startswith("**100 %** (1/1)")     # 120 vs 121
    assert cp.cell([rows[0]], "last").endswith("no prediction")
    coef = np.zeros(len(FEATURES))
    coef[FEATURES.index("first")] = np.log(0.5)                          # a first iteration: half the model's
    got = {r["t"]: r for r in cp.event_rows([tb], Correction(coef))}
    assert got[0]["flow+corr"] == pytest.approx(100.0) and got[2]["flow+corr"] == pytest.approx(132.0)
