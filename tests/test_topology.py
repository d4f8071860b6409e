"""Dragonfly topology against the reference facts (docs/design.md §4) and CODES' own connection files."""

import filecmp

import numpy as np
import pytest

from hybridsim_common.topology import (GLOBAL, LOCAL, TERMINAL, Dragonfly, DragonflyShape, TopologyError,
                                       codes_global_links)

SYS1056 = DragonflyShape(33, 8, 4, 4)
SYS72 = DragonflyShape(9, 4, 2, 2)


@pytest.fixture(scope="module")
def t1056():
    return Dragonfly(SYS1056)


def test_reference_counts(t1056):
    s = t1056.summary()
    assert (s["routers"], s["terminals"], s["router_ports"], s["radix"]) == (264, 1056, 3960, 15)
    # a routers per group all-to-all: a(a-1)/2 local links per group
    assert s["local_links"] == 33 * 8 * 7 // 2
    # every router uses all h global channels: g*a*h/2 links
    assert s["global_links"] == 33 * 8 * 4 // 2
    assert s["diameter"] == 3


def test_port_numbering_codes(t1056):
    R = t1056.radix
    cls = t1056.port_class.reshape(-1, R)
    assert (cls[:, 0:7] == LOCAL).all() and (cls[:, 7:11] == GLOBAL).all() and (cls[:, 11:15] == TERMINAL).all()
    # terminal t attaches to router t // p at port a-1+h + t % p
    assert t1056.terminal_port(0) == 11 and t1056.terminal_port(5) == 15 + 12
    assert t1056.peer_port[t1056.terminal_port(1055)] == 1055


def test_links_symmetric_and_local_once(t1056):
    R = t1056.radix
    for pid in range(t1056.n_ports):
        if t1056.port_class[pid] == TERMINAL:
            continue
        pr, pp = t1056.peer_router[pid], t1056.peer_port[pid]
        back = pr * R + pp
        assert t1056.peer_router[back] == pid // R and t1056.peer_port[back] == pid % R
        assert t1056.port_class[back] == t1056.port_class[pid]
    # exactly one local link per router pair inside a group
    for r in range(t1056.n_routers):
        nb = t1056.peer_router[r * R:r * R + 7]
        g = r // 8
        assert sorted(nb.tolist()) == [x for x in range(g * 8, g * 8 + 8) if x != r]


def test_every_group_pair_linked(t1056):
    pairs = set()
    for ra, _pa, rb, _pb, c in t1056.links:
        if c == GLOBAL:
            pairs.add(frozenset((ra // 8, rb // 8)))
    assert len(pairs) == 33 * 32 // 2


def test_minimal_routes_at_most_three_hops(t1056):
    rng = np.random.default_rng(0)
    dist = t1056.hop_distances()
    for _ in range(300):
        s, d = rng.integers(0, 264, 2)
        path = t1056.minimal_route(int(s), int(d), choice=int(rng.integers(0, 4)))
        assert len(path) - 1 <= 3
        assert len(path) - 1 >= dist[s, d]
        for u, v in zip(path, path[1:]):
            assert v in t1056.router_adjacency[u]


@pytest.mark.parametrize("shape,intra,inter", [
    (SYS72, "dfdally-72-intra", "dfdally-72-inter"),
    (SYS1056, "C-1056node-milc-lammps-nn/dfdally-1056-intra", "C-1056node-milc-lammps-nn/dfdally-1056-inter"),
])
def test_codes_connection_files_roundtrip(shape, intra, inter, codes_data, tmp_path):
    built = Dragonfly(shape)
    read = Dragonfly.from_codes_files(shape, codes_data / intra, codes_data / inter)
    assert (built.peer_router == read.peer_router).all() and (built.peer_port == read.peer_port).all()
    built.write_codes_files(tmp_path / "intra", tmp_path / "inter")
    assert filecmp.cmp(tmp_path / "intra", codes_data / intra, shallow=False)
    assert filecmp.cmp(tmp_path / "inter", codes_data / inter, shallow=False)


def test_connection_file_of_other_topology_rejected(codes_data):
    with pytest.raises(TopologyError):
        Dragonfly.from_codes_files(SYS1056, codes_data / "dfdally-72-intra", codes_data / "dfdally-72-inter")


def test_port_graph_smart_rule():
    t = Dragonfly(SYS72)
    e = t.port_graph_edges()
    R = t.radix
    intra = t.n_routers * R * (R - 1)
    assert e.shape[1] == intra + 2 * (len(t.links))
    s = set(map(tuple, e.T.tolist()))
    assert (0, 6) in s and (6, 0) in s  # ports of one router fully connected
    # a global link connects the two ports directly
    ra, pa, rb, pb, _ = next(l for l in t.links if l[4] == GLOBAL)
    assert (ra * R + pa, rb * R + pb) in s and (rb * R + pb, ra * R + pa) in s


def test_non_codes_group_count_still_connected():
    t = Dragonfly(DragonflyShape(5, 4, 2, 2))
    assert t.diameter() <= 3
    with pytest.raises(TopologyError):
        Dragonfly(DragonflyShape(20, 2, 1, 2))


def test_codes_arrangement_dfdally_8k():
    """CODES' dfdally_8k system (65 groups x 16 routers x 8 terminals, 8 global channels per router): its inter-group
    file, as CODES ships it (src/network-workloads/conf/dragonfly-dally/dfdally_8k_inter, read once by hand), starts
    router 0 -> routers 31, 47, .., 143 (router 15 of groups 1..8), router 1 -> groups 9..16 (router 14), router 8
    -> groups 1..8 again (router 7), router 31 (group 1, router 15) -> groups 58..64 and 0 (router 0): channel k of a
    group goes to the (k mod 64)-th group after it; every group pair is linked exactly twice."""
    shape = DragonflyShape(65, 16, 8, 8)
    topo = Dragonfly(shape)
    assert topo.n_terminals == 8320
    links = codes_global_links(shape)
    by_router = {}
    for s, d in links:
        by_router.setdefault(s, []).append(d)
    assert by_router[0] == [31, 47, 63, 79, 95, 111, 127, 143]
    assert [d // 16 for d in by_router[1]] == list(range(9, 17)) and {d % 16 for d in by_router[1]} == {14}
    assert [d // 16 for d in by_router[8]] == list(range(1, 9)) and {d % 16 for d in by_router[8]} == {7}
    assert [d // 16 for d in by_router[31]] == [58, 59, 60, 61, 62, 63, 64, 0] and {d % 16 for d in by_router[31]} == {0}
    pairs = {}
    for s, d in links:
        key = tuple(sorted((s // 16, d // 16)))
        pairs[key] = pairs.get(key, 0) + 1
    assert len(pairs) == 65 * 64 // 2 and set(pairs.values()) == {4}  # 2 links, each listed from both ends
