"""Plan-ahead forms (``Policy.ahead``, controllers/ahead.py): what a policy decides when every decision is fixed
before the run, as CODES' director needs. ``confident``'s form is checked against hand-written schedules; the CODES
bridge plans the default policy's windows from it and runs hybrid with it (CODES replaced by the launcher tests'
stand-in executable), or says in one line why it runs the truth."""

from __future__ import annotations

import pytest

from controllers import load_policy
from controllers.ahead import ConfidentAhead
from controllers.base import JobView, Policy, ahead_form
from hybridsim_common.backend import Mode

from test_codes_hybrid import _scenario, _standin
from test_codes_launcher_standins import bins  # noqa: F401  (fixture)

S, P = Mode.SIMULATE, Mode.PREDICT


def _schedule(policy: Policy, n: int) -> str:
    """The policy's decisions for a lone job of ``n`` iterations, asked in order (S / P per iteration)."""
    out = []
    for i in range(n):
        view = JobView(job="j", job_id=0, iteration=i, n_iterations=n, mode=None, modes=(), truth=(),
                       predicted=(), errors=())
        out.append("P" if Mode(policy.decide(view)) == P else "S")
    return "".join(out)


def test_confident_ahead_warms_up_for_probe_iterations_then_predicts_to_the_end():
    form = ConfidentAhead(probe=8)
    assert _schedule(form, 20) == "S" * 8 + "P" * 12
    assert _schedule(form, 16) == "S" * 8 + "P" * 8         # a stretch as long as the warm-up: predicted
    assert _schedule(form, 15) == "S" * 15                  # 7 after the warm-up, fewer than probe: exempt
    assert _schedule(ConfidentAhead(probe=3), 7) == "SSSPPPP"
    assert form.why_simulated("lammps", 12) == ("lammps: 12 iterations, fewer than 2 x probe = 16 (a warm-up of 8 "
                                                "and a predicted stretch at least as long)")
    assert form.why_simulated("milc", 20) is None
    assert "open-ended" in form.why_simulated("x", None)


def test_the_default_policy_has_a_plan_ahead_form_with_its_own_parameters():
    live = load_policy("confident", {"target_error": 3.5, "probe": 5})
    assert not live.plans_ahead   # its live schedule follows measured errors
    form = live.ahead()
    assert isinstance(form, ConfidentAhead) and (form.target, form.probe) == (3.5, 5)
    assert form.plans_ahead and form.ahead() is form
    # a fixed-schedule policy is its own form; one that follows the run without a form has none
    periodic = load_policy("periodic", {})
    assert periodic.ahead() is periodic and ahead_form(periodic) is periodic

    class LiveOnly(Policy):
        plans_ahead = False

        def decide(self, view):
            return S

    class Duck:   # duck-typed: no ahead(), says it cannot plan ahead
        plans_ahead = False

        def decide(self, view):
            return S

    assert LiveOnly().ahead() is None and ahead_form(LiveOnly()) is None and ahead_form(Duck()) is None


@pytest.mark.parametrize("shared", [True, False])
def test_the_plan_ahead_warm_up_is_per_job_with_either_warm_up_setting(shared):
    """Two jobs dry-run together, A of 20 iterations, B of 40 at half A's iteration length: each is simulated for its
    own ``probe`` (4) iterations and predicted after, whether the live policy's warm-up is shared or not."""
    form = load_policy("confident", {"probe": 4, "shared_warmup": shared}).ahead()
    assert isinstance(form, ConfidentAhead) and form.probe == 4
    views = sorted([(10.0 * i, 0, i, 20) for i in range(20)] + [(5.0 * i, 1, i, 40) for i in range(40)])
    got = {0: "", 1: ""}
    for now, jid, it, n in views:
        view = JobView(job=f"j{jid}", job_id=jid, iteration=it, n_iterations=n, mode=None, modes=(), truth=(),
                       predicted=(), errors=(), now=now, running=(0, 1))
        got[jid] += "P" if Mode(form.decide(view)) == P else "S"
    assert got == {0: "S" * 4 + "P" * 16, 1: "S" * 4 + "P" * 36}


def test_the_live_confident_decides_as_before():
    """The plan-ahead form is beside confident's live decisions, not in them: a lone job's first iterations under
    the live policy (nothing measured yet) are simulated, as confident always did."""
    live = load_policy("confident", {})
    assert _schedule(live, 4) == "SSSS"


def test_default_policy_plans_codes_windows_from_its_form(bins, tmp_path):
    from codes_bridge.hybrid import plan_director

    b, mpirun = bins
    plan = plan_director(_scenario(b, mpirun))   # no controller section: confident
    assert plan.plan == [[S] * 8 + [P] * 12] and plan.windows == [(8, 20)] and plan.mismatch == {"milc": []}


def test_default_policy_runs_hybrid_on_codes(bins, tmp_path, codes_data):
    from codes_bridge.writers import parse_conf
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq")
    _, _, summary = run_scenario(_scenario(b, mpirun, surrogate={"model": "mean"}), tmp_path / "run",
                                 mode="hybrid", progress=False)
    conf = parse_conf((tmp_path / "run" / "codes" / "dfdally-72.conf").read_text())
    assert (conf["DIRECTOR"]["start_iter"], conf["DIRECTOR"]["end_iter"]) == ("7", "19")
    assert summary["backend_stats"]["director"]["windows"] == [[8, 20]]
    assert "truth_only" not in summary["backend_stats"]["director"]


def test_default_policy_on_jobs_too_short_says_in_one_line_that_it_runs_the_truth(bins, tmp_path, codes_data,
                                                                                capfd):
    from codes_bridge.writers import parse_conf
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq", client=False)
    sc = _scenario(b, mpirun)
    sc.jobs[0].iterations = 12   # 8 warm-up + 4: fewer than probe after it
    _, _, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "predicts nothing CODES can predict" in ln]
    assert len(lines) == 1 and "milc: 12 iterations, fewer than 2 x probe = 16" in lines[0]
    assert "DIRECTOR" not in parse_conf((tmp_path / "run" / "codes" / "dfdally-72.conf").read_text())
    assert summary["backend_stats"]["director"]["windows"] == []
    assert summary["backend_stats"]["director"]["truth_only"] == lines[0].removeprefix("codes: ")


def test_a_policy_that_predicts_nothing_says_so_too(bins, tmp_path, codes_data, capfd):
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq", client=False)
    run_scenario(_scenario(b, mpirun, controller={"policy": "pdes"}), tmp_path / "run", mode="hybrid",
                 progress=False)
    err = capfd.readouterr().err
    assert "controller.policy pdes predicts nothing CODES can predict" in err
    assert "milc: simulated throughout by the policy" in err
