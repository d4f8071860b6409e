"""What the flow model keeps between calls and computes once (hybridsim/flow.py, issue 32's cost target), by hand on
the 3-group tiny Dragonfly of tests/test_flow_model.py: the table of routes, the hop counts per router pair, a
phase's slots routed at once, a job's time alone per placement, the sets' answers kept or dropped when a job is
placed, a set solved only on its shared channels and not solved again when nothing changed between passes."""

import numpy as np
import pytest

import hybridsim.flow as flow
from hybridsim.flow import FlowModel, Routes, workload_profile
from hybridsim_common.topology import Dragonfly, DragonflyShape

# 3 groups x 2 routers x 1 terminal (terminal t on router t), 1 global channel per router; radix 3: port 0 local,
# port 1 global, port 2 terminal; channel = router * 3 + port; injection of terminal t = 18 + t. Global links:
#   r0 (G0) -> r3 (G1)   r1 (G0) -> r4 (G2)   r2 (G1) -> r5 (G2)   r3 (G1) -> r0   r4 (G2) -> r1   r5 (G2) -> r2
TINY = DragonflyShape(groups=3, routers_per_group=2, terminals_per_router=1, global_channels_per_router=1)
#: r0 -> r5: a local hop to r1, r1's global link to r4, a local hop to r5
R0_TO_R5 = [0 * 3 + 0, 1 * 3 + 1, 4 * 3 + 0]


def _routes(**kw) -> Routes:
    return Routes(Dragonfly(TINY), **kw)


def test_the_table_of_routes_holds_each_asked_pair_once_in_its_routes_order():
    routes = _routes()
    pairs = np.array([0 * 6 + 5, 2 * 6 + 2, 0 * 6 + 5])   # r0 -> r5, r2 -> r2 (no hop), r0 -> r5 again
    off, ln = routes._route_table(pairs)
    ch, fr = routes._rt_arrays
    assert ln.tolist() == [3, 0, 3] and off[0] == off[2]
    assert ch[off[0]:off[0] + 3].tolist() == R0_TO_R5 and fr[off[0]:off[0] + 3].tolist() == [1.0, 1.0, 1.0]
    assert len(ch) == 3                                   # asked twice, stored once
    off2, _ = routes._route_table(np.array([0 * 6 + 5]))
    assert off2[0] == off[0] and len(routes._rt_arrays[0]) == 3


def test_hop_counts_look_each_router_pair_up_once():
    routes = _routes()
    calls = []
    hops = routes.hops
    routes.hops = lambda s, d, q=None: calls.append((s, d)) or hops(s, d, q)
    got = routes.hop_counts([0, 0, 0, 3], [5, 1, 5, 3])
    # r0 -> r5: two local hops and one global; r0 -> r1: one local hop; r3 -> r3: none
    assert got.tolist() == [[2.0, 1.0], [1.0, 0.0], [2.0, 1.0], [0.0, 0.0]]
    assert sorted(calls) == [(0, 1), (0, 5), (3, 3)]


def test_a_phases_slots_routed_at_once_are_each_slots_own_routes():
    """Slot 1: rank 0 (t0) sends 1000 B to rank 1 (t5) and 8 B to rank 2 on its own terminal (never in the network);
    slot 0: rank 1 sends 500 B to rank 0. Row k is slot k's flow_parts, to the bit."""
    routes = _routes()
    terms = [0, 5, 0]
    src, dst, w, slot = np.array([0, 0, 1]), np.array([1, 2, 0]), np.array([1000.0, 8.0, 500.0]), np.array([1, 1, 0])
    base, minimal, spread = routes.group_parts(slot, src, dst, w, terms)
    assert base.shape == minimal.shape == spread.shape == (2, 24)
    for row, k in enumerate((0, 1)):
        one = routes.flow_parts(src[slot == k], dst[slot == k], w[slot == k], terms)
        for got, want in zip((base[row], minimal[row], spread[row]), one):
            assert np.array_equal(got, want)
    # by hand, slot 1: injection of t0 and ejection at t5 in base, the inter-group route in minimal, and twice the
    # bytes spread over the 6 global and the 6 local channels
    want = np.zeros(24)
    want[[18 + 0, 5 * 3 + 2]] = 1000.0
    assert base[1].tolist() == want.tolist()
    want = np.zeros(24)
    want[R0_TO_R5] = 1000.0
    assert minimal[1].tolist() == want.tolist()
    assert spread[1][[r * 3 + 1 for r in range(6)]].tolist() == [2000.0 / 6] * 6
    assert spread[1][[r * 3 + 0 for r in range(6)]].tolist() == [2000.0 / 6] * 6


def _pair_model() -> tuple[FlowModel, float]:
    """Two jobs, each rank 0 -> rank 1 1000 B per iteration, no compute, on links of one bandwidth (no latency)."""
    m = FlowModel(_routes(bandwidth_gib=(1.0, 1.0, 1.0)), latency=False)
    for j in (0, 1):
        m.set_traffic(j, np.array([[0.0, 1000.0], [0.0, 0.0]]), 0.0)
    return m, float(m.routes.capacity[0])


def test_a_jobs_time_alone_is_kept_per_placement():
    m, cap = _pair_model()
    m.place(0, [0, 5])
    assert m._alone_time(0) == pytest.approx(1000.0 / cap)   # its busiest channel at full capacity
    assert m._alone_t[0][1] == m._alone_time(0)
    m.place(0, [0, 0])                                        # both ranks on one terminal: no network
    assert 0 not in m._alone_t
    assert m._alone_time(0) == 0.0


def test_placing_a_job_drops_the_answers_of_its_sets_and_keeps_the_others():
    """Jobs 0 and 1 on the same two terminals share every channel: the fixed point is twice the time alone
    (x = cap - 1000 / T on each, T = 1000 / x). Job 1 moved to terminals 2 and 3 (one local hop in group 1) shares
    nothing with job 0: job 0 runs as alone."""
    m, cap = _pair_model()
    m.place(0, [0, 5])
    m.place(1, [0, 5])
    assert m.iteration_time(0, [1]) == pytest.approx(2000.0 / cap, rel=1e-4)
    kept = m._cache[(0, (1,))]
    m.set_traffic(2, np.array([[0.0, 10.0], [0.0, 0.0]]), 0.0)
    m.place(2, [2, 3])                                        # a third job: the set {0, 1} is not touched
    assert m._cache[(0, (1,))] == kept and m._cache[(1, (0,))] == m.iteration_time(1, [0])
    m.place(1, [2, 3])                                        # job 1 moves: every set with it goes
    assert (0, (1,)) not in m._cache and (1, (0,)) not in m._cache
    assert m.iteration_time(0, [1]) == pytest.approx(1000.0 / cap)


def test_a_set_is_solved_on_its_shared_channels_only_and_the_same_as_on_all_of_them():
    """Job 2 (t3 -> t5: r3's local hop to r2, r2's global link to r5) shares only the ejection at t5 with job 0
    (t0 -> t5); jobs 0 and 1 share the five channels of job 0's route. Solving on every used channel gives the same
    numbers to the bit."""
    m, cap = _pair_model()
    m.set_traffic(2, np.array([[0.0, 700.0], [0.0, 0.0]]), 0.0)
    for j, t in ((0, [0, 5]), (1, [0, 5]), (2, [3, 5])):
        m.place(j, t)
    used = m._used[0][1]
    cols, rows, _ = m._set_view(0, [2], [])
    assert used[cols].tolist() == [5 * 3 + 2] and rows[0].tolist() == [700.0]
    cols, _, _ = m._set_view(0, [1, 2], [])
    assert sorted(used[cols].tolist()) == sorted([18 + 0] + R0_TO_R5 + [5 * 3 + 2])
    sets = [(j, s) for j in (0, 1, 2) for s in ((), (1,), (2,), (1, 2), (0, 2), (0, 1))]
    fast = {(j, s): m.iteration_time(j, s) for j, s in sets}
    view = FlowModel._set_view

    def every_column(self, job, others, bgs):
        used = self._used[job][1]
        return np.arange(len(used)), [self.bytes[k][used] for k in others], [self.rate[g][used] for g in bgs]

    m2, _ = _pair_model()
    m2.set_traffic(2, np.array([[0.0, 700.0], [0.0, 0.0]]), 0.0)
    for j, t in ((0, [0, 5]), (1, [0, 5]), (2, [3, 5])):
        m2.place(j, t)
    try:
        FlowModel._set_view = every_column
        full = {(j, s): m2.iteration_time(j, s) for j, s in sets}
    finally:
        FlowModel._set_view = view
    assert fast == full
    assert fast[(0, (2,))] > fast[(0, ())]   # the shared ejection does slow job 0


def test_measured_periods_solve_each_job_of_a_set_once():
    """With both periods measured a job's co-runner demand never changes between the fixed point's passes: each
    job's shares are solved once (before: once per pass). Job 0 beside job 1's 1000 B every 3000 / cap ns: demand
    cap / 3 on each shared channel, share 2 cap / 3, time 1500 / cap."""
    m, cap = _pair_model()
    m.place(0, [0, 5])
    m.place(1, [0, 5])
    m.set_period(0, 2000.0 / cap)
    m.set_period(1, 3000.0 / cap)
    alone = (m._alone_time(0), m._alone_time(1))   # kept from here on: what every set's fixed point starts from
    solves = []
    time_ = m._time
    m._time = lambda job, demand, cols=None: solves.append(job) or time_(job, demand, cols)
    assert m.iteration_time(0, [1]) == pytest.approx(1500.0 / cap)
    assert sorted(solves) == [0, 1]
    assert (m._alone_time(0), m._alone_time(1)) == alone and sorted(solves) == [0, 1]


def test_a_phases_flows_are_kept_in_their_first_sends_order_with_their_bytes_summed():
    """Rank 0 sends 2 then 1 in every iteration (64 B, then 32 B x (iteration + 1)); rank 1 sends 0 after a compute:
    the flows in order of their first send, each the mean over the sampled iterations, per flow its largest
    message and its slot."""
    from hybridsim.workloads.ops import COMPUTE, ISEND, WAITALL

    class Job:
        n_ranks = 3

        def ops(self, rank, iteration):
            if rank == 0:
                return [(ISEND, 2, 64, 0, 0), (ISEND, 1, 32 * (iteration + 1), 0, 1), (WAITALL, (0, 1))]
            if rank == 1:
                return [(COMPUTE, 5.0), (ISEND, 0, 16, 0, 0), (WAITALL, (0,))]
            return [(WAITALL, ())]

    ph = workload_profile(Job(), 2, sample=2)   # iterations 0 and 1
    assert len(ph) == 1
    p = ph[0]
    assert p.src.tolist() == [0, 0, 1] and p.dst.tolist() == [2, 1, 0] and p.slot.tolist() == [0, 1, 0]
    assert p.w.tolist() == [64.0, (32.0 + 64.0) / 2, 16.0]
    assert p.msg.tolist() == [64.0, 64.0, 16.0] and p.largest == 64.0
    assert p.serial_ns == 5.0 and p.overlap_ns == 0.0
    assert flow.traffic_phases(Job(), 2, sample=2)[1] == 5.0
