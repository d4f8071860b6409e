"""Truth that is true (issue 22, item 5): the bench's truth bias of a hybrid run's simulated iterations, and what a
predicted co-runner leaves in the network with ``keep_background: profile``."""

import random

import numpy as np
import pytest

from hybridsim.bench import truth_bias, truth_bias_summary
from hybridsim.engine.core import EventLoop
from hybridsim.engine.engine import Engine, background_mode, load_profile
from hybridsim.engine.network import Network
from hybridsim.scenario import parse_scenario
from hybridsim_common.records import IterationRecord

SC = parse_scenario("""
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 2, iterations: 3, workload: {kind: allreduce}}
  - {name: b, ranks: 2, iterations: 3, workload: {kind: allreduce}}
""")


def recs(job_id, times):
    """Records of job ``job_id`` from {(rank, iteration): duration}, iterations back to back from 0."""
    return [IterationRecord("ab"[job_id], job_id, r, i, 1000.0 * i, 1000.0 * i + d) for (r, i), d in times.items()]


def test_truth_bias_is_the_mean_signed_job_time_error_of_simulated_iterations_only():
    pure = recs(0, {(0, 0): 100, (1, 0): 300, (0, 1): 100, (1, 1): 100, (0, 2): 50, (1, 2): 50}) + \
        recs(1, {(0, 0): 10, (1, 0): 10, (0, 1): 10, (1, 1): 10, (0, 2): 10, (1, 2): 10})
    # job a: iteration 0 job time 220 against 200 (+10 %), iteration 1 90 against 100 (-10 %), iteration 2
    # predicted (not counted, however far off); job b: all predicted -> None
    hyb = recs(0, {(0, 0): 200, (1, 0): 240, (0, 1): 80, (1, 1): 100, (0, 2): 500, (1, 2): 500}) + \
        recs(1, {(0, 0): 99, (1, 0): 99, (0, 1): 99, (1, 1): 99, (0, 2): 99, (1, 2): 99})
    sim = [True] * 4 + [False] * 2 + [False] * 6
    bias = truth_bias(SC, pure, hyb, sim)
    assert bias["a"] == pytest.approx((10.0 + -10.0) / 2)
    assert bias["b"] is None
    # one rank of an iteration predicted: the iteration is not the hybrid's own truth
    sim2 = [True, True, True, False, False, False] + [False] * 6
    assert truth_bias(SC, pure, hyb, sim2)["a"] == pytest.approx(10.0)
    # beside predicted co-runners only: b predicted in iteration 1 (1000-1099 ns) overlaps a's iteration 1 only
    # (a: -10 %); a predicted in iteration 2 (2000-2500 ns) overlaps b's simulated iteration 2 (99 against 10 ns)
    sim3 = [True] * 4 + [False] * 2 + [True, True, False, False, True, True]
    assert truth_bias(SC, pure, hyb, sim3, beside_predicted=True) == pytest.approx({"a": -10.0, "b": 890.0})
    assert truth_bias(SC, pure, hyb, sim3) == pytest.approx({"a": 0.0, "b": 890.0})
    assert truth_bias_summary({"a": 2.0, "b": -3.0, "c": None}) == {"worst_truth_bias_pct": -3.0,
                                                                      "mean_abs_truth_bias_pct": 2.5}


def test_load_profile_cuts_the_iteration_into_phases_and_merges_equal_ones():
    # 3 ports at 10 B/ns; samples at 0, 10, 20, 40 ns; port 0 sends 100 B in [0, 10], port 1 nothing, port 2 50 B
    # in [10, 20] and 200 B in [20, 40] (linear between samples: 100 B in each of [20, 30] and [30, 40])
    cum = [[0, 0, 0], [100, 0, 0], [100, 0, 50], [100, 0, 250]]
    ports, starts, loads = load_profile([0, 10, 20, 40], cum, [10.0, 10.0, 10.0], 4)
    assert ports.tolist() == [0, 2]
    # phase loads: port 0 1.0, 0, 0, 0; port 2 0, 0.5, 1.0, 1.0 -> the last two phases merge
    assert starts.tolist() == [0.0, 0.25, 0.5]
    np.testing.assert_allclose(loads, [[1.0, 0.0], [0.0, 0.5], [0.0, 1.0]])
    one = load_profile([0, 10, 20, 40], cum, [10.0, 10.0, 10.0], 1)   # true: the mean load of the window
    assert one[1].tolist() == [0.0]
    np.testing.assert_allclose(one[2], [[100 / 400, 250 / 400]])
    assert load_profile([0, 40], [[5, 5, 5], [5, 5, 5]], [10.0] * 3, 4) is None
    assert background_mode(False) is None and background_mode(True) == "mean"
    assert background_mode("profile") == "profile"


def test_a_one_phase_profile_between_two_snapshots_is_the_general_paths_float_for_float():
    """load_profile's shortcut (one phase, two snapshots: keep_background's mean at a decision) gives the general
    path's ports, starts and loads bit for bit: its interpolation weights are exactly 0 and 1 there."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        P = 40
        c0 = np.floor(rng.uniform(0, 1e6, P)) * (rng.uniform(size=P) < 0.7)
        c1 = c0 + np.floor(rng.uniform(0, 1e5, P)) * (rng.uniform(size=P) < 0.5)
        t0 = rng.uniform(0, 1e6)
        t1 = t0 + rng.uniform(1e-3, 1e5)
        bw = rng.choice([5.36870912, 2.68435456, 10.73741824], P)
        got = load_profile([t0, t1], [c0.tolist(), c1.tolist()], bw.tolist(), 1)
        # the general path (load_profile's lines for phases >= 1), written out
        times, cum = np.array([t0, t1]), np.array([c0, c1])
        ports = np.nonzero(cum[-1] - cum[0] > 0)[0]
        cum = cum[:, ports]
        b = np.array([t0, t1])
        idx = np.clip(np.searchsorted(times, b, side="right") - 1, 0, 0)
        w = ((b - times[idx]) / (times[idx + 1] - times[idx]))[:, None]
        at = cum[idx] * (1.0 - w) + cum[idx + 1] * w
        util = np.diff(at, axis=0) / (bw[ports] * ((t1 - t0) / 1))
        assert np.array_equal(got[0], ports) and got[1].tolist() == [0.0]
        assert got[2].shape == (1, len(ports)) and got[2].dtype == np.float64 and np.array_equal(got[2], util)


def test_replayed_profile_sets_each_phase_at_the_predicted_pace_and_leaves_nothing_behind():
    """A hand-built profile on ports 0 and 3 (u = 0.5 then 0.2 on port 0, 0 then 0.6 on port 3, phases starting at
    0 and 0.25 of the iteration) replayed over a predicted iteration from t = 100 to 500 ns: the second phase starts at
    100 + 0.25 x 400 = 200 ns; a port's serialisation is stretched by 1 / (1 - u); the job's measured queued work
    (40 ns on port 0, none on port 3) is each loaded port's extra hop delay through every phase."""
    sc = parse_scenario(SC_YAML)
    eng = Engine(sc)
    loop = eng.loop = EventLoop()
    net = eng.net = Network(eng.topo, sc.topology, loop, random.Random(0))
    eng.bg_total, eng.bg_backlog = np.zeros(net.n_ports), np.zeros(net.n_ports)
    eng.profile, eng.cur_load, eng.bg_gen, eng.replay_t0 = {}, {}, {0: 1}, {0: 100.0}
    eng.profile[0] = (np.array([0, 3]), np.array([0.0, 0.25]), [np.array([0.5, 0.0]), np.array([0.2, 0.6])],
                      np.array([40.0, 0.0]))
    seen, waits = {}, {}

    def probe(t, _a=None, _b=None):
        seen[t] = (net.ports[0].nspb / net.nspb_nominal[0], net.ports[3].nspb / net.nspb_nominal[3])
        waits[t] = (net.ports[0].delay - net.delay_nominal[0], net.ports[3].delay - net.delay_nominal[3])

    loop.at(100.0, lambda t, a, b: (eng._set_load(0, 0), eng._replay(0, eng.profile[0][1], 500.0)))
    for t in (150.0, 199.0, 201.0, 499.0):
        loop.at(t, probe)
    loop.run()
    assert seen[150.0] == pytest.approx((2.0, 1.0)) and seen[199.0] == pytest.approx((2.0, 1.0))
    assert seen[201.0] == pytest.approx((1 / 0.8, 1 / 0.4)) and seen[499.0] == pytest.approx((1 / 0.8, 1 / 0.4))
    assert all(waits[t] == pytest.approx((40.0, 0.0)) for t in (150.0, 199.0, 201.0, 499.0))
    eng._clear_load(0)
    assert [pt.nspb for pt in net.ports] == net.nspb_nominal and [pt.delay for pt in net.ports] == net.delay_nominal
    # a phase event of an outdated generation (the job's next decision was made) changes nothing
    eng.bg_gen[0] = 2
    eng._phase(0.0, 0, (1, 1))
    assert 0 not in eng.cur_load


SC_YAML = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}
"""


class HalfExchange:
    """Every rank computes ``comp`` ns, then swaps ``size`` bytes with the rank half the job away."""

    background = False

    def __init__(self, n, iterations, comp, size):
        self.n_ranks, self.iterations, self.comp, self.size = n, iterations, comp, size

    def ops(self, rank, iteration):
        from hybridsim.workloads.ops import COMPUTE, IRECV, ISEND, WAITALL

        peer = (rank + self.n_ranks // 2) % self.n_ranks
        return [(COMPUTE, self.comp), (ISEND, peer, self.size, 1, 0), (IRECV, peer, 1, 1), (WAITALL, (0, 1))]


class PredictAFromIteration2:
    """Job a is predicted from iteration 2 on (each iteration lasting ``dur``, its pure mean); b is simulated."""

    def __init__(self, keep_background, dur):
        self.keep_background, self.dur = keep_background, dur

    def mode_for(self, job_id, iteration):
        from hybridsim_common.backend import Mode

        return Mode.PREDICT if job_id == 0 and iteration >= 2 else Mode.SIMULATE

    def predict(self, job_id, iteration, ranks, starts):
        return np.full(len(ranks), self.dur)


def test_a_predicted_corunners_profile_keeps_the_simulated_jobs_times_closer_to_pure_than_silence():
    """Two 8-rank jobs on random terminals, a bursty exchange (128 KiB after 20 / 35 us of compute); a predicted
    at its pure pace from iteration 2: b's simulated iterations beside it, against the pure run's, are biased fast
    when a is silent and much less so when a's profile stands in for it (measured, mean over b's iterations 2-5:
    -2.14 % silent, +0.28 % mean load, -0.24 % profile)."""
    sc = parse_scenario(SC_YAML.replace("""  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}""",
                                        """  - {name: a, ranks: 8, iterations: 6, workload: {kind: allreduce}}
  - {name: b, ranks: 8, iterations: 6, workload: {kind: allreduce}}
placement: {policy: random}
seed: 3""") .replace("global_channels_per_router: 2}", "global_channels_per_router: 2, routing: minimal}"))

    def run(director=None):
        wl = [HalfExchange(8, 6, 20_000.0, 131072), HalfExchange(8, 6, 35_000.0, 131072)]
        return Engine(sc, workloads=wl).run(director=director)

    pure = run()
    a_pure = np.mean([r.duration for r in pure.records if r.job_id == 0 and r.iteration >= 2])
    bias = {}
    for keep in (False, "profile"):
        res = run(PredictAFromIteration2(keep, a_pure))
        assert sum(1 for s in res.simulated if not s) == 4 * 8
        bias[keep] = truth_bias(sc, pure.records, res.records, res.simulated)["b"]
    assert bias[False] < 0  # a silent co-runner makes the truth fast
    assert abs(bias["profile"]) < abs(bias[False]) / 2


def test_scenario_takes_true_false_or_profile():
    from hybridsim.scenario import ScenarioError

    base = SC_YAML + "controller: {keep_background: %s}\n"
    assert parse_scenario(base % "profile").controller.keep_background == "profile"
    assert parse_scenario(base % "false").controller.keep_background is False
    with pytest.raises(ScenarioError, match="keep_background"):
        parse_scenario(base % "mean")


@pytest.mark.parametrize("keep", [True, "profile"])
def test_the_stand_in_starts_when_the_predicted_jobs_last_rank_stops_injecting(keep):
    """Job a turns predicted at iteration 2; its ranks finish iteration 1 at different times, each still sending its
    own packets until then: while any of them runs, no stand-in load is on the network (it would count their traffic
    twice); during the predicted iterations it is."""
    sc = parse_scenario(SC_YAML.replace("""  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}""",
                                        """  - {name: a, ranks: 8, iterations: 4, workload: {kind: allreduce}}
  - {name: b, ranks: 8, iterations: 4, workload: {kind: allreduce}}
placement: {policy: random}
seed: 3"""))
    wl = [HalfExchange(8, 4, 20_000.0, 131072), HalfExchange(8, 4, 35_000.0, 131072)]
    eng = Engine(sc, workloads=wl)
    loaded = {}

    def on_record(rec, simulated):
        net = eng.net
        on = any(s != nom for s, nom in zip(net.nspb, net.nspb_nominal))
        loaded.setdefault((rec.job_id, rec.iteration, simulated), []).append((rec.end, on))

    eng.run(director=PredictAFromIteration2(keep, 60_000.0), on_record=on_record)
    ends = loaded[(0, 1, True)]
    assert len(ends) == 8 and len({t for t, _ in ends}) > 1  # the ranks finish iteration 1 apart
    assert not any(on for _, on in ends)
    assert all(on for _, on in loaded[(0, 2, False)])
