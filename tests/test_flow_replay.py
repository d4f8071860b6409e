"""The replay of a job's first iterations (hybridsim.flow_replay) and the flow model's calibration terms (issue 32),
against hand-computed times: the engine's protocol offsets, the NIC's FIFO, a rank waiting for its partner, a
slot slowed by a shared channel, and the model built on them."""

import numpy as np
import pytest

from hybridsim.flow import FlowModel, Routes, workload_profile
from hybridsim.flow_replay import replay
from hybridsim.flow_tables import JobTable, fit_calibration
from hybridsim.workloads.ops import COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL
from hybridsim_common.topology import Dragonfly, DragonflyShape
from hybridsim_common.units import GIB

TINY = DragonflyShape(groups=3, routers_per_group=2, terminals_per_router=1, global_channels_per_router=1)
ONE = 1e9 / GIB   # GiB/s of 1 byte per ns


def tiny_routes():
    """test_flow_predictor.py's: every link 1 B/ns; latencies local 10, global 20, terminal 5 ns; router delay
    100 ns; packets of 100 B. t0 -> t5 crosses 2 local and 1 global hop: a 100-B packet 950 ns, a 64-B one 770."""
    return Routes(Dragonfly(TINY), (ONE, ONE, ONE), 0.0, latency_ns=(10.0, 20.0, 5.0), router_delay=100.0,
                  packet_size=100)


def flat(ts, td, size):
    """A stand-in network: every first packet takes 1000 ns, whatever its size."""
    return 0.0 if ts == td else 1000.0


class Pair:
    """Two ranks exchange ``size`` bytes (Irecv, Isend, Waitall)."""

    n_ranks = 2

    def __init__(self, size):
        self.size = size

    def ops(self, rank, iteration):
        o = 1 - rank
        return [(IRECV, o, 0, 0), (ISEND, o, self.size, 0, 1), (WAITALL, (0, 1))]


@pytest.mark.parametrize("size, expected", [
    (50, 3510 + 0.55 * 50 + 700),                    # eager: offset, copy, the 50-B packet's traversal
    (10_000, 3 * 3510 + 2 * 770 + 950 + 9_900),      # rendezvous: RTS, ACK, data's first packet, the rest at 1 B/ns
])
def test_a_two_rank_exchange_takes_the_protocol_and_the_transfer_by_hand(size, expected):
    routes = tiny_routes()

    def trav(ts, td, s):
        return routes.traversal(np.array([ts]), np.array([td]), float(s), 0.0)[0]

    times = replay(Pair(size).ops, [0, 5], trav, 1.0, iterations=1, packet_size=100)
    np.testing.assert_allclose(times, [[expected, expected]])


def test_the_nic_sends_one_message_after_another():
    """Rank 0 sends 5,000 B (eager) to ranks 1 and 2 at once: both posted at 3510 + 2750 = 6260 ns; the NIC sends
    the first until 11,260, then the second: it arrives at 11,260 + 1000 + 4,900 (its first packet's traversal,
    the rest at 1 B/ns) = 17,160 ns, the first at 6260 + 1000 + 4900 = 12,160."""

    class Fan:
        n_ranks = 3

        def ops(self, rank, iteration):
            if rank == 0:
                return [(ISEND, 1, 5000, 0, 0), (ISEND, 2, 5000, 0, 1), (WAITALL, (0, 1))]
            return [(IRECV, 0, 0, 0), (WAITALL, (0,))]

    times = replay(Fan().ops, [0, 1, 2], flat, 1.0, iterations=1, packet_size=100)[0]
    # rank 0 is done when its last packet starts injection: 11,260 + 4,900
    np.testing.assert_allclose(times, [16_160.0, 12_160.0, 17_160.0])


def test_a_rank_waits_for_its_partner_and_loopback_pays_only_software():
    """Rank 1 computes 5,000 ns before a blocking 8-B send; rank 0 blocks in its receive: 5,000 + 3510 + 4.4 +
    1000 ns. A message to the rank's own terminal (ranks 2 and 3 share one) never waits for the network."""

    class Wait:
        n_ranks = 4

        def ops(self, rank, iteration):
            return {0: [(RECV, 1, 0)], 1: [(COMPUTE, 5000.0), (SEND, 0, 8, 0)],
                    2: [(IRECV, 3, 0, 0), (WAITALL, (0,))], 3: [(ISEND, 2, 8, 0, 0), (WAITALL, (0,))]}[rank]

    times = replay(Wait().ops, [0, 1, 2, 2], flat, 1.0, iterations=1, packet_size=100)[0]
    np.testing.assert_allclose(times, [5000 + 3514.4 + 1000, 5000 + 3514.4, 3514.4, 3514.4])


def test_a_slot_slowed_by_a_shared_channel_and_the_next_iterations():
    """``slow`` 2 for the first send of phase 0: 10,000 B (rendezvous) at 0.5 B/ns; every iteration the same."""
    base = 3 * 3510 + 2 * 1000 + 1000
    times = replay(Pair(10_000).ops, [0, 1], flat, 1.0, slow=[[2.0]], iterations=3, packet_size=100)
    np.testing.assert_allclose(times, np.full((3, 2), base + 2 * 9_900.0))


def test_model_with_replay_alone_and_beside_background():
    """The replayed job's time alone is the replay's; beside a background flow on its channels it adds what the
    flows take from its phases' bandwidth (the flow model's max-min share), and the calibration scales each."""
    routes = tiny_routes()
    m = FlowModel(routes, replay=True, fifo=0.0)
    m.set_profile(0, workload_profile(Pair(10_000), 1), "milc", Pair(10_000).ops)
    m.place(0, [0, 5])
    alone = 3 * 3510 + 2 * 770 + 950 + 9_900
    assert m.alone(0) == pytest.approx(alone)
    assert m.start_time(0, ()) == pytest.approx(alone)
    m.set_rate(1, np.array([[0.0, 0.5], [0.5, 0.0]]))   # 0.5 B/ns both ways on the same terminals
    m.place(1, [0, 5])
    # the job's 9,900 B of bandwidth time at the water level 0.5 B/ns: 19,800, so 9,900 more
    assert m.iteration_time(0, [1]) == pytest.approx(alone + 9_900.0)
    assert m.parts(0, [1]) == pytest.approx((0.0, alone, 9_900.0))
    m.scale = {"milc": (1.1, 0.5)}
    m.first = {"milc": 0.9}
    m._cache.clear()
    assert m.iteration_time(0, [1]) == pytest.approx(1.1 * alone + 0.5 * 9_900.0)
    assert m.start_time(0, [1]) == pytest.approx(0.9 * (1.1 * alone + 0.5 * 9_900.0))
    assert m.uncertainty(0, "start") > 0 and np.isnan(m.uncertainty(5, "change"))
    with pytest.raises(ValueError):
        m.uncertainty(0, "later")


def test_fit_calibration_recovers_known_scales():
    """Tables whose engine time is exactly 0.8 L + 1.5 B (+ compute), first iterations 0.9 of it: recovered."""
    from surrogate.base import JobInfo

    rng = np.random.default_rng(1)
    tables = []
    for k in range(6):
        T = 30
        parts = np.column_stack([rng.uniform(0, 1e3, T), rng.uniform(1e4, 5e4, T), rng.uniform(0, 3e4, T)])
        y = parts[:, 0] + 0.8 * parts[:, 1] + 1.5 * parts[:, 2]
        y[0] *= 0.9
        tables.append(JobTable("r", f"j{k}", k, y, y.copy(), [()] * T, np.zeros(T),
                               JobInfo("milc", 16, T, 1e5, 1, 9, 72), parts=np.vstack([parts, parts[:1]])))
    scale, first = fit_calibration(tables)
    assert scale["milc"] == pytest.approx((0.8, 1.5), rel=1e-6)
    assert first["milc"] == pytest.approx(0.9, rel=1e-6)


@pytest.mark.parametrize("sync, expected", [(1.0, [3.0, 1.0]), (0.0, [2.0, 2.0]), (0.5, [6 ** 0.5, 2 ** 0.5])])
def test_the_slot_slowdown_between_slots_in_step_and_the_whole_phase(sync, expected):
    """Rank 0 sends 100 B in each of two slots (1 B/ns NIC): the slots' busiest channels take 300 and 100 ns (3x and
    1x the NIC's 100), the phase's 400 ns (2x the NIC's 200): in step each slot its own, else the phase's, between a
    geometric mix."""
    from hybridsim.flow import Phase

    m = FlowModel(tiny_routes(), sync=sync)
    p = Phase(np.array([0, 0]), np.array([1, 2]), np.array([100.0, 100.0]), slot=np.array([0, 1]))
    np.testing.assert_allclose(m._slow(np.array([300.0, 100.0]), np.array([100.0, 100.0]), 400.0, p, 1.0), expected)
