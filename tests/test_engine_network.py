"""Embedded engine, network level: zero-load latency, bandwidth, routing hop bounds, the adversarial-traffic bound.

Expectations are analytic (docs/workloads.md §7.6: per hop serialisation + router delay + link latency, CODES'
smallest packet latency 1556.056 ns for 8 B on one router), not taken from the engine."""

import random

import pytest

from hybridsim.engine.core import EventLoop
from hybridsim.engine.network import Network
from hybridsim.scenario import Topology
from hybridsim_common.units import bytes_to_ns

LT = bytes_to_ns(4096, 5.25)   # 726.609 ns: local/terminal link latency and 4-KiB serialisation
GL = bytes_to_ns(4096, 4.7)    # 811.638 ns: global


class Msg:
    def __init__(self, src, dst, wire):
        self.src_term, self.dst_term, self.wire, self.left, self.jb = src, dst, wire, 0, None


class HopSpy(Network):
    """Records router-to-router hops (routers visited - 1) of every delivered packet (debug handlers are methods)."""

    def _term_arrive_checked(self, t, term, pk):
        self.hop_log.append(pk.hops - 1)
        super()._term_arrive_checked(t, term, pk)


def make_net(routing="minimal", seed=1, debug=True, exact_credits=False, **kw):
    tcfg = Topology(groups=9, routers_per_group=4, terminals_per_router=2, global_channels_per_router=2,
                    routing=routing, **kw)
    topo = tcfg.build()
    loop = EventLoop()
    net = HopSpy(topo, tcfg, loop, random.Random(seed), debug=debug, exact_credits=exact_credits)
    net.hop_log = []
    delivered, local = {}, {}
    net.on_deliver = lambda t, m: delivered.__setitem__(m, t)
    net.on_local = lambda t, m: local.__setitem__(m, t)
    return net, loop, topo, delivered, local


def one_message(src, dst, nbytes, routing="minimal"):
    net, loop, topo, delivered, local = make_net(routing)
    m = Msg(src, dst, nbytes)
    loop.at(0.0, net.h_inject, m)
    loop.run()
    net.check_invariants()
    return delivered[m], local[m], topo


def test_smallest_packet_latency_matches_codes():
    # two terminals on router 0: 2 x serialisation of 8 B + router delay + 2 x link latency (CODES: 1556.056 ns)
    t, t_local, _ = one_message(0, 1, 8)
    expected = 2 * bytes_to_ns(8, 5.25) + 100 + 2 * LT
    assert t == pytest.approx(expected, rel=0, abs=1e-6)
    assert t == pytest.approx(1556.056, abs=1e-3)
    assert t_local == 0.0  # the only packet starts injection at once


def test_zero_load_latency_local_hop():
    # router 0 -> router 1 (same group): T->R, R-L->R, R->T, full 4-KiB packet
    t, _, _ = one_message(0, 2, 4096)
    assert t == pytest.approx(2 * LT + (LT + 100 + LT) + (LT + 100 + LT), abs=1e-6)


def test_zero_load_latency_global_hop():
    # terminal on router 0 to a terminal on the router at the far end of router 0's first global link
    net, loop, topo, delivered, _ = make_net()
    R = topo.radix
    peer = int(topo.peer_router[0 * R + topo.a - 1])
    m = Msg(0, peer * topo.p, 4096)
    loop.at(0.0, net.h_inject, m)
    loop.run()
    assert delivered[m] == pytest.approx(2 * LT + (GL + 100 + GL) + (LT + 100 + LT), abs=1e-6)


def test_long_flow_reaches_link_bandwidth():
    # 4 MiB across a global link: the bottleneck is 4.7 GiB/s
    net, loop, topo, delivered, _ = make_net()
    R = topo.radix
    peer = int(topo.peer_router[0 * R + topo.a - 1])
    nbytes = 4 << 20
    m = Msg(0, peer * topo.p, nbytes)
    loop.at(0.0, net.h_inject, m)
    loop.run()
    rate_gib = nbytes / delivered[m] * 1e9 / 2**30
    assert 0.97 * 4.7 < rate_gib <= 4.7
    # same router: terminal links only, 5.25 GiB/s
    t, _, _ = one_message(0, 1, nbytes)
    assert 0.97 * 5.25 < nbytes / t * 1e9 / 2**30 <= 5.25


def vcs_used(routing, src, dst, pid_of):
    """Deliver one 4-KiB message ``src`` -> ``dst`` on a fresh network; the VCs of port ``pid_of(net, topo)`` that
    held its packet (time integral of occupancy > 0)."""
    net, loop, topo, delivered, _ = make_net(routing)
    m = Msg(src, dst, 4096)
    loop.at(0.0, net.h_inject, m)
    loop.run()
    net.check_invariants()
    assert m in delivered
    return [vc.v for vc in net.ports[pid_of(net, topo)].vcs if vc.occ_int > 0]


@pytest.mark.parametrize("routing", ["minimal", "prog-adaptive"])
def test_virtual_channels_follow_codes_source_group_rule(routing):
    # CODES' dragonfly-dally picks the output VC by the group the router is in, the source group first: in the
    # source group VC = local hops taken so far (0 at the first router, 1 after a local hop), 3 in the destination
    # group. A packet that never leaves its group is in its source group all the way: VC 0 on the local hop, VC 1
    # into the terminal (VC 0 when both terminals share a router); a packet from another group arrives on VC 3.
    def tport(t):
        return lambda net, topo: int(topo.terminal_port_ids[t])
    assert vcs_used(routing, 0, 1, tport(1)) == [0]                                   # router 0 only
    assert vcs_used(routing, 2, 4, lambda net, topo: net.lport[1][2].pid) == [0]     # router 1 -> router 2
    assert vcs_used(routing, 2, 4, tport(4)) == [1]
    assert vcs_used(routing, 4 * 2, 4, tport(4)) == [3]                               # group 1 -> group 0


@pytest.mark.parametrize("routing,limit", [("minimal", 3), ("nonminimal", 5), ("prog-adaptive", 5),
                                           ("adaptive", 5)])
def test_route_hop_bounds(routing, limit):
    net, loop, topo, delivered, _ = make_net(routing)
    hops = net.hop_log
    rng = random.Random(5)
    for src in range(topo.n_terminals):
        for _ in range(6):
            dst = rng.randrange(topo.n_terminals)
            if dst != src:
                loop.at(rng.random() * 5000, net.h_inject, Msg(src, dst, 3 * 4096))
    loop.run()
    net.check_invariants()
    assert net.bytes_injected == net.bytes_delivered
    assert hops and max(hops) <= limit
    if routing == "minimal":
        assert max(hops) == 3
    if routing == "nonminimal":
        assert max(hops) >= 4  # Valiant paths through an intermediate group


def adversarial_throughput(routing, exact_credits=False):
    """Every terminal of group i sends 40 packets to the same-index terminal of group i+1; bytes/ns delivered."""
    net, loop, topo, delivered, _ = make_net(routing, seed=3, exact_credits=exact_credits)
    per_group = topo.a * topo.p
    nbytes = 40 * 4096
    for src in range(topo.n_terminals):
        loop.at(0.0, net.h_inject, Msg(src, (src + per_group) % topo.n_terminals, nbytes))
    loop.run()
    net.check_invariants()
    assert net.bytes_delivered == topo.n_terminals * nbytes
    return topo.n_terminals * nbytes / max(delivered.values()), topo


def test_adversarial_minimal_saturates_global_bound_and_others_exceed_it():
    thr_min, topo = adversarial_throughput("minimal")
    # one global link between consecutive groups (a*h = g-1 = 8): 9 links x 4.7 GiB/s in total
    n_links = sum(1 for d in topo.global_targets[0 * topo.a:1 * topo.a] for x in d if x // topo.a == 1)
    assert n_links == 1
    bound = topo.g * n_links * 4.7 * 2**30 / 1e9     # bytes per ns
    assert 0.9 * bound < thr_min <= bound * 1.0001
    for routing in ("nonminimal", "adaptive", "prog-adaptive"):
        thr, _ = adversarial_throughput(routing)
        assert thr > 1.3 * bound, routing
    # credits as events after the credit delay (exact CODES timing) give the same bound
    thr_exact, _ = adversarial_throughput("minimal", exact_credits=True)
    assert 0.9 * bound < thr_exact <= bound * 1.0001


def test_port_samples_of_a_long_flow():
    # 4 MiB over router 0's first global link: in a steady-state window the global port is ~100 % busy and the
    # destination router's terminal port carries the same bytes at 4.7 / 5.25 of its capacity
    from hybridsim.engine.sampling import PortSampler

    net, loop, topo, delivered, _ = make_net()
    R = topo.radix
    gport = 0 * R + topo.a - 1
    peer = int(topo.peer_router[gport])
    dst = peer * topo.p
    loop.at(0.0, net.h_inject, Msg(0, dst, 4 << 20))
    sampler = PortSampler(net, 100_000.0)
    loop.run(until=100_000.0)
    sampler.sample(100_000.0)
    loop.run(until=200_000.0)
    blk = sampler.sample(200_000.0)
    util = blk.feature("util_pct")[0]
    by = blk.feature("bytes")[0]
    assert util[gport] == pytest.approx(100.0, abs=1.0)
    tport = topo.terminal_port(dst)
    assert util[tport] == pytest.approx(100 * 4.7 / 5.25, abs=1.0)
    assert by[tport] == pytest.approx(by[gport], abs=4096)
    # injection (5.25 GiB/s) outruns the global link (4.7): packets stall only in front of the global port, which
    # is then blocked on credits (CODES' busy_time: from a stall to the port's next credit) for part of the window;
    # buffers stay within capacity
    stalled, busy = blk.feature("stalled")[0], blk.feature("busy_ns")[0]
    assert stalled[gport] > 0 and stalled.sum() == stalled[gport]
    assert 0 < busy[gport] < 100_000 and busy.sum() == busy[gport]
    assert (blk.feature("vc1_credits") >= 0).all() and (blk.feature("vc_occ") <= 16384).all()
    loop.run()
    assert delivered
