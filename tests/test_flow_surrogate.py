"""The interference-aware surrogate (surrogate/models/flow.py) and the co-runner inputs the controller gives it."""

import numpy as np
import pytest

from controllers.builtin import Periodic
from hybridsim_common.backend import Mode
from hybridsim_common.records import IterationRecord
from hybridsim.flow import FlowModel
from hybridsim.hybrid import ControllerSettings, HybridController
from hybridsim.runner import build_controller
from hybridsim.scenario import parse_scenario
from surrogate.base import Context, SurrogateError
from surrogate.models.flow import Flow
from surrogate.registry import create


def ctx(history, flow=None, now=None):
    return Context("j", "milc", np.asarray(history, dtype=np.float64), flow=None if flow is None else
                   np.asarray(flow, dtype=np.float64), flow_now=now)


def test_at_a_co_runner_start_the_prediction_moves_by_the_model_before_any_truth():
    """Truth 100 ns was measured with the model at 150 ns; a co-runner starts and the model says 250 ns now."""
    c = ctx([[90.0, 100.0], [110.0, 120.0]], flow=[150.0, 150.0], now=250.0)
    np.testing.assert_allclose(Flow(mode="delta").predict(c), [200.0, 220.0])         # delta: + 100 ns
    np.testing.assert_allclose(Flow().predict(c), [100 * 250 / 150, 120 * 250 / 150])  # ratio, the default
    np.testing.assert_allclose(Flow(mode="delta", gain=0.5).predict(c), [150.0, 170.0])
    np.testing.assert_allclose(Flow(mode="ratio", gain=0.5).predict(c), [100 * (1 + 0.5 * (250 / 150 - 1)),
                                                                          120 * (1 + 0.5 * (250 / 150 - 1))])
    np.testing.assert_allclose(Flow(mode="delta", k=2).predict(c), [195.0, 215.0])    # mean of the corrected two


def test_each_history_column_is_corrected_from_its_own_co_runners():
    """Column 0 ran beside a co-runner (model 300), column 1 alone (model 200); it is alone now (200): the mean of
    the two corrected values is (80 - 100 + 100) / 2."""
    c = ctx([[80.0, 100.0]], flow=[300.0, 200.0], now=200.0)
    np.testing.assert_allclose(Flow(k=2, mode="delta").predict(c), [(80.0 - 100.0 + 100.0) / 2])
    np.testing.assert_allclose(Flow(k=2).predict(c), [(80.0 * 200 / 300 + 100.0) / 2])


def test_without_flow_inputs_it_is_last_or_mean_and_nan_rows_are_skipped():
    c = ctx([[np.nan, 5.0, 7.0], [np.nan, np.nan, np.nan]])
    out = Flow().predict(c)
    assert out[0] == 7.0 and np.isnan(out[1])
    assert Flow(k=3).predict(c)[0] == pytest.approx(6.0)
    # a column without a flow value keeps its time; an unknown flow_now changes nothing
    np.testing.assert_allclose(Flow(k=2, mode="delta").predict(ctx([[4.0, 8.0]], flow=[np.nan, 10.0], now=12.0)),
                               [(4 + 10) / 2])
    np.testing.assert_allclose(Flow().predict(ctx([[4.0, 8.0]], flow=[10.0, 10.0], now=None)), [8.0])


def test_registered_with_its_options_checked():
    m = create("flow", k=4, mode="ratio")
    assert m.needs_flow and m.lookback == 4 and m.config() == {"k": 4, "mode": "ratio", "gain": 1.0,
                                                               "correction": "none"}
    assert create("flow").config() == {"k": 1, "mode": "ratio", "gain": 1.0, "correction": "none"}
    assert create("flow", correction="shipped").config()["correction"] == "shipped"   # the checkpoint still loads
    with pytest.raises(SurrogateError, match="flow correction"):
        Flow(correction="/nonexistent/folder")
    with pytest.raises(SurrogateError, match="mode"):
        Flow(mode="product")
    with pytest.raises(SurrogateError, match="k must"):
        Flow(k=0)


TWO = """
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1, routing: minimal,
           num_vcs: 3}
jobs:
  - {name: a, ranks: 4, iterations: 6, workload: {kind: nearest_neighbor, dimension_sizes: [4], msg_size: 65536}}
  - {name: b, ranks: 4, iterations: 2, workload: {kind: nearest_neighbor, dimension_sizes: [4], msg_size: 65536}}
placement: {policy: contiguous}
surrogate: {model: flow, config: {correction: none}}
controller: {policy: periodic, params: {warmup: 1, ft: 4, truth: 1}}
"""


def test_the_controller_gives_the_model_its_co_runners_and_their_end():
    """Job b runs beside a (on the same routers, interleaved) until it is through its last iteration; a's iteration
    decided then is modelled alone."""
    sc = parse_scenario(TWO)
    ctl = build_controller(sc, placement=[np.array([0, 2, 4, 6]), np.array([1, 3, 5, 7])])
    assert isinstance(ctl.corunner_feed.flow, FlowModel) and 0 in ctl.corunner_feed.flow and 1 in ctl.corunner_feed.flow
    beside, alone = ctl.corunner_feed.flow.iteration_time(0, [1]), ctl.corunner_feed.flow.iteration_time(0, [])
    assert beside > alone > 0
    st = ctl.states[0]
    assert ctl.mode_for(0, 0) == Mode.SIMULATE
    assert st.flow[0] == pytest.approx(ctl.corunner_feed.flow.start_time(0, [1]))   # a first iteration: the start
    ctl.states[1].done_count[-1] = ctl.states[1].n_ranks   # b is through its last iteration
    ctl.mode_for(0, 1)
    assert st.flow[1] == pytest.approx(alone)
    for r in range(4):
        ctl.on_record(IterationRecord("a", 0, r, 0, 0.0, 1000.0), True)
    c = ctl._context(st, 1, np.arange(4))
    # a's first truth became its demand as b's co-runner: the recorded value is the model's start beside b with it
    first = ctl.corunner_feed.flow.start_time(0, [1])
    assert c.flow_now == pytest.approx(alone)
    assert c.flow[-1] == pytest.approx(first)
    np.testing.assert_allclose(ctl.models[0].predict(c), 1000.0 * alone / first)


def test_history_models_do_not_build_the_flow_model():
    sc = parse_scenario(TWO.replace("surrogate: {model: flow, config: {correction: none}}", "surrogate: {model: last}"))
    ctl = build_controller(sc)
    assert ctl.corunner_feed.flow is None
    ctl.mode_for(0, 0)
    assert np.isnan(ctl.states[0].flow).all()


def test_a_stream_job_is_placed_in_the_model_when_it_starts():
    m = FlowModel.__new__(FlowModel)
    placed = []
    m.place = lambda job, terms: placed.append((job, list(terms)))
    m.iteration_time = lambda job, others: 1.0
    ctl = HybridController([("a", "milc", 2, 3)], Periodic(), Flow(), ControllerSettings(stream=True), flow=m)
    ctl.on_job_start(0, 0.0, np.array([5, 6]))
    assert placed == [(0, [5, 6])]


def test_a_hybrid_run_with_flow_predicts_every_predicted_iteration(tmp_path):
    from fakes import FakeBackend
    from hybridsim.runner import run_scenario

    sc = parse_scenario(TWO)
    _, _, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, backend=FakeBackend(sc))
    assert summary["jobs"]["a"]["predicted_iterations"] > 0
    assert summary["jobs"]["a"]["fallback_predictions"] == 0


def test_a_co_runner_measured_iteration_time_becomes_its_demand_and_every_recorded_value_follows():
    """Job b's first simulated iteration takes 3x its modelled time: from then on its demand beside a is a third,
    and a's flow values recorded before (beside b) are recomputed with it, so history and now agree."""
    sc = parse_scenario(TWO)
    ctl = build_controller(sc, placement=[np.array([0, 2, 4, 6]), np.array([1, 3, 5, 7])])
    ctl.mode_for(0, 0)
    ctl.mode_for(1, 0)
    before = ctl.states[0].flow[0]
    t_b = ctl.corunner_feed.flow.iteration_time(1, [0])
    for r in range(4):
        ctl.on_record(IterationRecord("b", 1, r, 0, 0.0, 3 * t_b), True)
    assert ctl.corunner_feed.flow.period[1] == pytest.approx(3 * t_b)
    after = ctl.states[0].flow[0]
    assert after == pytest.approx(ctl.corunner_feed.flow.start_time(0, [1])) and after < before   # a first iteration
    assert ctl.corunner_feed.flow.start_time(0, []) < after   # b still slows a, less than it was modelled to


def test_a_one_rank_job_beside_others_is_modelled_alone_without_error():
    """A one-rank job (a trace's single-node job) sends nothing: its replayed phases take no time alone, and nothing
    beside it can slow them; its modelled time beside a co-runner is its time alone (it used to divide by zero and
    fail the whole hybrid run)."""
    sc = parse_scenario(TWO.replace("{name: b, ranks: 4, iterations: 2, workload: {kind: nearest_neighbor, "
                                    "dimension_sizes: [4], msg_size: 65536}}",
                                    "{name: b, ranks: 1, iterations: 2, workload: {kind: nearest_neighbor, "
                                    "dimension_sizes: [1], msg_size: 65536}}"))
    ctl = build_controller(sc, placement=[np.array([0, 2, 4, 6]), np.array([1])])
    flow = ctl.corunner_feed.flow
    assert flow.iteration_time(1, [0]) == flow.iteration_time(1, []) >= 0.0
    assert np.isfinite(flow.iteration_time(0, [1])) and flow.iteration_time(0, [1]) > 0
