"""Scheduler (queue + allocation), dry run and stream metrics against hand-computed schedules."""

import math

import numpy as np
import pytest

from hybridsim.placement import place
from hybridsim.scheduler import (JobOutcome, Scheduler, SchedulerError, StreamJob, bounded_slowdown, dry_run,
                                 stream_metrics)
from hybridsim_common.topology import Dragonfly, DragonflyShape

S72 = DragonflyShape(9, 4, 2, 2)          # 72 terminals
S4 = DragonflyShape(1, 2, 2, 1)           # 4 terminals: 2 routers x 2
S6 = DragonflyShape(1, 3, 2, 1)           # 6 terminals


def _times(outcomes):
    return {o.job_id: (o.start, o.end) for o in outcomes}


def _j(job_id, size, arrival, run, walltime=None):
    return StreamJob(job_id, size, arrival, run if walltime is None else walltime, run)


# ---------------------------------------------------------------------------------------------------------- FCFS
def test_fcfs_starts_in_arrival_order_and_blocks_behind_the_head():
    # 4 terminals. A holds 3 until 10; B (4) waits for A; C (1) would fit at t=2 but FCFS keeps it behind B.
    jobs = [_j("A", 3, 0, 10), _j("B", 4, 1, 5), _j("C", 1, 2, 5)]
    out = _times(dry_run(jobs, S4, "fcfs"))
    assert out == {"A": (0, 10), "B": (10, 15), "C": (15, 20)}


def test_fcfs_ties_keep_submission_order_and_fill_what_fits():
    jobs = [_j("A", 2, 0, 4), _j("B", 2, 0, 6), _j("C", 1, 0, 1), _j("D", 3, 0, 2)]
    out = _times(dry_run(jobs, S4, "fcfs"))
    # A and B fill the machine; C takes one of A's terminals at 4; D (3) fits only once B ends at 6
    assert out == {"A": (0, 4), "B": (0, 6), "C": (4, 5), "D": (6, 8)}


def test_a_job_waits_while_the_machine_is_full():
    jobs = [_j("full", 4, 0, 10), _j("small", 1, 3, 1)]
    for queue in ("fcfs", "easy"):
        out = dry_run(jobs, S4, queue)
        assert (out[1].start, out[1].wait) == (10, 7), queue


# ---------------------------------------------------------------------------------------------------------- EASY
def test_easy_backfills_a_job_that_ends_before_the_reservation():
    # B (head, 4 terminals) is reserved at 10, when A ends; C (1 terminal, walltime 6) ends by 8 <= 10: backfilled.
    jobs = [_j("A", 3, 0, 10), _j("B", 4, 1, 5), _j("C", 1, 2, 5, walltime=6)]
    out = _times(dry_run(jobs, S4, "easy"))
    assert out == {"A": (0, 10), "B": (10, 15), "C": (2, 7)}


def test_easy_does_not_backfill_a_job_that_could_delay_the_head():
    # Same, but C's walltime 9 would take it to 11 > 10 and no terminal is spare at 10: C waits although its
    # actual run (5) would have fitted -- the decision is made on the walltime.
    jobs = [_j("A", 3, 0, 10), _j("B", 4, 1, 5), _j("C", 1, 2, 5, walltime=9)]
    out = _times(dry_run(jobs, S4, "easy"))
    assert out == {"A": (0, 10), "B": (10, 15), "C": (15, 20)}


def test_easy_backfills_on_extra_terminals_and_then_stops():
    # 6 terminals. A (3) until 10; B (4) arrives at 1: shadow 10, 6 - 4 = 2 extra terminals then.
    # C (2, runs 100) uses the 2 extra terminals: backfilled at 2 although it ends long after 10.
    # D (1, walltime 1) ends before the shadow: backfilled at 3, ends at 4.
    # E (1, walltime 50) at 4: one terminal free, no extra left (C took it), 54 > 10: waits; starts when B ends.
    jobs = [_j("A", 3, 0, 10), _j("B", 4, 1, 5), _j("C", 2, 2, 100), _j("D", 1, 3, 1), _j("E", 1, 4, 50)]
    out = _times(dry_run(jobs, S6, "easy"))
    assert out == {"A": (0, 10), "B": (10, 15), "C": (2, 102), "D": (3, 4), "E": (15, 65)}
    # FCFS: B and C start together at 10 (4 + 2 = 6), D and E once B ends
    fcfs = _times(dry_run(jobs, S6, "fcfs"))
    assert fcfs == {"A": (0, 10), "B": (10, 15), "C": (10, 110), "D": (15, 16), "E": (15, 65)}


def test_easy_reports_the_heads_reservation():
    s = Scheduler(S4, "easy")
    s.submit("A", 3, 0, 10)
    s.submit("B", 4, 1, 5)
    assert [j for j, _ in s.next_decisions(0)] == ["A"] and s.reservation is None
    assert s.next_event_time() == 1
    assert s.next_decisions(1) == [] and s.reservation == ("B", 10)
    assert s.next_event_time() is None


def _random_stream(rng, n, max_size, exact):
    jobs, t = [], 0.0
    for i in range(n):
        t += float(rng.integers(0, 5))
        run = float(rng.integers(1, 30))
        wall = run if exact else run + float(rng.integers(0, 20))
        jobs.append(StreamJob(i, int(rng.integers(1, max_size + 1)), t, wall, run))
    return jobs


@pytest.mark.parametrize("seed", range(6))
def test_easy_never_starts_a_job_after_a_reservation_it_was_given(seed):
    # Drive the scheduler by hand and record every reservation; with run times <= walltimes, each job starts no
    # later than every shadow time it was promised as the head of the queue.
    jobs = _random_stream(np.random.default_rng(seed), 40, 72, exact=seed % 2 == 0)
    s = Scheduler(S72, "easy", "random", seed=seed)
    for j in jobs:
        s.submit(j.job_id, j.size, j.arrival, j.walltime)
    promised: dict[int, float] = {}
    start: dict[int, float] = {}
    ends: list[tuple[float, int]] = []
    backfilled = 0
    while True:
        cands = [t for t in (s.next_event_time(), min(ends)[0] if ends else None) if t is not None]
        if not cands:
            break
        now = min(cands)
        for e in sorted(x for x in ends if x[0] == now):
            s.release(e[1], now)
            ends.remove(e)
        for jid, _ in s.next_decisions(now):
            start[jid] = now
            ends.append((now + jobs[jid].run_time, jid))
            # started while an earlier arrival still waits: a backfill
            backfilled += any(jobs[w].arrival < jobs[jid].arrival for w in s.waiting if jobs[w].arrival <= now)
        if s.reservation is not None:
            jid, shadow = s.reservation
            promised[jid] = min(promised.get(jid, math.inf), shadow)
    assert len(start) == len(jobs)
    assert promised and backfilled, "the stream must make jobs wait and backfill"
    for jid, shadow in promised.items():
        assert start[jid] <= shadow, (jid, start[jid], shadow)


# ---------------------------------------------------------------------------------------------------------- allocation
@pytest.mark.parametrize("queue", ["fcfs", "easy"])
@pytest.mark.parametrize("allocation", ["contiguous", "random", "random-router", "random-group"])
def test_no_terminal_is_held_by_two_running_jobs(queue, allocation):
    jobs = _random_stream(np.random.default_rng(3), 60, 40, exact=False)
    out = dry_run(jobs, S72, queue, allocation, seed=5)
    for o in out:
        assert len(o.terminals) == o.size and len(set(o.terminals.tolist())) == o.size
        assert o.terminals.min() >= 0 and o.terminals.max() < 72
    for i, a in enumerate(out):
        for b in out[i + 1:]:
            if a.start < b.end and b.start < a.end:  # running at the same time
                assert not set(a.terminals.tolist()) & set(b.terminals.tolist()), (a.job_id, b.job_id)
    assert max(o.wait for o in out) > 0  # the stream did queue


@pytest.mark.parametrize("allocation", ["contiguous", "random", "random-router", "random-group"])
def test_all_at_once_allocates_what_placement_places(allocation):
    sizes = [30, 20, 16]
    out = dry_run([_j(f"j{i}", r, 0, 5) for i, r in enumerate(sizes)], S72, "fcfs", allocation, seed=11)
    want = place(allocation, sizes, Dragonfly(S72), seed=11)
    assert all((o.terminals == w).all() for o, w in zip(out, want))


def test_freed_terminals_serve_the_next_job_contiguous():
    out = dry_run([_j("A", 2, 0, 5), _j("B", 2, 0, 9), _j("C", 3, 1, 1)], S4, "fcfs", "contiguous")
    assert out[0].terminals.tolist() == [0, 1] and out[1].terminals.tolist() == [2, 3]
    assert (out[2].start, out[2].terminals.tolist()) == (9, [0, 1, 2])


def test_deterministic_per_seed():
    jobs = _random_stream(np.random.default_rng(1), 30, 30, exact=False)
    a = dry_run(jobs, S72, "easy", "random", seed=4)
    b = dry_run(jobs, S72, "easy", "random", seed=4)
    c = dry_run(jobs, S72, "easy", "random", seed=5)
    assert all(x.start == y.start and (x.terminals == y.terminals).all() for x, y in zip(a, b))
    assert any((x.terminals != y.terminals).any() for x, y in zip(a, c))


# ---------------------------------------------------------------------------------------------------------- errors
def test_errors():
    s = Scheduler(S4)
    with pytest.raises(SchedulerError, match="outside 1..4"):
        s.submit("big", 5)
    with pytest.raises(SchedulerError, match="walltime"):
        s.submit("neg", 1, 0, -1)
    with pytest.raises(SchedulerError, match="arrival"):
        s.submit("neg", 1, -1, 1)
    s.submit("a", 1, 0, 1)
    with pytest.raises(SchedulerError, match="twice"):
        s.submit("a", 1)
    s.next_decisions(2)
    with pytest.raises(SchedulerError, match="backwards"):
        s.next_decisions(1)
    with pytest.raises(SchedulerError, match="not running"):
        s.release("zzz", 3)
    with pytest.raises(SchedulerError, match="unknown queue"):
        Scheduler(S4, queue="nope")
    with pytest.raises(SchedulerError, match="unknown allocation"):
        Scheduler(S4, allocation="file")


def test_a_job_larger_than_what_background_jobs_leave_is_an_error():
    jobs = [StreamJob("bg", 2, 0, math.inf, math.inf), _j("big", 3, 1, 5)]
    with pytest.raises(SchedulerError, match="needs 3 terminals but only 2 of 4"):
        dry_run(jobs, S4, "easy")
    out = dry_run([StreamJob("bg", 2, 0, math.inf, math.inf), _j("x", 2, 1, 5), _j("y", 1, 1, 5)], S4, "easy")
    assert [(o.start, o.end) for o in out] == [(0, math.inf), (1, 6), (6, 11)]


# ---------------------------------------------------------------------------------------------------------- metrics
def test_bounded_slowdown_and_stream_metrics():
    assert bounded_slowdown(0, 5, 10) == 1.0
    assert bounded_slowdown(15, 5, 10) == 2.0            # (15 + 5) / max(5, 10)
    assert bounded_slowdown(30, 20, 10) == 2.5
    with pytest.raises(ValueError):
        bounded_slowdown(1, 1, 0)
    t = np.array([0])
    out = [JobOutcome("A", 3, 0, 10, 0, 10, t), JobOutcome("B", 4, 1, 5, 10, 15, t),
           JobOutcome("C", 1, 2, 6, 2, 7, t), JobOutcome("bg", 1, 0, math.inf, 0, math.inf, t)]
    m = stream_metrics(out, 4, tau=10)
    # waits 0, 9, 0; slowdowns 1, (9+5)/10 = 1.4, 1; busy 3*10 + 4*5 + 1*5 = 55 of 4 x 15
    assert m["jobs"] == 3 and m["makespan"] == 15
    assert m["mean_wait"] == pytest.approx(3.0)
    assert m["mean_bounded_slowdown"] == pytest.approx((1 + 1.4 + 1) / 3)
    assert m["utilisation"] == pytest.approx(55 / 60)
    assert out[1].row(10) == {"job": "B", "arrival": 1, "start": 10, "end": 15, "wait": 9, "run_time": 5,
                              "bounded_slowdown": 1.4, "size": 4, "terminals": [0]}
    assert math.isnan(out[3].row(10)["bounded_slowdown"])


def test_easy_counts_every_job_ending_at_the_shadow_time_as_spare():
    # 4 terminals. A (1) and B (2) both end at 10; C (2) heads the queue at 1: shadow 10, and at 10 all 4 terminals
    # are free, so 4 - 2 = 2 spare. D (1 terminal, 100 s) at 2 fits the free terminal and the spare ones: backfilled,
    # although A alone already frees enough for C at 10.
    jobs = [_j("A", 1, 0, 10), _j("B", 2, 0, 10), _j("C", 2, 1, 5), _j("D", 1, 2, 100)]
    assert _times(dry_run(jobs, S4, "easy")) == {"A": (0, 10), "B": (0, 10), "C": (10, 15), "D": (2, 102)}


# ------------------------------------------------------------------------------------------------------ conservative
def test_conservative_protects_every_reservation_not_only_the_heads():
    # 4 terminals. A (3) until 10; B (2) and C (2) arrive at 1 and 2: both reserved at 10 (2 + 2 = 4). D (1, 20 s)
    # at 3 fits the free terminal now, but would hold it through [10, 12) where B and C need all 4: it waits till 12.
    # EASY protects only B: D is backfilled at 3 and C, which needs 2, waits for B to end at 12.
    jobs = [_j("A", 3, 0, 10), _j("B", 2, 1, 2), _j("C", 2, 2, 2), _j("D", 1, 3, 20)]
    assert _times(dry_run(jobs, S4, "conservative")) == {"A": (0, 10), "B": (10, 12), "C": (10, 12), "D": (12, 32)}
    assert _times(dry_run(jobs, S4, "easy")) == {"A": (0, 10), "B": (10, 12), "C": (12, 14), "D": (3, 23)}


def test_conservative_backfills_a_job_that_delays_no_reservation():
    # as above, but D runs 5 s: 3 + 5 = 8 <= 10, before any reservation needs its terminal
    jobs = [_j("A", 3, 0, 10), _j("B", 2, 1, 2), _j("C", 2, 2, 2), _j("D", 1, 3, 5)]
    assert _times(dry_run(jobs, S4, "conservative"))["D"] == (3, 8)


@pytest.mark.parametrize("seed", range(4))
def test_conservative_never_starts_a_job_after_its_first_reservation(seed):
    # With run times <= walltimes, a conservative reservation is a promise to every waiting job, not only the head:
    # drive by hand, note each job's reservation while it waits at the head, check it against its start.
    jobs = _random_stream(np.random.default_rng(seed + 10), 50, 72, exact=seed % 2 == 0)
    s = Scheduler(S72, "conservative")
    for j in jobs:
        s.submit(j.job_id, j.size, j.arrival, j.walltime)
    promised, start, ends = {}, {}, []
    while True:
        cands = [t for t in (s.next_event_time(), min(ends)[0] if ends else None) if t is not None]
        if not cands:
            break
        now = min(cands)
        for e in sorted(x for x in ends if x[0] == now):
            s.release(e[1], now)
            ends.remove(e)
        for jid, _ in s.next_decisions(now):
            start[jid] = now
            ends.append((now + jobs[jid].run_time, jid))
        if s.reservation is not None:
            promised[s.reservation[0]] = min(promised.get(s.reservation[0], math.inf), s.reservation[1])
    assert len(start) == len(jobs) and promised
    assert all(start[j] <= t for j, t in promised.items())
    assert sum(o.wait > 0 for o in dry_run(jobs, S72, "conservative")) > 5


def test_sjf_serves_the_shortest_walltime_first_and_policies_are_checked():
    from hybridsim.queues import QueuePolicy, QueuePolicyError, queue_policy

    jobs = [_j("A", 4, 0, 10), _j("B", 4, 1, 5), _j("C", 4, 2, 2)]
    assert _times(dry_run(jobs, S4, "hybridsim.queues:ShortestJobFirst")) == {"A": (0, 10), "B": (12, 17),
                                                                              "C": (10, 12)}

    class Bad(QueuePolicy):
        backfill = "aggressive"

    with pytest.raises(QueuePolicyError, match="backfill 'aggressive'"):
        queue_policy(Bad)
    with pytest.raises(QueuePolicyError, match="not a hybridsim.queues.QueuePolicy"):
        queue_policy("math:pi")
    with pytest.raises(QueuePolicyError, match="cannot load"):
        queue_policy("no_such_module_xyz:P")


def test_kill_at_walltime_and_plain_node_counts():
    jobs = [_j("A", 2, 0, 8, walltime=5), _j("B", 2, 1, 3)]
    out = dry_run(jobs, 2, "fcfs")
    assert [(o.start, o.end, o.killed) for o in out] == [(0, 8, False), (8, 11, False)]
    out = dry_run(jobs, 2, "fcfs", kill_at_walltime=True)
    assert [(o.start, o.end, o.killed) for o in out] == [(0, 5, True), (5, 8, False)]
    with pytest.raises(SchedulerError, match="needs a Dragonfly"):
        Scheduler(8, allocation="random-router")


def test_standard_metrics_by_hand():
    t = np.array([0])
    # waits 0, 2, 4, 10; runs 10, 2, 4, 20; sizes 1, 2, 3, 8 on 8 terminals
    out = [JobOutcome("a", 1, 0, 10, 0, 10, t), JobOutcome("b", 2, 1, 2, 3, 5, t),
           JobOutcome("c", 3, 2, 4, 6, 10, t), JobOutcome("d", 8, 5, 20, 15, 35, t, killed=True)]
    m = stream_metrics(out, 8, tau=5)
    assert m["jobs"] == 4 and m["killed"] == 1 and m["makespan"] == 35
    assert (m["mean_wait"], m["median_wait"], m["max_wait"]) == (4.0, 3.0, 10.0)
    assert m["p95_wait"] == pytest.approx(4 + 0.85 * 6)        # linear between the 3rd (4) and 4th (10) of 4
    assert (m["mean_response"], m["max_response"]) == ((10 + 4 + 8 + 30) / 4, 30.0)
    # bounded slowdowns: 1; (2 + 2) / 5 -> 1; (4 + 4) / 5 = 1.6; 30 / 20 = 1.5
    assert m["mean_bounded_slowdown"] == pytest.approx((1 + 1 + 1.6 + 1.5) / 4)
    assert m["utilisation"] == pytest.approx((10 + 4 + 12 + 160) / (8 * 35))
    assert m["throughput"] == pytest.approx(4 / 35)
    assert list(m["by_size"]) == ["1", "2", "3-4", "5-8"]
    assert m["by_size"]["3-4"] == {"jobs": 1, "mean_wait": 4.0, "median_wait": 4.0, "p95_wait": 4.0, "max_wait": 4.0,
                                   "mean_response": 8.0, "median_response": 8.0, "p95_response": 8.0,
                                   "max_response": 8.0, "mean_bounded_slowdown": 1.6,
                                   "median_bounded_slowdown": 1.6, "p95_bounded_slowdown": 1.6,
                                   "max_bounded_slowdown": 1.6}
