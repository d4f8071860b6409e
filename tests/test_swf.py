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
from hybridsim.swf import (MAX_SIMULATED_NS, SwfError, SwfMapping, choose_time_scale, fit_ranks, format_duration,
                           grid_dims, job_mappings, map_jobs, parse_swf, read_swf, smooth_below)

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
    mj = map_jobs(tr, 72, m)
    jobs, stream = list(job_mappings(mj, m)), mj.stream()
    assert mj.selection.skipped == {"unknown or zero run time": 1}
    assert mj.size_scale == 72 / 16 and mj.slowdown_tau == 10e3
    # job 10: 16 procs x 4.5 = 72 ranks, milc; 50 s -> 50 us / 10 us = 5 iterations; walltime 2 x 5 x 10 us
    assert jobs[0] == {"name": "j10-milc", "ranks": 72, "iterations": 5, "arrival": "0ns", "walltime": "100us",
                       "swf_id": 10,
                       "workload": {"kind": "milc", "dimension_sizes": [2, 3, 3, 4], "msg_size": 49152}}
    # job 11: 4 x 4.5 = 18 ranks, nn; 20 us / 4 us = 5 iterations; arrival 30 us; walltime = requested 40 s -> 40 us
    assert jobs[1] == {"name": "j11-nn", "ranks": 18, "iterations": 5, "arrival": "30us", "walltime": "40us",
                       "swf_id": 11,
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
    names = lambda m: [n.split("-")[0] for n in map_jobs(tr, 72, m).names]  # noqa: E731
    assert names(SwfMapping(from_job=11)) == ["j11", "j13", "j14"]
    assert names(SwfMapping(jobs=2)) == ["j10", "j11"]
    assert names(SwfMapping(window=(30, 100))) == ["j11"]           # submit - 100 in [30, 100): 12 skipped, 13 out
    assert names(SwfMapping(window=(30, 101))) == ["j11", "j13"]
    assert names(SwfMapping(window=(30, None), jobs=1)) == ["j11"]
    with pytest.raises(SwfError, match="no job"):
        map_jobs(tr, 72, SwfMapping(window=(60, 90)))                # only job 12, unknown run time
    a = map_jobs(tr, 72, SwfMapping(seed=3)).names
    assert a == map_jobs(tr, 72, SwfMapping(seed=3)).names
    draws = {tuple(map_jobs(tr, 72, SwfMapping(seed=s)).names) for s in range(6)}
    assert len(draws) > 1
    with pytest.raises(SwfError, match="unknown template"):
        map_jobs(tr, 72, SwfMapping(templates=("milc", "hpl")))


def test_rule_by_application_and_user(nasa):
    names = map_jobs(nasa, 72, SwfMapping(jobs=12, assign="application", templates=("milc", "lammps", "nn"))).names
    apps = nasa.col("app")[np.flatnonzero(nasa.col("run") > 0)[:12]]
    for name, app in zip(names, apps):
        if app >= 0:
            assert name.endswith(("-milc", "-lammps", "-nn")[int(app) % 3])


# ---------------------------------------------------------------------------------------------------------- CLI
def _cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "hybridsim", "scenario-from-swf", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd)


def test_cli_on_the_real_trace(tmp_path, swf_trace):
    out = tmp_path / "s" / "stream.yaml"
    r = _cli(swf_trace, "--system", SYS72, "-o", out, "--from-job", 57, "--jobs", 30, "--queue", "fcfs",
             "--allocation", "random-router", "--seed", 4, "--time-scale", "1us")
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
                 "--seed", "4", "--time-scale", "1us"]) == 0
    body = lambda t: [ln.replace("again.", "stream.") for ln in t.splitlines()  # noqa: E731
                      if not ln.startswith("# command:")]
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
    """``--system`` goes through hybridsim_common.yamlio like any scenario: a duplicate key is an error at its line and
    nothing is written."""
    base = tmp_path / "dup.yaml"
    base.write_text("seed: 1\nseed: 2\n")
    out = tmp_path / "o.yaml"
    assert main(["scenario-from-swf", str(nasa), "--system", str(base), "--jobs", "5", "-o", str(out)]) == 2
    assert f"{base}:2:1: seed: duplicate key 'seed' (first at line 1)" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------------- fidelity
def test_auto_time_scale_fits_every_job_within_the_tolerance(tmp_path):
    # runs 50, 20, 9, 1 s; templates cycle milc (10 us), nn (4 us): the tightest job is the 1 s one, milc again
    # (cycle: milc, nn, milc, nn -> job 14 is nn, 4 us): need 10 iterations of 4 us in 1 s -> 40 us per trace
    # second; job 13 (milc, 9 s) needs 10 x 10 us / 9 = 11.1 us: less. So the scale is 40 us.
    tr = _trace(tmp_path)
    m = SwfMapping(templates=("milc", "nn"), assign="cycle", iteration_time={"milc": 10e3, "nn": 4e3})
    mj = map_jobs(tr, 72, m)
    assert mj.time_scale == 40e3 and mj.time_scale_note.startswith("chosen")
    d = mj.distortion
    # 50 s x 40 us = 2 ms = 200 milc iterations; 20 s = 800 us = 200 nn; 9 s = 360 us = 36 milc; 1 s = 10 nn
    assert mj.iterations.tolist() == [200, 200, 36, 10]
    assert d["within"].all() and np.allclose(d["run_error_pct"], 0)
    assert mj.slowdown_tau == 10 * 40e3 and mj.arrival.tolist() == [0, 30 * 40e3, 100 * 40e3, 400 * 40e3]


def test_a_given_time_scale_names_the_jobs_it_cannot_fit(tmp_path):
    tr = _trace(tmp_path)
    m = SwfMapping(time_scale=1e3, templates=("milc", "nn"), assign="cycle", iteration_time={"milc": 10e3, "nn": 4e3})
    d = map_jobs(tr, 72, m).distortion
    # targets 50, 20, 9, 1 us -> 5 milc (exact), 5 nn (exact), 0.9 milc -> 1 (+11.1 %), 0.25 nn -> 1 (+300 %)
    assert d["within"].tolist() == [True, True, False, False]
    assert np.allclose(d["run_error_pct"], [0, 0, 100 / 9, 300])
    assert d["why"][2] == "9 s x 1us = 0.9 iterations of milc (10us): whole iterations miss by +11.1 %"
    assert d["why"][3] == "1 s x 1us = 1us is under half an iteration of nn (4us): rounded up to 1"
    # sizes: 16, 4, 2, 1 processors x 4.5 = 72, 18, 9, 4.5 -> 72, 18, 9, 4 ranks (4 and 6 tie: the smaller)
    assert d["ranks"].tolist() == [72, 18, 9, 4] and np.allclose(d["size_error_pct"], [0, 0, 0, -100 / 9])


def test_the_cap_on_simulated_time(tmp_path):
    # a job of 1 s and one submitted 10^6 s later: 10 x 1.7 ms per trace second would last 1.7e4 s... fine; but a
    # span of 9e8 s cannot fit 10 iterations of the 1 s job below 10^15 ns: capped, the 1 s job named
    f = tmp_path / "long.swf"
    f.write_text("\n".join(["; MaxProcs: 4", _line(1, 0, -1, 1, 4), _line(2, 9e8, -1, 100, 4)]) + "\n")
    mj = map_jobs(read_swf(f), 72, SwfMapping(templates=("lammps",)))
    assert "capped" in mj.time_scale_note and mj.time_scale <= MAX_SIMULATED_NS / (9e8 + 200 * 1.05)
    assert mj.distortion["within"].tolist() == [False, True]
    assert (mj.arrival + mj.walltime).max() <= MAX_SIMULATED_NS
    with pytest.raises(SwfError, match=rf"{f}:3: field 2 \(submit\) = 9e\+08: the job's arrival would end"):
        map_jobs(read_swf(f), 72, SwfMapping(templates=("lammps",), time_scale=1e7))
    scale, why = choose_time_scale(np.array([2.0]), np.array([1e3]), 10.0, 0.05)
    assert scale == 5e3 and "smallest" in why  # 10 iterations of 1 us in 2 s


def test_absurd_values_are_refused_by_line_and_field(tmp_path):
    f = tmp_path / "absurd.swf"
    f.write_text("\n".join([_line(1, 0, -1, 10, 4), _line(2, 5, -1, "1e300", 4), _line(3, "1e294", -1, 10, 4),
                            _line(4, 6, -1, 10, 2.5), _line(5, 7, -1, 10, -3), _line(6, 8, -1, "nan", 1)]) + "\n")
    with pytest.raises(SwfError) as ei:
        read_swf(f)
    assert ei.value.problems == [
        f"{f}:2: field 4 (run) = 1e+300 is out of range (-1 for unknown, else 0..1e+09)",
        f"{f}:3: field 2 (submit) = 1e+294 is out of range (-1 for unknown, else 0..1e+09)",
        f"{f}:4: field 5 (procs) = 2.5 is not a whole number",
        f"{f}:5: field 5 (procs) = -3 is out of range (-1 for unknown, else 0..1e+08)",
        f"{f}:6: field 4 (run) = nan is not finite"]
    with pytest.raises(SwfError, match="LAMMPS replicas must be in 1..64"):
        SwfMapping(lammps_replicas=1000000).check()
    with pytest.raises(SwfError, match="time scale"):
        SwfMapping(time_scale=1e300).check()


def test_cli_refuses_absurd_traces_and_folders(tmp_path, capsys):
    f = tmp_path / "absurd.swf"
    f.write_text(_line(1, 0, -1, 10, 4) + "\n" + _line(2, 5, -1, "1e300", 4) + "\n")
    out = tmp_path / "o.yaml"
    assert main(["scenario-from-swf", str(f), "--system", str(SYS72), "-o", str(out)]) == 2
    assert f"{f}:2: field 4 (run) = 1e+300 is out of range" in capsys.readouterr().err
    ok = tmp_path / "ok.swf"
    ok.write_text(_line(1, 0, -1, 10, 4) + "\n")
    (tmp_path / "folder").mkdir()
    for extra in ([], ["--force"]):
        assert main(["scenario-from-swf", str(ok), "--system", str(SYS72), "-o", str(tmp_path / "folder"),
                     *extra]) == 2
        assert "is a directory: -o names the scenario file" in capsys.readouterr().err
    assert main(["scenario-from-swf", str(ok), "--system", str(SYS72), "-o", str(out), "--lammps-replicas",
                 "1000000"]) == 2
    assert "LAMMPS replicas must be in 1..64" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "o.distortion.csv").exists()


def test_cli_writes_the_distortion_table_beside_the_scenario(tmp_path, capsys):
    f = tmp_path / "t.swf"
    f.write_text("\n".join(["; MaxProcs: 8", _line(1, 0, -1, 10, 8), _line(2, 4, -1, 3, 2)]) + "\n")
    out = tmp_path / "s.yaml"
    assert main(["scenario-from-swf", str(f), "--system", str(SYS72), "-o", str(out), "--templates", "milc",
                 "--time-scale", "100us"]) == 0
    printed = capsys.readouterr().out
    # 10 s x 100 us = 1 ms = 2.33 milc iterations (430 us) -> 2 (-14 %); 3 s = 300 us = 0.7 -> 1 (+43 %)
    assert "run times: 0 of 2 jobs within 5 %" in printed and "2 job(s) cannot fit: j1-milc (line 2)" in printed
    import csv

    with open(tmp_path / "s.distortion.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["job"], r["iterations"], r["within"]) for r in rows] == [("1", "2", "false"), ("2", "1", "false")]
    assert float(rows[0]["run_error_pct"]) == pytest.approx((2 * 430 - 1000) / 1000 * 100)
    data = yaml.safe_load(out.read_text())
    assert [j["iterations"] for j in data["jobs"]] == [2, 1] and data["jobs"][1]["arrival"] == "400us"
    assert [j["swf_id"] for j in data["jobs"]] == [1, 2]  # the trace's job numbers (field 1), for jobs.parquet
    assert "# run times: 0 of 2 jobs within 5 %" in out.read_text()
    # the default picks a scale that fits both: 10 x 430 us / 3 s = 1.433 ms -> 1.44 ms
    assert main(["scenario-from-swf", str(f), "--system", str(SYS72), "-o", str(out), "--templates", "milc",
                 "--force", "--walltime-rule", "exact"]) == 0
    assert "1.44ms" in capsys.readouterr().out
    data = yaml.safe_load(out.read_text())
    # exact walltime = the estimate: 10 s x 1.44 ms = 14.4 ms / 430 us = 33.5 -> 33 (or 34) iterations
    assert data["jobs"][0]["walltime"] == format_duration(data["jobs"][0]["iterations"] * 430e3)


def test_the_output_stays_within_the_base_scenarios_rank_iteration_limit(tmp_path):
    # the hand trace of test_auto_time_scale...: auto wants 40 us per trace second -> iterations 200, 200, 36, 10 on
    # 72, 18, 9, 4 ranks = 14400 + 3600 + 324 + 40 = 18364 rank-iterations
    tr = _trace(tmp_path)
    kw = dict(templates=("milc", "nn"), assign="cycle", iteration_time={"milc": 10e3, "nn": 4e3})
    assert int((map_jobs(tr, 72, SwfMapping(**kw)).ranks * [200, 200, 36, 10]).sum()) == 18364
    mj = map_jobs(tr, 72, SwfMapping(max_rank_iterations=1000, **kw))
    work = int((mj.ranks * mj.iterations).sum())
    assert work <= 1000 and "over limits.max_rank_iterations = 1000" in mj.time_scale_note
    # by hand: at s ns per trace second the work is 72 rint(50 s / 10us) + 18 rint(20 s / 4us) + 9 rint(9 s / 10us)
    # + 4 max(1, rint(s / 4us)): 922 up to s = 2.1 us (10.5 rounds to even), 1012 just above; 3 digits, rounded down
    assert 2090 <= mj.time_scale <= 2100 and work == 922
    assert not mj.distortion["within"].all()   # the shortest jobs no longer fit: named
    with pytest.raises(SwfError, match="over limits.max_rank_iterations = 1000 of the base scenario"):
        map_jobs(tr, 72, SwfMapping(max_rank_iterations=1000, time_scale=40e3, **kw))
    with pytest.raises(SwfError, match="even one iteration per job needs 103"):  # 72 + 18 + 9 + 4 ranks
        map_jobs(tr, 72, SwfMapping(max_rank_iterations=100, **kw))
