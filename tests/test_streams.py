"""Job streams end to end: scenario validation, the engine driven by the scheduler, the jobs table and stream
metrics of a run directory, and a hybrid run -- against hand-computed schedules and hybridsim.scheduler's own
functions on the recorded times."""

import json
import math

import numpy as np
import pytest

from hybridsim_common.backend import AlwaysSimulate
from hybridsim.engine import Engine
from hybridsim_common.records import JOB_COLUMNS, JOB_COLUMNS_LATER, read_jobs, read_iterations
from hybridsim.runner import run_scenario
from hybridsim.scenario import ScenarioError, load_scenario, parse_scenario
from hybridsim.scheduler import JobOutcome, StreamJob, bounded_slowdown, dry_run, stream_metrics

# 12 terminals: 3 groups x 2 routers x 2
HEAD = """\
seed: 3
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
sampling: {interval: 5us}
"""


def stream(queue="fcfs", allocation="contiguous", seed_line=""):
    # a (8 ranks) starts at 0; b (8) arrives at 1 us and cannot fit beside a (4 terminals free) until a ends; c (4)
    # arrives at 2 us and fits in the 4 free terminals
    return HEAD + f"""\
scheduler: {{queue: {queue}, allocation: {allocation}{seed_line}}}
jobs:
  - {{name: a, ranks: 8, iterations: 2, walltime: 100us, workload: {{kind: allreduce, size: 64}},
     compute: {{delay: 10us}}}}
  - {{name: b, ranks: 8, iterations: 2, arrival: 1us, walltime: 100us, workload: {{kind: allreduce, size: 64}},
     compute: {{delay: 5us}}}}
  - {{name: c, ranks: 4, iterations: 1, arrival: 2us, walltime: 10us, workload: {{kind: allreduce, size: 64}},
     compute: {{delay: 3us}}}}
"""


class Recorder(AlwaysSimulate):
    """Pure-simulation director that checks, at every job start, that no terminal is held by two running jobs."""

    def __init__(self):
        self.held: dict[int, set] = {}
        self.log: list = []

    def on_job_start(self, job_id, t, terminals):
        terms = set(np.asarray(terminals).tolist())
        assert len(terms) == len(terminals)
        for other, held in self.held.items():
            assert not terms & held, f"job {job_id} started at {t} on terminals of running job {other}"
        self.held[job_id] = terms
        self.log.append(("start", job_id, t))

    def on_job_end(self, job_id, t):
        del self.held[job_id]
        self.log.append(("end", job_id, t))


def run_engine(text):
    sc = parse_scenario(text, "s.yaml")
    rec = Recorder()
    res = Engine(sc).run(director=rec)
    return sc, res, rec


# ---------------------------------------------------------------------------------------------------------- engine
def test_a_job_waits_while_the_machine_is_full_and_starts_on_the_freed_terminals():
    _sc, res, rec = run_engine(stream("fcfs"))
    end_a = res.job_end["a"]
    assert res.job_start["a"] == 0.0
    # b needs 8 terminals, only 4 are free until a ends: it starts exactly when a ends, on a's terminals
    assert res.job_start["b"] == end_a
    assert res.job_terminals["b"].tolist() == res.job_terminals["a"].tolist() == list(range(8))
    # FCFS: c (4 ranks, would fit) stays behind the waiting b and starts with it, on the 4 never-used terminals
    assert res.job_start["c"] == end_a
    assert res.job_terminals["c"].tolist() == [8, 9, 10, 11]
    # a's ranks ran 2 iterations, b's and c's only after their start
    first = {}
    for r in res.records:
        first[r.job] = min(first.get(r.job, math.inf), r.start)
    assert first["b"] == end_a and first["c"] == end_a
    assert [e for e in rec.log if e[0] == "end"][0] == ("end", 0, end_a)


def test_easy_backfills_the_small_job_at_its_arrival():
    # EASY: b (head) is reserved at a's end; c fits in the 4 terminals b will not need then: backfilled at 2 us
    _sc, res, _rec = run_engine(stream("easy"))
    assert res.job_start["c"] == 2000.0
    assert res.job_start["b"] == res.job_end["a"]


@pytest.mark.parametrize("queue", ["easy", "conservative"])
def test_the_engine_schedule_is_the_dry_run_of_its_own_run_times(queue):
    # an independent check of the wiring: hybridsim.scheduler.dry_run fed with the run times the engine measured
    # gives the same starts and terminals
    sc, res, _rec = run_engine(stream(queue, "random"))
    jobs = [StreamJob(i, j.ranks, j.arrival, j.estimated_walltime(), res.job_end[j.name] - res.job_start[j.name])
            for i, j in enumerate(sc.jobs)]
    out = dry_run(jobs, sc.topology.shape, queue, "random", sc.scheduler_seed)
    assert out[2].start == 2000.0  # c backfilled at its arrival: it ends (by walltime) before b's reservation
    for o, j in zip(out, sc.jobs):
        assert o.start == pytest.approx(res.job_start[j.name], abs=1e-6)
        assert o.terminals.tolist() == res.job_terminals[j.name].tolist()


def test_no_terminal_is_held_by_two_running_jobs_in_a_longer_random_stream():
    jobs = "".join(f"  - {{name: j{i}, ranks: {r}, iterations: {it}, arrival: {a}us, "
                   f"workload: {{kind: allreduce, size: 256}}, compute: {{delay: {d}us}}}}\n"
                   for i, (r, it, a, d) in enumerate([(6, 3, 0, 4), (4, 2, 0, 2), (5, 2, 1, 3), (8, 1, 2, 2),
                                                      (2, 4, 3, 1), (12, 1, 4, 1), (3, 3, 5, 2), (7, 2, 5, 3)]))
    text = HEAD + "scheduler: {queue: easy, allocation: random}\njobs:\n" + jobs
    sc, res, rec = run_engine(text)
    assert len(res.job_end) == 8 and not rec.held   # every job started and ended
    assert any(res.job_start[j.name] > j.arrival for j in sc.jobs)   # some job waited
    # from the recorded times too: jobs whose [start, end) overlap share no terminal
    names = [j.name for j in sc.jobs]
    for x in names:
        for y in names:
            if x < y and res.job_start[x] < res.job_end[y] and res.job_start[y] < res.job_end[x]:
                assert not set(res.job_terminals[x].tolist()) & set(res.job_terminals[y].tolist())
    # ranks and per-job state are dropped when a job ends
    eng = Engine(sc)
    eng.run()
    assert eng.mpi.ranks == {} and eng.job_ranks == {} and eng.modes == {}


def test_a_stream_is_deterministic_per_seed():
    a = run_engine(stream("easy", "random"))[1]
    b = run_engine(stream("easy", "random"))[1]
    assert [(r.job, r.rank, r.iteration, r.start, r.end) for r in a.records] == \
        [(r.job, r.rank, r.iteration, r.start, r.end) for r in b.records]
    assert {k: v.tolist() for k, v in a.job_terminals.items()} == {k: v.tolist() for k, v in b.job_terminals.items()}
    other = {k: v.tolist() for k, v in run_engine(stream("easy", "random", ", seed: 99"))[1].job_terminals.items()}
    assert other != {k: v.tolist() for k, v in a.job_terminals.items()}


def test_all_jobs_at_zero_give_the_fixed_placement_run():
    # a stream whose jobs all arrive at 0 and fit is the fixed-placement run (same terminals, same records)
    jobs = """\
jobs:
  - {name: a, ranks: 6, iterations: 2, workload: {kind: allreduce, size: 20000}}
  - {name: b, ranks: 5, iterations: 3, workload: {kind: allreduce, size: 64}}
"""
    fixed = Engine(parse_scenario(HEAD + "placement: {policy: random-router}\n" + jobs)).run()
    streamed = Engine(parse_scenario(HEAD + "scheduler: {allocation: random-router}\n" + jobs)).run()
    key = [(r.job, r.rank, r.iteration, r.start, r.end) for r in fixed.records]
    assert key == [(r.job, r.rank, r.iteration, r.start, r.end) for r in streamed.records]
    assert fixed.job_end == streamed.job_end


# ---------------------------------------------------------------------------------------------------------- results
def test_jobs_table_and_summary_match_the_scheduler_metrics(tmp_path):
    sc = parse_scenario(stream("easy", "random-router"), str(tmp_path / "s.yaml"))
    rd, res, summary = run_scenario(sc, tmp_path / "run", progress=False)
    table = read_jobs(rd.path / "jobs.parquet").to_pydict()
    assert tuple(table) == JOB_COLUMNS + JOB_COLUMNS_LATER and table["job"] == ["a", "b", "c"]
    assert table["killed"] == [False] * 3 and table["swf_id"] == [None] * 3
    tau = sc.scheduler.slowdown_tau
    outcomes = []
    for i, name in enumerate(table["job"]):
        start, end = res.job_start[name], res.job_end[name]
        assert (table["start"][i], table["end"][i]) == (start, end)
        assert table["arrival"][i] == sc.jobs[i].arrival
        assert table["wait"][i] == start - sc.jobs[i].arrival
        assert table["run_time"][i] == end - start
        assert table["bounded_slowdown"][i] == bounded_slowdown(start - sc.jobs[i].arrival, end - start, tau)
        assert table["terminals"][i] == res.job_terminals[name].tolist()
        assert table["size"][i] == len(table["terminals"][i]) == sc.jobs[i].ranks
        outcomes.append(JobOutcome(i, sc.jobs[i].ranks, sc.jobs[i].arrival, sc.jobs[i].estimated_walltime(), start,
                                   end, res.job_terminals[name]))
    want = stream_metrics(outcomes, 12, tau)
    on_disk = json.loads((rd.path / "summary.json").read_text())["stream"]
    for k in ("jobs", "makespan", "mean_wait", "mean_bounded_slowdown", "utilisation"):
        assert on_disk[k] == pytest.approx(want[k], rel=1e-12), k
    # by hand: makespan = last end - first arrival (0)
    assert on_disk["makespan"] == max(res.job_end.values())
    assert on_disk["queue"] == "easy" and on_disk["allocation"] == "random-router" and on_disk["terminals"] == 12
    assert summary["jobs"]["b"]["wait"] == res.job_start["b"] - 1000.0


def test_report_draws_the_gantt_chart(tmp_path):
    from hybridsim.report import busy_over_time, report

    sc = parse_scenario(stream("fcfs"), str(tmp_path / "s.yaml"))
    rd, res, _ = run_scenario(sc, tmp_path / "run", progress=False)
    made = report(rd.path)
    assert rd.path / "report" / "jobs-gantt.png" in made
    t = read_jobs(rd.path / "jobs.parquet").to_pydict()
    times, busy, waiting = busy_over_time(t["start"], t["end"], t["size"], t["arrival"])
    end_a = res.job_end["a"]
    # 0: a (8) runs; 1 us: b waits; 2 us: b and c wait; at a's end b and c start (12 busy)
    assert times.tolist()[:4] == [0.0, 1000.0, 2000.0, end_a]
    assert busy.tolist()[:4] == [8, 8, 8, 12] and waiting.tolist()[:4] == [0, 1, 2, 0]


# ---------------------------------------------------------------------------------------------------------- scenario
@pytest.mark.parametrize("old,new,where,words", [
    ("{name: c, ranks: 4,", "{name: c, ranks: 13,", ":10:22: jobs.2.ranks", "job 'c' larger than the machine: 13 ranks"),
    ("arrival: 1us, walltime: 100us", "arrival: 1us, walltime: -5us", ":8:", "jobs.1.walltime: walltime shorter than zero"),
])
def test_stream_validation_errors_name_file_line_and_field(tmp_path, old, new, where, words):
    p = tmp_path / "s.yaml"
    p.write_text(stream("easy").replace(old, new))
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    msg = str(ei.value)
    assert f"{p}{where}" in msg and words in msg, msg


def _error(text):
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(text, "s.yaml")
    return str(ei.value)


def test_background_job_cannot_arrive_later():
    msg = _error(HEAD + "scheduler: {}\njobs:\n"
                 "  - {name: a, ranks: 4, iterations: 1, workload: {kind: allreduce}}\n"
                 "  - {name: bg, ranks: 4, arrival: 5us, workload: {kind: uniform_random}}\n")
    assert "s.yaml:7:35:" in msg and "jobs.1.arrival" in msg and "cannot arrive later" in msg, msg


def test_scheduler_with_placement_file_is_an_error():
    msg = _error(stream().replace("scheduler:", "placement: {policy: file, file: alloc.txt}\nscheduler:"))
    assert "s.yaml:4:" in msg and "placement.policy" in msg and "scheduler allocates terminals" in msg, msg


def test_arrival_without_scheduler_is_an_error():
    msg = _error(HEAD + "jobs:\n  - {name: a, ranks: 4, iterations: 1, arrival: 3us, workload: {kind: allreduce}}\n")
    assert "s.yaml:5:" in msg and "jobs.0.arrival" in msg and "need a scheduler" in msg, msg


def test_job_larger_than_machine_minus_background_is_an_error():
    msg = _error(HEAD + "scheduler: {}\njobs:\n"
                 "  - {name: bg, ranks: 4, workload: {kind: uniform_random}}\n"
                 "  - {name: a, ranks: 10, iterations: 1, workload: {kind: allreduce}}\n")
    assert "s.yaml:7:22:" in msg and "jobs.1.ranks" in msg and "minus 4 held by background jobs" in msg, msg


def test_codes_backend_refuses_a_stream():
    msg = _error(stream().replace("scheduler:", "backend: {kind: codes}\nscheduler:"))
    assert "scheduler" in msg and "CODES" in msg and "t = 0" in msg, msg


def test_default_walltime_is_generous_and_background_is_infinite():
    sc = parse_scenario(HEAD + "scheduler: {}\njobs:\n"
                        "  - {name: a, ranks: 4, iterations: 3, workload: {kind: milc, dimension_sizes: [2, 2]},"
                        " compute: {delay: 1us}}\n"
                        "  - {name: bg, ranks: 4, workload: {kind: uniform_random}}\n")
    # 2 x 3 iterations x (430 us typical MILC iteration + 1 us compute)
    assert sc.jobs[0].estimated_walltime() == 2 * 3 * (430e3 + 1e3)
    assert sc.jobs[1].estimated_walltime() == math.inf


# ---------------------------------------------------------------------------------------------------------- hybrid
def test_hybrid_run_of_a_stream_with_the_default_policy(tmp_path):
    text = HEAD + """\
scheduler: {queue: easy, allocation: random}
jobs:
  - {name: a, ranks: 8, iterations: 24, workload: {kind: allreduce, size: 4096}, compute: {delay: 2us}}
  - {name: b, ranks: 8, iterations: 24, arrival: 5us, workload: {kind: allreduce, size: 4096},
     compute: {delay: 2us}}
  - {name: c, ranks: 4, iterations: 24, arrival: 8us, workload: {kind: allreduce, size: 4096},
     compute: {delay: 3us}}
"""
    sc = parse_scenario(text, str(tmp_path / "s.yaml"))
    assert sc.controller.policy == "confident"
    # a stream this small costs less CPU than the loop would: the default controller runs the truth, and says why
    _, res0, summary0 = run_scenario(sc, tmp_path / "d", mode="hybrid", progress=False)
    assert all(res0.simulated) and "cheap" in summary0["hybrid"]["runs_truth"]
    # the default policy named in the scenario runs as asked
    sc = parse_scenario(text + "controller: {policy: confident}\n", str(tmp_path / "s.yaml"))
    rd, res, summary = run_scenario(sc, tmp_path / "h", mode="hybrid", progress=False)
    assert summary["hybrid"]["runs_truth"] is None
    assert set(res.job_end) == {"a", "b", "c"}
    # b waited for a's terminals; c started on arrival beside a
    assert res.job_start["b"] == res.job_end["a"] and res.job_start["c"] == 8000.0
    it = read_iterations(rd.path / "iterations.parquet").to_pydict()
    modes = {}
    for job, m, i in zip(it["job"], it["mode"], it["iteration"]):
        modes.setdefault(job, {})[i] = m
    for job in ("a", "b", "c"):
        assert modes[job][0] == "simulate"               # a new job has no history: simulated first
        assert "predict" in modes[job].values(), job     # then the surrogate serves it
    assert summary["stream"]["jobs"] == 3
    assert read_jobs(rd.path / "jobs.parquet").num_rows == 3


@pytest.mark.parametrize("policy", ["pdes", "surrogate", "periodic", "error-adaptive", "budget", "aligned",
                                    "confident"])
def test_every_builtin_policy_runs_a_stream(tmp_path, policy):
    from controllers.builtin import BUILTIN

    assert set(BUILTIN) == {"pdes", "surrogate", "periodic", "error-adaptive", "budget", "aligned", "confident"}
    text = HEAD + f"""\
scheduler: {{queue: fcfs, allocation: random}}
controller: {{policy: {policy}, params: {{warmup: 2}}}}
jobs:
  - {{name: a, ranks: 8, iterations: 12, workload: {{kind: allreduce, size: 4096}}, compute: {{delay: 2us}}}}
  - {{name: b, ranks: 8, iterations: 12, arrival: 5us, workload: {{kind: allreduce, size: 4096}},
     compute: {{delay: 2us}}}}
"""
    if policy == "pdes":
        text = text.replace(", params: {warmup: 2}", "")
    if policy == "confident":   # its warm-up ends on a stationarity test (max_warmup caps it)
        text = text.replace("params: {warmup: 2}", "params: {max_warmup: 2}")
    sc = parse_scenario(text, str(tmp_path / "s.yaml"))
    rd, res, summary = run_scenario(sc, tmp_path / "h", mode="hybrid", progress=False)
    assert res.job_start["b"] == res.job_end["a"]      # b waited for a's terminals
    hj = summary["hybrid"]["jobs"]
    for job in ("a", "b"):
        assert hj[job]["simulated_iterations"] + hj[job]["predicted_iterations"] == 12
        assert hj[job]["simulated_iterations"] >= (12 if policy == "pdes" else 2)   # b's own warm-up too
        if policy != "pdes":
            assert hj[job]["predicted_iterations"] > 0


def test_bench_on_a_stream_reports_run_time_and_makespan_errors(tmp_path):
    from hybridsim.bench import format_table, run_bench

    text = HEAD + """\
scheduler: {queue: easy, allocation: random}
jobs:
  - {name: a, ranks: 8, iterations: 16, workload: {kind: allreduce, size: 4096}, compute: {delay: 2us}}
  - {name: b, ranks: 8, iterations: 16, arrival: 5us, workload: {kind: allreduce, size: 4096}, compute: {delay: 2us}}
"""
    sc = parse_scenario(text, str(tmp_path / "s.yaml"))
    result = run_bench(sc, tmp_path / "b")
    r = result["runs"][0]
    pure = json.loads((tmp_path / "b" / "pure" / "summary.json").read_text())
    hyb = json.loads((tmp_path / "b" / r["run"] / "summary.json").read_text())
    mp, mh = pure["stream"]["makespan"], hyb["stream"]["makespan"]
    assert r["makespan_error_pct"] == pytest.approx(abs(mh - mp) / mp * 100)
    for name in ("a", "b"):
        rp, rh = pure["jobs"][name]["run_time"], hyb["jobs"][name]["run_time"]
        assert r["jobs"][name]["run_time_error_pct"] == pytest.approx(abs(rh - rp) / rp * 100)
    assert r["max_run_time_error_pct"] == max(r["jobs"][n]["run_time_error_pct"] for n in ("a", "b"))
    assert "makespan error" in format_table(result)
    # beside each run-time error, the start-time shift: where an error upstream moved the job in the queue
    shifts = {n: hyb["jobs"][n]["start"] - pure["jobs"][n]["start"] for n in ("a", "b")}
    assert {n: r["jobs"][n]["start_shift_ns"] for n in ("a", "b")} == pytest.approx(shifts)
    assert r["max_abs_start_shift_ns"] == pytest.approx(max(abs(x) for x in shifts.values()))
    assert r["jobs_start_shifted"] == sum(1 for x in shifts.values() if x != 0)
    # the standard metrics reach the run summaries of a simulated stream
    for key in ("median_wait", "p95_wait", "max_wait", "mean_response", "throughput", "by_size"):
        assert key in pure["stream"] and key in hyb["stream"]


def test_codes_bridge_and_swf_refuse_what_streams_cannot_run(tmp_path):
    from codes_bridge.backend import run_codes
    from codes_bridge.writers import CodesInputError
    from hybridsim.swf import SwfError, SwfMapping

    sc = parse_scenario(stream(), "s.yaml")
    with pytest.raises(CodesInputError, match="CODES' model-net-mpi-replay starts every job at t = 0"):
        run_codes(sc, tmp_path)
    assert not any(tmp_path.iterdir())          # nothing written
    with pytest.raises(SwfError, match="uniform-random cannot be used in a job stream"):
        SwfMapping(templates=("nn", "uniform-random")).check()


def test_a_backend_that_declares_no_streams_refuses_one_before_any_run_directory(tmp_path):
    """The runner asks the backend's declared ``no_streams`` (``Backend.run_refusal``); the remote engine declares it
    (its protocol carries no job starts), so a stream on ``backend: remote`` is a located scenario error with that
    reason (exit 2, as ``validate`` says) and writes nothing."""
    from hybridsim.scenario import ScenarioError
    from hybridsim.service.remote import RemoteBackend

    sc = parse_scenario(stream() + "backend: {kind: remote, remote: 127.0.0.1:1}\n", "s.yaml")
    with pytest.raises(ScenarioError) as ei:
        run_scenario(sc, tmp_path / "out", progress=False)
    assert str(ei.value).startswith("s.yaml:") and str(ei.value).endswith("scheduler: " + RemoteBackend.no_streams)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ kill at walltime
def killing(kill: bool, extra: str = "") -> str:
    # a (8 ranks, 4 iterations of ~28 us) asks for 70 us: killed after 2 whole iterations when kill_at_walltime; b (8)
    # arrives at 1 us and waits for a's terminals (4 free): it starts when a ends -- or is killed
    return HEAD + f"""\
scheduler: {{queue: fcfs, kill_at_walltime: {str(kill).lower()}}}
jobs:
  - {{name: a, ranks: 8, iterations: 4, walltime: 70us, workload: {{kind: allreduce, size: 64}},
     compute: {{delay: 10us}}{extra}}}
  - {{name: b, ranks: 8, iterations: 2, arrival: 1us, walltime: 100us, workload: {{kind: allreduce, size: 64}},
     compute: {{delay: 5us}}}}
"""


def test_a_job_over_its_walltime_is_killed_at_it_and_the_next_starts_then():
    _sc, full, _ = run_engine(killing(False))
    sc, res, rec = run_engine(killing(True))
    assert full.job_end["a"] > 70_000 and not full.job_killed   # off by default: a overruns its walltime
    assert res.job_killed == ["a"] and res.job_end["a"] == 70_000.0 == res.job_start["a"] + 70_000
    assert ("end", 0, 70_000.0) in rec.log and not rec.held
    # b starts at the kill, on a's terminals, instead of at a's natural end
    assert res.job_start["b"] == 70_000.0 < full.job_start["b"] == full.job_end["a"]
    assert res.job_terminals["b"].tolist() == list(range(8))
    # a's records up to the kill are the full run's (the runs are the same until then); none after it
    key = lambda r: (r.rank, r.iteration, r.start, r.end)  # noqa: E731
    before = sorted(key(r) for r in full.records if r.job == "a" and r.end <= 70_000)
    assert sorted(key(r) for r in res.records if r.job == "a") == before and 0 < len(before) < 32
    assert min(r.start for r in res.records if r.job == "b") == 70_000.0
    # b (within its walltime) runs to its end, alone as in the full run: about the same run time
    assert res.job_end["b"] - res.job_start["b"] == pytest.approx(full.job_end["b"] - full.job_start["b"], rel=0.02)
    # the dry run with the full run's run times and the kill gives the same schedule
    jobs = [StreamJob(i, j.ranks, j.arrival, j.estimated_walltime(), full.job_end[j.name] - full.job_start[j.name])
            for i, j in enumerate(sc.jobs)]
    out = dry_run(jobs, sc.topology.shape, "fcfs", kill_at_walltime=True)
    assert (out[0].end, out[0].killed, out[1].start, out[1].killed) == (70_000.0, True, 70_000.0, False)
    eng = Engine(sc)
    eng.run()
    assert eng.mpi.ranks == {} and eng.job_ranks == {}
    sc.backend.embedded.core = "python"  # the Python core's parked ranks are Python state, which can be looked at
    eng = Engine(sc)
    eng.run()
    assert eng.mpi.ranks == {} and eng.job_ranks == {} and eng.mpi.parked == {} and eng.mpi.pred_ranks == {}


def test_killed_jobs_and_swf_ids_in_the_jobs_table_summary_and_report(tmp_path):
    from hybridsim.report import report

    text = killing(True, ", swf_id: 57").replace("compute: {delay: 5us}}", "compute: {delay: 5us}, swf_id: 58}")
    sc = parse_scenario(text, str(tmp_path / "s.yaml"))
    rd, res, summary = run_scenario(sc, tmp_path / "run", progress=False)
    t = read_jobs(rd.path / "jobs.parquet").to_pydict()
    assert t["killed"] == [True, False] and t["swf_id"] == [57, 58]
    assert (t["start"][0], t["end"][0], t["run_time"][0]) == (0.0, 70_000.0, 70_000.0)
    assert t["start"][1] == 70_000.0 and t["wait"][1] == 69_000.0
    on_disk = json.loads((rd.path / "summary.json").read_text())
    assert on_disk["stream"]["kill_at_walltime"] is True and on_disk["stream"]["killed"] == 1
    assert on_disk["stream"]["killed_jobs"] == ["a"]
    assert (on_disk["jobs"]["a"]["killed"], on_disk["jobs"]["a"]["swf_id"], on_disk["jobs"]["b"]["killed"]) == \
        (True, 57, False)
    made = report(rd.path)
    for name in ("jobs-gantt.png", "jobs-schedule.png", "jobs-queue.png"):
        assert rd.path / "report" / name in made and (rd.path / "report" / name).stat().st_size > 1000


def test_a_killed_stream_job_in_a_hybrid_run(tmp_path):
    sc = parse_scenario(killing(True) + "controller: {policy: periodic, params: {warmup: 1, ft: 2}}\n"
                        "surrogate: {model: last}\n", str(tmp_path / "s.yaml"))
    rd, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    assert res.job_killed == ["a"] and res.job_end["a"] == 70_000.0 and res.job_start["b"] == 70_000.0
    assert summary["jobs"]["b"]["iterations_recorded"] == 16
