"""The hybrid loop's fast-forward (``Director.fast_forward``): a job's stretch of iterations that the policy has
promised PREDICT (``Policy.horizon``) runs in the engine's message layer without a director call per iteration. It
must change nothing: every run here is made twice, once with the fast-forward and once on the per-iteration path (a
controller whose ``fast_forward`` grants nothing), and the records, job ends, events, port samples, the controller's
tables, counts and spans and the policy's state must be the same, value for value. Each comparison also checks that
stretches were granted, so it is not vacuous."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from hybridsim.engine import Engine
from hybridsim.engine import cores
from hybridsim.runner import build_controller
from hybridsim.scenario import load_scenario, parse_scenario
from surrogate.base import Context, Surrogate

REPO = Path(__file__).resolve().parents[1]


def _run(sc, ffwd: bool):
    """One hybrid run of ``sc`` (placement and topology as the runner makes them); ``ffwd`` False: the
    per-iteration path. Returns (result, controller, engine, stretches granted)."""
    ctl = build_controller(sc)
    granted = []
    if ffwd:
        inner = ctl.fast_forward

        def spy(job_id, iteration, ends):
            plan = inner(job_id, iteration, ends)
            if plan is not None:
                granted.append(len(plan))
            return plan
        ctl.fast_forward = spy
    else:
        ctl.fast_forward = lambda job_id, iteration, ends: None
    eng = Engine(sc)
    res = eng.run(director=ctl, on_record=ctl.on_record)
    return res, ctl, eng, granted


def _records(res):
    return [(r.job, r.job_id, r.rank, r.iteration, r.start, r.end) for r in res.records]


def _same_state(a, b):
    """Two controllers (and their policies) hold the same state, bar wall times."""
    strip = lambda s: {k: v for k, v in s.items() if k != "wall"}
    assert json.dumps(strip(a.summary()), sort_keys=True, default=str) == \
        json.dumps(strip(b.summary()), sort_keys=True, default=str)
    assert a.now == b.now and a.silences.pending == b.silences.pending and a.silences.spans == b.silences.spans \
        and a.silences.reach == b.silences.reach
    assert a.counts == b.counts and a.corunner_feed._sets == b.corunner_feed._sets
    for jid, x in a.states.items():
        y = b.states[jid]
        if x is None:
            assert y is None
            continue
        for name in ("truth", "pred", "raw", "load", "flow", "clean", "edge", "sim", "stretch", "last_col",
                     "prev_col"):
            assert np.array_equal(getattr(x, name), getattr(y, name), equal_nan=True), (jid, name)
        for name in ("modes", "errors", "signed", "done_count", "lo", "hi", "visible", "n_simulated", "n_predicted",
                     "n_complete", "fitted", "window_start", "fallbacks", "edge_shift"):
            assert getattr(x, name) == getattr(y, name), (jid, name)
    pa, pb = a.policy, b.policy
    for name, v in vars(pa).items():
        if name == "jobs":
            assert v.keys() == pb.jobs.keys()
            for k, s in v.items():
                t = pb.jobs[k]
                for f in type(s).__slots__ + getattr(type(s).__mro__[1], "__slots__", ()):
                    assert getattr(s, f) == getattr(t, f), (k, f)
        else:
            assert v == getattr(pb, name), name


def assert_fast_forward_changes_nothing(sc, stretches: bool = True):
    """The run of ``sc`` with the fast-forward is the per-iteration run, and at least one stretch was granted (none
    with ``stretches`` False: a case the fast-forward leaves to the per-iteration path)."""
    ref, ca, ea, _ = _run(sc.model_copy(deep=True), ffwd=False)
    got, cb, eb, granted = _run(sc.model_copy(deep=True), ffwd=True)
    if stretches:
        assert granted and max(granted) > 1, "no stretch was granted: the comparison would be vacuous"
    else:
        assert not granted
    assert _records(got) == _records(ref)
    assert got.simulated == ref.simulated
    assert got.job_end == ref.job_end and got.events == ref.events and got.end_time == ref.end_time
    assert got.job_start == ref.job_start and got.job_killed == ref.job_killed
    if ref.ports is not None:
        assert np.array_equal(got.ports.values, ref.ports.values, equal_nan=True)
    cols_a, cols_b = ca.per_iteration_columns(ref.records), cb.per_iteration_columns(got.records)
    assert cols_a["mode"] == cols_b["mode"]
    for name in ("predicted", "truth"):
        assert np.array_equal(np.array(cols_a[name]), np.array(cols_b[name]), equal_nan=True), name
    _same_state(ca, cb)
    # the engine's side of the skipped decisions: modes, keep_background's generations, snapshots, replay starts
    assert ea.modes == eb.modes and ea.bg_gen == eb.bg_gen and ea.replay_t0 == eb.replay_t0
    assert {j: (t, list(b), None if w is None else list(w)) for j, (t, b, w) in ea.snap.items()} \
        == {j: (t, list(b), None if w is None else list(w)) for j, (t, b, w) in eb.snap.items()}
    # every stretch applied by the end; a partial run may stop where a stretch's last iteration was reached and not
    # yet predicted (its ranks not all there), as the per-iteration run stops between mode_for and predict
    for first, length, reached, scheduled in eb.stretches.values():
        assert got.partial and reached == length == scheduled + 1
    assert cb._stretches.keys() == eb.stretches.keys()
    return granted


def _scenario(path, replace=(), **sections):
    sc = load_scenario(REPO / path)
    sc.backend.embedded.progress = False
    text = Path(REPO / path).read_text()
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    if sections or replace:
        extra = "".join(f"{k}: {v}\n" for k, v in sections.items())
        text = "\n".join(line for line in text.splitlines() if line.split(":")[0] not in sections) + "\n" + extra
        sc = parse_scenario(text, path=REPO / path)
        sc.backend.embedded.progress = False
    return sc


native = pytest.mark.skipif(cores.NativeCore is None, reason="native core not built")


def _sync(path, sync):
    """The example's controller section (the default policy, named, where it has none) with ``sync`` set."""
    import yaml
    ctl = yaml.safe_load((REPO / path).read_text()).get("controller") or {}
    ctl.setdefault("policy", "confident")
    ctl["sync"] = sync
    return json.dumps(ctl)


@native
@pytest.mark.parametrize("sync", ["job", "skew"])
def test_hybrid_72_long(sync):
    path = "examples/hybrid-72-long.yaml"
    granted = assert_fast_forward_changes_nothing(_scenario(path, controller=_sync(path, sync)))
    assert sum(granted) > 100


@native
@pytest.mark.parametrize("sync", ["job", "skew"])
def test_mix_72_600(sync):
    path = "benchmarks/scenarios/mix-72-600.yaml"
    granted = assert_fast_forward_changes_nothing(_scenario(path, controller=_sync(path, sync)))
    assert sum(granted) > 500


@native
@pytest.mark.parametrize("keep", ["false", "profile"])
def test_mix_72_600_other_keep_background(keep):
    """keep_background off, and ``profile`` (fast-forwarded only where the job's profile has one phase)."""
    assert_fast_forward_changes_nothing(_scenario(
        "benchmarks/scenarios/mix-72-600.yaml",
        controller=f"{{policy: aligned, params: {{warmup: 1, ft: 16, truth: 1}}, keep_background: {keep}}}"))


@native
@pytest.mark.parametrize("stop", [{"end_time": 12.3e6}, {"max_events": 250_000}])
def test_a_partial_run_stops_inside_stretches(stop):
    """A run that stops in the middle (``end_time``, ``max_events``) leaves the director as the per-iteration run
    does: the stretches are reported as far as they got."""
    sc = _scenario("benchmarks/scenarios/mix-72-600.yaml")
    for k, v in stop.items():
        setattr(sc.backend.embedded, k, v)
    ref, *_ = _run(sc.model_copy(deep=True), ffwd=False)
    assert ref.partial
    assert_fast_forward_changes_nothing(sc)


@native
def test_a_model_that_reads_the_flow_model():
    """``flow`` (``needs_flow``): stretches once every job's flow period is measured."""
    assert_fast_forward_changes_nothing(_scenario("benchmarks/scenarios/mix-72-600.yaml", surrogate="{model: flow}"))


@native
def test_a_mixed_history_is_left_to_the_per_iteration_path():
    """``history: mixed`` feeds the model's own predictions back: its contexts move over a stretch, no fast-forward."""
    assert_fast_forward_changes_nothing(_scenario("benchmarks/scenarios/mix-72-600.yaml",
                                                  surrogate="{model: mean, config: {k: 4}, history: mixed}"),
                                        stretches=False)


@native
def test_the_confident_policy():
    assert_fast_forward_changes_nothing(_scenario(
        "benchmarks/scenarios/mix-72-600.yaml",
        controller="{policy: confident, params: {target_error: 5.0}, keep_background: true}"))


@native
@pytest.mark.parametrize("policy", ["periodic", "error-adaptive", "surrogate"])
def test_per_job_policies_and_ridge(policy):
    params = "{warmup: 4}" if policy == "surrogate" else "{warmup: 4, truth: 1}"
    assert_fast_forward_changes_nothing(_scenario(
        "benchmarks/scenarios/mix-72-600.yaml", surrogate="{model: ridge, config: {k: 4}}",
        controller=f"{{policy: {policy}, params: {params}, keep_background: true}}"))


SMALL = """
seed: 2
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: fast, ranks: 8, iterations: 80, workload: {kind: allreduce, size: 2048}}
  - {name: slow, ranks: 8, iterations: 24, workload: {kind: allreduce, size: 65536, count: 4}}
  - {name: noise, ranks: 4, workload: {kind: uniform_random, msg_size: 4096, interval: 20000}}
placement: {policy: random}
sampling: {interval: 50us}
surrogate: {model: mean, config: {k: 2}}
controller: {policy: %s, params: {warmup: 2, ft: 8, truth: 1}, keep_background: true, sync: %s}
"""


@native
@pytest.mark.parametrize("policy", ["aligned", "periodic"])
@pytest.mark.parametrize("sync", ["job", "skew", "rank"])
def test_the_three_syncs(policy, sync):
    """Every sync; with per-rank ends (``skew``, ``rank``) a stretch stops where virtual time would go back."""
    sc = parse_scenario(SMALL % (policy, sync))
    sc.backend.embedded.progress = False
    assert_fast_forward_changes_nothing(sc)


@native
@pytest.mark.parametrize("walltime", ["400us", "450us", "500us"])
def test_a_job_stream_with_kills_at_the_walltime(walltime):
    """Jobs start and end (the director's on_job_start / on_job_end end every stretch), some are killed at walltimes
    too short for them (with 450us, nn-b while a stretch of its own is open; with 500us, another job while two
    are)."""
    sc = _scenario("examples/stream-72.yaml", replace=[("walltime: 1440us", f"walltime: {walltime}"),
                                                       ("walltime: 1080us", "walltime: 250us")],
                   surrogate="{model: last}",
                   controller="{policy: aligned, params: {warmup: 1, ft: 8, truth: 1}, keep_background: true}",
                   scheduler="{queue: easy, allocation: random-router, slowdown_tau: 100us, kill_at_walltime: true}")
    ref, *_ = _run(sc.model_copy(deep=True), ffwd=False)
    assert ref.job_killed, "the scenario should kill a job at its walltime"
    assert_fast_forward_changes_nothing(sc)


def test_the_python_core_fast_forwards_as_the_native_one():
    """The Python core's message layer (``MpiLayer``) runs stretches too: the same records with and without."""
    sc = _scenario("benchmarks/scenarios/mix-72-600.yaml")
    sc.jobs[0].iterations = 120   # a shorter run for the Python core
    sc.backend.embedded.core = "python"
    assert_fast_forward_changes_nothing(sc)


# ------------------------------------------------------------------------------------------------ predict_many
def _ctx(rng, R=6, L=8, iteration=20):
    hist = rng.uniform(1e4, 2e4, (R, L))
    hist[1, :3] = np.nan
    return Context(job="j", workload="milc", history=hist, iteration=iteration, load=np.full(L, 0.3), load_now=0.3,
                   flow=np.full(L, 1.5e4), flow_now=1.6e4, ranks=np.arange(R), columns=np.arange(iteration - L + 1,
                                                                                                iteration + 1))


class _ReadsIteration(Surrogate):
    """A model whose answer depends on the iteration (as the oracle's): the default rollout must move it on."""
    name = "reads-iteration"

    def predict(self, ctx):
        return np.nanmean(ctx.history, axis=1) * (1.0 + 0.01 * ctx.iteration)


def _models():
    from surrogate import registry
    out = [registry.create(name, **cfg) for name, cfg in
           (("last", {}), ("mean", {"k": 3}), ("ewma", {}), ("ridge", {"k": 4}), ("flow", {}))]
    ridge = out[3]
    series = [np.cumsum(np.random.default_rng(3).uniform(0.9, 1.1, 40)) * 1e3 + 1e4 for _ in range(4)]
    ridge.fit_series(series)
    assert ridge.coef is not None
    out.append(_ReadsIteration())
    return out


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.name)
def test_predict_many_is_k_one_step_predictions(model):
    rng = np.random.default_rng(1)
    ctx = _ctx(rng)
    k = 7
    many = model.predict_many(ctx, k)
    assert many.shape == (k, ctx.history.shape[0]) and many.dtype == np.float64
    for m in range(k):
        one = np.asarray(model.predict(dataclasses.replace(ctx, iteration=ctx.iteration + m)), dtype=np.float64)
        assert np.array_equal(many[m], one, equal_nan=True), m
    assert model.predict_many(ctx, 0).shape[0] == 0


def test_predict_many_of_the_lstm_is_its_one_step_predictions():
    pytest.importorskip("torch")
    from surrogate import registry
    model = registry.create("lstm", k=8, hidden=8, epochs=2)
    rng = np.random.default_rng(2)
    y = rng.uniform(1e4, 2e4, (4, 30))
    from surrogate.online import OnlineSeries
    model.fit(OnlineSeries("j", "milc", y), list(range(8, 30)))
    ctx = _ctx(rng, R=4)
    many = model.predict_many(ctx, 3)
    for m in range(3):
        one = model.predict(dataclasses.replace(ctx, iteration=ctx.iteration + m))
        assert np.array_equal(many[m], np.asarray(one, dtype=np.float64))


# ------------------------------------------------------------------------------------------------ the policies' promises
def test_aligned_promises_predict_until_the_next_window_and_not_the_last_iteration():
    from controllers.builtin import Aligned, PRED
    from controllers.base import JobView
    pol = Aligned(warmup=1, ft=4, truth=1)

    def view(job, it, now, n=50):
        return JobView(job=f"j{job}", job_id=job, iteration=it, n_iterations=n, mode=None, modes=(), truth=(),
                       predicted=(), errors=(), now=now)
    # warm-up: both jobs' first iteration, then the window closes at the second boundary
    for it, now in ((0, 0.0), (1, 10.0)):
        for job in (0, 1):
            pol.decide(view(job, it, now))
    assert pol.phase == "forward"
    assert pol.decide(view(0, 2, 20.0)) == PRED
    n, until = pol.horizon(view(0, 2, 20.0))
    assert until == pol.next_open and n == 50 - 2 - 2
    assert pol.standing(0, until) == until
    # the slot after skipped decisions is the one the calls leave
    ref = Aligned(warmup=1, ft=4, truth=1)
    for it, now in ((0, 0.0), (1, 10.0)):
        for job in (0, 1):
            ref.decide(view(job, it, now))
    ref.decide(view(0, 2, 20.0))
    for it, now in ((3, 21.0), (4, 22.5), (5, 24.0)):
        assert ref.decide(view(0, it, now)) == PRED
    pol.fast_forwarded(0, 50, range(3, 6), [21.0, 22.5, 24.0])
    assert {f: getattr(pol.jobs[0], f) for f in pol.jobs[0].__slots__} == \
        {f: getattr(ref.jobs[0], f) for f in ref.jobs[0].__slots__}
    # a window that opens ends every promise
    pol._open(30.0)
    assert pol.standing(0, until) == -np.inf and pol.horizon(view(0, 6, 30.0))[1] == -np.inf


def test_a_policy_promises_nothing_by_default():
    from controllers.base import Policy
    from controllers.builtin import Budget

    class Mine(Policy):
        def decide(self, view):
            return "predict"
    assert Mine().horizon(None)[0] == 0 and Mine().standing(0, 1.0) == -np.inf
    assert Budget().horizon(None)[0] == 0


@native
@pytest.mark.parametrize("bad", ["shape", "nan", "past-the-end"])
def test_a_directors_bad_stretch_is_an_engine_error(bad):
    from hybridsim.engine import EngineError
    sc = _scenario("benchmarks/scenarios/mix-72-600.yaml")
    ctl = build_controller(sc)
    inner = ctl.fast_forward

    def broken(job_id, iteration, ends):
        plan = inner(job_id, iteration, ends)
        if plan is None:
            return None
        if bad == "shape":
            return plan[:, :-1]
        if bad == "nan":
            return np.where(np.arange(plan.shape[1]) == 0, np.nan, plan)
        return np.ones((sc.jobs[job_id].iterations, plan.shape[1]))
    ctl.fast_forward = broken
    with pytest.raises(EngineError, match="fast_forward"):
        Engine(sc).run(director=ctl, on_record=ctl.on_record)


@native
def test_the_native_stretch_state_copies_the_byte_counters_only_when_new_iterations_were_reached():
    """``stretch_state(j, since)``: the native core hands over the job's byte counters (a list over every port) only
    when the stretch reached iterations beyond ``since``, the engine reading them only then; the run is the
    per-iteration one all the same (keep_background's snapshots included, as every comparison here checks)."""
    sc = _scenario("benchmarks/scenarios/mix-72-600.yaml")
    sc.jobs[0].iterations = 200
    ctl = build_controller(sc)
    eng = Engine(sc)
    seen = []
    orig = cores.NativeMpi.stretch_state

    def spy(self, j, since=-1):
        out = orig(self, j, since)
        seen.append((since, out[0], out[3] is not None))
        return out
    cores.NativeMpi.stretch_state = spy
    try:
        eng.run(director=ctl, on_record=ctl.on_record)
    finally:
        cores.NativeMpi.stretch_state = orig
    assert seen and all(since >= 0 for since, _, _ in seen)
    assert not any(given for since, reached, given in seen if reached <= since)
    assert any(given for since, reached, given in seen if reached > since)
    assert sum(reached <= since for since, reached, _ in seen) > 10   # calls that no longer copy them
    sc2 = _scenario("benchmarks/scenarios/mix-72-600.yaml")
    sc2.jobs[0].iterations = 200
    assert_fast_forward_changes_nothing(sc2)


@native
def test_a_history_only_models_answers_are_reused_and_change_nothing():
    """A ``Surrogate.history_only`` model (ridge) is asked once per history between fits: the stretch after a
    prediction and the next window's shadow prediction reuse its answer (``OnlineFit._answer``). The run is the one
    whose models are asked every time (the same models with ``history_only`` off), with fewer model calls."""
    sc = _scenario("benchmarks/scenarios/mix-72-600.yaml", surrogate="{model: ridge}")
    runs = {}
    for reuse in (True, False):
        ctl = build_controller(sc.model_copy(deep=True))
        calls = [0]
        for m in ctl.models.values():
            assert m.history_only
            if not reuse:
                m.history_only = False
            inner = m.predict

            def counted(ctx, inner=inner):
                calls[0] += 1
                return inner(ctx)
            m.predict = counted
        res = Engine(sc.model_copy(deep=True)).run(director=ctl, on_record=ctl.on_record)
        runs[reuse] = (res, ctl, calls[0])
    (got, cb, n_reuse), (ref, ca, n_ask) = runs[True], runs[False]
    assert _records(got) == _records(ref) and got.simulated == ref.simulated and got.events == ref.events
    _same_state(ca, cb)
    assert cb.counts["inference_calls"] == ca.counts["inference_calls"] > 0
    assert n_reuse <= n_ask * 2 // 3, (n_reuse, n_ask)   # a stretch and a window's shadow per answer, about
