"""The ``confident`` policy (issue 22, item 4): a Student prediction bound per job on the error of a predicted
stretch, a warm-up that ends on a stationarity test, windows spaced by the bound, and a co-runner's start or end that
opens a window only when the model is not confident. Schedules are hand-traced on hand-built views."""

from __future__ import annotations

import math

import pytest

from controllers import load_policy
from controllers.base import JobView
from controllers.builtin import completion_bound, stationary
from hybridsim.cli import main
from hybridsim_common.backend import Mode

S, P = Mode.SIMULATE, Mode.PREDICT


def test_completion_bound_hand_list():
    """A Student prediction bound on the mean of m new scores: |mean| + t s sqrt(1/n + 1/m). Scores 0 2 4: mean 2,
    s = sqrt((4 + 0 + 4) / 2) = 2, n = 3, so 2 degrees of freedom, whose quantile q is (2q - 1) / sqrt(2q (1 - q)):
    at coverage 0.5 (q = 0.75) sqrt(2/3), at 0.8 (q = 0.9) 0.8 / sqrt(0.18) = 8 / (3 sqrt(2)). m = 3: sqrt(2/3)."""
    s = [0.0, 2.0, 4.0]
    assert completion_bound(s, 3, 0.5) == pytest.approx(2 + 2 * math.sqrt(2 / 3) * math.sqrt(2 / 3))
    assert completion_bound(s, 3) == pytest.approx(2 + 2 * 8 / (3 * math.sqrt(2)) * math.sqrt(2 / 3))
    assert completion_bound(s, math.inf, 0.5) == pytest.approx(2 + 2 * math.sqrt(2 / 3) / math.sqrt(3))
    # two scores, coverage 0.5: 1 degree of freedom, quantile tan(pi / 4) = 1; 1 -1: mean 0, s = sqrt(2)
    assert completion_bound([1.0, -1.0], 1, 0.5) == pytest.approx(math.sqrt(2) * math.sqrt(1 / 2 + 1))
    assert completion_bound([1.0, -1.0], 2, 0.5) == pytest.approx(math.sqrt(2))
    # the bias's uncertainty and the stretches' spread add in quadrature: below the sum of the two terms
    assert completion_bound(s, 3, 0.5) < 2 + 2 * math.sqrt(2 / 3) * 2 / math.sqrt(3)
    assert completion_bound([5.0], 1) == math.inf          # one window: no spread yet
    assert completion_bound([1.0, 1.0], 1) == pytest.approx(1.0)   # no spread seen: the bias alone


def test_largest_ft_hand_computed():
    """Scores 1 -1 at coverage 0.5: bias 0, t s = sqrt(2), n = 2. Budget 1 %, a job 100 window lengths long: ft must
    satisfy (ft - 1) / ft * sqrt(2) * sqrt(1/2 + ft / 100) <= 1: ft 10 gives 0.986, ft 11 1.004. With no end in
    sight every ft passes; a job 4 window lengths long: ft 3 gives 2/3 * sqrt(2) * sqrt(1/2 + 3/4) = 1.05 and ft 2
    gives 0.71."""
    p = load_policy("confident", {"target_error": 1, "coverage": 0.5})
    assert p.largest_ft([1.0, -1.0], 100.0) == 10
    assert p.largest_ft([1.0, -1.0], math.inf) == 256
    assert p.largest_ft([1.0, -1.0], 4.0) == 2
    assert p.largest_ft([3.0], 100.0) == 2                 # no bound yet: min_ft


def test_stationarity_constant_trending_noisy():
    assert stationary([100.0] * 5, 2.0)
    assert not stationary([100.0, 100.0], 2.0)                       # fewer than 3: no verdict yet
    # slope 2 over 4 steps = 8 % of the mean 104, no noise: a trend
    assert not stationary([100.0, 102.0, 104.0, 106.0, 108.0], 2.0)
    # slope 0.1 over 4 steps = 0.4 % of 100.2: within 2 %
    assert stationary([100.0, 100.1, 100.2, 100.3, 100.4], 2.0)
    # y - 100 = 0 4 -4 4 -4 0: slope -8 / 17.5 = -0.457 (2.29 % over 5 steps, over 2 %), but its standard error is
    # sqrt(60.3 / 4 / 17.5) = 0.93: noise around a flat level
    assert stationary([100.0, 104.0, 96.0, 104.0, 96.0, 100.0], 2.0)
    # a start transient: 85 then flat: slope 4.5 (14 %), standard error sqrt(67.5 / 2 / 5) = 2.6 < 4.5
    assert not stationary([85.0, 100.0, 100.0, 100.0], 2.0)


def cview(jid, it, now, truth=10.0, signed=(), running=(), n=100, change_error=None):
    """Job ``jid`` before iteration ``it`` at virtual time ``now``; every earlier iteration took ``truth`` ns (a
    callable: ``truth(i)``); ``signed``: its job-level shadow errors ``(iteration, %)``; ``change_error``: its
    model's declared error at a change (%)."""
    f = truth if callable(truth) else (lambda i: truth)
    tr = tuple(f(i) for i in range(it))
    return JobView(f"j{jid}", jid, it, n, None, (), tr, (None,) * it, (), {}, now=now, running=running,
                   signed_errors=tuple(signed), change_error=change_error)


def test_warmup_ends_when_every_job_is_stationary():
    """A (constant 10 ns) is stationary at iteration 4 (iterations 0-2 complete: the one just run is left out); B
    (trending) never is, so both are simulated until B's ``max_warmup`` (6) is reached."""
    p = load_policy("confident", {"target_error": 2, "max_warmup": 6})
    trend = lambda i: 10.0 + i   # noqa: E731
    for it in range(6):
        assert p.decide(cview(0, it, 10.0 * it)) == S, it
        assert p.decide(cview(1, it, 10.0 * it, truth=trend)) == S, it
    assert p.decide(cview(0, 6, 60.0)) == S            # A waits for B ...
    assert p.decide(cview(1, 6, 60.0, truth=trend)) == P   # ... whose max_warmup closes the warm-up
    assert p.phase == "forward"
    q = load_policy("confident", {"target_error": 2})
    assert [q.decide(cview(0, it, 10.0 * it)) for it in range(4)] == [S] * 4
    assert q.decide(cview(0, 4, 40.0)) == P            # alone and constant: 3 complete iterations suffice


def prefix(p, sa, sb):
    """Two constant jobs (10 ns iterations, deciding at 10 * it): the warm-up closes at t=40, with no bound yet
    windows (one iteration) run at t=50 and t=70 and the second closes at t=80; ``sa``, ``sb``: each job's signed
    shadow errors of iterations 5 and 7 (two windows)."""
    for it in range(4):
        assert p.decide(cview(0, it, 10.0 * it)) == S and p.decide(cview(1, it, 10.0 * it)) == S
    assert p.decide(cview(0, 4, 40.0)) == S           # A stationary, B not checked yet
    assert p.decide(cview(1, 4, 40.0)) == P           # B stationary: warm-up over
    assert p.ft == 2 and p.next_open == pytest.approx(50.0)
    assert p.decide(cview(0, 5, 50.0)) == S and p.decide(cview(1, 5, 50.0)) == S   # first window
    assert p.decide(cview(0, 6, 60.0, signed=[(5, sa[0])])) == S   # A's quota done, B's not yet
    assert p.decide(cview(1, 6, 60.0, signed=[(5, sb[0])])) == P   # closes: one score each, no bound: ft 2
    assert p.ft == 2 and p.next_open == pytest.approx(70.0)
    assert p.decide(cview(0, 7, 70.0, signed=[(5, sa[0])])) == S and p.decide(cview(1, 7, 70.0)) == S
    assert p.decide(cview(0, 8, 80.0, signed=[(5, sa[0]), (7, sa[1])])) == S
    assert p.decide(cview(1, 8, 80.0, signed=[(5, sb[0]), (7, sb[1])])) == P


def test_gap_follows_the_bound():
    """coverage 0.5. Scores 1 1: bias 1, spread 0: within 2 % at any ft: max_ft 32, next window at 80 + 31 * 10.
    Budget 1.5 %: (ft - 1) / ft * 1 <= 1.5 at any ft too; budget 0.9: ft <= 10. A's scores 3 5: bias
    4 plus a spread > 4: even ft 2 (half predicted) misses 2 %: min_ft 2."""
    p = load_policy("confident", {"target_error": 2, "coverage": 0.5, "max_ft": 32})
    prefix(p, (1.0, 1.0), (1.0, 1.0))
    assert p.ft == 32 and p.next_open == pytest.approx(390.0)
    assert [p.decide(cview(0, it, 10.0 * it)) for it in (9, 20, 38)] == [P, P, P]
    assert p.decide(cview(0, 39, 390.0)) == S
    r = load_policy("confident", {"target_error": 0.9, "coverage": 0.5})
    prefix(r, (1.0, 1.0), (1.0, 1.0))
    assert r.ft == 10 and r.next_open == pytest.approx(80.0 + 9 * 10.0)
    q = load_policy("confident", {"target_error": 2, "coverage": 0.5})
    prefix(q, (3.0, 5.0), (1.0, 1.0))
    assert q.ft == 2 and q.next_open == pytest.approx(90.0)
    assert q.decide(cview(0, 9, 90.0)) == S


@pytest.mark.parametrize("target,want", [(2.0, P), (0.9, S)])
def test_corunner_end_opens_a_window_only_when_unsure(target, want):
    """After the prefix both jobs' bound on one stretch is 1 %; the next window is at t=170 or later (ft 10 at
    budget 0.9). A leaves at t=90: within budget 2 % no window; over budget 0.9 % B opens one at once."""
    p = load_policy("confident", {"target_error": target, "coverage": 0.5})
    prefix(p, (1.0, 1.0), (1.0, 1.0))
    assert p.next_open >= 170.0
    assert p.decide(cview(1, 9, 90.0, running=(1,))) == want


@pytest.mark.parametrize("target,want", [(2.0, P), (0.9, S)])
def test_corunner_start_opens_a_window_only_when_unsure(target, want):
    """Job C arrives at t=90 (its own warm-up is simulated either way); A, the leader, opens a window beside it
    only when the bounds of the jobs already running exceed the budget."""
    p = load_policy("confident", {"target_error": target, "coverage": 0.5})
    prefix(p, (1.0, 1.0), (1.0, 1.0))
    assert p.decide(cview(2, 0, 90.0, running=(0, 1, 2))) == S
    assert p.decide(cview(0, 9, 90.0, running=(0, 1, 2))) == want


@pytest.mark.parametrize("change_error,trust,want", [(None, True, S), (1.0, True, P), (1.5, True, S),
                                                     (1.0, False, S)])
def test_a_change_the_model_vouches_for_opens_no_window(change_error, trust, want):
    """Budget 0.9 %, coverage 0.5: B's windows give a one-stretch bound of 1 % (over budget), so A's end opens a
    window (:func:`test_corunner_end_opens_a_window_only_when_unsure`) unless B's model declares an error at changes
    whose 68 % band, scaled to the 50 % two-sided quantile (0.6745 / 0.9945 = 0.678), is within it: 1.0 % -> 0.68 %
    (no window), 1.5 % -> 1.02 % (window); ``trust_changes: false`` ignores the model's word."""
    p = load_policy("confident", {"target_error": 0.9, "coverage": 0.5, "trust_changes": trust})
    prefix(p, (1.0, 1.0), (1.0, 1.0))
    assert p.decide(cview(1, 9, 90.0, running=(1,), change_error=change_error)) == want


def test_the_flow_model_declares_its_measured_band_at_changes():
    """``Surrogate.change_error``: None by default (ridge); ``flow`` gives its 68 % band per kind in % (NN 3.9 %),
    and none where it was not measured in that setting (another gain, an unknown kind)."""
    from hybridsim.flow import UNCERTAINTY
    from surrogate.registry import create

    assert create("ridge").change_error("milc") is None
    assert create("flow").change_error("nearest_neighbor") == pytest.approx(
        100 * UNCERTAINTY["nearest_neighbor"]["change"])
    assert create("flow", gain=0.5).change_error("milc") is None
    assert create("flow").change_error("uniform_random") is None


def test_validate_accepts_target_error_and_refuses_a_bad_one(tmp_path, capsys):
    base = ("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
            "jobs:\n  - {name: a, ranks: 4, iterations: 2, workload: {kind: milc, dimension_sizes: [2, 2], "
            "msg_size: 4096}}\n")
    ok = tmp_path / "ok.yaml"
    ok.write_text(base + "controller: {policy: confident, params: {target_error: 2}}\n")
    assert main(["validate", str(ok)]) == 0, capsys.readouterr().err
    for bad, msg in (("-1", "target_error must be"), ("150", "target_error must be"), ("true", "target_error must be"),
                     ("'2%'", "target_error must be")):
        f = tmp_path / "bad.yaml"
        f.write_text(base + f"controller: {{policy: confident, params: {{target_error: {bad}}}}}\n")
        capsys.readouterr()
        assert main(["validate", str(f)]) == 2, bad
        err = capsys.readouterr().err
        assert "bad.yaml:4:" in err and "controller.params" in err and msg in err, err


def test_student_quantile_matches_scipy_without_importing_it():
    """The policy's Student quantile (closed-form CDF, bisection) against scipy's, and the policy never imports scipy
    (its import alone once cost a hybrid run of the quickstart 4 s of controller time)."""
    import subprocess
    import sys

    from scipy.stats import t

    from controllers.builtin import _student, student_two_sided

    for dof in (1, 2, 3, 4, 7, 15, 40):
        for q in (0.6, 0.9, 0.95, 0.995):
            assert _student(dof, q) == pytest.approx(float(t.ppf(q, dof)), rel=1e-10)
    assert student_two_sided(1.0, 1) == pytest.approx(0.5)           # Cauchy: P(|T| < 1) = 1/2
    assert student_two_sided(math.sqrt(2), 2) == pytest.approx(1 / math.sqrt(2))   # t / sqrt(2 + t^2)
    code = ("import sys\nfrom controllers.builtin import Confident\n"
            "Confident().largest_ft([0.5, -0.3, 0.2], 100.0)\n"
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_truth_noise_hand_computed():
    """10 12 10 12: successive differences 2 -2 2, mean square 4, sqrt(4 / 2) = 1.414 ns of a mean of 11 ns."""
    from controllers.builtin import truth_noise

    assert truth_noise([10.0, 12.0, 10.0, 12.0]) == pytest.approx(math.sqrt(2) / 11 * 100)
    assert truth_noise([10.0, 11.0, 12.0, 13.0]) == pytest.approx(math.sqrt(0.5) / 11.5 * 100)   # a trend: small
    assert truth_noise([5.0, 5.0]) is None


def test_bound_separates_truth_noise_from_the_models_bias():
    """Scores 1 -1 (one iteration each), coverage 0.5 (t = 1 at 1 degree of freedom): s^2 = 2. With a truth noise of
    1 %, the drift between windows is tau^2 = 2 - 1 = 1 and one stretch of 4 iterations is off by
    sqrt(tau^2 + 1 / 4): B = 0 + 1 * sqrt(2 / 2 + 1.25 / 1) = 1.5. Without noise the whole spread is the model's:
    sqrt(1 + 2) = 1.732 (completion_bound's)."""
    from controllers.builtin import _ConfSlot

    p = load_policy("confident", {"coverage": 0.5})
    js = _ConfSlot(0)
    js.scores, js.counts, js.noise = [1.0, -1.0], [1, 1], 1.0
    assert p.bound_at(js, 1.0, 4.0) == pytest.approx(1.5)
    js.noise = None
    assert p.bound_at(js, 1.0, 4.0) == pytest.approx(math.sqrt(3))
    assert p.bound_at(js, 1.0, 4.0) == pytest.approx(completion_bound([1.0, -1.0], 1, 0.5))


def test_a_short_job_does_not_hold_the_warmup():
    """B has 6 iterations, fewer than probe (8) from its start: it is exempt (simulated to its end) and A, constant,
    ends the warm-up on its own at iteration 4."""
    p = load_policy("confident", {"target_error": 2})
    for it in range(4):
        assert p.decide(cview(0, it, 10.0 * it)) == S
        assert p.decide(cview(1, it, 10.0 * it, truth=lambda i: 10.0 + 3 * i, n=6)) == S
    assert p.jobs[1].exempt
    assert p.decide(cview(0, 4, 40.0)) == P
    assert p.decide(cview(1, 4, 40.0, truth=lambda i: 10.0 + 3 * i, n=6)) == S   # exempt: simulated to its end


@pytest.mark.parametrize("vouch, scores, want", [(2, (0.1, 0.1), P), (3, (0.1, 0.1), S), (2, (1.5, -1.5), S)])
def test_two_scores_vouch_only_for_a_near_exact_model(vouch, scores, want):
    """A trending job (never stationary) decides at iteration 3 with its model's scores on iterations 1 and 2 (too few
    completed iterations for a truth noise: sigma = 0). Scores 0.1, 0.1: b = 0.1, s = 0, bound 0.1 % <= 2 %: warm
    with ``vouch`` 2, not with 3. Scores 1.5, -1.5: b = 0, s^2 = 4.5, tau^2 = 4.5, bound 3.078 sqrt(4.5 / 2 + 4.5)
    = 8.0 % (t at 0.9 with 1 degree of freedom): not warm."""
    p = load_policy("confident", {"target_error": 2, "vouch": vouch})
    trend = lambda i: 10.0 + i   # noqa: E731
    for it in range(3):
        assert p.decide(cview(0, it, 10.0 * it, truth=trend)) == S
    signed = [(1, scores[0]), (2, scores[1])]
    assert p.decide(cview(0, 3, 30.0, truth=trend, signed=signed)) == want
    if want == S:
        assert not p.jobs[0].warmed
    else:
        assert p.jobs[0].warm_end == 3


def test_backtest_scores_count_one_iteration_each():
    """Shadow errors of warm-up iterations (the controller's backtest at the first fit) are one score each; window
    iterations that follow one another are one score."""
    p = load_policy("confident", {"target_error": 2})
    for it in range(4):
        p.decide(cview(0, it, 10.0 * it))
    assert p.decide(cview(0, 4, 40.0)) == P and p.jobs[0].warm_end == 4
    back = [(1, 0.5), (2, -0.5), (3, 0.25)]
    p.decide(cview(0, 5, 50.0, signed=back))
    assert p.jobs[0].scores == [0.5, -0.5, 0.25] and p.jobs[0].counts == [1, 1, 1]
    p.decide(cview(0, 9, 90.0, signed=back + [(7, 1.0), (8, 2.0)]))
    assert p.jobs[0].scores == [0.5, -0.5, 0.25, 1.5] and p.jobs[0].counts == [1, 1, 1, 2]


@pytest.mark.parametrize("clean", [False, True])
def test_clean_windows_wait_for_an_iteration_beside_every_job(clean):
    """A decides at 10 it, B at 10 it + 5 (both 10 ns iterations, constant). The warm-up closes at B's iteration 4
    (t=45), the next window opens at A's iteration 6 (t=60; 55 is the next opening time, A the leader) and B joins at
    65. A's iteration 6 started before B joined: not clean. With ``clean`` A needs iteration 7 (clean, from 70) done,
    so the window closes at A's decision at 80; without, every job's first window iteration suffices and B closes it
    at 75."""
    p = load_policy("confident", {"target_error": 2, "clean": clean})
    a = lambda it: cview(0, it, 10.0 * it)          # noqa: E731
    b = lambda it: cview(1, it, 10.0 * it + 5.0)    # noqa: E731
    for it in range(4):
        assert p.decide(a(it)) == S and p.decide(b(it)) == S
    assert p.decide(a(4)) == S and p.decide(b(4)) == P   # warm-up over at 45
    assert p.decide(a(5)) == P and p.decide(b(5)) == P   # before the opening time (55); B is not the leader
    assert p.decide(a(6)) == S and p.decide(b(6)) == S   # A opens at 60, B joins at 65
    if not clean:
        assert p.decide(a(7)) == S and p.decide(b(7)) == P   # each ran one window iteration: closed at 75
    else:
        assert p.decide(a(7)) == S and p.decide(b(7)) == S   # A's clean iteration 7 still running
        assert p.decide(a(8)) == P                           # closed at 80


# ------------------------------------------------------------------------------------ per-job warm-up (issue 31)
def test_per_job_warmup_predicts_a_warm_job_while_another_still_warms():
    """As in test_warmup_ends_when_every_job_is_stationary, A is constant (stationary at iteration 4) and B trends
    until its ``max_warmup`` (6). With ``shared_warmup: false`` A does not wait: the warm-up phase closes at A's
    decision at t=40 (window length A's 10 ns, no bound yet: ft 2, next opening at 50) and A is predicted; B is
    simulated throughout its own warm-up. At 50 A, the only warm job, leads a window of one iteration that B (not
    warm) does not hold open: it closes at A's decision at 60, and B, warm at 6 by max_warmup, is predicted."""
    p = load_policy("confident", {"target_error": 2, "max_warmup": 6, "shared_warmup": False, "standin_bias": 0})
    trend = lambda i: 10.0 + i   # noqa: E731
    for it in range(4):
        assert p.decide(cview(0, it, 10.0 * it)) == S and p.decide(cview(1, it, 10.0 * it, truth=trend)) == S
    assert p.decide(cview(0, 4, 40.0)) == P           # A warm: predicted at once
    assert p.phase == "forward" and p.ft == 2 and p.next_open == pytest.approx(50.0)
    assert p.decide(cview(1, 4, 40.0, truth=trend)) == S   # B still warming
    assert p.decide(cview(0, 5, 50.0)) == S and p.phase == "window"   # A's first window
    assert p.decide(cview(1, 5, 50.0, truth=trend)) == S
    assert p.decide(cview(0, 6, 60.0)) == P and p.phase == "forward"   # B does not hold it open
    assert p.next_open == pytest.approx(70.0)
    assert p.decide(cview(1, 6, 60.0, truth=trend)) == P and p.jobs[1].warm_end == 6


@pytest.mark.parametrize("n_b, alone", [(200, True), (80, True), (79, False), (None, True)])
def test_a_job_warms_up_alone_only_when_its_budget_absorbs_the_standins_bias(n_b, alone):
    """Per job with the default ``standin_bias`` 10 % and ``probe`` 8: a warm-up beside predicted co-runners may cost
    a job 10 % of 8 iterations, 80 iteration-%, against half its budget, 1 % x its iterations (target 2 %). B (trending,
    ``max_warmup`` 6) of 200 or 80 iterations (or open-ended) absorbs it: A (constant) is predicted once warm, at
    iteration 4, as in test_per_job_warmup_predicts_a_warm_job_while_another_still_warms. B of 79 does not: its
    warm-up is shared, and A waits in truth until B's max_warmup closes it at t=60, as with ``shared_warmup``."""
    p = load_policy("confident", {"target_error": 2, "max_warmup": 6, "shared_warmup": False})
    trend = lambda i: 10.0 + i   # noqa: E731
    for it in range(4):
        assert p.decide(cview(0, it, 10.0 * it)) == S and p.decide(cview(1, it, 10.0 * it, truth=trend, n=n_b)) == S
    assert p.decide(cview(0, 4, 40.0)) == (P if alone else S)
    assert p.decide(cview(1, 4, 40.0, truth=trend, n=n_b)) == S
    assert p.decide(cview(0, 5, 50.0)) == S                            # alone: A's first window; shared: waits
    assert p.decide(cview(1, 5, 50.0, truth=trend, n=n_b)) == S
    assert p.decide(cview(0, 6, 60.0)) == (P if alone else S)
    assert p.decide(cview(1, 6, 60.0, truth=trend, n=n_b)) == P         # warm by max_warmup
    assert p.phase == "forward"


def test_shared_warmup_and_standin_bias_are_checked():
    from controllers.base import PolicyError

    with pytest.raises(PolicyError, match="shared_warmup must be true or false, got 1"):
        load_policy("confident", {"shared_warmup": 1})
    with pytest.raises(PolicyError, match="standin_bias must be >= 0"):
        load_policy("confident", {"standin_bias": -1})
    with pytest.raises(PolicyError, match="standin_bias must be a finite number"):
        load_policy("confident", {"standin_bias": "ten"})


def prefix_per_job(p, sa, sb):
    """:func:`prefix` with ``shared_warmup: false``: A, warm at iteration 4, is predicted there instead of waiting for
    B (same opening times: 50, 70); the rest is the same schedule."""
    for it in range(4):
        assert p.decide(cview(0, it, 10.0 * it)) == S and p.decide(cview(1, it, 10.0 * it)) == S
    assert p.decide(cview(0, 4, 40.0)) == P and p.decide(cview(1, 4, 40.0)) == P
    assert p.ft == 2 and p.next_open == pytest.approx(50.0)
    assert p.decide(cview(0, 5, 50.0)) == S and p.decide(cview(1, 5, 50.0)) == S
    assert p.decide(cview(0, 6, 60.0, signed=[(5, sa[0])])) == S
    assert p.decide(cview(1, 6, 60.0, signed=[(5, sb[0])])) == P
    assert p.ft == 2 and p.next_open == pytest.approx(70.0)
    assert p.decide(cview(0, 7, 70.0, signed=[(5, sa[0])])) == S and p.decide(cview(1, 7, 70.0)) == S
    assert p.decide(cview(0, 8, 80.0, signed=[(5, sa[0]), (7, sa[1])])) == S
    assert p.decide(cview(1, 8, 80.0, signed=[(5, sb[0]), (7, sb[1])])) == P


SA, SB = (1.0, 1.0), (0.5, 0.5)   # coverage 0.5, budget 0.9: A's B(1) = 1 % (unsure), B's 0.5 % (sure)


@pytest.mark.parametrize("shared", [True, False])
def test_a_start_gives_an_own_window_only_to_the_unsure_job(shared):
    """Budget 0.9 %, coverage 0.5: A's scores 1 1 (bias 1, no spread: B(1) = 1 %, over), B's 0.5 0.5 (0.5 %,
    within). A's gap: (ft - 1) / ft <= 0.9 gives ft 10, B's any: next window at 80 + 9 * 10 = 170. C arrives at 90
    (simulated for its own warm-up either way). Shared: not every job is sure, so A, the leader, opens a window for
    everyone at 90 and B joins it. Per job: A alone gets a truth window of its own (one iteration, then predicted
    again); B's promise stands, and B stays predicted."""
    p = load_policy("confident", {"target_error": 0.9, "coverage": 0.5, "shared_warmup": shared, "standin_bias": 0})
    (prefix if shared else prefix_per_job)(p, SA, SB)
    assert p.ft == 10 and p.next_open == pytest.approx(170.0)
    assert p.standing(0, 170.0) == pytest.approx(170.0) and p.standing(1, 170.0) == pytest.approx(170.0)
    assert p.decide(cview(2, 0, 90.0, running=(0, 1, 2))) == S
    if shared:
        assert p.standing(1, 170.0) == pytest.approx(90.0)   # the window moved up: every promise ends
        assert p.decide(cview(0, 9, 90.0, running=(0, 1, 2))) == S and p.phase == "window"
        assert p.decide(cview(1, 9, 90.0, running=(0, 1, 2))) == S
    else:
        assert p.standing(0, 170.0) == -math.inf and p.standing(1, 170.0) == pytest.approx(170.0)
        assert p.decide(cview(0, 9, 90.0, running=(0, 1, 2))) == S and p.phase == "forward"   # its own window
        assert p.decide(cview(1, 9, 90.0, running=(0, 1, 2))) == P
        assert p.decide(cview(0, 10, 100.0, running=(0, 1, 2))) == P   # one iteration (truth = 1), then predicted
        assert p.next_open == pytest.approx(170.0)


@pytest.mark.parametrize("target, want_b", [(2.0, P), (0.9, S)])
def test_a_corunner_end_gives_an_own_window_per_job(target, want_b):
    """Per job, A leaves at t=90 and B's co-runners change: within budget 2 % (B(1) 0.5 %) B stays predicted; at
    0.9 % with B's scores 1 1 (B(1) 1 %) B gets one truth iteration of its own and is predicted again; no window
    opens (the next stays at 170)."""
    p = load_policy("confident", {"target_error": target, "coverage": 0.5, "shared_warmup": False, "standin_bias": 0})
    prefix_per_job(p, SA, SA if target < 1 else SB)
    nxt = p.next_open
    assert p.decide(cview(1, 9, 90.0, running=(1,))) == want_b
    assert p.decide(cview(1, 10, 100.0, running=(1,))) == P and p.phase == "forward" and p.next_open == nxt


def test_a_job_starting_mid_run_does_not_hold_a_window_per_job():
    """Per job, C (trending: never stationary before max_warmup 32) arrives at 90 while A and B are sure (budget
    2 %): no window opens. The next shared window (A leads at its opening time) closes after one iteration of A
    and B while C, still warming, is simulated beside it and holds nothing."""
    p = load_policy("confident", {"target_error": 2.0, "coverage": 0.5, "shared_warmup": False, "max_ft": 4,
                                  "standin_bias": 0})
    prefix_per_job(p, SA, SB)
    assert p.ft == 4 and p.next_open == pytest.approx(110.0)   # 80 + 3 * 10
    trend = lambda i: 10.0 + i   # noqa: E731
    run = (0, 1, 2)
    assert p.decide(cview(2, 0, 90.0, running=run)) == S and p.next_open == pytest.approx(110.0)
    assert p.decide(cview(0, 9, 90.0, running=run)) == P and p.decide(cview(1, 9, 90.0, running=run)) == P
    assert p.decide(cview(2, 1, 100.0, truth=trend, running=run)) == S
    assert p.decide(cview(0, 11, 110.0, running=run)) == S and p.phase == "window"
    assert p.decide(cview(1, 11, 110.0, running=run)) == S
    assert p.decide(cview(2, 2, 110.0, truth=trend, running=run)) == S
    assert p.decide(cview(0, 12, 120.0, running=run)) == S
    assert p.decide(cview(1, 12, 120.0, running=run)) == P and p.phase == "forward"   # C held nothing
    assert p.decide(cview(2, 3, 120.0, truth=trend, running=run)) == S and not p.jobs[2].warmed


def test_a_job_warm_on_its_own_gets_its_first_window_soon():
    """Per job (``standin_bias`` 0), budget 2 %, coverage 0.5, ``max_ft`` 32: after the prefix A's and B's bounds
    allow any gap, so the next window is at 80 + 31 * 10 = 390 (the last window was 10 ns long). C (constant, 100
    iterations) arrives at 90 and warms up alone, stationary at its iteration 4 (t=130). Its model was fitted on
    truth beside predicted co-runners and has no score yet: the next window moves to 130 + (min_ft - 1) * 10 = 140,
    where A, the leader, opens it."""
    p = load_policy("confident", {"target_error": 2.0, "coverage": 0.5, "shared_warmup": False, "max_ft": 32,
                                  "standin_bias": 0})
    prefix_per_job(p, SA, SB)
    assert p.ft == 32 and p.next_open == pytest.approx(390.0)
    run = (0, 1, 2)
    for k in range(4):
        t = 90.0 + 10 * k
        assert p.decide(cview(0, 9 + k, t, running=run)) == P and p.decide(cview(1, 9 + k, t, running=run)) == P
        assert p.decide(cview(2, k, t, running=run)) == S
    assert p.next_open == pytest.approx(390.0)
    assert p.decide(cview(0, 13, 130.0, running=run)) == P and p.decide(cview(1, 13, 130.0, running=run)) == P
    assert p.decide(cview(2, 4, 130.0, running=run)) == P and p.jobs[2].warm_end == 4
    assert p.next_open == pytest.approx(140.0)
    assert p.decide(cview(0, 14, 140.0, running=run)) == S and p.phase == "window"


def test_largest_ft_is_the_largest_ft_that_passes_one_by_one():
    """``largest_ft`` computes every ft's test at once; it is the first ft, from ``max_ft`` down, whose
    (ft - 1) / ft * bound(windows / ft stretches of (ft - 1) x per-window iterations) is within the budget, found one
    ft at a time here from the policy's own bound, over random windows, noise, scores (some a single one: no bound
    yet), unbounded jobs and NaN lengths."""
    import random

    from controllers.builtin import _ConfSlot

    rnd = random.Random(3)
    for _ in range(3000):
        p = load_policy("confident", {"target_error": rnd.choice([0.5, 1, 2, 4, 8]), "min_ft": rnd.choice([2, 3]),
                                      "max_ft": rnd.choice([16, 64, 256])})
        js = _ConfSlot(0)
        k = rnd.randint(1, 10)
        js.scores = [rnd.gauss(rnd.uniform(-3, 3), rnd.uniform(0, 4)) for _ in range(k)]
        js.counts = [rnd.randint(1, 20) for _ in range(k)]
        js.noise = rnd.choice([None, 0.0, rnd.uniform(0, 10)])
        js.per_window = rnd.choice([1.0, 3.0, rnd.uniform(1, 10)])
        windows = rnd.choice([math.inf, math.nan, 0.0, float(rnd.randint(1, 500)), rnd.uniform(0, 2000)])
        terms = p._terms(js)
        want = p.min_ft
        if terms is not None:
            for ft in range(p.max_ft, p.min_ft - 1, -1):
                if (ft - 1) / ft * p._bound(terms, windows / ft, (ft - 1) * js.per_window) <= p.target:
                    want = ft
                    break
        assert p.largest_ft(js.scores, windows, js) == want
