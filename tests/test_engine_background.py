"""Background load of predicted jobs (keep_background): capacity (1 - u) and the M/D/1 wait behind background
packets, u / (2 (1 - u)) packet times per hop, exactly as set and exactly undone."""

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
