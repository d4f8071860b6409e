"""Background load of predicted jobs (keep_background): capacity (1 - u) and the M/D/1 wait behind background
packets, u / (2 (1 - u)) packet times per hop, or the predicted jobs' measured queued work, exactly as set and
exactly undone; the queued work a counted job's packets hold on a port, against a hand-computed case."""

import random

import pytest

from hybridsim.engine.core import EventLoop
from hybridsim.engine.network import Network
from hybridsim.scenario import parse_scenario
from hybridsim_common.units import bytes_to_ns


def test_background_stretches_serialisation_and_adds_md1_wait():
    sc = parse_scenario("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, "
                        "global_channels_per_router: 2}\njobs: [{name: a, ranks: 2, iterations: 1, "
                        "workload: {kind: allreduce}}]")
    topo = sc.build_topology()
    net = Network(topo, sc.topology, EventLoop(), random.Random(0))
    p_local, p_global = 0, 3  # router 0: port 0 local, port 3 global
    d_local, d_global = net.ports[p_local].delay, net.ports[p_global].delay
    s_local = bytes_to_ns(4096, 5.25)
    assert d_local == pytest.approx(100 + s_local)  # router delay + one packet time (CODES default latency)
    net.set_background({p_local: 0.5, p_global: 0.2})
    assert net.ports[p_local].nspb * 4096 == pytest.approx(2 * s_local)
    assert net.ports[p_local].delay == pytest.approx(d_local + 0.5 * s_local)          # 0.5 / (2 * 0.5) = 0.5
    s_global = bytes_to_ns(4096, 4.7)
    assert net.ports[p_global].delay == pytest.approx(d_global + 0.2 / 1.6 * s_global)  # 0.2 / (2 * 0.8)
    assert net.ports[1].delay == net.delay_nominal[1]
    net.set_background({})
    assert net.ports[p_local].delay == d_local and net.ports[p_local].nspb * 4096 == pytest.approx(s_local)


def test_a_measured_backlog_replaces_the_md1_wait():
    sc = parse_scenario("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, "
                        "global_channels_per_router: 2}\njobs: [{name: a, ranks: 2, iterations: 1, "
                        "workload: {kind: allreduce}}]")
    net = Network(sc.build_topology(), sc.topology, EventLoop(), random.Random(0))
    d0, s0 = net.ports[0].delay, net.ports[0].nspb
    net.set_port_background([0, 1], [0.5, 0.0], [250.0, 99.0])
    assert net.ports[0].nspb == pytest.approx(2 * s0)    # the capacity left is still 1 - u
    assert net.ports[0].delay == d0 + 250.0               # the wait is the measured one, not M/D/1's
    assert net.ports[1].delay == net.delay_nominal[1]     # no load: nominal, whatever the backlog says
    net.set_port_background([0], [0.0], [0.0])
    assert net.ports[0].delay == d0 and net.ports[0].nspb == s0


class _Msg:
    def __init__(self, src, dst, wire, jb):
        self.src_term, self.dst_term, self.wire, self.left, self.jb = src, dst, wire, 0, jb


def test_queued_work_of_two_packets_meeting_at_a_port():
    """Two one-packet messages of a counted job leave terminals 0 and 1 (router 0) at t = 0 for terminal 2 (router
    1, same group): they reach router 0 together, so on its local port to router 1 one is served at once (work
    s^2 / 2) and the other waits s first (s * s + s^2 / 2): 2 s^2 in all, s = P x the local link's ns per byte. At
    router 1 they arrive s apart; the terminal port's service s_t makes the second wait max(0, s_t - s)."""
    sc = parse_scenario("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, "
                        "global_channels_per_router: 2, routing: minimal}\njobs: [{name: a, ranks: 2, "
                        "iterations: 1, workload: {kind: allreduce}}]")
    loop = EventLoop()
    net = Network(sc.build_topology(), sc.topology, loop, random.Random(0))
    net.on_local = net.on_deliver = lambda t, msg: None
    n = net.n_ports
    jb = [0] * n + [0.0] * n
    for src in (0, 1):
        net.h_inject(0.0, _Msg(src, 2, net.P, jb), None)
    loop.run()
    used = [p for p in range(n) if jb[p]]
    assert [jb[p] for p in used] == [2 * net.P, 2 * net.P]   # router 0 -> 1, then to terminal 2
    local = [p for p in used if net.ports[p].local]
    term = [p for p in used if net.ports[p].to_term]
    assert len(local) == len(term) == 1
    s = net.P * net.nspb_nominal[local[0]]
    s_t = net.P * net.nspb_nominal[term[0]]
    assert jb[n + local[0]] == pytest.approx(2 * s * s)
    assert jb[n + term[0]] == pytest.approx(s_t * s_t + s_t * max(0.0, s_t - s))
