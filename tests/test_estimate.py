"""hybridsim.estimate: a run's cost before it runs, and the default controller running the truth where a hybrid run
cannot pay."""

import math

import pytest

from hybridsim.estimate import EVENTS_PER_PACKET, MIN_WARMUP, estimate, ns_per_event, saveable_share
from hybridsim.scenario import load_scenario

TOPO = ("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
        "placement: {policy: contiguous}\n")


def scenario(tmp_path, iterations, extra=""):
    f = tmp_path / "s.yaml"
    f.write_text(TOPO + "jobs:\n  - {name: a, ranks: 8, iterations: %d, workload: {kind: nearest_neighbor, "
                 "dimension_sizes: [2, 2, 2], msg_size: 8192, max_dimension_distance: 1}}\n" % iterations + extra)
    return load_scenario(f)


def test_events_hand_computed(tmp_path):
    """8 ranks in a 2x2x2 torus, distance 1: 6 neighbours (+-1 in each of 3 dimensions), 8192 B = 2 packets of
    4096 B each: 12 packets per rank-iteration, 8 x 20 x 12 = 1,920 packets; the first MIN_WARMUP iterations are
    simulated at least."""
    e = estimate(scenario(tmp_path, 20))
    assert e.events == pytest.approx(1920 * EVENTS_PER_PACKET)
    assert e.saveable_events == pytest.approx(1920 * EVENTS_PER_PACKET * (20 - MIN_WARMUP) / 20)
    assert e.cpu_s == pytest.approx(e.events * ns_per_event(252) * 1e-9
                                    * (1 if e.cpu_s < e.events * 1e-6 else 14))
    assert math.isfinite(e.memory_bytes) and e.memory_bytes > 0
    assert "estimate: pure" in e.line()


def test_warm_ups_hold_every_job_hand_computed():
    """MIN_WARMUP = 8. Job a starts at 0 with 40 iterations of 1 (warm-up [0, 8)); job b at 20 with 30 iterations of
    2 (warm-up [20, 36), life [20, 80)); job c at 30 with 8 iterations of 1 (too short: holds no one). a's free time
    is [8, 40) less b's warm-up [20, 36): 16 of its 40; b's is [36, 80): 44 of 60; c's [38, 38): none."""
    assert MIN_WARMUP == 8
    share = saveable_share({"a": (0.0, 1.0, 40), "b": (20.0, 2.0, 30), "c": (30.0, 1.0, 8)})
    assert share["a"] == pytest.approx(16 / 40)
    assert share["b"] == pytest.approx(44 / 60)
    assert share["c"] == 0.0
    # started together, the job with the longest warm-up holds the other: [0, 16) of b's
    together = saveable_share({"a": (0.0, 1.0, 40), "b": (0.0, 2.0, 30)})
    assert together["a"] == pytest.approx(24 / 40) and together["b"] == pytest.approx(44 / 60)


def test_a_hybrid_whose_best_case_saves_little_runs_the_truth(tmp_path):
    """Six jobs of 18 iterations in a stream, one arriving every 9 iterations: a job's 10 iterations after its own
    8-iteration warm-up, [9k + 8, 9k + 18), are held by the next one's warm-up [9k + 9, 9k + 17) but for 2 (the one
    after starts at 9k + 18), the last one's all free, so at best (5 x 2 + 10) / (6 x 18) = 18.5 % of the events are
    saved: over MIN_SAVED (10 %), under MIN_SAVED_CPU (20 %)."""
    from hybridsim.estimate import MIN_SAVED, MIN_SAVED_CPU
    from hybridsim.workloads import estimate_cost

    def stream(arrival_us):
        f = tmp_path / "s.yaml"
        # terminal links slower than the routers': a rank's sends are serialised at the terminal's bandwidth
        f.write_text(TOPO.replace("placement: {policy: contiguous}\n", "")
                     .replace("global_channels_per_router: 2}", "global_channels_per_router: 2, "
                              "bandwidth: {local: 5.25, global: 4.7, terminal: 2.0}}")
                     + "scheduler: {queue: fcfs, allocation: contiguous}\njobs:\n"
                     + "".join("  - {name: j%d, ranks: 8, iterations: 18, arrival: %.6fus, workload: {kind: "
                               "nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 1048576, "
                               "max_dimension_distance: 1}}\n" % (k, k * arrival_us) for k in range(6)))
        return load_scenario(f)

    sc = stream(1.0)
    job, topo = sc.jobs[0], sc.topology
    c = estimate_cost(job, topo.packet_size)
    per_it = c.compute_ns + c.packets * topo.packet_size / (topo.bandwidth.terminal * 2**30) * 1e9   # ns
    e = estimate(stream(9 * per_it / 1e3))
    assert e.saveable_events / e.events == pytest.approx(20 / 108, rel=1e-6)
    assert MIN_SAVED < 20 / 108 < MIN_SAVED_CPU
    assert not e.pays and f"{MIN_SAVED_CPU:.0%}" in e.reason
    # spaced out (each job alone), the same jobs pay
    assert estimate(stream(18 * per_it / 1e3)).pays


def test_cpu_per_event_grows_with_the_machine():
    assert ns_per_event(252) == pytest.approx(140.0)
    assert ns_per_event(252) < ns_per_event(3960) < ns_per_event(32240)


def test_a_scenario_too_short_to_predict_runs_the_truth(tmp_path, capsys):
    """A job of MIN_WARMUP iterations is all warm-up: the default controller runs the truth and says why; a
    controller section named by the user is run as asked."""
    from hybridsim.runner import run_scenario

    sc = scenario(tmp_path, MIN_WARMUP)
    e = estimate(sc)
    assert not e.pays and "0%" in e.reason and "all warm-up" in e.reason
    _, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    assert summary["hybrid"]["runs_truth"] == e.reason
    assert summary["hybrid"]["policy"] == "pdes" and all(res.simulated)
    assert "hybrid mode runs the truth" in capsys.readouterr().err
    forced = scenario(tmp_path, MIN_WARMUP, "controller: {policy: surrogate, params: {warmup: 2}}\n")
    _, res2, summary2 = run_scenario(forced, tmp_path / "run2", mode="hybrid", progress=False)
    assert summary2["hybrid"]["runs_truth"] is None and not all(res2.simulated)


def test_a_bench_says_that_it_runs_the_truth_once(tmp_path, capsys):
    """Two seeds x two surrogates of a scenario the default runs as the truth: four runs, one line."""
    from hybridsim.cli import main

    f = tmp_path / "s.yaml"
    f.write_text(TOPO + "jobs:\n  - {name: a, ranks: 8, iterations: %d, workload: {kind: nearest_neighbor, "
                 "dimension_sizes: [2, 2, 2], msg_size: 8192, max_dimension_distance: 1}}\n" % MIN_WARMUP)
    assert main(["bench", str(f), "--surrogate", "last", "--surrogate", "mean", "--seeds", "2", "-o",
                 str(tmp_path / "b"), "--no-progress"]) == 0
    assert capsys.readouterr().err.count("hybrid mode runs the truth") == 1


def test_a_cheap_scenario_runs_the_truth_and_a_dear_one_pays(tmp_path):
    """400 iterations of a small job: 0.06 CPU-s pure, less than twice what the loop would cost; the same job with
    messages 64x larger sends 64x the packets and pays."""
    cheap = estimate(scenario(tmp_path, 400))
    assert not cheap.pays and "cheap" in cheap.reason
    f = tmp_path / "dear.yaml"
    f.write_text(TOPO + "jobs:\n  - {name: a, ranks: 8, iterations: 400, workload: {kind: nearest_neighbor, "
                 "dimension_sizes: [2, 2, 2], msg_size: 524288, max_dimension_distance: 1}}\n")
    dear = estimate(load_scenario(f))
    assert dear.events == pytest.approx(64 * cheap.events)
    assert dear.pays and dear.reason == "" and dear.hybrid_cpu_s < dear.cpu_s


def test_warmup_iterations_are_scored_for_cheap_models(tmp_path):
    """LAST is fitted on nothing and predicts each rank's previous time: the controller's score of a clean warm-up
    iteration it is (job time of iteration it - 1 - job time of it) / job time of it x 100, computed here from the
    run's own truth table; those scores come before the job's first prediction."""
    from hybridsim.runner import build_controller, run_scenario

    sc = scenario(tmp_path, 40, "controller: {policy: confident}\nsurrogate: {model: last}\n")
    ctl = build_controller(sc)
    run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, controller=ctl)
    st = ctl.states[0]
    first_pred = next(i for i, m in enumerate(st.modes) if m.value == "predict")
    warm = [(it, e) for it, e in st.clean_signed if it < first_pred]
    assert len(warm) >= 2
    for it, e in warm:
        prev, cur = st.truth[:, it - 1].mean(), st.truth[:, it].mean()
        assert e == pytest.approx((prev - cur) / cur * 100.0, rel=1e-9, abs=1e-12)
