"""1D Dragonfly topology with CODES dragonfly-dally numbering.

``g`` groups of ``a`` routers, ``p`` terminals and ``h`` global channels per router; all-to-all local links inside a
group. Router ``r`` is in group ``r // a``; terminal ``t`` attaches to router ``t // p``.

Router port numbering (CODES dragonfly-dally, docs/workloads.md §7.1)::

    0 .. a-2            local ports, in intra-file order (for the all-to-all file: the other routers ascending)
    a-1 .. a-2+h        global ports, in inter-file order
    a-1+h .. radix-1    terminal ports, in terminal-id order           radix = (a-1) + h + p

Global arrangement (``codes``): CODES' ``dragonfly-dally-topo-gen.py``: channel ``k = i*h + j`` of router ``i`` in group
``G`` reaches group ``(G + k mod (g-1) + 1) mod g``, landing on router ``a-1-i`` of that group, wherever ``g - 1``
divides ``a*h`` (checked against CODES' own files for the 1,056-node system and ``dfdally_8k``). For other group counts
the channels are dealt round-robin (each group pair receives ``>= 1`` link when ``g - 1 <= a*h``), see
:func:`_round_robin_global_links`.

Everything here is array-backed (numpy) so the engine, the graph builder and the bridge share one description.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

LOCAL, GLOBAL, TERMINAL = 0, 1, 2
LINK_CLASS_NAMES = ("local", "global", "terminal")


class TopologyError(ValueError):
    """The topology parameters or a connection file are inconsistent."""


@dataclass(frozen=True)
class DragonflyShape:
    groups: int
    routers_per_group: int
    terminals_per_router: int
    global_channels_per_router: int

    @property
    def radix(self) -> int:
        return (self.routers_per_group - 1) + self.global_channels_per_router + self.terminals_per_router


def codes_global_links(shape: DragonflyShape) -> list[tuple[int, int]]:
    """Global links in CODES inter-file order: ``(src_router, dst_router)`` for every router's channels, both
    directions listed (each physical link appears once per endpoint).

    CODES' generator (``dragonfly-dally-topo-gen.py``) deals a group's ``a*h`` channels ``k = i*h + j`` over the other
    groups in turn, starting after its own: channel ``k`` of group ``G`` goes to group ``(G + k mod (g-1) + 1) mod g``,
    from router ``i`` to router ``a-1-i`` there. When ``g - 1`` divides ``a*h`` (``g = a*h + 1``, the 1,056-node
    system; ``dfdally_8k``'s 65 groups of 16 routers with 8 channels each, two links per group pair) every such
    link has its reverse and this is CODES' file. Other group counts: :func:`_round_robin_global_links`."""
    g, a, h = shape.groups, shape.routers_per_group, shape.global_channels_per_router
    if g >= 2 and (a * h) % (g - 1) == 0:
        out = []
        for r in range(g * a):
            G, i = divmod(r, a)
            for j in range(h):
                tg = (G + (i * h + j) % (g - 1) + 1) % g
                out.append((r, tg * a + (a - 1 - i)))
        return out
    return _round_robin_global_links(shape)


def _round_robin_global_links(shape: DragonflyShape) -> list[tuple[int, int]]:
    """Deal each group's ``a*h`` global channels over the other groups round-robin, pairing symmetric channels.

    Used when ``g - 1`` does not divide ``a*h``. Group pair (G, G') is linked ``c`` times with c distributed as evenly as possible;
    channel slots are consumed in router order so a router's channels fill before the next router's.
    """
    g, a, h = shape.groups, shape.routers_per_group, shape.global_channels_per_router
    if g < 2:
        return []
    slots = a * h
    if g - 1 > slots:
        raise TopologyError(
            f"{g} groups need at least {g - 1} global channels per group but a*h = {a}*{h} = {slots}")
    # whole rounds only: each round gives every group pair one more link, so every group spends g-1 slots
    rounds = slots // (g - 1)
    next_slot = [0] * g
    links: list[tuple[int, int]] = []
    pairs = sorted(itertools.combinations(range(g), 2), key=lambda p: ((p[1] - p[0]) % g, p[0]))
    for _ in range(rounds):
        for G, H in pairs:
            links.append((G * a + next_slot[G] // h, H * a + next_slot[H] // h))
            next_slot[G] += 1
            next_slot[H] += 1
    out = []
    for s, d in links:
        out.append((s, d))
        out.append((d, s))
    out.sort(key=lambda x: x[0])
    return out


def _read_records(path: str | Path, max_bytes: int | None, what: str) -> np.ndarray:
    """The int32 words of a connection file: a regular file only (a FIFO or a device is refused, not waited on), at
    most ``max_bytes`` (what the topology can hold)."""
    from .files import read_bytes

    try:
        return np.frombuffer(read_bytes(path, max_bytes if max_bytes is not None else 1 << 30), dtype="<i4")
    except OSError as exc:
        raise TopologyError(f"{what} {path}: {exc.strerror or exc}"
                            + (" (more links than the topology has)" if max_bytes is not None else "")) from None


def read_intra_file(path: str | Path, max_bytes: int | None = None) -> np.ndarray:
    """CODES intra-group connection file: binary little-endian ``int32 {src, dest, type}`` records."""
    raw = _read_records(path, max_bytes, "intra-group file")
    if raw.size % 3:
        raise TopologyError(f"{path}: size {raw.size * 4} B is not a multiple of 12 (int src, dest, type records)")
    return raw.reshape(-1, 3)


def read_inter_file(path: str | Path, max_bytes: int | None = None) -> np.ndarray:
    """CODES inter-group connection file: binary little-endian ``int32 {src, dest}`` records (global router ids)."""
    raw = _read_records(path, max_bytes, "inter-group file")
    if raw.size % 2:
        raise TopologyError(f"{path}: size {raw.size * 4} B is not a multiple of 8 (int src, dest records)")
    return raw.reshape(-1, 2)


class Dragonfly:
    """A 1D Dragonfly with per-port link tables.

    Port tables (length ``n_ports = n_routers * radix``, index ``router * radix + port``):
        ``port_class``  0 local, 1 global, 2 terminal
        ``peer_router`` router at the other end (-1 for terminal ports)
        ``peer_port``   port index at the other end (for terminal ports: the terminal id)
    """

    def __init__(self, shape: DragonflyShape, global_links: list[tuple[int, int]] | None = None,
                 intra_links: np.ndarray | None = None):
        self.shape = shape
        g, a, p, h = shape.groups, shape.routers_per_group, shape.terminals_per_router, shape.global_channels_per_router
        for name, v in (("groups", g), ("routers_per_group", a), ("terminals_per_router", p),
                        ("global_channels_per_router", h)):
            if v < 1:
                raise TopologyError(f"topology.{name} must be >= 1, got {v}")
        if g > 1 and h < 1:
            raise TopologyError("a Dragonfly with more than one group needs global channels")
        self.g, self.a, self.p, self.h = g, a, p, h
        self.radix = shape.radix
        self.n_routers = g * a
        self.n_terminals = self.n_routers * p
        self.n_ports = self.n_routers * self.radix
        R = self.radix
        self.port_class = np.empty(self.n_ports, np.int8)
        self.peer_router = np.full(self.n_ports, -1, np.int64)
        self.peer_port = np.full(self.n_ports, -1, np.int64)

        # local ports
        if intra_links is None:
            local_order = [[j for j in range(a) if j != i] for i in range(a)]
        else:
            local_order = [[] for _ in range(a)]
            for s, d, _t in intra_links.tolist():
                if not (0 <= s < a and 0 <= d < a) or s == d:
                    raise TopologyError(f"intra-group file: link {s}->{d} is outside 0..{a - 1} or a self-loop")
                local_order[s].append(d)
            for i in range(a):
                if sorted(local_order[i]) != [j for j in range(a) if j != i]:
                    raise TopologyError(
                        f"intra-group file: router {i} must link once to each of the other {a - 1} routers of its "
                        f"group (all-to-all), found {local_order[i]}")
        self.local_order = local_order
        for r in range(self.n_routers):
            G, i = divmod(r, a)
            for k, j in enumerate(local_order[i]):
                pid = r * R + k
                self.port_class[pid] = LOCAL
                self.peer_router[pid] = G * a + j
                self.peer_port[pid] = local_order[j].index(i)

        # global ports
        links = codes_global_links(shape) if global_links is None else list(global_links)
        per_router: list[list[int]] = [[] for _ in range(self.n_routers)]
        for s, d in links:
            if not (0 <= s < self.n_routers and 0 <= d < self.n_routers):
                raise TopologyError(f"inter-group file: link {s}->{d} is outside routers 0..{self.n_routers - 1}")
            if s // a == d // a:
                raise TopologyError(f"inter-group file: link {s}->{d} stays inside group {s // a}")
            per_router[s].append(d)
        for r in range(self.n_routers):
            if len(per_router[r]) > h:
                raise TopologyError(
                    f"inter-group file: router {r} has {len(per_router[r])} global links, topology allows {h}")
        if global_links is not None and g > 1:  # routing takes one global hop between any two groups
            linked = {(s // a, d // a) for s, d in links}
            missing = [(G, H) for G in range(g) for H in range(G + 1, g) if (G, H) not in linked]
            if missing:
                pairs = ", ".join(f"{G}-{H}" for G, H in missing[:5]) + (", ..." if len(missing) > 5 else "")
                raise TopologyError(f"inter-group file: {len(missing)} pair(s) of groups have no global link between "
                                    f"them ({pairs}); a 1D Dragonfly links every pair of groups directly (minimal "
                                    "routes cross one global link)")
        self.global_targets = per_router
        used: dict[tuple[int, int], list[int]] = {}
        for r in range(self.n_routers):
            for j in range(h):
                pid = r * R + (a - 1) + j
                self.port_class[pid] = GLOBAL
            for j, d in enumerate(per_router[r]):
                used.setdefault((r, d), []).append(j)
        for (r, d), js in used.items():
            back = used.get((d, r))
            if back is None or len(back) != len(js):
                raise TopologyError(f"inter-group file: link {r}->{d} has no matching link {d}->{r}")
            for j, jb in zip(js, back):
                pid = r * R + (a - 1) + j
                self.peer_router[pid] = d
                self.peer_port[pid] = (a - 1) + jb

        # terminal ports
        for r in range(self.n_routers):
            for t in range(p):
                pid = r * R + (a - 1) + h + t
                self.port_class[pid] = TERMINAL
                self.peer_port[pid] = r * p + t

    # ------------------------------------------------------------------------------------------------ constructors
    @classmethod
    def from_codes_files(cls, shape: DragonflyShape, intra: str | Path, inter: str | Path) -> "Dragonfly":
        a = shape.routers_per_group  # a file larger than the topology can hold is refused before it is read
        intra_links = read_intra_file(intra, 12 * a * a)
        inter_links = read_inter_file(inter, 8 * shape.groups * a * shape.global_channels_per_router)
        return cls(shape, global_links=[tuple(x) for x in inter_links.tolist()], intra_links=intra_links)

    def write_codes_files(self, intra: str | Path, inter: str | Path) -> None:
        """Write CODES' binary intra/inter connection files (byte-identical to CODES' generator for its layout)."""
        rows = [(i, j, 0) for i in range(self.a) for j in self.local_order[i]]
        np.asarray(rows, dtype="<i4").reshape(-1, 3).tofile(intra)
        grows = [(r, d) for r in range(self.n_routers) for d in self.global_targets[r]]
        np.asarray(grows, dtype="<i4").reshape(-1, 2).tofile(inter)

    # ------------------------------------------------------------------------------------------------ queries
    def terminal_port(self, t: int) -> int:
        """Global port id of the router port that terminal ``t`` attaches to."""
        r = t // self.p
        return r * self.radix + (self.a - 1) + self.h + (t % self.p)

    @cached_property
    def terminal_port_ids(self) -> np.ndarray:
        t = np.arange(self.n_terminals)
        return (t // self.p) * self.radix + (self.a - 1) + self.h + (t % self.p)

    @cached_property
    def router_adjacency(self) -> list[list[int]]:
        """Neighbour routers of each router (local + global), for BFS."""
        R = self.radix
        adj = []
        for r in range(self.n_routers):
            nb = self.peer_router[r * R:(r + 1) * R]
            adj.append(sorted(set(int(x) for x in nb if x >= 0)))
        return adj

    def hop_distances(self) -> np.ndarray:
        """All-pairs router-to-router hop counts (BFS; ``n_routers^2`` int16)."""
        n = self.n_routers
        dist = np.full((n, n), -1, np.int16)
        adj = self.router_adjacency
        for s in range(n):
            dist[s, s] = 0
            dq = deque([s])
            while dq:
                u = dq.popleft()
                for v in adj[u]:
                    if dist[s, v] < 0:
                        dist[s, v] = dist[s, u] + 1
                        dq.append(v)
        return dist

    def diameter(self) -> int:
        d = self.hop_distances()
        if (d < 0).any():
            raise TopologyError("topology is disconnected")
        return int(d.max())

    def minimal_route(self, src_router: int, dst_router: int, choice: int = 0) -> list[int]:
        """A minimal router path (list of routers, inclusive) following CODES' minimal rule: inside a group one local
        hop; across groups go to a router of this group with a global link to the destination group (``choice``
        picks among them), cross, then one local hop to the destination."""
        a = self.a
        if src_router == dst_router:
            return [src_router]
        sg, dg = src_router // a, dst_router // a
        if sg == dg:
            return [src_router, dst_router]
        gateways = [(r, d) for r in range(sg * a, sg * a + a) for d in self.global_targets[r] if d // a == dg]
        if not gateways:
            raise TopologyError(f"no global link between groups {sg} and {dg}")
        direct = [(r, d) for r, d in gateways if r == src_router]
        gw, land = (direct or gateways)[choice % len(direct or gateways)]
        path = [src_router]
        if gw != src_router:
            path.append(gw)
        path.append(land)
        if land != dst_router:
            path.append(dst_router)
        return path

    @cached_property
    def links(self) -> list[tuple[int, int, int, int, int]]:
        """Undirected router-router links ``(router_a, port_a, router_b, port_b, class)`` with ``port_a < port_b``
        ordering by global port id (each physical link once)."""
        R = self.radix
        out = []
        for pid in range(self.n_ports):
            c = int(self.port_class[pid])
            if c == TERMINAL:
                continue
            pr = int(self.peer_router[pid])
            if pr < 0:
                continue
            qid = pr * R + int(self.peer_port[pid])
            if pid < qid:
                out.append((pid // R, pid % R, pr, int(self.peer_port[pid]), c))
        return out

    def port_graph_edges(self) -> np.ndarray:
        """SMART's port graph: ``(2, E)`` directed edge index over global port ids. All ports of a router are fully
        connected (both directions), plus both directions of every local and global link."""
        R = self.radix
        ii, jj = np.meshgrid(np.arange(R), np.arange(R), indexing="ij")
        mask = ii != jj
        base = np.arange(self.n_routers)[:, None] * R
        src = (base + ii[mask][None, :]).ravel()
        dst = (base + jj[mask][None, :]).ravel()
        link_src, link_dst = [], []
        for ra, pa_, rb, pb, _c in self.links:
            link_src += [ra * R + pa_, rb * R + pb]
            link_dst += [rb * R + pb, ra * R + pa_]
        return np.stack([np.concatenate([src, link_src]), np.concatenate([dst, link_dst])]).astype(np.int64)

    def summary(self) -> dict:
        n_local = sum(1 for l in self.links if l[4] == LOCAL)
        n_global = sum(1 for l in self.links if l[4] == GLOBAL)
        return {
            "groups": self.g,
            "routers_per_group": self.a,
            "terminals_per_router": self.p,
            "global_channels_per_router": self.h,
            "routers": self.n_routers,
            "terminals": self.n_terminals,
            "router_ports": self.n_ports,
            "radix": self.radix,
            "local_links": n_local,
            "global_links": n_global,
            "diameter": self.diameter(),
        }
