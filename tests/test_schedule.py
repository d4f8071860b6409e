"""``hybridsim schedule``: hand-computed FCFS / EASY / conservative schedules, and the NASA iPSC/860 trace (the
bundled copy, tests/data/traces) against an independent reference scheduler written out below (x1 and x0.5
inter-arrival times)."""

import csv
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from hybridsim.cli import main
from hybridsim.schedule import from_trace, run_schedule
from hybridsim.swf import parse_swf, read_swf


def _swf(jobs, max_nodes=4):
    """SWF text: ``jobs`` = (number, submit, run, procs[, requested time])."""
    lines = ["; Version: 2.2", f"; MaxNodes: {max_nodes}"]
    for j in jobs:
        num, submit, run, procs = j[:4]
        req = j[4] if len(j) > 4 else -1
        lines.append(f"{num} {submit} -1 {run} {procs} -1 -1 {procs} {req} -1 1 1 1 -1 -1 -1 -1 -1")
    return "\n".join(lines) + "\n"


def _schedule(tmp_path, text, *args, name="s"):
    trace = tmp_path / f"{name}.swf"
    trace.write_text(text)
    out = tmp_path / name
    assert main(["schedule", str(trace), "-o", str(out), *map(str, args)]) == 0
    with open(out / "jobs.csv") as fh:
        rows = list(csv.DictReader(fh))
    return out, {int(r["job_id"]): (float(r["starting_time"]), float(r["finish_time"])) for r in rows}


# Four nodes. A (3 nodes, 0-10) leaves one free. B (2 nodes) arrives at 1 and heads the queue: 4 nodes free at 10
# when A ends, 2 to spare. C (2 nodes, 2 s) arrives at 2 behind B. D (1 node, 20 s) arrives at 3.
#   FCFS: B and C start together at 10 (2 + 2 = 4 nodes), D once they end at 12.
#   EASY: only B holds a reservation; D fits the one free node and B's 2 spare nodes: backfilled at 3 (to 23). At 10
#         B starts on 2 of the 3 free nodes; C needs 2: it waits for B (12) -- D delayed C, EASY allows that.
#   conservative: C holds a reservation at 10 as well, so D (20 s) has no node for [10, 12): it waits till 12.
CASE = [(1, 0, 10, 3), (2, 1, 2, 2), (3, 2, 2, 2), (4, 3, 20, 1)]
WANT = {"fcfs": {1: (0, 10), 2: (10, 12), 3: (10, 12), 4: (12, 32)},
        "easy": {1: (0, 10), 2: (10, 12), 3: (12, 14), 4: (3, 23)},
        "conservative": {1: (0, 10), 2: (10, 12), 3: (10, 12), 4: (12, 32)}}


@pytest.mark.parametrize("queue", ["fcfs", "easy", "conservative"])
def test_hand_case(tmp_path, queue):
    out, got = _schedule(tmp_path, _swf(CASE), "--queue", queue)
    assert got == WANT[queue]
    swf = [ln.split() for ln in (out / "schedule.swf").read_text().splitlines() if not ln.startswith(";")]
    # every job with its number, submit and run time; field 3 = the wait
    assert [(int(f[0]), int(f[1]), int(f[2]), int(f[3])) for f in swf] == [
        (n, s, int(WANT[queue][n][0]) - s, r) for n, s, r, _ in CASE]
    assert (out / "schedule.swf").read_text().startswith("; Version: 2.2\n; MaxNodes: 4\n")
    summary = json.loads((out / "summary.json").read_text())
    waits = [WANT[queue][n][0] - s for n, s, _, _ in CASE]
    m = summary["metrics"]
    assert summary["nodes"] == 4 and summary["jobs_scheduled"] == 4
    assert m["mean_wait"] == pytest.approx(np.mean(waits)) and m["max_wait"] == max(waits)
    assert json.loads((out / "manifest.json").read_text())["status"] == "completed"
    table = pq.read_table(out / "jobs.parquet").to_pylist()
    assert [r["job"] for r in table] == [1, 2, 3, 4] and table[0]["line"] == 3 and table[3]["size_class"] == "1"


def test_requested_time_is_the_walltime_and_kill_is_optional(tmp_path):
    # 2 nodes. A (2 nodes) asks for 5 s but runs 8; B (2 nodes) arrives at 1.
    case = [(1, 0, 8, 2, 5), (2, 1, 3, 2, 10)]
    _, got = _schedule(tmp_path, _swf(case, 2), "--queue", "fcfs", name="keep")
    assert got == {1: (0, 8), 2: (8, 11)}
    out, got = _schedule(tmp_path, _swf(case, 2), "--queue", "fcfs", "--kill-at-walltime", name="kill")
    assert got == {1: (0, 5), 2: (5, 8)}
    first = next(ln.split() for ln in (out / "schedule.swf").read_text().splitlines() if ln.startswith("1 "))
    assert first[3] == "5" and first[10] == "0"  # ran 5 s, status 0 (killed)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["killed"] == 1


def test_walltime_rule_factor_changes_easy_backfilling(tmp_path):
    # 4 nodes. A (1 node, 0-10, requests 10 s); B (4 nodes, requests 5 s) at 1 heads the queue: shadow 10, no node
    # to spare. C (1 node, runs 6 s, requests nothing) at 2: with exact walltimes it ends by 8 <= 10 -> backfilled;
    # with walltime 2 x 6 = 12 it would end at 14 > 10 -> it waits for B. (A and B keep their requested times.)
    case = [(1, 0, 10, 1, 10), (2, 1, 5, 4, 5), (3, 2, 6, 1)]
    _, exact = _schedule(tmp_path, _swf(case), "--queue", "easy", name="exact")
    _, twice = _schedule(tmp_path, _swf(case), "--queue", "easy", "--walltime-rule", "factor", name="twice")
    assert exact == {1: (0, 10), 2: (10, 15), 3: (2, 8)}
    assert twice == {1: (0, 10), 2: (10, 15), 3: (15, 21)}


def test_shortest_job_first_plug_in(tmp_path, monkeypatch):
    # 1 node: A runs 0-10; B (5 s) arrives at 1, C (2 s) at 2: SJF serves C first at 10, then B.
    case = [(1, 0, 10, 1), (2, 1, 5, 1), (3, 2, 2, 1)]
    _, got = _schedule(tmp_path, _swf(case, 1), "--queue", "hybridsim.queues:ShortestJobFirst", name="spec")
    assert got == {1: (0, 10), 2: (12, 17), 3: (10, 12)}

    import importlib.metadata
    from importlib.metadata import EntryPoint

    import hybridsim.queues as q

    ep = EntryPoint("sjf", "hybridsim.queues:ShortestJobFirst", q.ENTRY_POINT_GROUP)  # as an installed package's
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [ep] if group == q.ENTRY_POINT_GROUP else [])
    assert "sjf" in q.available_queue_policies()
    _, got2 = _schedule(tmp_path, _swf(case, 1), "--queue", "sjf", name="ep")
    assert got2 == got


def test_unknown_size_or_run_time_is_kept_unscheduled(tmp_path):
    text = _swf([(1, 0, 10, 2), (2, 1, -1, 2), (3, 2, 4, 2)])
    out, got = _schedule(tmp_path, text, "--queue", "fcfs")
    assert got == {1: (0, 10), 3: (2, 6)}
    body = [ln.split() for ln in (out / "schedule.swf").read_text().splitlines() if not ln.startswith(";")]
    assert [b[:4] for b in body] == [["1", "0", "0", "10"], ["2", "1", "-1", "-1"], ["3", "2", "0", "4"]]
    assert json.loads((out / "summary.json").read_text())["not_scheduled"] == {"unknown run time": 1}


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    big = tmp_path / "big.swf"
    big.write_text(_swf([(1, 0, 10, 2), (2, 1, 10, 8)]))
    out = tmp_path / "o"
    assert main(["schedule", str(big), "-o", str(out)]) == 2
    assert f"{big}:4: field 5 (procs) = 8 processors, more than the 4 nodes" in capsys.readouterr().err
    absurd = tmp_path / "absurd.swf"
    absurd.write_text(_swf([(1, 0, "1e300", 2)]))
    assert main(["schedule", str(absurd), "-o", str(out)]) == 2
    assert f"{absurd}:3: field 4 (run) = 1e+300 is out of range" in capsys.readouterr().err
    assert main(["schedule", str(big), "-o", str(out), "--nodes", "8", "--queue", "lottery"]) == 2
    assert "unknown queue policy 'lottery'" in capsys.readouterr().err
    assert not out.exists()
    # an existing folder that hybridsim did not write is never replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    ok = tmp_path / "ok.swf"
    ok.write_text(_swf([(1, 0, 10, 2)]))
    assert main(["schedule", str(ok), "-o", str(tmp_path / "mine"), "--force"]) == 2
    assert "not a hybridsim" in capsys.readouterr().err and (tmp_path / "mine" / "notes.txt").exists()
    assert main(["schedule", str(ok), "-o", str(out)]) == 0
    assert main(["schedule", str(ok), "-o", str(out)]) == 2  # exists: needs --force
    assert main(["schedule", str(ok), "-o", str(out), "--force"]) == 0


def test_a_scenario_is_scheduled_with_its_declared_run_times(tmp_path, repo):
    from hybridsim.schedule import declared_run_time
    from hybridsim.scenario import load_scenario

    src = tmp_path / "stream.yaml"
    src.write_text("""
topology: {groups: 1, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
scheduler: {queue: fcfs}
jobs:
  - {name: a, ranks: 3, iterations: 10, workload: {kind: nearest_neighbor, dimension_sizes: [3], msg_size: 64}}
  - {name: b, ranks: 4, iterations: 5, arrival: 1us,
     workload: {kind: nearest_neighbor, dimension_sizes: [4], msg_size: 64}}
""")
    sc = load_scenario(src)
    ra, rb = (declared_run_time(j) / 1e9 for j in sc.jobs)
    out = tmp_path / "out"
    assert main(["schedule", str(src), "-o", str(out)]) == 0
    rows = {r["name"]: r for r in pq.read_table(out / "jobs.parquet").to_pylist()}
    assert rows["a"]["start"] == 0 and rows["a"]["end"] == pytest.approx(ra)
    assert rows["b"]["start"] == pytest.approx(ra) and rows["b"]["run_time"] == pytest.approx(rb)
    assert rows["b"]["submit"] == pytest.approx(1e-6) and rows["b"]["job"] == 2


# ------------------------------------------------------------------------------------------------ NASA reference
def reference_schedule(jobs, nodes, queue):
    """Start times by a plain event loop, written independently of hybridsim.scheduler: ``jobs`` = (submit, size,
    run, walltime) in submit order. At each time: jobs that end leave, arrived jobs join the queue, the queue is
    served -- FCFS: from the head while the head fits; EASY (Mu'alem & Feitelson 2001): then, with the head blocked,
    its shadow time (running jobs end by their walltime) and the nodes to spare then (every job ending at the shadow
    time counted); a later job starts if it fits
    now and ends (by walltime) by the shadow time, or fits the spare nodes (which it then uses up). Repeated at the
    same time until nothing changes (a job of run time 0 ends as it starts)."""
    start = [None] * len(jobs)
    running = []  # (end, walltime end, size, i)
    queue_ = []
    free = nodes
    nxt = 0
    t = 0.0
    while nxt < len(jobs) or queue_ or running:
        cands = ([jobs[nxt][0]] if nxt < len(jobs) else []) + [r[0] for r in running]
        t = max(t, min(cands))
        while True:
            changed = False
            for r in [r for r in running if r[0] <= t]:
                running.remove(r)
                free += r[2]
                changed = True
            while nxt < len(jobs) and jobs[nxt][0] <= t:
                queue_.append(nxt)
                nxt += 1
                changed = True
            while queue_ and jobs[queue_[0]][1] <= free:
                i = queue_.pop(0)
                start[i] = t
                free -= jobs[i][1]
                running.append((t + jobs[i][2], t + jobs[i][3], jobs[i][1], i))
                changed = True
            if queue_ and queue == "easy":
                head = jobs[queue_[0]]
                ends = sorted((max(r[1], t), r[2]) for r in running)
                shadow = next(e for e, _ in ends if free + sum(s for e2, s in ends if e2 <= e) >= head[1])
                extra = free + sum(s for e, s in ends if e <= shadow) - head[1]  # all that end at the shadow time
                for i in list(queue_[1:]):
                    size, wall = jobs[i][1], jobs[i][3]
                    if size <= free and (t + wall <= shadow or size <= extra):
                        if t + wall > shadow:
                            extra -= size
                        queue_.remove(i)
                        start[i] = t
                        free -= size
                        running.append((t + jobs[i][2], t + wall, size, i))
                        changed = True
            if not changed:
                break
            if any(r[0] <= t for r in running):
                continue
            break
    return start


@pytest.fixture(scope="module")
def nasa(swf_trace):
    return read_swf(swf_trace)


def _scaled(trace, factor):
    """The trace with inter-arrival times x ``factor`` (x0.5: twice the load)."""
    jobs = trace.jobs.copy()
    jobs[:, 1] = np.floor(jobs[:, 1] * factor)
    text = "\n".join(trace.header) + "\n" + "\n".join(" ".join(str(int(v)) for v in row) for row in jobs) + "\n"
    return parse_swf(text, "scaled.swf")


@pytest.mark.parametrize("factor", [1.0, 0.5])
@pytest.mark.parametrize("queue", ["fcfs", "easy"])
def test_nasa_trace_matches_the_reference(nasa, queue, factor):
    trace = nasa if factor == 1 else _scaled(nasa, factor)
    inp = from_trace(trace)
    got = run_schedule(inp, queue).start.tolist()
    jobs = list(zip(inp.arrival.tolist(), inp.size.tolist(), inp.run_time.tolist(), inp.walltime.tolist()))
    want = reference_schedule(jobs, 128, queue)
    assert inp.nodes == 128 and len(got) == 18239
    assert got == want
    waits = np.array(got) - np.array([j[0] for j in jobs])
    print(queue, factor, (waits > 0).sum())
    assert (waits > 0).sum() > 5  # the trace does queue (its submit times are start times: little at x1)


def test_nasa_through_the_command(tmp_path, swf_trace):
    out = tmp_path / "nasa"
    assert main(["schedule", str(swf_trace), "-o", str(out), "--queue", "fcfs"]) == 0
    swf = read_swf(out / "schedule.swf")
    trace = read_swf(swf_trace)
    assert (swf.jobs[:, [0, 1, 3, 4]] == trace.jobs[:, [0, 1, 3, 4]]).all()
    inp = from_trace(trace)
    want = reference_schedule(list(zip(inp.arrival, inp.size, inp.run_time, inp.walltime)), 128, "fcfs")
    waits = np.array(want) - inp.arrival
    assert (swf.jobs[inp.rows, 2] == waits).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["mean_wait"] == pytest.approx(waits.mean())
    assert math.isclose(summary["metrics"]["p95_wait"], np.percentile(waits, 95))


def test_plots_and_the_steps_they_draw(tmp_path):
    from hybridsim.report import busy_over_time

    # the hand case under EASY: A 3 nodes 0-10, B 2 nodes 10-12, C 2 nodes 12-14, D 1 node 3-23
    t, busy, waiting = busy_over_time([0, 10, 12, 3], [10, 12, 14, 23], [3, 2, 2, 1], [0, 1, 2, 3])
    assert t.tolist() == [0, 1, 2, 3, 10, 12, 14, 23]
    assert busy.tolist() == [3, 3, 3, 4, 3, 3, 1, 0]
    assert waiting.tolist() == [0, 1, 2, 2, 1, 0, 0, 0]
    out, _ = _schedule(tmp_path, _swf(CASE), "--queue", "easy", "--plot")
    for name in ("gantt.png", "utilisation.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 10_000


def test_a_gzipped_trace_reads_the_same(tmp_path):
    import gzip

    gz = tmp_path / "case.swf.gz"
    gz.write_bytes(gzip.compress(_swf(CASE).encode()))
    out = tmp_path / "gz"
    assert main(["schedule", str(gz), "-o", str(out), "--queue", "easy"]) == 0
    rows = pq.read_table(out / "jobs.parquet").to_pylist()
    assert {r["job"]: (r["start"], r["end"]) for r in rows} == WANT["easy"]
