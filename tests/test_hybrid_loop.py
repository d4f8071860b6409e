"""The controller loop and policies, on a stand-in backend with analytic iteration times (tests/fakes.py)."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from controllers import PolicyError, load_policy
from controllers.base import JobView
from hybridsim_common.backend import Mode
from hybridsim.runner import RunError, build_controller, run_scenario
from hybridsim.scenario import parse_scenario

from fakes import FakeBackend, duration

SC = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 40, workload: {kind: allreduce}}
  - {name: b, ranks: 3, iterations: 40, workload: {kind: allreduce}}
surrogate: {model: ridge, config: {k: 4}}
controller: {policy: periodic, params: {warmup: 8, ft: 8, truth: 1}, sync: rank}
"""


def modes_of(backend, jid):
    return [m for j, _i, m in backend.calls if j == jid]


def test_periodic_schedule_and_records(tmp_path):
    sc = parse_scenario(SC)
    fb = FakeBackend(sc)
    rd, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, backend=fb)
    m = modes_of(fb, 0)
    # warm-up of 8 simulated, then 7 predicted + 1 simulated, repeatedly
    assert m[:8] == [Mode.SIMULATE] * 8
    assert m[8:16] == [Mode.PREDICT] * 7 + [Mode.SIMULATE]
    assert m[16:24] == [Mode.PREDICT] * 7 + [Mode.SIMULATE]
    t = {k: np.asarray(v) for k, v in pq.read_table(rd.path / "iterations.parquet").to_pydict().items()}
    a = t["job"] == "a"
    assert a.sum() == 4 * 40
    pred = a & (t["mode"] == "predict")
    assert np.isnan(t["truth"][pred]).all() and np.isfinite(t["predicted"][pred]).all()
    # truth-window rows carry both the truth and the shadow prediction
    win = a & (t["mode"] == "simulate") & (t["iteration"] >= 8)
    assert np.isfinite(t["truth"][win]).all() and np.isfinite(t["predicted"][win]).all()
    # predicted durations in the table are the predictions
    assert np.allclose(t["end"][pred] - t["start"][pred], t["predicted"][pred])
    js = summary["jobs"]["a"]
    assert js["predicted_iterations"] == 28 and js["simulated_iterations"] == 12
    assert js["surrogate_fraction"] == pytest.approx(28 / 40)
    assert len(js["truth_window_errors"]) == 4
    man = json.loads((rd.path / "manifest.json").read_text())
    assert man["status"] == "completed"
    assert set(summary["wall_split_s"]) == {"simulation", "controller", "inference", "tuning"}


def test_shadow_prediction_error_is_exact_for_last(tmp_path):
    """With LAST, the shadow prediction of truth-window iteration 15 is the truth of iteration 7 carried through the
    7 predicted iterations, so its error is |d(7) - d(15)| / d(15) averaged over ranks."""
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", "model: last"))
    _, _, s = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, backend=FakeBackend(sc))
    errs = dict(s["jobs"]["a"]["truth_window_errors"])
    for it in (15, 23, 31, 39):
        exp = np.mean([abs(duration(0, r, it - 8) - duration(0, r, it)) / duration(0, r, it) for r in range(4)])
        assert errs[it] == pytest.approx(exp * 100, rel=1e-9)


def test_pdes_policy_matches_pure_simulation(tmp_path):
    sc = parse_scenario(SC.replace("policy: periodic, params: {warmup: 8, ft: 8, truth: 1}", "policy: pdes"))
    _, res, s = run_scenario(sc, tmp_path / "h", mode="hybrid", progress=False, backend=FakeBackend(sc))
    _, res2, s2 = run_scenario(sc, tmp_path / "p", mode="simulate", progress=False, backend=FakeBackend(sc))
    assert [r.end for r in res.records] == [r.end for r in res2.records]
    assert s["jobs"]["a"]["completion_time_ns"] == s2["jobs"]["a"]["completion_time_ns"]


def test_surrogate_policy_completion_time_analytic(tmp_path):
    """warm-up 10 then LAST for 30 iterations: rank r ends at sum_{i<10} d(r, i) + 30 d(r, 9)."""
    sc = parse_scenario(SC.replace("policy: periodic, params: {warmup: 8, ft: 8, truth: 1}",
                                   "policy: surrogate, params: {warmup: 10}").replace("model: ridge, config: {k: 4}",
                                                                                       "model: last"))
    fb = FakeBackend(sc)
    _, _, s = run_scenario(sc, tmp_path / "h", mode="hybrid", progress=False, backend=fb)
    exp = max(sum(duration(0, r, i) for i in range(10)) + 30 * duration(0, r, 9) for r in range(4))
    assert s["jobs"]["a"]["completion_time_ns"] == pytest.approx(exp, rel=1e-12)
    assert s["jobs"]["a"]["predicted_iterations"] == 30
    # predicted iterations cost no events: only 10 of 40 iterations of each job were simulated
    assert s["events"] == 100 * (4 + 3) * 10


class Raises:
    name = "raiser"

    def decide(self, view):
        if view.iteration == 5:
            raise ZeroDivisionError("boom")
        return "simulate"


class Invalid:
    def decide(self, view):
        return "maybe" if view.iteration == 3 else "simulate"


@pytest.mark.parametrize("cls,frag", [("Raises", "raised at job 'a' iteration 5: ZeroDivisionError: boom"),
                                      ("Invalid", "returned 'maybe' for job 'a' iteration 3")])
def test_bad_policy_stops_run_and_marks_manifest(tmp_path, cls, frag):
    sc = parse_scenario(SC.replace("policy: periodic, params: {warmup: 8, ft: 8, truth: 1}",
                                   f"policy: 'test_hybrid_loop:{cls}'"))
    with pytest.raises(RunError) as ei:
        run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, backend=FakeBackend(sc))
    assert frag in str(ei.value)
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["status"] == "failed" and frag in man["reason"]
    assert not (tmp_path / "r" / "iterations.parquet").exists()


def test_predicting_iteration_zero_rejected(tmp_path):
    sc = parse_scenario(SC.replace("policy: periodic, params: {warmup: 8, ft: 8, truth: 1}",
                                   "policy: 'test_hybrid_loop:Invalid'"))
    with pytest.raises(PolicyError):
        load_policy("nope")


def view(it, modes, errors=(), costs=None):
    return JobView("a", 0, it, 100, modes[-1] if modes else None, tuple(modes), (), (), tuple(errors), costs or {})


def test_error_adaptive_grows_and_shrinks():
    p = load_policy("error-adaptive", {"warmup": 2, "threshold": 2.0, "start_interval": 4, "min_interval": 2,
                                       "max_interval": 16})
    S, P = Mode.SIMULATE, Mode.PREDICT
    assert p.interval(view(10, [S] * 10)) == 4
    assert p.interval(view(11, [S] * 10, errors=[(9, 1.0)])) == 8       # low error: double
    assert p.interval(view(12, [S] * 10, errors=[(9, 1.0), (11, 0.5)])) == 16
    assert p.interval(view(13, [S] * 10, errors=[(9, 1.0), (11, 0.5), (12, 0.1)])) == 16  # capped
    assert p.interval(view(14, [S] * 10, errors=[(9, 1.0), (11, 0.5), (12, 0.1), (13, 9.0)])) == 8  # halve


def test_budget_meets_amdahl_target():
    p = load_policy("budget", {"target_speedup": 10, "truth": 1, "assumed_ratio": 1000})
    f = p.surrogate_fraction(1000)
    assert 1 / ((1 - f) + f / 1000) == pytest.approx(10, rel=1e-9)
    k = p.interval(view(20, [Mode.SIMULATE] * 20))
    assert k / (k + 1) >= f  # the chosen stretch predicts at least the needed fraction


def test_plugin_module_class_and_bad_params():
    p = load_policy("examples.policies.every_other:EveryOther", {"warmup": 3})
    assert p.decide(view(3, [Mode.SIMULATE] * 3)) == Mode.PREDICT
    with pytest.raises(PolicyError, match="bad parameters"):
        load_policy("periodic", {"ft": 1})
    with pytest.raises(PolicyError, match="unknown policy"):
        load_policy("nope")


def test_job_sync_ends_predicted_iterations_together(tmp_path):
    """sync: job -- every rank of a job ends a predicted iteration at (latest start + median prediction)."""
    sc = parse_scenario(SC.replace("sync: rank", "sync: job").replace("model: ridge, config: {k: 4}", "model: last"))
    _, res, _ = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, backend=FakeBackend(sc))
    recs = [r for r in res.records if r.job == "a"]
    by_it = {}
    for r in recs:
        by_it.setdefault(r.iteration, []).append(r)
    # iteration 8 is the first predicted one: ranks start at their own simulated ends of iteration 7
    it8 = sorted(by_it[8], key=lambda r: r.rank)
    starts = np.array([r.start for r in it8])
    last = np.array([duration(0, r, 7) for r in range(4)])
    expected_end = starts.max() + np.median(last)
    assert all(r.end == pytest.approx(expected_end, rel=1e-12) for r in it8)
    # later predicted iterations start together and stay together
    assert len({round(r.end, 6) for r in by_it[12]}) == 1
    # ... and last them the median of the last simulated times: the skew absorbed by iteration 8 (a rank's
    # realised time there is latest start - own start + median) is not fed back as an iteration time
    it9 = by_it[9]
    assert all(r.end - r.start == pytest.approx(np.median(last), rel=1e-12) for r in it9)


@pytest.mark.parametrize("history", ["mixed", "truth"])
def test_history_truth_or_mixed(tmp_path, history):
    """MEAN of 2 after a warm-up of 8 (sync: rank): with history=truth every predicted iteration of rank r is
    (d(r, 6) + d(r, 7)) / 2; with mixed, iteration 9 is (d(r, 7) + prediction of 8) / 2, and so on."""
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", f"model: mean, config: {{k: 2}}, history: {history}")
                        .replace("policy: periodic, params: {warmup: 8, ft: 8, truth: 1}",
                                 "policy: surrogate, params: {warmup: 8}"))
    _, res, _ = run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, backend=FakeBackend(sc))
    got = {(r.rank, r.iteration): r.end - r.start for r in res.records if r.job == "a"}
    for r in range(4):
        p8 = (duration(0, r, 6) + duration(0, r, 7)) / 2
        assert got[(r, 8)] == pytest.approx(p8, rel=1e-12)
        p9 = p8 if history == "truth" else (duration(0, r, 7) + p8) / 2
        assert got[(r, 9)] == pytest.approx(p9, rel=1e-12)
        if history == "truth":
            assert got[(r, 20)] == pytest.approx(p8, rel=1e-12)


def test_volume_scaling_predicts_known_irregular_iterations(tmp_path):
    """Iterations 10, 20, 30 send 1.5x the bytes and take 1.5x the time: LAST on volume-normalised times predicts
    them exactly, plain LAST misses each by a third."""
    from hybridsim.hybrid import ControllerSettings, HybridController
    from surrogate.registry import create

    vol = np.array([1.5 if i % 10 == 0 and i else 1.0 for i in range(40)])

    def dur(jid, r, it):
        return 1000.0 * (1 + 0.01 * r) * vol[it]

    sc = parse_scenario(SC.replace("sync: rank", "sync: job").replace("model: ridge, config: {k: 4}", "model: last"))
    for volumes, expect_exact in (({0: vol, 1: vol}, True), (None, False)):
        ctl = HybridController([("a", "allreduce", 4, 40), ("b", "allreduce", 3, 40)],
                               load_policy("surrogate", {"warmup": 5}), create("last"), ControllerSettings(sync="rank"), volumes=volumes)
        _, res, _ = run_scenario(sc, tmp_path / f"v{expect_exact}", mode="hybrid", progress=False, controller=ctl,
                                 backend=FakeBackend(sc, duration_fn=dur))
        d = {(r.rank, r.iteration): r.end - r.start for r in res.records if r.job == "a"}
        err = max(abs(d[(r, i)] - dur(0, r, i)) / dur(0, r, i) for r in range(4) for i in range(5, 40))
        if expect_exact:
            assert err < 1e-12
        else:
            assert err == pytest.approx(1 / 3, rel=1e-9)


def test_each_job_gets_its_own_model(tmp_path):
    sc = parse_scenario(SC)
    ctl = build_controller(sc)
    assert set(ctl.models) == {0, 1} and ctl.models[0] is not ctl.models[1]
    # the stand-in backend has no interference between jobs: keep window edges (job b's warm-up meets job a
    # predicted from iteration 8 on, which would leave b's ridge only its first iteration to fit on)
    ctl.drop_edges = False
    run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, controller=ctl, backend=FakeBackend(sc))
    # each ridge was fitted on its own job's warm-up only
    assert ctl.models[0].coef is not None and ctl.models[1].coef is not None
    assert not np.array_equal(ctl.models[0].coef, ctl.models[1].coef)


def test_checkpoint_folder_and_graph_models(tmp_path):
    from surrogate.base import SurrogateError
    from surrogate.registry import create

    m = create("mean", k=3)
    m.save(tmp_path / "ckpt")
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", f"model: {tmp_path / 'ckpt'}"))
    ctl = build_controller(sc)
    assert [x.name for x in ctl.models.values()] == ["mean", "mean"] and ctl.models[0].k == 3
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", "model: dcrnn"))
    ctl = build_controller(sc)   # graph models run on the embedded engine (tests/test_hybrid_graphs.py)
    assert ctl.wants_samples and ctl.graphs is not None
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", "model: dcrnn") + "backend: {kind: codes}\n")
    with pytest.raises(SurrogateError, match="needs port graphs"):
        build_controller(sc)


def aview(jid, it, now, n=100, shadow=None):
    """``shadow`` = {iteration: (mean prediction, mean truth)} of a window."""
    shadow = shadow or {}
    truth = tuple(shadow[i][1] if i in shadow else None for i in range(it))
    pred = tuple(shadow[i][0] if i in shadow else None for i in range(it))
    return JobView(f"j{jid}", jid, it, n, None, (), truth, pred, (), {}, now=now)


def test_aligned_windows_hand_computed():
    """Two jobs: A's iterations last 1 ns, B's 3 ns (hand-traced schedule, warm-up 2, truth 1, ft 4). B, the job
    with the longer iterations, opens the windows."""
    S, P = Mode.SIMULATE, Mode.PREDICT
    p = load_policy("aligned", {"warmup": 2, "truth": 1, "ft": 4})
    assert p.decide(aview(0, 0, 0.0)) == S and p.decide(aview(1, 0, 0.0)) == S
    assert [p.decide(aview(0, i, float(i))) for i in (1, 2)] == [S, S]   # A done with its warm-up at t=2 ...
    assert p.decide(aview(1, 1, 3.0)) == S                               # ... B is not (1 of 2)
    assert [p.decide(aview(0, i, float(i))) for i in (3, 4, 5)] == [S, S, S]  # A keeps B company
    # t=6: B completes its 2nd iteration: the warm-up closes (6 ns = 2 windows of 3 ns); next window at 6 + 3 * 3
    assert p.decide(aview(1, 2, 6.0)) == P
    assert p.next_open == pytest.approx(15.0)
    assert [p.decide(aview(0, i, float(i))) for i in range(6, 15)] == [P] * 9
    assert p.decide(aview(1, 3, 9.0)) == P and p.decide(aview(1, 4, 12.0)) == P
    assert p.decide(aview(0, 15, 15.0)) == P                            # A waits for the leader B ...
    assert p.decide(aview(1, 5, 15.0)) == S                             # ... which opens the window at t=15
    assert p.decide(aview(0, 16, 16.0)) == S and p.decide(aview(0, 17, 17.0)) == S   # A joins
    assert p.decide(aview(1, 6, 18.0)) == P                             # B done: window of 3 ns closes
    assert p.next_open == pytest.approx(18.0 + 3 * 3.0)
    assert p.decide(aview(0, 18, 18.0)) == P


def test_aligned_does_not_wait_for_finished_jobs_and_adapts():
    S, P = Mode.SIMULATE, Mode.PREDICT
    p = load_policy("aligned", {"warmup": 1, "truth": 1, "ft": 4, "threshold": 2.0, "max_ft": 8})
    assert p.decide(aview(0, 0, 0.0, n=3)) == S and p.decide(aview(1, 0, 0.0)) == S
    assert p.decide(aview(1, 1, 1.0)) == S           # job 1 done with its warm-up, job 0 not yet
    assert p.decide(aview(0, 1, 1.0, n=3)) == P and p.next_open == pytest.approx(4.0)
    assert p.decide(aview(1, 2, 2.0)) == P
    assert p.decide(aview(0, 2, 2.0, n=3)) == P      # job 0's last iteration: it never asks again
    assert p.decide(aview(1, 3, 4.0)) == S           # the window opens; job 0 (finishing) is not waited for
    # shadow prediction 101 vs truth 100: the window's completion error is 1 % <= 2 %: ft doubles
    assert p.decide(aview(1, 4, 5.0, shadow={3: (101.0, 100.0)})) == P and p.ft == 8
    assert p.next_open == pytest.approx(5.0 + 7 * 1.0)
    assert p.decide(aview(1, 5, 12.0, shadow={3: (101.0, 100.0)})) == S
    # a 2-iteration window: (104 + 106) vs (100 + 100) = 5 % > 2 %: ft halves
    p.truth = 2
    assert p.decide(aview(1, 6, 13.0, shadow={5: (104.0, 100.0)})) == S
    assert p.decide(aview(1, 7, 14.0, shadow={5: (104.0, 100.0), 6: (106.0, 100.0)})) == P and p.ft == 4
    assert p.next_open == pytest.approx(14.0 + 3 * 2.0)


def test_aligned_opens_a_window_when_a_job_ends():
    """Job 0 (1 ns iterations, 6 of them) ends during a fast-forward: the next decision of job 1 (5 ns iterations)
    opens a window although ft = 100 would not for another ~500 ns."""
    S, P = Mode.SIMULATE, Mode.PREDICT
    p = load_policy("aligned", {"warmup": 1, "truth": 1, "ft": 100})
    assert p.decide(aview(0, 0, 0.0, n=6)) == S and p.decide(aview(1, 0, 0.0)) == S
    assert [p.decide(aview(0, i, float(i), n=6)) for i in range(1, 5)] == [S] * 4
    assert p.decide(aview(1, 1, 5.0)) == P and p.next_open == pytest.approx(5.0 + 99 * 5.0)
    assert p.decide(aview(0, 5, 5.0, n=6)) == P          # job 0's last iteration, predicted: ends at ~6 ns
    assert p.decide(aview(1, 2, 10.0)) == S              # job 0 has ended: window
    q = load_policy("aligned", {"warmup": 1, "truth": 1, "ft": 100, "on_job_end": False})
    for pol in (q,):
        pol.decide(aview(0, 0, 0.0, n=6)), pol.decide(aview(1, 0, 0.0))
        [pol.decide(aview(0, i, float(i), n=6)) for i in range(1, 5)]
        pol.decide(aview(1, 1, 5.0)), pol.decide(aview(0, 5, 5.0, n=6))
        assert pol.decide(aview(1, 2, 10.0)) == P


def test_aligned_engine_run_simulates_jobs_together(tmp_path):
    """On the embedded engine, with ``aligned`` each job's simulated stretches overlap the other's in virtual time:
    every truth window of the slow job lies inside the span where the fast job is simulated (up to one iteration
    of the fast job at each edge)."""
    sc = parse_scenario("""
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: fast, ranks: 8, iterations: 120, workload: {kind: allreduce, size: 2048}}
  - {name: slow, ranks: 8, iterations: 30, workload: {kind: allreduce, size: 65536, count: 4}}
placement: {policy: random}
surrogate: {model: mean, config: {k: 2}}
controller: {policy: aligned, params: {warmup: 2, ft: 4, truth: 1}, keep_background: false}
""")
    ctl = build_controller(sc)
    rd, res, summary = run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, controller=ctl)
    t = {k: np.asarray(v) for k, v in pq.read_table(rd.path / "iterations.parquet").to_pydict().items()}
    spans = {}
    for job in ("fast", "slow"):
        sel = (t["job"] == job)
        it = t["iteration"][sel]
        n = it.max() + 1
        start = np.array([t["start"][sel][it == i].min() for i in range(n)])
        end = np.array([t["end"][sel][it == i].max() for i in range(n)])
        sim = np.array([(t["mode"][sel][it == i] == "simulate").all() for i in range(n)])
        spans[job] = (start, end, sim)
    fs, fe, fsim = spans["fast"]
    ss, se, ssim = spans["slow"]
    assert ssim[:2].all() and not ssim.all() and not fsim.all()
    fast_len = float(np.max(fe - fs))
    for i in np.flatnonzero(ssim):
        # the fast job is simulated for every instant of slow's simulated iteration i, edges aside
        inside = (fe > ss[i] + fast_len) & (fs < se[i] - fast_len)
        assert fsim[inside].all(), f"slow iteration {i} simulated while fast was predicted"
    assert summary["jobs"]["fast"]["predicted_iterations"] > 0 and summary["jobs"]["slow"]["predicted_iterations"] > 0
    # window edges: a simulated iteration is clean iff no predicted iteration of the other job overlaps it (from the
    # written records); the edges of stretches that have clean iterations are hidden from the surrogate
    for me, other in ((0, 1), (1, 0)):
        (ms, me_, msim), (os_, oe, osim) = spans[("fast", "slow")[me]], spans[("fast", "slow")[other]]
        st = ctl.states[me]
        expect = np.array([msim[i] and not np.any(~osim & (os_ < me_[i]) & (oe > ms[i])) for i in range(len(ms))])
        assert np.array_equal(st.clean[msim], expect[msim])
        edges = ctl._edges(st, st.n_iterations)
        assert not edges[~msim].any() and not edges[expect].any()
    fast_edges = ctl._edges(ctl.states[0], ctl.states[0].n_iterations)
    assert fast_edges.any()   # the fast job's iteration in flight when a window closes


def test_absurd_predictions_fall_back_to_last_truth(tmp_path):
    """A model that collapses (1e-30 ns) or explodes is replaced, per rank, by the rank's last simulated time."""
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", "model: last"))
    ctl = build_controller(sc)
    ctl.drop_edges = False  # no interference in the stand-in backend; keep every truth in the contexts
    calls = []
    for m in ctl.models.values():
        def bad(ctx, calls=calls):
            calls.append(1)
            y = ctx.history[:, -1].copy()
            y[0] = 1e-30 if len(calls) % 2 else 1e30
            return y
        m.predict = bad
        m.history_only = False   # its answer moves with every call: none may be reused (Surrogate.history_only)
    run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, controller=ctl, backend=FakeBackend(sc))
    assert ctl.counts["fallback_predictions"] == len(calls) > 0
    for st in ctl.states.values():
        p = st.pred[np.isfinite(st.pred)]
        assert (p > 0).all() and p.max() < 1e20


def test_history_window_uses_the_latest_truth_window_only(tmp_path):
    """periodic warm-up 8, ft 4, truth 2, MEAN of 8 with history=window: iteration 12 (the first after the window
    10-11) is predicted from iterations 10 and 11 only; iteration 8 from the warm-up's last 8."""
    sc = parse_scenario(SC.replace("model: ridge, config: {k: 4}", "model: mean, config: {k: 8}, history: window")
                        .replace("params: {warmup: 8, ft: 8, truth: 1}", "params: {warmup: 8, ft: 4, truth: 2}"))
    ctl = build_controller(sc)
    ctl.drop_edges = False  # the stand-in backend has no interference
    _, res, _ = run_scenario(sc, tmp_path / "r", mode="hybrid", progress=False, controller=ctl,
                             backend=FakeBackend(sc))
    modes = ctl.states[0].modes
    assert [m.value[0] for m in modes[8:14]] == list("ppsspp")
    got = {(r.rank, r.iteration): r.end - r.start for r in res.records if r.job == "a" and r.rank == 0}
    d = [duration(0, 0, i) for i in range(40)]
    assert got[(0, 8)] == pytest.approx(np.mean(d[0:8]), rel=1e-12)
    assert got[(0, 9)] == pytest.approx(np.mean(d[0:8]), rel=1e-12)
    assert got[(0, 12)] == pytest.approx((d[10] + d[11]) / 2, rel=1e-12)


class _Script:
    """Policy: job 0 simulates iterations < 4, job 1 iterations < 1; then both predict."""
    name = "script"

    def decide(self, view):
        return "simulate" if view.iteration < (4 if view.job_id == 0 else 1) else "predict"


def test_edge_iteration_is_replaced_by_its_prediction():
    """Job 0 runs iterations of 100, 110, 120 ns, then iteration 3 (200 ns) while job 1 is predicted: an edge. MEAN of
    2 on the clean history predicts iteration 3 as 115, so the first predicted iteration, also 115, is lengthened
    by 115 - 200 = -85 ns; job 0's completion then equals what it would be had iteration 3 taken 115."""
    from hybridsim.hybrid import ControllerSettings, HybridController
    from hybridsim_common.records import IterationRecord
    from surrogate.registry import create

    def run(correct):
        ctl = HybridController([("a", "x", 2, 6), ("b", "x", 2, 6)], _Script(), {0: create("mean", k=2),
                                                                                 1: create("mean", k=2)},
                               ControllerSettings(sync="job", correct_edges=correct))
        t = 0.0
        assert ctl.mode_for(1, 0).value == "simulate"
        for r in range(2):
            ctl.on_record(IterationRecord("b", 1, r, 0, 0.0, 50.0), True)
        for it, d in enumerate([100.0, 110.0, 120.0, 200.0]):
            assert ctl.mode_for(0, it).value == "simulate"
            if it == 3:   # job 1 predicted from t = 330 on, across job 0's iteration 3 (330 .. 530)
                assert ctl.mode_for(1, 1).value == "predict"
                ctl.predict(1, 1, np.arange(2), np.array([330.0, 330.0]))
            for r in range(2):
                ctl.on_record(IterationRecord("a", 0, r, it, t, t + d), True)
            t += d
        assert ctl.mode_for(0, 4).value == "predict"
        return ctl, ctl.predict(0, 4, np.arange(2), np.array([t, t]))

    ctl, y = run(True)
    st = ctl.states[0]
    assert bool(st.clean[2]) and not bool(st.clean[3])
    assert ctl._edges(st, 4)[3]
    assert np.allclose(y, 115.0 + (115.0 - 200.0))
    assert ctl.counts["edge_corrections"] == 1 and st.edge_shift == pytest.approx(-85.0)
    _, y0 = run(False)
    assert np.allclose(y0, 115.0)


class _SimFirst:
    """Policy: simulate iteration 0, predict the rest."""
    name = "sim-first"

    def decide(self, view):
        return "simulate" if view.iteration == 0 else "predict"


def test_job_advances_by_the_mean_of_right_skewed_rank_predictions():
    """sync: job. Iteration 0 takes 100, 100, 100 and 500 ns on the four ranks (right-skewed: median 100, mean 200);
    LAST predicts each rank's own time for iteration 1. The ranks start iteration 1 at 100, 100, 100 and 500 and end
    it together at the latest start plus the mean, 500 + 200 = 700 (the median would give 600): durations 600, 600,
    600, 200."""
    from hybridsim.hybrid import ControllerSettings, HybridController
    from hybridsim_common.records import IterationRecord
    from surrogate.registry import create

    ctl = HybridController([("a", "x", 4, 3)], _SimFirst(), {0: create("last")}, ControllerSettings(sync="job"))
    assert ctl.mode_for(0, 0).value == "simulate"
    for r, d in enumerate([100.0, 100.0, 100.0, 500.0]):
        ctl.on_record(IterationRecord("a", 0, r, 0, 0.0, d), True)
    assert ctl.mode_for(0, 1).value == "predict"
    y = ctl.predict(0, 1, np.arange(4), np.array([100.0, 100.0, 100.0, 500.0]))
    assert np.allclose(y, [600.0, 600.0, 600.0, 200.0])
    assert np.allclose(ctl.states[0].raw[:, 1], [100.0, 100.0, 100.0, 500.0])


def test_skew_sync_keeps_the_ranks_skew_through_predicted_iterations():
    """sync: skew. Iteration 0 takes 100, 100, 100 and 160 ns (job time = mean = 115): every rank advances by the job
    time from its own start, ending iteration 1 at 215, 215, 215 and 275 (the 60 ns skew the simulated iteration left
    is kept; sync: job would end all four at 275). With 100, 100, 100 and 500 ns (job time 200) ranks 0-2 would end
    at 300, before rank 3 starts at 500 (and before the engine predicts, at the latest start): they end at 500."""
    from hybridsim.hybrid import ControllerSettings, HybridController
    from hybridsim_common.records import IterationRecord
    from surrogate.registry import create

    for times, ends in (([100.0, 100.0, 100.0, 160.0], [215.0, 215.0, 215.0, 275.0]),
                        ([100.0, 100.0, 100.0, 500.0], [500.0, 500.0, 500.0, 700.0])):
        ctl = HybridController([("a", "x", 4, 3)], _SimFirst(), {0: create("last")}, ControllerSettings(sync="skew"))
        assert ctl.mode_for(0, 0).value == "simulate"
        for r, d in enumerate(times):
            ctl.on_record(IterationRecord("a", 0, r, 0, 0.0, d), True)
        starts = np.array(times)
        assert ctl.mode_for(0, 1).value == "predict"
        y = ctl.predict(0, 1, np.arange(4), starts)
        assert np.allclose(starts + y, ends)
    with pytest.raises(ValueError, match="sync must be one of job, skew, rank"):
        HybridController([("a", "x", 4, 3)], _SimFirst(), {0: create("last")}, ControllerSettings(sync="lockstep"))


@pytest.mark.parametrize("reads_truth", [False, True])
def test_decision_work_does_not_grow_with_iterations(reads_truth, monkeypatch):
    """Structural, not timed: a policy's view is built without computing any per-iteration mean (the tables are read
    lazily), so a decision reads exactly what the policy looks at -- one mean when it reads the latest truth, none
    when it does not -- for a job of 30 iterations as for one of 300. The context of a prediction holds the model's
    look-back, whatever the job's length."""
    from hybridsim.hybrid import HybridController
    from hybridsim.timeline import JobState
    from surrogate.registry import create

    means = []
    orig = JobState.mean
    monkeypatch.setattr(JobState, "mean", lambda self, arr, i: means.append(i) or orig(self, arr, i))
    contexts = []

    class Looking:
        name = "looking"

        def decide(self, view):
            if reads_truth and view.iteration > 0:
                view.truth[-1]
            return "simulate" if view.iteration % 10 == 0 else "predict"

    per_decision = {}
    for n in (30, 300):
        means.clear()
        sc = parse_scenario(SC.replace("iterations: 40", f"iterations: {n}"))
        model = create("mean", k=4)
        predict = model.predict
        model.predict = lambda ctx, p=predict: contexts.append(ctx.history.shape) or p(ctx)
        ctl = HybridController([("a", "allreduce", 4, n)], Looking(), {0: model})
        ctl.drop_edges = False  # the stand-in backend has no interference
        FakeBackend(sc.model_copy(update={"jobs": sc.jobs[:1]})).run(director=ctl, on_record=ctl.on_record)
        per_decision[n] = len(means) / n
    expect = 1.0 - 1 / 30 if reads_truth else 0.0   # iteration 0 has no earlier truth to read
    assert per_decision[30] == pytest.approx(expect) and per_decision[300] == pytest.approx(1.0 - 1 / 300 if reads_truth
                                                                                          else 0.0)
    assert {s for s in contexts} == {(4, 4)}


def test_a_timelines_spans_are_its_records_summed_up():
    """``JobState.record_spans`` (a burst summed up per iteration, as the native core hands it over) leaves a job's
    lows, highs, counts and complete iterations as ``record_predicted`` of the same records does, bursts cutting
    iterations anywhere, records past the job's last iteration ignored."""
    from types import SimpleNamespace

    from hybridsim.timeline import JobState

    rng = np.random.default_rng(7)
    R, N = 5, 6
    recs = [SimpleNamespace(job_id=3, rank=r, iteration=i, start=float(rng.uniform(0, 10) + 10 * i),
                            end=float(rng.uniform(10, 20) + 10 * i)) for i in range(N + 1) for r in rng.permutation(R)]
    a, b = JobState.new("j", 3, "milc", R, N), JobState.new("j", 3, "milc", R, N)
    cuts = [0, 3, 4, 11, 17, 18, 26, len(recs)]
    for k0, k1 in zip(cuts, cuts[1:]):
        burst = recs[k0:k1]
        a.record_predicted(burst)
        spans = {}
        for r in burst:
            n, lo, hi = spans.get(r.iteration, (0, np.inf, -np.inf))
            spans[r.iteration] = (n + 1, min(lo, r.start), max(hi, r.end))
        b.record_spans([(3, it, n, lo, hi) for it, (n, lo, hi) in spans.items()])
        assert (a.lo, a.hi, a.done_count, a.n_complete) == (b.lo, b.hi, b.done_count, b.n_complete), (k0, k1)
    assert a.n_complete == N and all(c == R for c in a.done_count)


def test_a_model_that_refuses_a_prediction_falls_back_to_the_last_truth():
    """A model raising SurrogateError at predict (e.g. a graph model whose look-back of a rank is all window edges)
    does not stop the run: every rank takes its last simulated time (as for a non-finite answer), counted in
    ``fallback_predictions`` and ``refused_predictions``, the message kept for the summary."""
    from hybridsim.hybrid import HybridController
    from hybridsim_common.records import IterationRecord
    from surrogate.base import SurrogateError
    from surrogate.registry import create

    model = create("last")

    def refuse(ctx):
        raise SurrogateError("rank 0 has no finite iteration time in its history")

    model.predict = refuse
    ctl = HybridController([("a", "x", 3, 4)], _SimFirst(), {0: model})
    assert ctl.mode_for(0, 0).value == "simulate"
    for r, d in enumerate([100.0, 120.0, 140.0]):
        ctl.on_record(IterationRecord("a", 0, r, 0, 0.0, d), True)
    assert ctl.mode_for(0, 1).value == "predict"
    starts = np.array([100.0, 120.0, 140.0])
    y = ctl.predict(0, 1, np.arange(3), starts)
    # each rank's last truth (100, 120, 140): job time 120, every rank advances by it from its own start (sync skew)
    assert np.allclose(starts + y, starts + 120.0)
    assert ctl.counts["refused_predictions"] == 1 and ctl.counts["fallback_predictions"] == 3
    assert "no finite iteration time" in ctl.summary()["last_refused_prediction"]
