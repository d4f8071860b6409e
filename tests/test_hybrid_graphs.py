"""Graph surrogates (SMART, smart-nollm, DCRNN) in the hybrid loop: port graphs built online from the engine's
sample stream, checked against the offline dataset builder on the same run's ports.parquet."""

import numpy as np
import pytest

from hybridsim_common.backend import Mode
from hybridsim.runner import build_controller, run_scenario
from hybridsim.scenario import parse_scenario
from surrogate.base import SurrogateError
from surrogate.dataset import build_dataset

SC = """
seed: 3
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: m, ranks: 8, iterations: 30, workload: {kind: milc, dimension_sizes: [2, 2, 2, 1], msg_size: 8192}}
  - {name: n, ranks: 6, iterations: 30,
     workload: {kind: nearest_neighbor, dimension_sizes: [3, 2, 1], msg_size: 4096, max_dimension_distance: 1}}
placement: {policy: random}
sampling: {interval: 5us}
output: {ports: true}
surrogate: {model: smart-nollm, config: {hidden: 8, tf_ff: 16, epochs: 3, gcn_layers: 1, tune_steps: 1, lookback: 4}}
controller: {policy: periodic, params: {warmup: 8, ft: 4, truth: 1}}
"""


def _predictions_ok(ctl):
    for st in ctl.states.values():
        pred = [i for i, m in enumerate(st.modes) if m == Mode.PREDICT]
        assert len(pred) > 10
        p = st.pred[:, pred]
        assert np.isfinite(p).all() and (p > 0).all()


@pytest.fixture(scope="module")
def nollm_run(tmp_path_factory):
    sc = parse_scenario(SC)
    ctl = build_controller(sc)
    assert ctl.wants_samples and ctl.graphs is not None
    rd, res, summary = run_scenario(sc, tmp_path_factory.mktemp("h") / "run", mode="hybrid", progress=False,
                                    controller=ctl)
    return sc, ctl, rd, summary


def test_smart_nollm_hybrid_run_completes(nollm_run):
    sc, ctl, rd, summary = nollm_run
    assert summary["hybrid"]["counts"]["fit_calls"] == 2 and summary["hybrid"]["counts"]["tune_calls"] > 0
    _predictions_ok(ctl)
    for job in sc.jobs:
        assert summary["jobs"][job.name]["iterations_recorded"] == job.ranks * 30
        assert summary["jobs"][job.name]["truth_window_mape"] is not None


def test_online_graphs_equal_offline_dataset(nollm_run):
    """The independent check: the offline builder on the run's ports.parquet, with its training split set to the
    iterations the online normaliser was fitted on, gives the online graph of every simulated iteration."""
    sc, ctl, rd, _ = nollm_run
    g = ctl.graphs
    for jid, st in ctl.states.items():
        js = g.jobs[jid]
        a = len(js.norm_iterations)
        assert js.norm_iterations == list(range(a)) and 2 <= a <= 8   # the frozen warm-up graphs
        ds = build_dataset(rd.path, train_frac=(a + 0.5) / st.n_iterations, jobs=[st.job])
        off = ds[st.job]
        assert off.split["train"] == (0, a)
        np.testing.assert_array_equal(off.rank_port, g.rank_port(jid))
        np.testing.assert_array_equal(off.norm_mean, js.mu)
        np.testing.assert_array_equal(off.norm_std, js.sd)
        sim = [i for i, m in enumerate(st.modes) if m == Mode.SIMULATE]
        assert len(sim) >= 12
        for i in sim:
            np.testing.assert_array_equal(g.graph(jid, i), off.x[i], err_msg=f"job {st.job} iteration {i}")
        # graphs frozen during the run (what fit/tune/predict saw once final) are the offline ones too
        assert len(js.frozen) >= len(sim) - 2
        for i, raw in js.frozen.items():
            np.testing.assert_array_equal(g.graph(jid, i), off.x[i])
        # a predicted iteration reuses the latest simulated graph before it
        pred = [i for i, m in enumerate(st.modes) if m == Mode.PREDICT]
        u = pred[3]
        last_sim = max(i for i in sim if i < u)
        np.testing.assert_array_equal(g.graph(jid, u), off.x[last_sim])


def test_graph_series_for_fit_and_tune(nollm_run):
    sc, ctl, rd, _ = nollm_run
    st = ctl.states[0]
    series = ctl._series(st)
    assert series.T == 30 and np.isfinite(series.y).all() and (series.y > 0).all()
    assert series.x.shape == (30, ctl.graphs.n_ports, series.n_features)
    x = series.x[np.array([[0, 1], [8, 9]])]
    assert x.shape == (2, 2, ctl.graphs.n_ports, series.n_features) and np.isfinite(x).all()
    tgt = ctl._targets(st, series, range(30))
    edges = ctl._edges(st, 30)   # simulated iterations that met the other job predicted (hybrid.py, drop_edges)
    assert tgt == [i for i, m in enumerate(st.modes) if m == Mode.SIMULATE and not edges[i]] and len(tgt) >= 8
    ctx = series.context(9, 4, 2)
    assert ctx.graphs.shape == (2, ctl.graphs.n_ports, series.n_features)


def test_smart_with_frozen_lm_no_ports_written(tmp_path):
    """SMART with the packaged MiniLM (1 layer); port sampling switched on for the run although the scenario
    records none, and no ports.parquet written."""
    text = SC.replace("sampling: {interval: 5us}", "sampling: {interval: 5us, ports: false}") \
             .replace("output: {ports: true}", "output: {ports: false}") \
             .replace("model: smart-nollm, config: {", "model: smart, config: {llm_layers: 1, llm_dtype: float32, "
                      "d_model: 8, n_prototypes: 8, n_heads: 2, d_keys: 4, ") \
             .replace("epochs: 3", "epochs: 1")
    sc = parse_scenario(text)
    sc.jobs = sc.jobs[:1]   # one job keeps the frozen LM's forward passes few
    ctl = build_controller(sc)
    rd, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, controller=ctl)
    assert not (rd.path / "ports.parquet").exists()
    assert ctl.graphs.n_samples > 10
    assert summary["hybrid"]["surrogate"] == "smart"
    _predictions_ok(ctl)


def test_dcrnn_in_the_loop(tmp_path):
    sc = parse_scenario(SC.replace("model: smart-nollm, config: {hidden: 8, tf_ff: 16, epochs: 3, gcn_layers: 1, "
                                   "tune_steps: 1, lookback: 4}",
                                   "model: dcrnn, config: {hidden: 4, epochs: 2, k: 4, graph_lookback: 2, "
                                   "tune_epochs: 1}"))
    ctl = build_controller(sc)
    run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, controller=ctl)
    _predictions_ok(ctl)


def test_warmup_of_one_defers_the_graph_fit(tmp_path):
    """aligned with warm-up 1 (its default): a graph model has no target (iteration t from t-1) at
    the first prediction. The run must not fail: the first predictions are each rank's last simulated time (counted
    as fallbacks), and the model is fitted at the end of the first truth window and predicts from then on."""
    sc = parse_scenario(SC.replace("controller: {policy: periodic, params: {warmup: 8, ft: 4, truth: 1}}",
                                   "controller: {policy: aligned, params: {warmup: 1, ft: 4, truth: 1}}"))
    ctl = build_controller(sc)
    rd, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, controller=ctl)
    c = summary["hybrid"]["counts"]
    assert c["fit_calls"] == len(sc.jobs) and c["inference_calls"] > 0 and c["tune_calls"] > 0
    deferred = 0
    for st in ctl.states.values():
        assert st.fitted
        pred = [i for i, m in enumerate(st.modes) if m == Mode.PREDICT]
        if pred[0] == 1:  # only iteration 0 simulated (the other job may run more during the leader's warm-up)
            deferred += 1
            v = ctl.volumes[st.job_id][:2] if st.job_id in ctl.volumes else np.ones(2)
            # before the fit: exactly each rank's last truth (iteration 0), in the job's volume frame
            np.testing.assert_allclose(st.raw[:, 1], st.truth[:, 0] / v[0] * v[1])
            assert st.fallbacks >= st.n_ranks
        assert np.isfinite(st.pred[:, pred]).all() and (st.pred[:, pred] > 0).all()
        assert summary["jobs"][st.job]["iterations_recorded"] == st.n_ranks * 30
    assert deferred >= 1 and c["deferred_fits"] == deferred


def test_backend_without_sample_stream_is_refused():
    sc = parse_scenario(SC + "backend: {kind: codes}\n")
    with pytest.raises(SurrogateError, match="does not stream"):
        build_controller(sc)
