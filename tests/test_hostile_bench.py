"""Hostile and careless ``hybridsim bench`` options (issue 35, items 2 and 8): every bad ``--policy``,
``--surrogate``, ``--baseline``, ``--sweep-ft`` or ``--seeds`` value, and every backend refusal, is a clean exit 2
that names the option, found by the preflight before the pure run: no bench directory is written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hybridsim.cli import main

TINY = """\
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 3, workload: {kind: allreduce, size: 1024}}
"""

#: name -> (options, fragments of the message)
CASES = {
    "policy_typo": (["--policy", "periodc"], ["--policy periodc", "unknown policy 'periodc'"]),
    "target_error_0": (["--policy", "confident:target_error=0"], ["--policy confident:target_error=0",
                                                                  "target_error"]),
    "policy_ft_0": (["--policy", "periodic:ft=0"], ["--policy periodic:ft=0", "ft must be"]),
    "policy_missing_module": (["--policy", "no_such_module_h4:P"], ["--policy no_such_module_h4:P",
                                                                     "No module named"]),
    "policy_unknown_param": (["--policy", "periodic:fft=4"], ["--policy periodic:fft=4", "'fft'"]),
    "policy_value_not_yaml": (["--policy", "periodic:ft=["], ["--policy 'periodic:ft=['", "not a YAML scalar"]),
    "sweep_ft_0": (["--sweep-ft", "4,0"], ["--sweep-ft", "got 0"]),
    "sweep_ft_1": (["--sweep-ft", "1"], ["--sweep-ft 1", "ft must be"]),
    "sweep_ft_huge": (["--sweep-ft", "99999999999999999999"], ["--sweep-ft 99999999999999999999"]),
    "sweep_ft_word": (["--sweep-ft", "four"], ["--sweep-ft expects integers"]),
    "surrogate_typo": (["--surrogate", "ridg"], ["--surrogate ridg", "unknown surrogate model"]),
    "surrogate_option": (["--surrogate", "lstm:hidden=0"], ["--surrogate lstm:hidden=0"]),
    "baseline_typo": (["--seeds", "2", "--baseline", "nope"], ["--baseline nope", "unknown surrogate model"]),
    "seeds_1e9": (["--seeds", "1000000000"], ["--seeds 1000000000", "from 1 to 100"]),
    "seeds_0": (["--seeds", "0"], ["--seeds 0", "from 1 to 100"]),
    "seeds_negative": (["--seeds", "-3"], ["--seeds -3"]),
    "seeds_with_pure": (["--seeds", "2", "--pure", "."], ["--pure judges against one pure run"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_option_refused_before_the_pure_run(tmp_path, capsys, monkeypatch, name):
    import hybridsim.runner as runner

    def no_run(*_a, **_k):  # the preflight must refuse before any simulation
        raise AssertionError("a run was started before the options were checked")

    monkeypatch.setattr(runner, "run_scenario", no_run)
    sc = tmp_path / "s.yaml"
    sc.write_text(TINY)
    out = tmp_path / "b"
    args, fragments = CASES[name]
    rc = main(["bench", str(sc), "-o", str(out), "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    for frag in fragments:
        assert frag in err, f"{frag!r} not in {err!r}"
    assert "Traceback" not in err
    assert not out.exists()


def test_the_scenarios_own_bad_controller_is_refused_before_the_pure_run(tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    sc.write_text(TINY + "controller: {policy: periodic, params: {ft: 0}}\n")
    rc = main(["bench", str(sc), "-o", str(tmp_path / "b"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "the scenario's controller section" in err and "ft must be" in err, err
    assert not (tmp_path / "b").exists()


def test_codes_refusal_comes_before_any_codes_run(tmp_path, capsys):
    """What the CODES director cannot honour (here optimistic CODES; a policy without a plan-ahead form likewise,
    tests/test_codes_standin.py) is said before the pure and floor CODES runs; the default policy, confident, has a
    plan-ahead form and is not refused (tests/test_policy_ahead.py)."""
    sc = tmp_path / "s.yaml"
    sc.write_text(TINY + "backend: {kind: codes, codes: {synch: optimistic, np: 2}}\n")
    rc = main(["bench", str(sc), "-o", str(tmp_path / "b"), "--no-progress", "--policy", "confident"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--policy confident: backend codes refuses hybrid mode" in err and "synch: optimistic" in err
    assert not (tmp_path / "b").exists()


def test_preflight_returns_the_surrogates_with_the_baselines():
    from hybridsim.bench import BenchOptionError, preflight
    from hybridsim.scenario import parse_scenario

    sc = parse_scenario(TINY)
    assert preflight(sc, surrogates=["ridge"], seeds=3) == ["ridge", "last", "mean"]
    assert preflight(sc, surrogates=None, seeds=1) is None
    with pytest.raises(BenchOptionError, match="--seeds 101"):
        preflight(sc, seeds=101)
    with pytest.raises(BenchOptionError, match="--seeds True"):
        preflight(sc, seeds=True)
    with pytest.raises(BenchOptionError, match="--sweep-ft: every Ft"):
        preflight(sc, sweep_ft=[-1])
    # the zero-shot end of a sweep is a case of its own: the scenario's warm-up goes to the warm-up-only policy
    bad = sc.model_copy(deep=True)
    bad.controller.policy, bad.controller.params = "periodic", {"ft": 4, "warmup": -2}
    with pytest.raises(BenchOptionError, match="--sweep-ft 8"):
        preflight(bad, policies=[("pdes", {})], sweep_ft=[8])
