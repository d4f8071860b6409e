"""SWF reader (real NASA iPSC/860 trace, broken lines) and ``hybridsim scenario-from-swf``."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from hybridsim.cli import main
from hybridsim.cli_streams import flow_yaml
from hybridsim.scenario import Job, parse_scenario
from hybridsim.swf import (SwfError, SwfMapping, fit_ranks, format_duration, grid_dims, map_jobs, parse_swf,
                           read_swf, smooth_below)

REPO = Path(__file__).resolve().parents[1]
SYS72 = REPO / "examples" / "hybrid-72-long.yaml"


def _line(*vals):
    """An SWF job line: the given leading fields, -1 for the rest."""
    return " ".join(str(v) for v in list(vals) + [-1] * (18 - len(vals)))


@pytest.fixture(scope="module")
def nasa(swf_trace):
    return read_swf(swf_trace)


# ---------------------------------------------------------------------------------------------------------- reader
def test_reads_the_real_trace(nasa):
    # the README: 18,239 jobs, 128 processors; counts below from awk over the file
    assert nasa.jobs.shape == (18239, 18)
    assert len(nasa.header) == 32 and nasa.header[0] == "; Version: 2.2"
    assert nasa.max_procs == 128 and nasa.keys["Computer"] == "Intel iPSC/860"
    assert nasa.jobs[0].tolist() == [1, 0, -1, 1451, 128, -1, -1, -1, -1, -1, -1, 1, 1, -1, -1, -1, -1, -1]
    assert nasa.lines[0] == 33 and nasa.lines[-1] == 32 + 18239
    sizes, counts = np.unique(nasa.col("procs"), return_counts=True)
    assert dict(zip(sizes.astype(int).tolist(), counts.tolist())) == {
        1: 4935, 2: 1763, 4: 2683, 8: 1793, 16: 1780, 32: 3662, 64: 1203, 128: 420}
    assert nasa.col("run").max() == 62643 and (nasa.col("req_time") == -1).all()


def test_broken_lines_are_reported_by_number(tmp_path):
    text = "\n".join(["; Version: 2.2", "; MaxProcs: 8", _line(1, 0, -1, 10, 4),
                      _line(2, 5, -1, 10)[:-3],                                 # 17 fields
                      "", _line(3, 6, -1, "abc", 2), _line(4, 7, -1, 5, 2) + " 9",  # not a number; 19 fields
                      _line(5, 8, -1, 5, 2)])
    f = tmp_path / "bad.swf"
    f.write_text(text)
    with pytest.raises(SwfError) as ei:
        read_swf(f)
    assert ei.value.problems == [f"{f}:4: expected 18 fields, got 17",
                                 f"{f}:6: field 4 (run) is not a number: 'abc'",
                                 f"{f}:7: expected 18 fields, got 19"]
    assert str(ei.value).startswith(f"{f}: 3 malformed job line(s)")
    with pytest.raises(SwfError, match=r"2 malformed job line\(s\) \(and 1 more\)"):
        parse_swf("\n".join(["x"] * 2 + [_line(1, 0)]), "t.swf", max_problems=1)
    with pytest.raises(SwfError, match="no job lines"):
        parse_swf("; only a header\n", "t.swf")
    with pytest.raises(SwfError, match="no such file"):
        read_swf(tmp_path / "missing.swf")


# ---------------------------------------------------------------------------------------------------------- shapes
def test_rank_counts_and_grids():
    assert smooth_below(20) == [1, 2, 3, 4, 6, 8, 9, 12, 16, 18]
    assert grid_dims(512, 4) == [4, 4, 4, 8] and grid_dims(1024, 3) == [8, 8, 16] and grid_dims(72, 3) == [3, 4, 6]
    assert grid_dims(1, 4) == [1, 1, 1, 1]
    assert fit_ranks("milc", 128 * 8.25, 1056) == 1024   # 1056 -> nearest 2^a 3^b <= 1056
    assert fit_ranks("nn", 33, 1056) == 32 and fit_ranks("nn", 0.5625, 72) == 1
    assert fit_ranks("milc", 5, 72) == 4                  # tie 4 / 6 -> the smaller
    assert fit_ranks("uniform-random", 0.5625, 72) == 2   # a rank needs another to send to
    assert fit_ranks("lammps", 128 * 0.5625, 72) == 72


def test_lammps_check_is_the_workloads_own():
    from hybridsim.workloads.base import WorkloadError
    from hybridsim.workloads.lammps import LammpsModel, decomposition_problem

    msg = decomposition_problem(41, 1, 1, 1)  # a prime: 41 subdomains in one dimension, thinner than the cutoff
    assert msg and "FFT cutoff" in msg and decomposition_problem(40, 1, 1, 1) is None
    with pytest.raises(WorkloadError) as ei:
        LammpsModel(41, 1, 1, 1, 800e6, 4e9, 1e6)
    assert str(ei.value) == msg


def test_format_duration():
    assert [format_duration(x) for x in (0, 250, 1000, 25574e3, 1.46e6, 2e9, 1234.5)] == \
        ["0ns", "250ns", "1us", "25.574ms", "1.46ms", "2s", "1234.5ns"]


# ---------------------------------------------------------------------------------------------------------- mapping
def _trace(tmp_path):
    text = "\n".join(["; MaxProcs: 16",
                      _line(10, 100, -1, 50, 16),                       # 0 s after the first submit
                      _line(11, 130, -1, 20, 4, -1, -1, -1, 40),       # requested time 40 s
                      _line(12, 160, -1, -1, 4),                        # unknown run time: skipped
                      _line(13, 200, -1, 9, -1, -1, -1, 2),            # size from requested processors
                      _line(14, 500, -1, 1, 1)])
    f = tmp_path / "t.swf"
    f.write_text(text + "\n")
    return read_swf(f)


def test_map_jobs_by_hand(tmp_path):
    tr = _trace(tmp_path)
    m = SwfMapping(time_scale=1e3, templates=("milc", "nn"), assign="cycle",
                   iteration_time={"milc": 10e3, "nn": 4e3}, walltime_factor=2.0)
    jobs, stream, sel, scales = map_jobs(tr, 72, m)
    assert sel.skipped == {"unknown or zero run time": 1}
    assert scales["size_scale"] == 72 / 16 and scales["slowdown_tau"] == 10e3
    # job 10: 16 procs x 4.5 = 72 ranks, milc; 50 s -> 50 us / 10 us = 5 iterations; walltime 2 x 5 x 10 us
    assert jobs[0] == {"name": "j10-milc", "ranks": 72, "iterations": 5, "arrival": "0ns", "walltime": "100us",
                       "workload": {"kind": "milc", "dimension_sizes": [2, 3, 3, 4], "msg_size": 49152}}
    # job 11: 4 x 4.5 = 18 ranks, nn; 20 us / 4 us = 5 iterations; arrival 30 us; walltime = requested 40 s -> 40 us
    assert jobs[1] == {"name": "j11-nn", "ranks": 18, "iterations": 5, "arrival": "30us", "walltime": "40us",
                       "workload": {"kind": "nearest_neighbor", "dimension_sizes": [2, 3, 3], "msg_size": 32768}}
    # job 13: 2 requested processors -> 9 ranks; 9 us / 10 us -> 1 iteration (at least one)
    assert (jobs[2]["name"], jobs[2]["ranks"], jobs[2]["iterations"], jobs[2]["arrival"]) == ("j13-milc", 9, 1,
                                                                                             "100us")
    assert [j.run_time for j in stream] == [50e3, 20e3, 10e3, 4e3]
    assert [j.walltime for j in stream] == [100e3, 40e3, 20e3, 8e3]
    for j in jobs:  # less the stream fields, each is a valid scenario job today
        Job.model_validate({k: v for k, v in j.items() if k not in ("arrival", "walltime")})


def test_slices_and_rules(tmp_path):
    tr = _trace(tmp_path)
    names = lambda m: [j["name"].split("-")[0] for j in map_jobs(tr, 72, m)[0]]  # noqa: E731
    assert names(SwfMapping(from_job=11)) == ["j11", "j13", "j14"]
    assert names(SwfMapping(jobs=2)) == ["j10", "j11"]
    assert names(SwfMapping(window=(30, 100))) == ["j11"]           # submit - 100 in [30, 100): 12 skipped, 13 out
    assert names(SwfMapping(window=(30, 101))) == ["j11", "j13"]
    assert names(SwfMapping(window=(30, None), jobs=1)) == ["j11"]
    with pytest.raises(SwfError, match="no job"):
        map_jobs(tr, 72, SwfMapping(window=(60, 90)))                # only job 12, unknown run time
    a = [j["name"] for j in map_jobs(tr, 72, SwfMapping(seed=3))[0]]
    assert a == [j["name"] for j in map_jobs(tr, 72, SwfMapping(seed=3))[0]]
    draws = {tuple(j["name"] for j in map_jobs(tr, 72, SwfMapping(seed=s))[0]) for s in range(6)}
    assert len(draws) > 1
    with pytest.raises(SwfError, match="unknown template"):
        map_jobs(tr, 72, SwfMapping(templates=("milc", "hpl")))


def test_rule_by_application_and_user(nasa):
    jobs, *_ = map_jobs(nasa, 72, SwfMapping(jobs=12, assign="application", templates=("milc", "lammps", "nn")))
    apps = nasa.col("app")[np.flatnonzero(nasa.col("run") > 0)[:12]]
    for j, app in zip(jobs, apps):
        if app >= 0:
            assert j["name"].endswith(("-milc", "-lammps", "-nn")[int(app) % 3])


# ---------------------------------------------------------------------------------------------------------- CLI
def _cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "hybridsim", "scenario-from-swf", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd)


def test_cli_on_the_real_trace(tmp_path, swf_trace):
    out = tmp_path / "s" / "stream.yaml"
    r = _cli(swf_trace, "--system", SYS72, "-o", out, "--from-job", 57, "--jobs", 30, "--queue", "fcfs",
             "--allocation", "random-router", "--seed", 4)
    assert r.returncode == 0, r.stderr
    assert "30 jobs" in r.stdout and "utilisation" in r.stdout
    text = out.read_text()
    assert "#   ; Version: 2.2\n" in text and "#   ; Computer: Intel iPSC/860\n" in text
    data = yaml.safe_load(text)
    assert data["scheduler"] == {"queue": "fcfs", "allocation": "random-router", "slowdown_tau": "10us"}
    assert data["seed"] == 4 and "placement" not in data and data["output"] == {"ports": False}
    assert data["jobs"][0]["name"].startswith("j57-") and data["jobs"][0]["arrival"] == "0ns"
    assert len(data["jobs"]) == 30 and all(1 <= j["ranks"] <= 72 for j in data["jobs"])
    # without the stream fields the file is valid today (the schema gains them at integration): every section,
    # and every job on its own (together they need more terminals than the machine: they run one after another)
    jobs = [{k: v for k, v in j.items() if k not in ("arrival", "walltime")} for j in data["jobs"]]
    for j in jobs:
        stripped = {**{k: v for k, v in data.items() if k != "scheduler"}, "jobs": [j]}
        assert parse_scenario(yaml.safe_dump(stripped), "stripped.yaml").topology.n_terminals == 72
    # deterministic per seed
    assert main(["scenario-from-swf", str(swf_trace), "--system", str(SYS72), "-o", str(tmp_path / "again.yaml"),
                 "--from-job", "57", "--jobs", "30", "--queue", "fcfs", "--allocation", "random-router",
                 "--seed", "4"]) == 0
    body = lambda t: [ln for ln in t.splitlines() if not ln.startswith("# command:")]  # noqa: E731
    assert body((tmp_path / "again.yaml").read_text()) == body(text)


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, swf_trace):
    bad = tmp_path / "bad.swf"
    bad.write_text(_line(1, 0, -1, 10, 4) + "\n1 2 3\n")
    out = tmp_path / "out.yaml"
    r = _cli(bad, "--system", SYS72, "-o", out)  # one real process for the exit status
    assert r.returncode == 2 and f"{bad}:2: expected 18 fields, got 3" in r.stderr and not out.exists()

    def run(*args):
        code = main(["scenario-from-swf", *map(str, args)])
        return code, capsys.readouterr().err

    base = tmp_path / "base.yaml"
    base.write_text("topology:\n  groups: 9\n  routers_per_grup: 4\n")
    code, err = run(swf_trace, "--system", base, "-o", out)
    assert code == 2 and f"{base}:3:3: topology.routers_per_grup: unknown key" in err
    code, err = run(swf_trace, "--system", SYS72, "-o", out, "--templates", "milc,hpl")
    assert code == 2 and "unknown template" in err
    code, err = run(swf_trace, "--system", SYS72, "-o", out, "--iteration-time", "milc=fast")
    assert code == 2 and "--iteration-time milc" in err
    code, err = run(swf_trace, "--system", SYS72, "-o", out, "--window", "3d:1d")
    assert code == 2 and "empty time window" in err
    assert not out.exists()
    out.write_text("keep me")
    code, err = run(swf_trace, "--system", SYS72, "-o", out, "--jobs", 3)
    assert code == 2 and "--force" in err and out.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_flow_yaml_round_trips():
    x = {"name": "j1-milc", "a": "0ns", "b": "true", "c": "1e3", "d": "x: y", "e": [1, 2.5, "inf"], "f": {"g": "h"},
         "i": "", "j": "NO"}
    line = flow_yaml(x)
    assert "\n" not in line and yaml.safe_load(line) == x
    assert line.startswith("{name: j1-milc, a: 0ns, b: \"true\"")


def test_system_file_is_read_with_the_scenario_loaders_checks(nasa, tmp_path, capsys):
    """``--system`` goes through hybridsim.yamlio like any scenario: a duplicate key is an error at its line and
    nothing is written."""
    base = tmp_path / "dup.yaml"
    base.write_text("seed: 1\nseed: 2\n")
    out = tmp_path / "o.yaml"
    assert main(["scenario-from-swf", str(nasa), "--system", str(base), "--jobs", "5", "-o", str(out)]) == 2
    assert f"{base}:2:1: seed: duplicate key 'seed' (first at line 1)" in capsys.readouterr().err
    assert not out.exists()
