"""``hybridsim schedule`` for scheduling research: Batsim's ``jobs.csv`` with node ids, the utilisation series,
partitions (SWF fields 15-16), dependencies (17-18), fair-share through the queue plug-in's job view, energy from a
machine file, ``slowdown_tau`` from a scenario, the output header -- each against a hand-computed case -- and
conservative backfilling against an independent reference on a slice of the KTH-SP2 trace (tests/data/traces, its
source in its header)."""

import csv
import json
import math

import numpy as np
import pytest

from hybridsim.cli import main
from hybridsim.queues import FairShare, UsageHistory
from hybridsim.schedule import BATSIM_COLUMNS, UTILISATION_COLUMNS, from_trace, run_schedule
from hybridsim.scheduler import Scheduler, interval_set
from hybridsim.swf import parse_swf, read_swf


def _swf(jobs, max_nodes=4):
    """SWF text: ``jobs`` = dicts with n, submit, run, procs and optional req, user, group, queue, part, prev,
    think."""
    lines = ["; Version: 2.2", f"; MaxNodes: {max_nodes}",
             "; Note: There is no information on wait times - the given submit", ";       times are start times",
             "; Note: group 1 is normal users"]
    for j in jobs:
        g = j.get
        lines.append(f"{j['n']} {j['submit']} -1 {j['run']} {j['procs']} -1 -1 {j['procs']} {g('req', -1)} -1 1 "
                     f"{g('user', -1)} {g('group', -1)} -1 {g('queue', -1)} {g('part', -1)} {g('prev', -1)} "
                     f"{g('think', -1)}")
    return "\n".join(lines) + "\n"


def _run(tmp_path, text, *args, name="s"):
    trace = tmp_path / f"{name}.swf"
    trace.write_text(text)
    out = tmp_path / name
    assert main(["schedule", str(trace), "-o", str(out), *map(str, args)]) == 0
    with open(out / "jobs.csv") as fh:
        rows = {int(r["job_id"]): r for r in csv.DictReader(fh)}
    return out, rows


def _j(n, submit, run, procs, **kw):
    return {"n": n, "submit": submit, "run": run, "procs": procs, **kw}


# The EASY hand case of tests/test_schedule.py on 4 nodes: A (3 nodes, 0-10), B (2, arrives 1, 2 s), C (2, arrives
# 2, 2 s), D (1, arrives 3, 20 s). EASY: D backfilled at 3 on the free node 3; B at 10 on nodes 0-1 (A's); C at 12
# on 0-1 again (B's); D ends at 23.
EASY_CASE = [_j(1, 0, 10, 3), _j(2, 1, 2, 2), _j(3, 2, 2, 2), _j(4, 3, 20, 1)]


def test_jobs_csv_has_batsims_columns_and_node_ids(tmp_path):
    out, rows = _run(tmp_path, _swf(EASY_CASE), "--queue", "easy")
    with open(out / "jobs.csv") as fh:
        header = next(csv.reader(fh))
    assert tuple(header[:len(BATSIM_COLUMNS)]) == BATSIM_COLUMNS
    want = {1: (0, 10, "0-2"), 2: (10, 12, "0-1"), 3: (12, 14, "0-1"), 4: (3, 23, "3")}
    for n, (start, end, nodes) in want.items():
        r = rows[n]
        submit = EASY_CASE[n - 1]["submit"]
        assert (float(r["starting_time"]), float(r["finish_time"]), r["allocated_resources"]) == (start, end, nodes)
        assert float(r["execution_time"]) == end - start and float(r["waiting_time"]) == start - submit
        assert float(r["turnaround_time"]) == end - submit
        assert float(r["stretch"]) == pytest.approx((end - submit) / (end - start))
        assert (r["success"], r["final_state"], r["consumed_energy"]) == ("1", "COMPLETED_SUCCESSFULLY", "-1")
        assert r["workload_name"] == "s" and int(r["requested_number_of_resources"]) == EASY_CASE[n - 1]["procs"]
    assert float(rows[3]["stretch"]) == 6.0  # C: submitted at 2, ran 12-14


def test_killed_jobs_are_walltime_reached(tmp_path):
    _, rows = _run(tmp_path, _swf([_j(1, 0, 8, 2, req=5), _j(2, 1, 3, 2, req=10)], 2), "--queue", "fcfs",
                   "--kill-at-walltime")
    assert (rows[1]["success"], rows[1]["final_state"], rows[1]["finish_time"]) == ("0", "COMPLETED_WALLTIME_REACHED",
                                                                                     "5")
    assert rows[2]["final_state"] == "COMPLETED_SUCCESSFULLY" and float(rows[2]["requested_time"]) == 10


def test_utilisation_series_by_hand(tmp_path):
    out, _ = _run(tmp_path, _swf(EASY_CASE), "--queue", "easy")
    with open(out / "utilisation.csv") as fh:
        r = csv.reader(fh)
        assert tuple(next(r)) == UTILISATION_COLUMNS
        got = [tuple(float(x) for x in row) for row in r]
    # time, busy nodes, utilisation, running jobs, queued jobs, queued nodes -- after every change at that time
    assert got == [(0, 3, .75, 1, 0, 0), (1, 3, .75, 1, 1, 2), (2, 3, .75, 1, 2, 4), (3, 4, 1, 2, 2, 4),
                   (10, 3, .75, 2, 1, 2), (12, 3, .75, 2, 0, 0), (14, 1, .25, 1, 0, 0), (23, 0, 0, 0, 0, 0)]


def test_header_names_the_producer_and_drops_notes_made_false(tmp_path):
    out, _ = _run(tmp_path, _swf(EASY_CASE), "--queue", "conservative")
    head = [ln for ln in (out / "schedule.swf").read_text().splitlines() if ln.startswith(";")]
    assert head[:2] == ["; Version: 2.2", "; MaxNodes: 4"]
    assert not any("no information on wait times" in h or "times are start times" in h for h in head[:-1])
    assert "; Note: group 1 is normal users" in head
    assert any(h.startswith("; Producer: hybridsim") and h.endswith(" schedule") for h in head)
    assert any(h.startswith("; Command: hybridsim schedule") for h in head)
    assert any(h.startswith("; Options: queue=conservative, nodes=4") for h in head)
    assert "no information on wait times" in head[-1]  # named as dropped
    summary = json.loads((out / "summary.json").read_text())
    assert summary["options"]["queue"] == "conservative" and len(summary["header_notes_dropped"]) == 1
    assert read_swf(out / "schedule.swf").jobs.shape == (4, 18)  # still a trace


# Partitions. Part 1 has 2 nodes, part 2 has 2: A (part 1, 2 nodes, 0-10) fills part 1, so B (part 1, 1 node,
# arrives 1) waits till 10, although part 2 is idle; C (part 2, 2 nodes, arrives 2, 3 s) starts at once on nodes
# 2-3. As one machine of 4 nodes, B would start at 1.
PART_CASE = [_j(1, 0, 10, 2, part=1, queue=7), _j(2, 1, 5, 1, part=1, queue=7), _j(3, 2, 3, 2, part=2, queue=8)]


def test_partitions_are_scheduled_apart(tmp_path):
    out, rows = _run(tmp_path, _swf(PART_CASE), "--partitions", "1=2,2=2", "--queue", "fcfs")
    got = {n: (float(r["starting_time"]), r["allocated_resources"], r["partition"]) for n, r in rows.items()}
    assert got == {1: (0, "0-1", "1"), 2: (10, "0", "1"), 3: (2, "2-3", "2")}
    assert json.loads((out / "summary.json").read_text())["partitions"] == {"1": 2, "2": 2}
    _, one = _run(tmp_path, _swf(PART_CASE), "--queue", "fcfs", name="one")
    assert float(one[2]["starting_time"]) == 1
    _, by_queue = _run(tmp_path, _swf(PART_CASE), "--partitions", "7=2,8=2", "--partition-field", "queue",
                       "--queue", "fcfs", name="q")
    assert {n: float(r["starting_time"]) for n, r in by_queue.items()} == {1: 0, 2: 10, 3: 2}
    _, auto = _run(tmp_path, _swf(PART_CASE), "--partitions", "auto", "--queue", "fcfs", name="auto")
    assert float(auto[2]["starting_time"]) == 10  # part 1 as large as its largest job: 2 nodes


def test_partition_errors_name_the_line(tmp_path, capsys):
    trace = tmp_path / "p.swf"
    trace.write_text(_swf(PART_CASE))
    assert main(["schedule", str(trace), "-o", str(tmp_path / "x"), "--partitions", "1=2"]) == 2
    assert f"{trace}:8: partition 2 is not in --partitions" in capsys.readouterr().err
    assert main(["schedule", str(trace), "-o", str(tmp_path / "x"), "--partitions", "1=1,2=2"]) == 2
    assert f"{trace}:6: 2 processors, more than the 1 nodes of partition 1" in capsys.readouterr().err
    assert main(["schedule", str(trace), "-o", str(tmp_path / "x"), "--partitions", "1=two"]) == 2
    assert "--partitions: expected auto or P=N" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_curie_partitions_from_field_16(repo):
    src = repo / "tests" / "data" / "traces" / "curie_sample-first400.swf"
    trace = read_swf(src)
    inp = from_trace(trace, partitions="auto")
    assert inp.partition_names == [4, 8, 10] and len(inp.size) == 400
    out = run_schedule(inp, "easy")
    parts = np.asarray(inp.part_index)
    lo = np.r_[0, np.cumsum(inp.partition_nodes)[:-1]]
    for i in range(len(inp.size)):  # every job's nodes lie inside its partition's id range
        ids = [int(x) for a in out.nodes[i].split() for x in a.split("-")]
        assert lo[parts[i]] <= min(ids) and max(ids) < lo[parts[i]] + inp.partition_nodes[parts[i]]
    # each partition scheduled alone gives the same starts: partitions do not share nodes
    for k, name in enumerate(inp.partition_names):
        sel = parts == k
        alone = run_schedule(from_trace(_subset(trace, trace.col("partition") == name), nodes=inp.partition_nodes[k]),
                             "easy")
        assert alone.start.tolist() == out.start[sel].tolist()


def _text(header, jobs):
    return "\n".join(header) + "\n" + "\n".join(" ".join(str(int(v)) if v == int(v) else repr(float(v)) for v in row)
                                                for row in jobs) + "\n"


def _subset(trace, mask):
    return parse_swf(_text(trace.header, trace.jobs[mask]), "subset.swf")


def test_dependencies_wait_for_the_preceding_job_and_think_time(tmp_path):
    # 4 nodes. A (1 node, 0-10); B depends on A with 5 s think time: submitted at 2, it cannot start before 15.
    # C depends on job 99, absent from the trace: ignored (noted).
    case = [_j(1, 0, 10, 1), _j(2, 2, 3, 1, prev=1, think=5), _j(3, 1, 2, 1, prev=99)]
    out, rows = _run(tmp_path, _swf(case), "--queue", "fcfs")
    assert {n: (float(r["starting_time"]), float(r["waiting_time"])) for n, r in rows.items()} == {
        1: (0, 0), 2: (15, 13), 3: (1, 0)}
    notes = json.loads((out / "summary.json").read_text())["notes"]
    assert any("1 job(s) submitted after their preceding job's end" in n and "1 preceding job(s) not scheduled"
               in n for n in notes)
    _, free = _run(tmp_path, _swf(case), "--queue", "fcfs", "--no-dependencies", name="free")
    assert float(free[2]["starting_time"]) == 2


def test_a_dependency_cycle_is_an_error(tmp_path, capsys):
    trace = tmp_path / "c.swf"
    trace.write_text(_swf([_j(1, 0, 1, 1, prev=2), _j(2, 0, 1, 1, prev=1)]))
    assert main(["schedule", str(trace), "-o", str(tmp_path / "c")]) == 2
    assert "never started" in capsys.readouterr().err


def test_fair_share_serves_the_lighter_user_first(tmp_path):
    # 1 node. A (user 1) runs 0-10; X (user 3, arrives 0) waits and runs 10-30. C (user 1) arrives at 11, when user
    # 1 has used 10 node-s; D (user 2) at 12, user 2 has used nothing. At 30 fair-share serves D then C; FCFS C
    # then D.
    case = [_j(1, 0, 10, 1, user=1), _j(2, 0, 20, 1, user=3), _j(3, 11, 1, 1, user=1), _j(4, 12, 1, 1, user=2)]
    _, fair = _run(tmp_path, _swf(case, 1), "--queue", "hybridsim.queues:FairShare", name="fair")
    _, fcfs = _run(tmp_path, _swf(case, 1), "--queue", "fcfs", name="fcfs")
    assert {n: float(r["starting_time"]) for n, r in fair.items()} == {1: 0, 2: 10, 3: 31, 4: 30}
    assert {n: float(r["starting_time"]) for n, r in fcfs.items()} == {1: 0, 2: 10, 3: 30, 4: 31}


def test_the_job_view_and_usage_history():
    seen = []

    class Spy(FairShare):
        def key(self, job):
            seen.append((job.job_id, job.user, job.group, job.queue, job.partition, job.usage.user(job.user,
                                                                                                   job.arrival)))
            return ()

    s = Scheduler(2, Spy())
    s.submit("a", 2, 0, 4, user=5, group=6, queue=7, partition=8)
    assert [j for j, _ in s.next_decisions(0)] == ["a"]
    s.release("a", 4)
    s.submit("b", 1, 5, 1, user=5)
    s.next_decisions(5)
    assert seen == [("a", 5, 6, 7, 8, 0.0), ("b", 5, -1, -1, -1, 8.0)]  # 2 nodes x 4 s
    h = UsageHistory(half_life=10)
    h.charge(1, 2, 8.0, 0.0)
    h.charge(1, 3, 2.0, 10.0)
    assert h.user(1, 10) == pytest.approx(4 + 2) and h.user(1, 20) == pytest.approx(3)
    assert h.group(2, 30) == pytest.approx(1) and h.group(9, 0) == 0


def test_energy_from_the_machine_file(tmp_path, repo):
    # haswell-ep.yaml: static power 70 W (package) + 16 W (DRAM) a node, no GPU
    out, rows = _run(tmp_path, _swf(EASY_CASE), "--machine", repo / "examples" / "machines" / "haswell-ep.yaml")
    for n, r in rows.items():
        assert float(r["consumed_energy"]) == pytest.approx(EASY_CASE[n - 1]["procs"] * EASY_CASE[n - 1]["run"] * 86)
    assert json.loads((out / "summary.json").read_text())["energy_j"] == pytest.approx(86 * (30 + 4 + 4 + 20))


def test_slowdown_tau_comes_from_the_scenario(tmp_path):
    src = tmp_path / "stream.yaml"
    src.write_text("""
topology: {groups: 1, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
scheduler: {queue: fcfs, slowdown_tau: 2ms}
jobs:
  - {name: a, ranks: 4, iterations: 10, workload: {kind: nearest_neighbor, dimension_sizes: [4], msg_size: 64}}
  - {name: b, ranks: 4, iterations: 5, workload: {kind: nearest_neighbor, dimension_sizes: [4], msg_size: 64}}
""")
    out = tmp_path / "out"
    assert main(["schedule", str(src), "-o", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["slowdown_tau_s"] == 2e-3
    with open(out / "jobs.csv") as fh:
        b = [r for r in csv.DictReader(fh) if r["profile"] == "b"][0]
    wait, run = float(b["waiting_time"]), float(b["execution_time"])
    assert float(b["bounded_slowdown"]) == pytest.approx(max(1, (wait + run) / max(run, 2e-3)))


def test_interval_sets():
    assert interval_set(np.array([8, 0, 1, 2, 3, 10, 11])) == "0-3 8 10-11"
    assert interval_set(np.array([5])) == "5" and interval_set(np.array([], dtype=np.int64)) == ""


# ------------------------------------------------------------------------------------- conservative reference
def conservative_reference(jobs, nodes):
    """Conservative backfilling written independently of hybridsim.scheduler: ``jobs`` = (submit, size, run,
    walltime) in submit order. At every time something happens, the profile of free nodes is rebuilt from the
    running jobs (ending by their walltime; one past it "any moment" after now) and every queued job, in arrival
    order, reserves the earliest time it fits for its walltime; jobs reserved at now start. Repeated at the same
    time until nothing starts."""
    start = [None] * len(jobs)
    running = []  # (end, walltime end, size)
    queue, nxt, t = [], 0, 0.0
    while nxt < len(jobs) or queue or running:
        t = max(t, min(([jobs[nxt][0]] if nxt < len(jobs) else []) + [r[0] for r in running]))
        running = [r for r in running if r[0] > t]
        while nxt < len(jobs) and jobs[nxt][0] <= t:
            queue.append(nxt)
            nxt += 1
        while True:
            after = math.nextafter(t, math.inf)  # a job past its walltime ends "any moment", never at now
            times = sorted({t} | {max(r[1], after) for r in running})
            free = [nodes - sum(r[2] for r in running if max(r[1], after) > x) for x in times]
            started = []
            for i in queue:
                size, wall = jobs[i][1], jobs[i][3]
                for k, x in enumerate(times):
                    if all(free[m] >= size for m in range(k, len(times)) if times[m] < x + wall):
                        break
                s = times[k]
                if x + wall not in times:  # split the profile at the reservation's end
                    m = next((m for m, y in enumerate(times) if y > x + wall), len(times))
                    times.insert(m, x + wall)
                    free.insert(m, free[m - 1])
                for m, y in enumerate(times):
                    if s <= y < s + wall:
                        free[m] -= size
                if s == t:
                    started.append(i)
            for i in started:
                queue.remove(i)
                start[i] = t
                running.append((t + jobs[i][2], t + jobs[i][3], jobs[i][1]))
            if not started:
                break
            running = [r for r in running if r[0] > t]
    return start


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_conservative_matches_the_reference_on_kth(repo, factor):
    trace = read_swf(repo / "tests" / "data" / "traces" / "KTH-SP2-first600.swf")
    jobs = trace.jobs.copy()
    jobs[:, 1] = np.floor((jobs[:, 1] - jobs[0, 1]) * factor)
    trace = parse_swf(_text(trace.header, jobs), "kth.swf")
    inp = from_trace(trace)
    got = run_schedule(inp, "conservative").start.tolist()
    want = conservative_reference(list(zip(inp.arrival.tolist(), inp.size.tolist(), inp.run_time.tolist(),
                                           inp.walltime.tolist())), inp.nodes)
    assert inp.nodes == 100 and len(got) == 600
    assert got == want
    assert sum(g > a for g, a in zip(got, inp.arrival.tolist())) > 50  # the slice does queue


def test_schedule_reads_what_scenario_from_swf_writes(tmp_path, repo, capsys):
    # the KTH slice as a stream scenario; schedule reads it back (the run-only bounds do not apply to a schedule,
    # the YAML bounds are --limit's) and finds the dry run scenario-from-swf estimated
    out = tmp_path / "kth.yaml"
    assert main(["scenario-from-swf", str(repo / "tests" / "data" / "traces" / "KTH-SP2-first600.swf"),
                 "--system", str(repo / "examples" / "stream-72.yaml"), "-o", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text()
    tight = ["--limit", f"yaml_bytes={len(text) // 2}"]
    assert main(["schedule", str(out), "-o", str(tmp_path / "a"), *tight]) == 2
    assert "--limit yaml_bytes" in capsys.readouterr().err
    small = out.with_name("small.yaml")
    small.write_text(text.replace("limits: {", "limits: {max_rank_iterations: 1, ") if "limits: {" in text
                     else text.replace("\njobs:\n", "\nlimits: {max_rank_iterations: 1}\njobs:\n", 1))
    assert main(["validate", str(small)]) == 2  # a run would refuse it
    capsys.readouterr()
    assert main(["schedule", str(small), "-o", str(tmp_path / "b")]) == 0
    est = next(ln for ln in text.splitlines() if "dry run with the estimated run times" in ln)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["jobs_scheduled"] == 600
    mean_wait_s = float(est.split("wait mean ")[1].split()[0]) * {"ms": 1e-3, "us": 1e-6, "s": 1, "ns": 1e-9}[
        est.split("wait mean ")[1].split()[1].rstrip(",")]
    assert summary["metrics"]["mean_wait"] == pytest.approx(mean_wait_s, rel=1e-3)


def test_a_node_failure_kills_and_requeues_the_job(tmp_path, capsys):
    # 2 nodes, EASY. A (2 nodes, 0-10) loses node 1 at 4 (back at 7): killed at 4, requeued with its whole run
    # time; it needs both nodes, so it restarts at 7 and ends at 17. B (1 node, arrives 5, 1 s) ends by A's
    # reservation at 7: backfilled at 5 on node 0.
    fail = tmp_path / "fail.txt"
    fail.write_text("# time node repair\n4 1 3\n")
    out, rows = _run(tmp_path, _swf([_j(1, 0, 10, 2), _j(2, 5, 1, 1)], 2), "--failures", fail)
    got = {n: (float(r["starting_time"]), float(r["finish_time"]), r["allocated_resources"], r["requeued"])
           for n, r in rows.items()}
    assert got == {1: (7, 17, "0-1", "1"), 2: (5, 6, "0", "0")}
    # conservative: the same (B's 1 s fits before A's reservation at 7); FCFS: B waits behind A
    for queue, b_start in (("conservative", 5), ("fcfs", 17)):
        _, rows_q = _run(tmp_path, _swf([_j(1, 0, 10, 2), _j(2, 5, 1, 1)], 2), "--failures", fail, "--queue", queue,
                         name=queue)
        assert (float(rows_q[1]["starting_time"]), float(rows_q[2]["starting_time"])) == (7, b_start), queue
    assert float(rows[1]["waiting_time"]) == 7  # from its own submit time
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["requeued_jobs"], summary["requeues"]) == (1, 1)
    bad = tmp_path / "bad.txt"
    bad.write_text("4 9 3\n")
    assert main(["schedule", str(tmp_path / "s.swf"), "-o", str(tmp_path / "b"), "--failures", str(bad)]) == 2
    assert f"{bad}:1: field NODE = 9 out of range" in capsys.readouterr().err


def test_failures_at_a_rate_are_seeded():
    from hybridsim.schedule import draw_failures

    a = draw_failures(2.0, 600, 10, 0, 86400, seed=3)
    assert np.array_equal(a, draw_failures(2.0, 600, 10, 0, 86400, seed=3))
    assert 5 < len(a) < 40 and (a[:, 2] - a[:, 0] == 600).all() and (np.diff(a[:, 0]) >= 0).all()  # ~20 expected
    assert draw_failures(0.0, 600, 10, 0, 86400, seed=3).shape == (0, 3)


def test_scenario_from_swf_reports_the_time_scale_trade_off(repo):
    from hybridsim.swf import SwfMapping, map_jobs, time_scale_tradeoff

    trace = read_swf(repo / "tests" / "data" / "traces" / "KTH-SP2-first600.swf")
    mj = map_jobs(trace, 72, SwfMapping(max_rank_iterations=10**6))
    rows = mj.tradeoff
    assert rows[0]["scale_ns_per_s"] == mj.time_scale and rows[0]["within"] == int(mj.distortion["within"].sum())
    assert rows[-1]["within"] == rows[-1]["jobs"] == 600  # the last rung fits every job
    assert all(a["rank_iterations"] <= b["rank_iterations"] for a, b in zip(rows, rows[1:]))
    assert rows[0]["rank_iterations"] <= 10**6 < rows[-1]["rank_iterations"]
    # by hand: two jobs of 10 s and 1000 s on 1 ms iterations, 1 rank each, 5 %: 10 iterations needed -> 1 ms / s
    t = time_scale_tradeoff(np.array([10.0, 1000.0]), np.array([1e6, 1e6]), np.array([1, 1]), 2000.0, 1e4, 0.05)
    assert [r["scale_ns_per_s"] for r in t] == [1e4, 4e4, 1.6e5, 6.4e5, 1e6]
    assert t[0]["within"] == 1 and t[0]["rank_iterations"] == 1 + 10  # 0.1 -> 1 iteration (off), 10 iterations
    assert t[-1] == {"scale_ns_per_s": 1e6, "within": 2, "jobs": 2, "rank_iterations": 10 + 1000,
                     "length_ns": 2000.0 * 1e6}
