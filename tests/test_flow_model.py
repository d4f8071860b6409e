"""The flow-level interference model (hybridsim/flow.py) against hand-computed routes, shares and times."""

import numpy as np
import pytest

from hybridsim.flow import FlowModel, Routes, maxmin_levels, maxmin_share, traffic_matrix, traffic_phases
from hybridsim_common.topology import Dragonfly, DragonflyShape

# 3 groups x 2 routers x 1 terminal, 1 global channel per router (g = a*h + 1: CODES' arrangement). Router i of
# group G reaches group (G + i + 1) mod 3, landing on router 1 - i there:
#   r0 (G0) -> r3 (G1)   r1 (G0) -> r4 (G2)   r2 (G1) -> r5 (G2)   r3 (G1) -> r0   r4 (G2) -> r1   r5 (G2) -> r2
# radix 3: port 0 local, port 1 global, port 2 terminal; channel = router * 3 + port; injection of t = 18 + t
TINY = DragonflyShape(groups=3, routers_per_group=2, terminals_per_router=1, global_channels_per_router=1)


def test_tiny_topology_is_the_one_the_hand_routes_assume():
    topo = Dragonfly(TINY)
    assert topo.global_targets == [[3], [4], [5], [0], [1], [2]]
    assert topo.radix == 3 and topo.n_ports == 18


def test_routes_of_a_two_rank_matrix_give_the_hand_computed_channel_bytes():
    """Rank 0 on terminal 0 sends 1000 B to rank 1 on terminal 5, which sends 500 B back. r0 has no global link to
    G2, so 0 -> r1 (local) -> r4 (global) -> r5 (local) -> eject; back: r5 -> r4 (local) -> r1 (global) -> r0
    (local) -> eject."""
    routes = Routes(Dragonfly(TINY))
    tm = np.array([[0.0, 1000.0], [500.0, 0.0]])
    got = routes.channel_bytes(tm, [0, 5])
    want = np.zeros(18 + 6)
    # inject t0, r0 local, r1 global, r4 local, eject t5; back: inject t5, r5 local, r4 global, r1 local, eject t0
    want[[18 + 0, 0 * 3 + 0, 1 * 3 + 1, 4 * 3 + 0, 5 * 3 + 2]] = 1000.0
    want[[18 + 5, 5 * 3 + 0, 4 * 3 + 1, 1 * 3 + 0, 0 * 3 + 2]] += 500.0
    np.testing.assert_allclose(got, want)


def test_a_router_with_its_own_global_link_takes_it_and_ranks_on_one_terminal_stay_off_the_network():
    routes = Routes(Dragonfly(TINY))
    got = routes.channel_bytes(np.array([[0.0, 64.0, 8.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), [0, 3, 0])
    want = np.zeros(24)
    want[[18 + 0, 0 * 3 + 1, 3 * 3 + 2]] = 64.0   # r0 -> r3 directly over its global link, eject at t3
    np.testing.assert_allclose(got, want)


def test_parallel_global_links_share_the_bytes_evenly():
    """2 groups x 2 routers, 1 global channel each: both routers of G0 link to G1 (two parallel group links). From
    r0 to r3 the route is r0's own global link; from both routers together, each link carries its router's bytes."""
    shape = DragonflyShape(groups=2, routers_per_group=2, terminals_per_router=1, global_channels_per_router=1)
    topo = Dragonfly(shape)
    routes = Routes(topo)
    glob = [r * topo.radix + 1 for r in range(4)]
    one = routes.channel_bytes(np.array([[0.0, 300.0], [0.0, 0.0]]), [0, 3])
    assert one[glob[0]] == pytest.approx(300.0) and one[glob[1]] == 0.0
    assert one[glob].sum() == pytest.approx(300.0)


def test_capacity_is_the_class_bandwidth_in_bytes_per_ns():
    routes = Routes(Dragonfly(TINY), bandwidth_gib=(1.0, 2.0, 4.0))
    gib = 2 ** 30 / 1e9
    assert routes.capacity[0] == pytest.approx(1.0 * gib)     # r0 port 0: local
    assert routes.capacity[1] == pytest.approx(2.0 * gib)     # r0 port 1: global
    assert routes.capacity[2] == pytest.approx(4.0 * gib)     # r0 port 2: terminal (ejection)
    assert routes.capacity[18] == pytest.approx(4.0 * gib)    # injection


@pytest.mark.parametrize("cap, demands, share", [
    (10.0, [], 10.0),            # alone: the whole channel
    (10.0, [1.0, 1.0], 8.0),     # small flows are served, the elastic one takes the rest
    (10.0, [2.0, 6.0], 4.0),     # 2 served; the 6-flow and the elastic one split the remaining 8
    (9.0, [5.0, 5.0], 3.0),      # three-way fair split: nobody's demand is below 3
    (12.0, [3.0, 20.0, 20.0], 3.0),
    (12.0, [0.0, 3.0, 20.0, 20.0], 3.0),   # a flow that demands nothing changes nothing
])
def test_maxmin_share_is_the_water_level(cap, demands, share):
    assert maxmin_share(cap, demands) == pytest.approx(share)


def test_maxmin_levels_of_many_channels_at_once_match_one_by_one():
    rng = np.random.default_rng(0)
    cap = rng.uniform(1, 10, 50)
    dem = rng.uniform(0, 6, (4, 50)) * (rng.uniform(size=(4, 50)) > 0.3)
    got = maxmin_levels(cap, dem)
    for c in range(50):
        assert got[c] == pytest.approx(maxmin_share(cap[c], dem[:, c]))
        # the defining equation: served flows take their demand, the rest share the level
        assert np.minimum(dem[:, c], got[c]).sum() + got[c] == pytest.approx(cap[c])


class _TwoChannels:
    """Routes stand-in: two channels of 1 B/ns; a traffic matrix's row r goes on channel r."""

    n_channels = 2
    capacity = np.array([1.0, 1.0])
    nonminimal = 0.0
    packet_size = 4096
    class_bw = np.array([1.0, 1.0, 1.0])

    def flow_bytes(self, src, dst, w, terminals):
        return np.bincount(np.asarray(src), weights=np.asarray(w, dtype=np.float64), minlength=2)

    def flow_parts(self, src, dst, w, terminals):
        """All of it minimal (``base`` here; nothing to spread)."""
        return self.flow_bytes(src, dst, w, terminals), np.zeros(2), np.zeros(2)

    def group_parts(self, group, src, dst, w, terminals):
        """:meth:`flow_parts` per group (a row per sorted distinct value of ``group``), as ``Routes.group_parts``."""
        group, src, dst, w = (np.asarray(x) for x in (group, src, dst, w))
        parts = [self.flow_parts(src[group == k], dst[group == k], w[group == k], terminals) for k in np.unique(group)]
        return tuple(np.array(x) for x in zip(*parts))


def test_iteration_time_beside_background_traffic_by_hand():
    """Job 0 sends 100 B per iteration on channel 0 (alone: 100 ns + 50 ns compute). Background job 1 puts 0.5 B/ns
    there: job 0's share is 0.5 B/ns, its communication 200 ns."""
    m = FlowModel(_TwoChannels())
    m.set_traffic(0, np.array([[100.0, 0.0], [0.0, 0.0]]), 50.0)
    m.place(0, [0, 1])
    m.set_rate(1, np.array([[0.5, 0.0], [0.0, 0.0]]))
    m.place(1, [0, 1])
    assert m.alone(0) == pytest.approx(150.0)
    assert m.iteration_time(0, [1]) == pytest.approx(250.0)
    assert m.iteration_time(0, [7]) == pytest.approx(150.0)   # an unknown job changes nothing
    assert np.isnan(m.iteration_time(5, []))                   # nor is an unplaced job answered


def test_two_iterating_jobs_meet_at_the_fixed_point_by_hand():
    """Jobs 0 and 1 both send 100 B per iteration on channel 0, no compute. At the fixed point T0 = T1 = T and each
    sees the other's demand 100 / T: share x = 1 - 100/T (while 100/T < x), T = 100 / x, so T = 200 ns."""
    m = FlowModel(_TwoChannels())
    for j in (0, 1):
        m.set_traffic(j, np.array([[100.0, 0.0], [0.0, 0.0]]), 0.0)
        m.place(j, [0, 1])
    assert m.iteration_time(0, [1]) == pytest.approx(200.0, rel=1e-4)
    assert m.iteration_time(0, []) == pytest.approx(100.0)


def test_traffic_matrix_of_a_workload_counts_sends_and_the_slowest_compute():
    class Ring:
        n_ranks = 3

        def ops(self, rank, iteration):
            from hybridsim.workloads.ops import COMPUTE, IRECV, ISEND

            return [(COMPUTE, 10.0 * (rank + 1)), (ISEND, (rank + 1) % 3, 64 * (iteration + 1), 0, 0),
                    (IRECV, (rank - 1) % 3, 0, 1)]

    tm, compute = traffic_matrix(Ring(), n_iterations=2)
    want = np.zeros((3, 3))
    for r in range(3):
        want[r, (r + 1) % 3] = (64 + 128) / 2   # the mean over the two iterations
    np.testing.assert_allclose(tm, want)
    assert compute == pytest.approx(30.0)


def test_the_two_rules_by_hand_where_the_hot_channel_is_not_the_shared_one():
    """Job 0: 100 B on channel 0 (its busiest), 50 B on channel 1, where background takes 0.5 B/ns (share 0.5).
    ``max``: max(100 / 1, 50 / 0.5) = 100 ns, unchanged; ``weighted``: 100 ns x (100 x 1 + 50 x 2) / 150."""
    for rule, want in (("max", 100.0), ("weighted", 100.0 * 200.0 / 150.0)):
        m = FlowModel(_TwoChannels(), rule=rule)
        m.set_traffic(0, np.array([[100.0, 0.0], [0.0, 50.0]]), 0.0)
        m.place(0, [0, 1])
        m.set_rate(1, np.array([[0.0, 0.0], [0.0, 0.5]]))
        m.place(1, [0, 1])
        assert m.alone(0) == pytest.approx(100.0)
        assert m.iteration_time(0, [1]) == pytest.approx(want)


def test_phases_split_at_blocking_ops_and_sum_over_phases():
    """Rank r sends 100 B to r+1 and waits, then 40 B to r-1 (a blocking SEND), then 10 B to r+1 again: three
    phases; the two 100/40 B phases of a 1 B/ns channel per rank take 100 + 40 + 10 ns, not max(150)."""
    from hybridsim.workloads.ops import IRECV, ISEND, RECV, SEND, WAITALL

    class Three:
        n_ranks = 2

        def ops(self, rank, iteration):
            o = 1 - rank
            return [(IRECV, o, 0, 0), (ISEND, o, 100, 0, 1), (WAITALL, (0, 1)), (SEND, o, 40, 1), (RECV, o, 1),
                    (ISEND, o, 10, 2, 0), (IRECV, o, 2, 1), (WAITALL, (0, 1))]

    phases, compute = traffic_phases(Three(), n_iterations=1)
    assert [sorted(w.tolist()) for _s, _d, w in phases] == [[100.0, 100.0], [40.0, 40.0], [10.0, 10.0]]
    assert compute == 0.0
    m = FlowModel(_TwoChannels())
    m.set_traffic(0, phases, 0.0)
    m.place(0, [0, 1])
    assert m.alone(0) == pytest.approx(150.0)
    one = FlowModel(_TwoChannels())
    one.set_traffic(0, traffic_matrix(Three(), 1)[0], 0.0)   # all of it in one phase
    one.place(0, [0, 1])
    assert one.alone(0) == pytest.approx(150.0)              # both ranks on their own channel: the same here
    # half of channel 0 taken (share 0.5): each phase's slowest channel takes twice as long ("max": 2 x 150 ns);
    # half of each phase's bytes are slowed 2x ("weighted": 1.5 x 150 ns)
    for rule, want in (("max", 300.0), ("weighted", 225.0)):
        beside = FlowModel(_TwoChannels(), rule=rule)
        beside.set_traffic(0, phases, 0.0)
        beside.place(0, [0, 1])
        beside.set_rate(1, np.array([[0.5, 0.0], [0.0, 0.0]]))
        beside.place(1, [0, 1])
        assert beside.iteration_time(0, [1]) == pytest.approx(want)


def test_nonminimal_share_is_spread_over_every_global_and_local_channel():
    """With ``nonminimal=1`` the inter-group bytes take two global and two local hops each, spread evenly: 6 global
    links (both directions: 6 global ports) and 6 local ports of the tiny topology each get 2 x 1000 / 6 B."""
    topo = Dragonfly(TINY)
    got = Routes(topo, nonminimal=1.0).channel_bytes(np.array([[0.0, 1000.0], [0.0, 0.0]]), [0, 5])
    glob = [r * 3 + 1 for r in range(6)]
    loc = [r * 3 + 0 for r in range(6)]
    np.testing.assert_allclose(got[glob], 2000.0 / 6)
    np.testing.assert_allclose(got[loc], 2000.0 / 6)
    assert got[18 + 0] == 1000.0 and got[5 * 3 + 2] == 1000.0   # injection and ejection as ever


def test_a_measured_period_sets_a_co_runners_demand_by_hand():
    """As the fixed-point case, but job 1 measured at 400 ns per iteration: its demand is 100 / 400 = 0.25 B/ns, job
    0's share 0.75 B/ns, its time 100 / 0.75 ns."""
    m = FlowModel(_TwoChannels())
    for j in (0, 1):
        m.set_traffic(j, np.array([[100.0, 0.0], [0.0, 0.0]]), 0.0)
        m.place(j, [0, 1])
    assert m.iteration_time(0, [1]) == pytest.approx(200.0, rel=1e-4)
    m.set_period(1, 400.0)
    assert m.iteration_time(0, [1]) == pytest.approx(100.0 / 0.75)
