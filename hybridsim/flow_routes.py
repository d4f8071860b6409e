"""Routes of a Dragonfly as channel fractions, for the flow-level model (:mod:`hybridsim.flow`, issue 32): the bytes
of rank-to-rank flows placed on terminals laid on every channel they cross (a router output port, or a terminal's
injection link) as the engine's ``minimal`` routing draws its ports, plus the share a non-minimal (Valiant) path
spreads over every global and local channel, and a first packet's traversal of its route on an idle network.

A phase's flows are routed by slot at once (:meth:`Routes.group_parts`) from a table of the router pairs' routes
(:meth:`Routes._route_table`), each sum made in the order a loop over the flows makes it: the same numbers, for the
cost of a placement in a hybrid run (benchmarks/RESULTS.md, issue 32, "Predictor cost, round two").
"""

from __future__ import annotations

import numpy as np

from hybridsim_common.topology import GLOBAL, LOCAL, Dragonfly
from hybridsim_common.units import GIB


class Routes:
    """Minimal routes of a :class:`~hybridsim_common.topology.Dragonfly`, as channel fractions.

    Channels: ``0 .. n_ports-1`` router output ports (global port id ``router * radix + port``; a terminal port is its
    terminal's ejection), ``n_ports + t`` terminal ``t``'s injection link. :attr:`capacity` is each channel's bandwidth
    in bytes per ns."""

    def __init__(self, topo: Dragonfly, bandwidth_gib=(5.25, 4.7, 5.25), nonminimal: float = 0.0, *,
                 latency_ns=(0.0, 0.0, 0.0), router_delay: float = 0.0, packet_size: int = 4096):
        self.topo = topo
        #: fraction of inter-group bytes taken as routed non-minimally (Valiant, as adaptive routing does under load):
        #: two global hops and two local hops each, spread evenly over every global and local channel
        self.nonminimal = float(nonminimal)
        R, a = topo.radix, topo.a
        self.n_channels = topo.n_ports + topo.n_terminals
        bw = np.asarray(bandwidth_gib, dtype=np.float64) * GIB / 1e9  # bytes per ns per class
        self.capacity = np.empty(self.n_channels)
        self.capacity[:topo.n_ports] = bw[topo.port_class]
        self.capacity[topo.n_ports:] = bw[2]
        #: per link class (local, global, terminal): bytes per ns, propagation latency ns; the router delay (ns) a
        #: packet pays at every router it crosses; the packet size a message is cut into
        self.class_bw = bw
        self.latency_ns = np.asarray(latency_ns, dtype=np.float64)
        self.router_delay = float(router_delay)
        self.packet_size = int(packet_size)
        # (router, neighbour router) -> its output ports to it; router -> group -> its global ports there
        self._to: dict[tuple[int, int], list[int]] = {}
        for pid in range(topo.n_ports):
            if topo.port_class[pid] in (LOCAL, GLOBAL) and topo.peer_router[pid] >= 0:
                self._to.setdefault((pid // R, int(topo.peer_router[pid])), []).append(pid)
        self._gw: dict[tuple[int, int], list[int]] = {}  # (group, dst group) -> routers of group linked to it
        for r in range(topo.n_routers):
            for d in topo.global_targets[r]:
                lst = self._gw.setdefault((r // a, d // a), [])
                if r not in lst:
                    lst.append(r)
        self._cache: dict[tuple[int, int], dict[int, float]] = {}
        self._hops: dict[tuple[int, int], tuple[float, float]] = {}
        # the table of routes (_route_table): every asked router pair's channels and fractions, and where each is
        self._rt_arrays: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.float64))
        self._rt_off: np.ndarray | None = None
        self._rt_len: np.ndarray | None = None

    def _hop(self, out: dict, r: int, nxt: int, w: float) -> None:
        ports = self._to[(r, nxt)]
        for p in ports:
            out[p] = out.get(p, 0.0) + w / len(ports)

    def _global(self, out: dict, gw: int, dg: int, dst_router: int, w: float) -> None:
        """From gateway router ``gw`` over its global links to group ``dg`` (evenly), then a local hop."""
        a = self.topo.a
        lands = [d for d in self.topo.global_targets[gw] if d // a == dg]
        for land in dict.fromkeys(lands):
            share = w * lands.count(land) / len(lands)
            self._hop(out, gw, land, share)
            if land != dst_router:
                self._hop(out, land, dst_router, share)

    def router_route(self, src: int, dst: int) -> dict[int, float]:
        """Channel -> fraction of the bytes from router ``src`` to router ``dst`` (ejection excluded)."""
        key = (src, dst)
        if key in self._cache:
            return self._cache[key]
        a = self.topo.a
        out: dict[int, float] = {}
        sg, dg = src // a, dst // a
        if src == dst:
            pass
        elif sg == dg:
            self._hop(out, src, dst, 1.0)
        elif any(d // a == dg for d in self.topo.global_targets[src]):
            self._global(out, src, dg, dst, 1.0)  # the engine's minimal rule: own global ports first
        else:
            gws = self._gw[(sg, dg)]
            for gw in gws:
                self._hop(out, src, gw, 1.0 / len(gws))
                self._global(out, gw, dg, dst, 1.0 / len(gws))
        self._cache[key] = out
        return out

    def _route_table(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each router pair ``src * n_routers + dst`` of ``pairs`` has its :meth:`router_route` in the table of
        routes (:attr:`_rt_arrays`: every channel and fraction, pair after pair, in the route's order): (offset,
        length) arrays; a pair's route enters the table the first time it is asked for."""
        nr = self.topo.n_routers
        if self._rt_off is None:
            self._rt_off = np.full(nr * nr, -1, dtype=np.int64)
            self._rt_len = np.zeros(nr * nr, dtype=np.int64)
        new = np.unique(pairs[self._rt_off[pairs] < 0])
        if len(new):
            ch, fr = list(self._rt_arrays[0]), list(self._rt_arrays[1])
            for k in new.tolist():
                r = self.router_route(k // nr, k % nr)
                self._rt_off[k], self._rt_len[k] = len(ch), len(r)
                ch.extend(r.keys())
                fr.extend(r.values())
            self._rt_arrays = (np.asarray(ch, dtype=np.int64), np.asarray(fr, dtype=np.float64))
        return self._rt_off[pairs], self._rt_len[pairs]

    def hops(self, src: int, dst: int, nonminimal: float | None = None) -> tuple[float, float]:
        """Expected (local, global) router-to-router hops from router ``src`` to router ``dst``: the minimal route's,
        plus, for the :attr:`nonminimal` share of an inter-group route, one global and one local hop more (a Valiant
        path through an intermediate group)."""
        base = self._hops.get((src, dst))
        if base is None:   # the minimal route's, once per router pair (for performance: asked per flow)
            pc = self.topo.port_class
            loc = glob = 0.0
            for ch, f in self.router_route(src, dst).items():
                if pc[ch] == LOCAL:
                    loc += f
                else:
                    glob += f
            base = self._hops[(src, dst)] = (loc, glob)
        loc, glob = base
        q = self.nonminimal if nonminimal is None else float(nonminimal)
        if src // self.topo.a != dst // self.topo.a:
            loc += q
            glob += q
        return loc, glob

    def traversal(self, ts, td, size, nonminimal: float | None = None) -> np.ndarray:
        """(n,) ns for the first packet of a ``size``-byte message (a number or one per flow; at most one packet
        counts) from terminal ``ts[i]`` to
        terminal ``td[i]`` on an idle network, as the engine moves a packet (hybridsim.engine.network): the injection
        link (serialisation + terminal latency), at every router crossed its delay, then the next link's
        serialisation + latency (local or global), and the ejection link's; 0 for a message that stays on its
        terminal. The rest of a message follows at the bandwidth its channels leave (the flow model's bandwidth
        term)."""
        ts, td = np.asarray(ts, dtype=np.int64), np.asarray(td, dtype=np.int64)
        return self.traversal_by_hops(ts, td, self.hop_counts(ts, td, nonminimal), size)

    def hop_counts(self, ts, td, nonminimal: float | None = None) -> np.ndarray:
        """(n, 2) (local, global) router-to-router hops (:meth:`hops`) of the flows from terminal ``ts[i]`` to
        ``td[i]``, looked up once per router pair."""
        topo = self.topo
        ts, td = np.asarray(ts, dtype=np.int64), np.asarray(td, dtype=np.int64)
        if not len(ts):
            return np.zeros((0, 2))
        nr = topo.n_routers
        pairs, inv = np.unique((ts // topo.p) * nr + td // topo.p, return_inverse=True)
        table = np.array([self.hops(k // nr, k % nr, nonminimal) for k in pairs.tolist()], dtype=np.float64)
        return table[inv.reshape(-1)]

    def traversal_by_hops(self, ts: np.ndarray, td: np.ndarray, hops: np.ndarray, size) -> np.ndarray:
        """:meth:`traversal` of the flows ``ts`` -> ``td`` whose :meth:`hop_counts` are ``hops``."""
        pkt = np.clip(np.broadcast_to(np.asarray(size, np.float64), ts.shape), 1.0, self.packet_size)
        lat, rd = self.latency_ns, self.router_delay
        bw = self.class_bw
        out = (2 * (pkt / bw[2] + lat[2]) + rd                     # injection + ejection, and the first router
               + hops[:, 0] * (pkt / bw[0] + lat[0] + rd) + hops[:, 1] * (pkt / bw[1] + lat[1] + rd))
        out[ts == td] = 0.0
        return out

    def channel_bytes(self, tm: np.ndarray, terminals) -> np.ndarray:
        """(n_channels,) bytes per iteration of traffic matrix ``tm`` (R, R) on ranks placed on ``terminals`` (R,)."""
        tm = np.asarray(tm, dtype=np.float64)
        src, dst = np.nonzero(tm)
        return self.flow_bytes(src, dst, tm[src, dst], terminals)

    def flow_parts(self, src, dst, w, terminals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(base, minimal, spread)`` (n_channels,) each, so that the bytes of the flows with a non-minimal share q
        are ``base + (1 - q) minimal + q spread`` (:meth:`flow_bytes`): ``base`` the injection and ejection links and
        the intra-group routes, ``minimal`` the inter-group bytes routed minimally, ``spread`` the same bytes routed
        non-minimally (two global and two local hops each, spread evenly over every global and local channel)."""
        src = np.asarray(src, dtype=np.int64)
        if not len(src):
            return np.zeros(self.n_channels), np.zeros(self.n_channels), np.zeros(self.n_channels)
        base, minimal, spread = self.group_parts(np.zeros(len(src), np.int64), src, dst, w, terminals)
        return base[0], minimal[0], spread[0]

    def group_parts(self, group, src, dst, w, terminals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`flow_parts` of each group of the flows at once: (K, n_channels) each, row k the flows whose
        ``group`` is the k-th of its sorted distinct values (a phase's slots: :meth:`FlowModel.place`).

        Each row's sums are made in the order a loop over that group's flows makes them, for performance in numpy:
        a router pair's bytes summed in flow order (bincount adds one after another), then added onto its route's
        channels pair after pair, the pairs in the order of their first flow (np.add.at adds in index order)."""
        topo = self.topo
        terms = np.asarray(terminals, dtype=np.int64)
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        w = np.asarray(w, dtype=np.float64)
        _, g = np.unique(np.asarray(group, dtype=np.int64), return_inverse=True)
        g = g.reshape(-1)
        K, C = (int(g.max()) + 1 if len(g) else 0), self.n_channels
        base, minimal, spread = np.zeros((K, C)), np.zeros((K, C)), np.zeros((K, C))
        ts, td = terms[src], terms[dst]
        keep = ts != td  # a rank pair on one terminal never enters the network
        w, ts, td, g = w[keep], ts[keep], td[keep], g[keep]
        if not len(w):
            return base, minimal, spread
        np.add.at(base, (g, topo.n_ports + ts), w)
        np.add.at(base, (g, topo.terminal_port_ids[td]), w)
        nr = topo.n_routers
        keys, first, inv = np.unique((g * nr + ts // topo.p) * nr + td // topo.p, return_index=True,
                                     return_inverse=True)
        order = np.argsort(first, kind="stable")
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = np.arange(len(order))
        v = np.bincount(pos[inv.reshape(-1)], weights=w, minlength=len(order))
        # each (group, router pair) entry's route from the table of routes (its channels and fractions)
        rr = keys[order] % (nr * nr)
        off, ln = self._route_table(rr)
        ch_all, fr_all = self._rt_arrays
        rep = np.repeat(np.arange(len(rr)), ln)
        at = off[rep] + (np.arange(len(rep)) - np.repeat(np.cumsum(ln) - ln, ln))
        gk = keys[order] // (nr * nr)
        far = (rr // nr) // topo.a != (rr % nr) // topo.a
        inter = np.bincount(gk[far], weights=v[far], minlength=K)    # in pair order, one after another
        rows, chans, vals, farr = gk[rep], ch_all[at], v[rep] * fr_all[at], far[rep]
        for sel, out in ((~farr, base), (farr, minimal)):
            if sel.any():
                np.add.at(out, (rows[sel], chans[sel]), vals[sel])
        if inter.any():
            pc = topo.port_class
            glob = np.nonzero((pc == GLOBAL) & (topo.peer_router >= 0))[0]
            loc = np.nonzero(pc == LOCAL)[0]
            for k, x in enumerate(inter.tolist()):
                if x:
                    spread[k, glob] += 2 * x / len(glob)
                    spread[k, loc] += 2 * x / len(loc)
        return base, minimal, spread

    def flow_bytes(self, src, dst, w, terminals, nonminimal: float | None = None) -> np.ndarray:
        """(n_channels,) bytes of the rank-to-rank flows ``src`` -> ``dst`` of ``w`` bytes (arrays of one length) on
        ranks placed on ``terminals`` (``nonminimal``: the share routed non-minimally, default :attr:`nonminimal`)."""
        q = self.nonminimal if nonminimal is None else float(nonminimal)
        base, minimal, spread = self.flow_parts(src, dst, w, terminals)
        return base + (1 - q) * minimal + q * spread if q else base + minimal
