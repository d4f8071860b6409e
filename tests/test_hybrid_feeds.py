"""The hybrid loop's model inputs (surrogate.online feeds), its measured simulation cost, and every built-in model
run in the loop on a reduced quickstart."""

import types

import numpy as np
import pytest

from controllers.builtin import Budget
from hybridsim_common.backend import Mode
from hybridsim.runner import build_controller, run_scenario
from hybridsim.scenario import parse_scenario
from surrogate.base import Context
from surrogate.models.history import Mean
from surrogate.online import GraphFeed, HistoryFeed, feed_for

from fakes import FakeBackend

SC = """
seed: 1
topology: {groups: 2, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
jobs:
  - {name: a, ranks: 4, iterations: 40, workload: {kind: allreduce, size: 1024}}
placement: {policy: contiguous}
surrogate: {model: mean, config: {k: 2}, volume_scaling: false}
controller: {policy: budget, params: {target_speedup: 10, warmup: 8}}
"""


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def perf_counter(self):
        return self.t


def test_budget_policy_sees_the_measured_simulation_cost(tmp_path, monkeypatch):
    """Each simulated iteration costs 1 s of (fake) backend wall time, each prediction 0.1 s of inference. From the
    first predicted iteration on, the policy measures s = (8 s / 8) / (0.1 s / 1) = 10 = its target speedup, so
    f = (1 - 1/10) / (1 - 1/10) = 1 (clipped to 0.999), k = ceil(0.999 / 0.001) = 999: every later iteration is
    predicted (8 simulated of 40). Without the simulation cost the policy falls back to its assumed ratio of 100
    (k = ceil(0.909 / 0.091) = 10) and simulates a truth iteration after every 10 predicted (10 simulated)."""
    import hybridsim.hybrid as hybrid

    clock = FakeClock()
    monkeypatch.setattr(hybrid, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    sc = parse_scenario(SC)
    costs = []

    class Recording(Budget):
        def decide(self, view):
            costs.append(dict(view.costs))
            return super().decide(view)

    class SlowMean(Mean):
        history_only = False   # every prediction asks the model (and costs its 0.1 s): no answer reused

        def predict(self, ctx: Context) -> np.ndarray:
            clock.t += 0.1
            return super().predict(ctx)

    def dur(jid, r, it):
        clock.t += 0.25        # 4 ranks: 1 s of backend wall time per simulated iteration
        return 1000.0 * (1 + 0.01 * r)

    ctl = hybrid.HybridController([("a", "allreduce", 4, 40)], Recording(target_speedup=10, warmup=8),
                                  SlowMean(k=2), hybrid.ControllerSettings(drop_edges=False))
    run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, controller=ctl,
                 backend=FakeBackend(sc, duration_fn=dur))
    modes = ctl.states[0].modes
    assert modes[:8] == [Mode.SIMULATE] * 8
    assert modes.count(Mode.SIMULATE) == 8 and len(modes) == 40
    # the cost the policy saw at the last decision: 8 s of simulation (the backend's time between director calls)
    assert costs[-1]["simulate"] == pytest.approx(8.0)
    assert costs[-1]["inference"] == pytest.approx(0.1 * costs[-1]["predicted_iterations"])


def test_feed_is_chosen_once_from_the_model():
    from surrogate.base import SurrogateError
    from surrogate.registry import create

    assert isinstance(feed_for(create("ridge"), 0, 4), HistoryFeed)
    with pytest.raises(SurrogateError, match="needs port graphs"):
        feed_for(create("smart-nollm"), 0, 4)
    assert GraphFeed.fit_at_first_prediction and not HistoryFeed.fit_at_first_prediction


def test_feeds_own_the_port_graph_wiring():
    """The graph feed's port graphs are set up by surrogate.online.Feeds, not by the controller: none for history
    models (no samples wanted), one OnlineGraphs for graph models, each graph job on its placement or, for a stream
    job, on the terminals it starts on; a graph job without terminals is refused."""
    from hybridsim_common.topology import DragonflyShape
    from surrogate.base import SurrogateError
    from surrogate.online import Feeds
    from surrogate.registry import create

    shape = DragonflyShape(groups=2, routers_per_group=2, terminals_per_router=2, global_channels_per_router=1)
    ridge, graph = create("ridge"), create("smart-nollm")
    plain = Feeds([ridge], shape, {0: np.arange(4)})
    assert not plain.wants_samples and plain.graphs is None
    assert isinstance(plain.feed(ridge, 0, "a", 10, 4), HistoryFeed)
    feeds = Feeds([ridge, graph], shape, {1: np.array([4, 5, 6, 7])})
    assert feeds.wants_samples and feeds.graphs is not None and not feeds.graphs.jobs
    assert isinstance(feeds.feed(ridge, 0, "a", 10, 4), HistoryFeed) and 0 not in feeds.graphs.jobs
    assert isinstance(feeds.feed(graph, 1, "b", 10, 4), GraphFeed)
    assert feeds.graphs.jobs[1].rank_port.tolist() == feeds.graphs.topo.terminal_port_ids[[4, 5, 6, 7]].tolist()
    feeds.feed(graph, 2, "c", 10, 4, terminals=np.array([0, 1]))   # a stream job, on its start's terminals
    assert len(feeds.graphs.jobs[2].rank_port) == 2
    with pytest.raises(SurrogateError, match="terminals are unknown"):
        Feeds([graph], shape).feed(graph, 0, "a", 10, 4)


# -------------------------------------------------------------------------------------------------- every model
QUICK = open(__file__.rsplit("/tests/", 1)[0] + "/examples/quickstart.yaml").read()

#: tiny configurations where the default one takes minutes on a laptop core (the defaults themselves are checked by
#: hand, see the report); the history models run at their defaults
TINY = {
    "dcrnn": "{hidden: 4, epochs: 2, tune_epochs: 1}",
    "smart-nollm": "{hidden: 8, tf_ff: 16, epochs: 2, gcn_layers: 1, tune_steps: 1}",
    "smart": "{hidden: 8, tf_ff: 16, epochs: 1, gcn_layers: 1, tune_steps: 1, llm_layers: 1, llm_dtype: float32, "
             "d_model: 8, n_prototypes: 8, n_heads: 2, d_keys: 4}",
}
MODELS = ["last", "mean", "ewma", "ridge", "lstm", "dcrnn", "smart-nollm", "smart", "pretrained"]
ITERATIONS = 18   # the aligned policy (warm-up 1, Ft 16) then has one truth window and its tune


def _quick(model: str | None) -> str:
    text = QUICK.replace("iterations: 20", f"iterations: {ITERATIONS}")
    text += "controller: {policy: aligned, params: {warmup: 1, ft: 16, truth: 1}}\n"
    if model is not None:
        text += f"surrogate: {{model: {model}" + (f", config: {TINY[model]}" if model in TINY else "") + "}\n"
    return text


@pytest.fixture(scope="module")
def quick_pure(tmp_path_factory):
    sc = parse_scenario(_quick(None))
    _, _, summary = run_scenario(sc, tmp_path_factory.mktemp("q") / "pure", mode="simulate", progress=False)
    return {name: j["completion_time_ns"] for name, j in summary["jobs"].items()}


@pytest.mark.parametrize("model", MODELS)
def test_every_builtin_model_completes_the_quickstart_in_the_loop(model, quick_pure, tmp_path):
    """aligned (warm-up 1, Ft 16), default settings otherwise (volume scaling on). Bound: 10 % per job. LAST (each rank's
    last truth, which is also what a deferred fit predicts) is 3.3 % (MILC) and 5.1 % (NN) off here, every model
    within 5.2 % when this test was written; a failing model (a fit on one target whose chain of predictions drifts,
    a collapse to the fallback limit) is off by tens of per cent or more. The job advances by the mean of its ranks'
    predictions (sync: skew, the default here, and job), which follows a model whose per-rank chains fan out: the one-epoch DCRNN here predicts
    MILC's ranks 171-2199 us at the last iteration around a 347 us truth, +18 % on completion (the median of the
    ranks hid it: +2 %); it moves with the truth it learns from (+26 % once a predicted co-runner's stand-in load
    started at its last rank rather than its first; +33 % with sync: skew, where the truth windows no longer start in
    lockstep, against +26 % with sync: job), so its bound is 40 %, still below a collapse (which is off by 100x)."""
    sc = parse_scenario(_quick(model))
    ctl = build_controller(sc)
    _, _, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, controller=ctl)
    for st in ctl.states.values():
        pred = [i for i, m in enumerate(st.modes) if m == Mode.PREDICT]
        assert len(pred) >= ITERATIONS // 2
        p = st.pred[:, pred]
        assert np.isfinite(p).all() and (p > 0).all()
        done = summary["jobs"][st.job]["completion_time_ns"]
        err = abs(done - quick_pure[st.job]) / quick_pure[st.job] * 100
        bound = 40.0 if model == "dcrnn" else 10.0
        assert err < bound, f"{model}: job {st.job} completion {err:.1f} % off the pure run"
    assert summary["hybrid"]["counts"]["fit_calls"] + summary["hybrid"]["counts"]["deferred_fits"] >= 2
