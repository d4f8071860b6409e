"""The stand-in for a predicted job's traffic on CODES (``backend.codes.standin``; docs/codes.md section 3): the
scenario option and its validation, the ``DIRECTOR/standin`` key the bridge writes for each value, and the check that
the CODES build really started the stand-in (an unpatched CODES ignores the key and would drop the traffic
silently). CODES is replaced by the launcher tests' stand-in executable; the stand-in's effect on a real CODES is
measured in tests/codes_live and benchmarks/RESULTS_codes_hybrid.md."""

from __future__ import annotations

import pytest

from codes_bridge.hybrid import (STANDIN_BANNER, STANDIN_BANNERS, STANDIN_MODES, check_standin,
                                 director_section, executable_has_standin)
from codes_bridge.writers import parse_conf
from hybridsim.scenario import Scenario, ScenarioError, load_scenario

from test_codes_hybrid import _scenario, _standin
from test_codes_launcher_standins import bins  # noqa: F401  (fixture)


def _with_standin(sc: Scenario, value: str) -> Scenario:
    d = sc.model_dump(mode="json", exclude_none=True)
    d["backend"]["codes"]["standin"] = value
    return Scenario.model_validate(d)


@pytest.mark.parametrize("value", ["replay", "load", "none"])
def test_director_section_writes_the_standin_key(value):
    assert director_section([(8, 20)], standin=value)["standin"] == value
    assert director_section([], standin=value)["standin"] == value  # the floor run's section too


def test_director_section_writes_the_scale_of_a_replay_or_load_only():
    assert director_section([(8, 20)], standin="replay", standin_scale=0.5)["standin_scale"] == "0.5"
    assert director_section([(8, 20)], standin="replay")["standin_scale"] == "1.0"
    assert director_section([(8, 20)], standin="load", standin_scale=0.25)["standin_scale"] == "0.25"
    assert "standin_scale" not in director_section([(8, 20)], standin="none", standin_scale=0.5)
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"standin_scale must be in \(0, 1\]"):
            director_section([(8, 20)], standin="replay", standin_scale=bad)


def test_director_section_refuses_an_unknown_standin():
    with pytest.raises(ValueError, match="standin must be one of replay, load, none, got 'replay '"):
        director_section([(8, 20)], standin="replay ")
    assert STANDIN_MODES == ("replay", "load", "none")


def test_scenario_standin_values_and_default():
    sc = _scenario(None, "mpirun")
    assert (sc.backend.codes.standin, sc.backend.codes.standin_scale) == ("load", 1.0)
    assert _with_standin(sc, "none").backend.codes.standin == "none"
    assert _with_standin(sc, "load").backend.codes.standin == "load"


@pytest.mark.parametrize("bad", ["Replay", "drop", "", 1])
def test_scenario_refuses_a_bad_standin_with_the_choices(bad, tmp_path):
    text = ("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
            "jobs: [{name: milc, ranks: 8, iterations: 4, workload: {kind: milc, dimension_sizes: [2, 2, 2]}}]\n"
            f"backend: {{kind: codes, codes: {{standin: {bad!r}}}}}\n")
    with pytest.raises(ScenarioError, match=r"backend\.codes\.standin.*'replay'.*'none'"):
        (tmp_path / "s.yaml").write_text(text)
        load_scenario(tmp_path / "s.yaml")


@pytest.mark.parametrize("bad", [0, 1.5, -1])
def test_scenario_refuses_a_standin_scale_outside_0_1(bad):
    d = _scenario(None, "mpirun").model_dump(mode="json", exclude_none=True)
    d["backend"]["codes"]["standin_scale"] = bad
    with pytest.raises(ValueError, match="standin_scale"):
        Scenario.model_validate(d)


def test_a_pure_run_is_the_same_whatever_the_standin_says():
    """``bench --pure`` judges a scenario's stand-in settings against one pure run: the stand-in keys are hybrid-only,
    every other key still tells two scenarios apart."""
    from hybridsim.pure_run import _pure_relevant
    from hybridsim.scenario import scenario_to_dict

    sc = _scenario(None, "mpirun")
    a = scenario_to_dict(sc)
    b = scenario_to_dict(_with_standin(sc, "replay"))
    b["backend"]["codes"]["standin_scale"] = 0.5
    assert a != b and _pure_relevant(a) == _pure_relevant(b)
    c = scenario_to_dict(sc)
    c["backend"]["codes"]["timeout"] = 1.0
    assert _pure_relevant(a) != _pure_relevant(c)


def test_check_standin_reads_the_banner():
    assert check_standin("x\n" + STANDIN_BANNER + " (predicted ranks ...)\n", "replay") is None
    assert check_standin("no banner here", "none") is None
    why = check_standin("ROSS banner only", "replay")
    assert why is not None and "0001-standin-traffic.patch" in why and "standin: none" in why
    # each stand-in has its own banner: a replay banner does not prove the load patch
    assert check_standin("stand-in traffic: load (predicted jobs hold ...)\n", "load") is None
    why = check_standin(STANDIN_BANNER + "\n", "load")
    assert why is not None and "0002-standin-load.patch" in why


def _hybrid(b, mpirun, standin):
    sc = _scenario(b, mpirun, controller={"policy": "surrogate", "params": {"warmup": 8}},
                   surrogate={"model": "mean"})
    return _with_standin(sc, standin)


@pytest.mark.parametrize("standin", ["replay", "load", "none"])
def test_hybrid_run_writes_the_key_and_a_patched_codes_runs(bins, tmp_path, codes_data, standin):
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq")   # patched: prints the banner when asked to replay
    _, _, summary = run_scenario(_hybrid(b, mpirun, standin), tmp_path / "run", mode="hybrid", progress=False)
    conf = parse_conf((tmp_path / "run" / "codes" / "dfdally-72.conf").read_text())
    assert conf["DIRECTOR"]["standin"] == standin
    out = (tmp_path / "run" / "codes" / "model-output.txt").read_text()
    assert (STANDIN_BANNER in out) == (standin == "replay")
    assert (STANDIN_BANNERS["load"] in out) == (standin == "load")
    assert summary["backend_stats"]["director"]["windows"] == [[8, 20]]
    assert summary["standin"] == ({"mode": standin} if standin == "none" else {"mode": standin, "scale": 1.0})


def test_hybrid_run_refuses_a_codes_without_the_patch(bins, tmp_path, codes_data):
    """An unpatched CODES ignores DIRECTOR/standin: the run must not pass for one with the stand-in. It is refused
    before any run directory exists (the backend's hybrid refusal, which validate and bench ask too)."""
    from codes_bridge.backend import CodesBackend
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq", patched=False)
    with pytest.raises(ScenarioError, match="cannot stand in: it lacks hybridsim's patch"):
        run_scenario(_hybrid(b, mpirun, "replay"), tmp_path / "run", mode="hybrid", progress=False)
    assert not (tmp_path / "run").exists()  # refused before CODES ran, before any run directory
    # nothing predicted (pdes): nothing to stand in for, so the unpatched CODES is fine
    pdes = _hybrid(b, mpirun, "replay")
    pdes.controller.policy, pdes.controller.params = "pdes", {}
    assert CodesBackend.hybrid_refusal(pdes) is None
    # with the stand-in off the same CODES is fine
    assert CodesBackend.hybrid_refusal(_hybrid(b, mpirun, "none")) is None
    run_scenario(_hybrid(b, mpirun, "none"), tmp_path / "run2", mode="hybrid", progress=False)


def test_executable_check_reads_the_banner_in_the_binary(tmp_path):
    (tmp_path / "patched").write_bytes(b"\x7fELF\x00..." + STANDIN_BANNER.encode() + b" (predicted ranks %g)\x00")
    (tmp_path / "stock").write_bytes(b"\x7fELF\x00 tw_error DIRECTOR start_iter\x00")
    (tmp_path / "empty").write_bytes(b"")
    assert executable_has_standin(tmp_path / "patched")
    assert not executable_has_standin(tmp_path / "stock") and not executable_has_standin(tmp_path / "empty")


@pytest.mark.parametrize("case", ["live-only-policy", "unpatched"])
def test_bench_refuses_what_codes_cannot_honour_before_any_codes_run(bins, tmp_path, codes_data, case,
                                                                    live_only_policy):
    """``hybridsim bench`` on CODES asks the backend's hybrid refusal of every policy case before it runs anything:
    a policy that follows the run and has no plan-ahead form (a plug-in here; the default, confident, has one) or a
    stand-in the CODES build lacks is refused with exit 2 and a policy or setting that works named, before pure
    CODES or the floor run starts (the stand-in CODES would write standin-argv.json in any run folder it ran in) and
    before the bench directory exists."""
    import subprocess
    import sys

    import yaml

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq", patched=case != "unpatched")
    d = _hybrid(b, mpirun, "replay").model_dump(mode="json", exclude_none=True)
    extra = []
    if case == "live-only-policy":
        d["controller"] = {"policy": live_only_policy}
        extra = ["--plugin-path", str(tmp_path)]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d))
    run = subprocess.run([sys.executable, "-m", "hybridsim", "bench", str(f), "-o", str(tmp_path / "out"),
                          "--no-progress", *extra], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "before any run" in run.stderr
    if case == "live-only-policy":
        assert "controller.policy: liveonly:LiveOnly" in run.stderr and "the default, confident" in run.stderr
    else:
        assert "cannot stand in" in run.stderr and "standin: none" in run.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.rglob("standin-argv.json"))  # CODES never started
