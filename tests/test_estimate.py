"""hybridsim.estimate: a run's cost before it runs, and the default controller running the truth where a hybrid run
cannot pay."""

import math

import pytest

from hybridsim.estimate import EVENTS_PER_PACKET, MIN_WARMUP, estimate, ns_per_event
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
