"""The Dragonfly network at packet granularity, with CODES dragonfly-dally semantics (WORKLOADS.md section 7).

What is modelled (packet = chunk):

* **Terminals (NICs).** A FIFO injection queue per terminal. The head packet leaves when the NIC is idle and the
  credit counter of the injection link allows it (``occupancy + 1 packet <= terminal VC buffer``); it serialises at
  the terminal bandwidth and reaches its router after the serialisation plus the terminal link latency. The last
  packet of a message starting to serialise is the message's *local completion* (MPI Isend completion).
* **Router output ports, per VC.** Buffers are accounted per (output port, VC) at the upstream router, as CODES does:
  an arriving packet is routed, then *admitted* to its (port, VC) if ``occupancy + 1 packet <= buffer`` (occupancy
  grows, a credit goes upstream after the credit delay) or kept in that (port, VC)'s overflow list (no credit yet,
  the port's ``stalled`` counter grows and its busy-on-credits clock starts). A credit from downstream frees one packet
  of occupancy and admits the head of the overflow list. Occupancy is counted in whole packets (CODES adds
  ``chunk_size`` per chunk, whatever its real size).
* **Port send loop.** Each output port serves its VCs round-robin. A packet of ``s`` bytes occupies the port for its
  serialisation time ``s / bandwidth``; it reaches the next hop after serialisation + router delay + link latency
  (the router delay adds latency but does not occupy the port).
* **Delivery.** At the destination terminal every packet returns a credit to the last router at once; a message is
  delivered when its last packet has arrived.
* **Routing** (:meth:`Network.route`): ``minimal``, ``nonminimal`` (Valiant), ``adaptive`` (UGAL-L at the source
  router) and ``prog-adaptive`` (CODES' rule, re-evaluated at every router of the source group). VCs: 0/1 in the
  source group (number of local hops taken there), 2 in an intermediate group, 3 in the destination group.

All per-port state lives in flat lists indexed by the global port id ``p = router * radix + port`` or by
``pv = p * num_vcs + vc``. Handlers have the event-loop signature ``handler(t, a, b)``.
"""

from __future__ import annotations

from collections import deque
from heapq import heappush

from ..topology import GLOBAL, LOCAL, TERMINAL, Dragonfly
from ..units import GIB

ROUTINGS = ("minimal", "nonminimal", "adaptive", "prog-adaptive")
MINIMAL, NONMINIMAL, ADAPTIVE, PROG_ADAPTIVE = range(4)


class Packet:
    """One packet (= one CODES chunk) of a message.

    ``up`` is the ``pv`` whose credit this packet holds upstream (a router output (port, VC)), or ``-1 - terminal``
    while it holds the injection credit of its source terminal.
    """

    __slots__ = ("msg", "size", "dst", "dst_router", "dst_group", "src_group", "igroup", "nonmin", "visited",
                 "lhops", "hops", "up", "last", "jb")

    def __init__(self, msg, size, src, dst, dst_router, dst_group, src_group, last, jb):
        self.msg = msg
        self.size = size
        self.dst = dst
        self.dst_router = dst_router
        self.dst_group = dst_group
        self.src_group = src_group
        self.igroup = -1
        self.nonmin = False
        self.visited = False
        self.lhops = 0
        self.hops = 0
        self.up = -1 - src
        self.last = last
        self.jb = jb


class Network:
    """Terminals, routers, links and routing of one Dragonfly; see the module docstring.

    ``on_local(t, msg)`` and ``on_deliver(t, msg)`` are the hooks of the message layer: the first when the last
    packet of ``msg`` starts injection at its source NIC, the second when its last packet has reached the destination
    terminal. A message is any object with ``src_term``, ``dst_term``, ``wire`` (bytes), ``left`` and ``jb`` (per-port
    byte counters of its job, or ``None``) attributes.
    """

    def __init__(self, topo: Dragonfly, tcfg, loop, rng, debug: bool = False, exact_credits: bool = False):
        self.topo = topo
        self.exact_credits = exact_credits
        self.loop = loop
        self.rng = rng
        self.debug = debug
        self.routing = ROUTINGS.index(tcfg.routing)
        a, p, g, R = topo.a, topo.p, topo.g, topo.radix
        self.a, self.p, self.g, self.radix = a, p, g, R
        NV = self.nv = tcfg.num_vcs
        self.P = P = tcfg.packet_size
        self.vc_dest = NV - 1
        self.vc_inter = NV - 2
        self.router_delay = float(tcfg.router_delay)
        self.credit_delay = float(tcfg.effective_credit_delay())
        bw = tcfg.bandwidth.as_tuple()
        lat = tcfg.link_latency()
        caps = (tcfg.vc_buffer.local, tcfg.vc_buffer.global_, tcfg.vc_buffer.terminal)
        pc = topo.port_class.tolist()
        n = topo.n_ports
        self.n_ports = n
        self.port_class = pc
        #: bytes per ns of each port at full capacity
        self.bw_bpns = [bw[c] * GIB / 1e9 for c in pc]
        self.nspb_nominal = [1.0 / b for b in self.bw_bpns]
        #: ns per byte in effect (raised by background load from predicted jobs)
        self.nspb = list(self.nspb_nominal)
        self.lat = [float(lat[c]) for c in pc]
        #: buffer capacity of each (port, VC) in packets
        self.cap = [caps[c] // P for c in pc]
        self.peer = topo.peer_router.tolist()
        self.peer_port = topo.peer_port.tolist()
        self.is_term = [c == TERMINAL for c in pc]

        # per (port, VC)
        self.occ = [0] * (n * NV)          # packets accounted against the downstream buffer
        self.pend = [deque() for _ in range(n * NV)]  # admitted, waiting for the port
        self.ovf = [deque() for _ in range(n * NV)]   # not admitted (downstream buffer full)
        self.occ_int = [0.0] * (n * NV)    # integral of occ over time (packet-ns), for window means
        self.occ_t = [0.0] * (n * NV)
        # per port
        self.busy_until = [0.0] * n
        self.sched = [False] * n
        self.rr = [NV - 1] * n
        self.npend = [0] * n
        self.port_occ = [0] * n            # sum of occ over VCs (packets)
        self.qcount = [0] * n              # packets in the overflow lists (packets)
        self.bytes_out = [0] * n
        self.pkts_out = [0] * n
        self.stalled = [0] * n
        self.busy_acc = [0.0] * n          # ns blocked on credits (closed intervals)
        self.busy_start = [-1.0] * n       # start of the open interval, -1 if none

        # terminals
        T = topo.n_terminals
        self.n_terminals = T
        self.tq = [deque() for _ in range(T)]
        self.tocc = [0] * T
        self.tbusy = [0.0] * T
        self.tsched = [False] * T
        self.tcap = caps[TERMINAL] // P
        self.t_nspb = 1.0 / (bw[TERMINAL] * GIB / 1e9)
        self.t_lat = float(lat[TERMINAL])
        self.t_bytes_in = [0] * T          # bytes injected by each terminal
        self.t_bytes_out = [0] * T         # bytes delivered to each terminal

        # routing tables
        self.tport = topo.terminal_port_ids.tolist()
        self.lport = []                    # lport[r][j]: port id from r to router j of its group
        self.gports = []                   # gports[r][G]: global port ids of r to group G
        self.lgw = []                      # lgw[r][G]: local port ids of r to routers of its group with links to G
        self.reach = []                    # reach[r]: groups r reaches over its own global ports (sorted)
        for r in range(topo.n_routers):
            base = r * R
            lp = [-1] * a
            gp: dict[int, list[int]] = {}
            for k in range(R):
                pid = base + k
                if pc[pid] == LOCAL:
                    lp[self.peer[pid] % a] = pid
                elif pc[pid] == GLOBAL and self.peer[pid] >= 0:
                    gp.setdefault(self.peer[pid] // a, []).append(pid)
            self.lport.append(lp)
            self.gports.append(gp)
            self.reach.append(sorted(gp))
        for r in range(topo.n_routers):
            G0 = r // a
            lg: dict[int, list[int]] = {}
            for j in range(a):
                r2 = G0 * a + j
                if r2 == r:
                    continue
                for G in self.gports[r2]:
                    lg.setdefault(G, []).append(self.lport[r][j])
            self.lgw.append(lg)

        # hooks (set by the message layer)
        self.on_local = None
        self.on_deliver = None
        # counters
        self.packets = 0
        self.bytes_self = 0

        self._bind()

    # ------------------------------------------------------------------------------------------------ handlers
    def _bind(self) -> None:
        """Create the event handlers.

        The per-packet handlers are closures over the flat state lists rather than methods: a free-variable load is
        several times cheaper than ``self.attribute`` in CPython, and these few functions run tens of millions of
        times. Each one is an event handler ``(t, a, b)``; the public names are:

        ``inject(t, msg)``            the message reaches its source NIC: cut it into packets, queue them;
        ``term_send(t, term)``        the NIC, if idle, starts its queued packets that hold credits, back to back;
        ``local_done(t, msg)``        the last packet of ``msg`` starts injection (when that lies after ``term_send``);
        ``term_arrive(t, term, pk)``  a packet reaches its destination terminal (credit back, message count);
        ``router_arrive(t, r, pk)``   a packet reaches router ``r``: route, then admit or overflow;
        ``port_send(t, p)``           output port ``p`` starts its next packet (VCs round-robin);
        ``credit(t, pv)``             a credit for (port, VC) ``pv`` arrives: free a slot, admit the overflow head;
        ``term_credit(t, term)``      an injection credit arrives at terminal ``term``.
        """
        heap = self.loop.heap
        seq = self.loop.seq
        NV = self.nv
        P = self.P
        a, p_per_r = self.a, self.p
        occ, cap, pend, ovf = self.occ, self.cap, self.pend, self.ovf
        occ_int, occ_t = self.occ_int, self.occ_t
        busy_until, sched, rr, npend = self.busy_until, self.sched, self.rr, self.npend
        port_occ, qcount = self.port_occ, self.qcount
        bytes_out, pkts_out, stalled = self.bytes_out, self.pkts_out, self.stalled
        busy_acc, busy_start = self.busy_acc, self.busy_start
        nspb, lat, peer, peer_port, is_term = self.nspb, self.lat, self.peer, self.peer_port, self.is_term
        tq, tocc, tbusy, tsched = self.tq, self.tocc, self.tbusy, self.tsched
        tcap, t_nspb, t_lat = self.tcap, self.t_nspb, self.t_lat
        t_bytes_in, t_bytes_out = self.t_bytes_in, self.t_bytes_out
        rdelay, cdelay = self.router_delay, self.credit_delay
        exact = self.exact_credits
        tport, lport, gports, lgw = self.tport, self.lport, self.gports, self.lgw
        vc_dest, vc_inter = self.vc_dest, self.vc_inter
        mode = self.routing
        randrange = self.rng.randrange
        port_class = self.port_class
        prog_adaptive, ugal = self._prog_adaptive, self._ugal
        draw_igroup = self._draw_igroup
        best_global, best_local = self._best_global, self._best_local
        net = self

        # ---------------------------------------------------------------------------------------------- terminals
        def inject(t, msg, _=None):
            src, dst = msg.src_term, msg.dst_term
            size = msg.wire
            if src == dst:  # loopback: never touches the network
                net.bytes_self += size
                msg.left = 0
                net.on_local(t, msg)
                net.on_deliver(t, msg)
                return
            npk = max(1, -(-size // P))
            msg.left = npk
            dr = dst // p_per_r
            dg = dr // a
            sg = src // p_per_r // a
            q = tq[src]
            jb = msg.jb
            for _i in range(npk - 1):
                q.append(Packet(msg, P, src, dst, dr, dg, sg, False, jb))
            q.append(Packet(msg, size - P * (npk - 1), src, dst, dr, dg, sg, True, jb))
            net.packets += npk
            t_bytes_in[src] += size
            if not tsched[src]:
                term_send(t, src)

        def term_send(t, term, _=None):
            tsched[term] = False
            q = tq[term]
            if not q:
                return
            if t < tbusy[term]:
                tsched[term] = True
                heappush(heap, (tbusy[term], next(seq), h_tsend, term, None))
                return
            # Send back to back every queued packet that holds a credit now: credits only come back over time, so
            # each of them would find one at its own start too. Same times as one event per packet, fewer events.
            o = tocc[term]
            if o >= tcap:
                return  # wait for a credit
            r = term // p_per_r
            start = t
            while q and o < tcap:
                pk = q.popleft()
                o += 1
                end = start + pk.size * t_nspb
                heappush(heap, (end + t_lat, next(seq), h_arrive, r, pk))
                if pk.last:
                    if start == t:
                        net.on_local(t, pk.msg)
                    else:
                        heappush(heap, (start, next(seq), h_local, pk.msg, None))
                start = end
            tocc[term] = o
            tbusy[term] = start

        def local_done(t, msg, _=None):
            net.on_local(t, msg)

        def term_credit(t, term, _=None):
            tocc[term] -= 1
            if not tsched[term]:
                term_send(t, term)

        def term_arrive(t, term, pk):
            credit_up(t, pk.up)
            t_bytes_out[term] += pk.size
            msg = pk.msg
            msg.left -= 1
            if msg.left == 0:
                net.on_deliver(t, msg)

        # ---------------------------------------------------------------------------------------------- routers
        def route(r, pk):
            dr = pk.dst_router
            if r == dr:
                return tport[pk.dst] * NV + vc_dest
            c = r // a
            dg = pk.dst_group
            if c == dg:
                return lport[r][dr % a] * NV + vc_dest
            gp = gports[r]
            if c != pk.src_group:
                # intermediate group: minimal to the destination group
                pk.visited = True
                cands = gp.get(dg)
                if cands:
                    if mode == PROG_ADAPTIVE:
                        port = best_global(cands)
                    else:
                        port = cands[randrange(len(cands))] if len(cands) > 1 else cands[0]
                else:
                    cands = lgw[r][dg]
                    if mode == PROG_ADAPTIVE:
                        port = best_local(cands)
                    else:
                        port = cands[randrange(len(cands))] if len(cands) > 1 else cands[0]
                return port * NV + vc_inter
            # source group
            at_source = pk.hops == 0
            if at_source:
                pk.igroup = draw_igroup(pk.src_group, dg)
            vc = pk.lhops
            if mode == PROG_ADAPTIVE:
                port = prog_adaptive(r, pk, at_source, gp, dg)
            elif mode == MINIMAL:
                cands = gp.get(dg) or lgw[r][dg]
                port = cands[randrange(len(cands))] if len(cands) > 1 else cands[0]
            elif mode == NONMINIMAL:
                target = pk.igroup if pk.igroup >= 0 else dg
                pk.nonmin = target != dg
                cands = gp.get(target) or lgw[r][target]
                port = cands[randrange(len(cands))] if len(cands) > 1 else cands[0]
            else:
                port = ugal(r, pk, at_source, gp, dg)
            if port_class[port] == LOCAL:
                pk.lhops = 1
            return port * NV + vc

        def router_arrive(t, r, pk):
            pv = route(r, pk)
            pk.hops += 1
            p = pv // NV
            o = occ[pv]
            if o < cap[p]:
                occ_int[pv] += o * (t - occ_t[pv])
                occ_t[pv] = t
                occ[pv] = o + 1
                port_occ[p] += 1
                pend[pv].append(pk)
                npend[p] += 1
                credit_up(t, pk.up)
                pk.up = pv
                if not sched[p]:
                    if t >= busy_until[p]:
                        port_send(t, p)
                    else:
                        sched[p] = True
                        heappush(heap, (busy_until[p], next(seq), h_port, p, None))
            else:
                ovf[pv].append(pk)
                qcount[p] += 1
                stalled[p] += 1
                if busy_start[p] < 0.0:
                    busy_start[p] = t

        def port_send(t, p, _=None):
            sched[p] = False
            base = p * NV
            v = rr[p]
            for _i in range(NV):
                v += 1
                if v == NV:
                    v = 0
                q = pend[base + v]
                if q:
                    break
            else:
                return
            rr[p] = v
            pk = q.popleft()
            n = npend[p] - 1
            npend[p] = n
            size = pk.size
            end = t + size * nspb[p]
            busy_until[p] = end
            bytes_out[p] += size
            pkts_out[p] += 1
            jb = pk.jb
            if jb is not None:
                jb[p] += size
            if is_term[p]:
                heappush(heap, (end + rdelay + lat[p], next(seq), h_tarrive, peer_port[p], pk))
            else:
                heappush(heap, (end + rdelay + lat[p], next(seq), h_arrive, peer[p], pk))
            if n:
                sched[p] = True
                heappush(heap, (end, next(seq), h_port, p, None))

        def credit_up(t, up):
            # Return the credit a packet held upstream (router (port, VC) up >= 0, or terminal -1 - up). With
            # exact_credits, or when a packet waits for it, it travels as an event arriving after the credit delay.
            # Otherwise only an arrival within the credit delay (1.4 ns by default) could tell the difference, so it
            # is applied at once: one event less per packet hop.
            if up >= 0:
                if exact or ovf[up]:
                    heappush(heap, (t + cdelay, next(seq), h_credit, up, None))
                    return
                p = up // NV
                o = occ[up]
                occ_int[up] += o * (t - occ_t[up])
                occ_t[up] = t
                occ[up] = o - 1
                port_occ[p] -= 1
                bs = busy_start[p]
                if bs >= 0.0:
                    busy_acc[p] += t - bs
                    busy_start[p] = t if qcount[p] else -1.0
            else:
                term = -1 - up
                if exact or (tq[term] and not tsched[term]):
                    heappush(heap, (t + cdelay, next(seq), h_tcredit, term, None))
                else:
                    tocc[term] -= 1

        def credit(t, pv, _=None):
            p = pv // NV
            o = occ[pv]
            occ_int[pv] += o * (t - occ_t[pv])
            occ_t[pv] = t
            occ[pv] = o - 1
            port_occ[p] -= 1
            q = ovf[pv]
            if q:
                pk = q.popleft()
                qcount[p] -= 1
                occ[pv] = o
                port_occ[p] += 1
                pend[pv].append(pk)
                npend[p] += 1
                credit_up(t, pk.up)
                pk.up = pv
                if not sched[p]:
                    if t >= busy_until[p]:
                        port_send(t, p)
                    else:
                        sched[p] = True
                        heappush(heap, (busy_until[p], next(seq), h_port, p, None))
            bs = busy_start[p]
            if bs >= 0.0:
                busy_acc[p] += t - bs
                busy_start[p] = t if qcount[p] else -1.0

        self.inject, self.term_send, self.term_credit, self.term_arrive = inject, term_send, term_credit, term_arrive
        self.route, self.router_arrive, self.port_send, self.credit = route, router_arrive, port_send, credit
        self._credit_up = credit_up
        h_arrive, h_port, h_credit, h_tsend, h_tcredit, h_tarrive = (router_arrive, port_send, credit, term_send,
                                                                       term_credit, term_arrive)
        h_local = local_done
        if self.debug:
            h_credit, h_tcredit, h_tarrive = self._credit_checked, self._term_credit_checked, self._term_arrive_checked
        #: the handlers pushed on the heap (debug mode wraps three of them with invariant checks)
        self.h_arrive, self.h_port, self.h_credit, self.h_tsend = h_arrive, h_port, h_credit, h_tsend
        self.h_tcredit, self.h_tarrive, self.h_inject = h_tcredit, h_tarrive, inject

    @property
    def bytes_injected(self) -> int:
        return sum(self.t_bytes_in)

    @property
    def bytes_delivered(self) -> int:
        return sum(self.t_bytes_out)

    # ------------------------------------------------------------------------------------------------ routing
    def _draw_igroup(self, sg, dg):
        g = self.g
        if g <= 2 or sg == dg:
            return -1
        lo, hi = (sg, dg) if sg < dg else (dg, sg)
        k = self.rng.randrange(g - 2)
        if k >= lo:
            k += 1
        if k >= hi:
            k += 1
        return k

    def _score(self, port):
        return self.port_occ[port] + self.qcount[port]

    def _best_global(self, cands):
        """CODES' global pick: two distinct random candidates, the lower score wins (ties at random)."""
        if len(cands) == 1:
            return cands[0]
        rng = self.rng
        i = rng.randrange(len(cands))
        j = rng.randrange(len(cands) - 1)
        if j >= i:
            j += 1
        a, b = cands[i], cands[j]
        sa, sb = self._score(a), self._score(b)
        if sa < sb:
            return a
        if sb < sa:
            return b
        return a if rng.random() < 0.5 else b

    def _best_local(self, cands):
        """CODES' local pick: the lowest score of all candidates (ties at random)."""
        if len(cands) == 1:
            return cands[0]
        best = None
        bs = 1 << 60
        ties = 0
        for c in cands:
            s = self.port_occ[c] + self.qcount[c]
            if s < bs:
                best, bs, ties = c, s, 1
            elif s == bs:
                ties += 1
                if self.rng.randrange(ties) == 0:
                    best = c
        return best

    def route(self, r, pk):
        """Output (port, VC) index ``pv`` of packet ``pk`` at router ``r`` (may update the packet's path state)."""
        NV = self.nv
        dr = pk.dst_router
        if r == dr:
            return self.tport[pk.dst] * NV + self.vc_dest
        a = self.a
        c = r // a
        dg = pk.dst_group
        if c == dg:
            return self.lport[r][dr % a] * NV + self.vc_dest
        sg = pk.src_group
        mode = self.routing
        gp = self.gports[r]
        if c != sg:
            # intermediate group: route minimally to the destination group
            pk.visited = True
            cands = gp.get(dg)
            if cands:
                port = self._best_global(cands) if mode == PROG_ADAPTIVE else \
                    cands[self.rng.randrange(len(cands))] if len(cands) > 1 else cands[0]
            else:
                cands = self.lgw[r][dg]
                port = self._best_local(cands) if mode == PROG_ADAPTIVE else \
                    cands[self.rng.randrange(len(cands))] if len(cands) > 1 else cands[0]
            return port * NV + self.vc_inter
        # source group
        at_source = pk.hops == 0
        if at_source:
            pk.igroup = self._draw_igroup(sg, dg)
        vc = pk.lhops
        rng = self.rng
        if mode == MINIMAL:
            cands = gp.get(dg) or self.lgw[r][dg]
            port = cands[rng.randrange(len(cands))] if len(cands) > 1 else cands[0]
        elif mode == NONMINIMAL:
            target = pk.igroup if pk.igroup >= 0 else dg
            pk.nonmin = target != dg
            cands = gp.get(target) or self.lgw[r][target]
            port = cands[rng.randrange(len(cands))] if len(cands) > 1 else cands[0]
        elif mode == ADAPTIVE:
            port = self._ugal(r, pk, at_source, gp, dg)
        else:
            port = self._prog_adaptive(r, pk, at_source, gp, dg)
        if self.port_class[port] == LOCAL:
            pk.lhops = 1
        return port * NV + vc

    def _ugal(self, r, pk, at_source, gp, dg):
        """UGAL-L: at the source router compare (queue x hops) of one random minimal and one random non-minimal
        first hop; the decision then holds for the packet's whole path (Valiant if non-minimal)."""
        rng = self.rng
        if at_source and pk.igroup >= 0:
            mc = gp.get(dg)
            m_hops = 2
            if not mc:
                mc = self.lgw[r][dg]
                m_hops = 3
            ig = pk.igroup
            nc = gp.get(ig)
            n_hops = 4
            if not nc:
                nc = self.lgw[r][ig]
                n_hops = 5
            mp = mc[rng.randrange(len(mc))]
            np_ = nc[rng.randrange(len(nc))]
            if self._score(mp) * m_hops <= self._score(np_) * n_hops:
                return mp
            pk.nonmin = True
            return np_
        target = pk.igroup if (pk.nonmin and not pk.visited) else dg
        cands = gp.get(target) or self.lgw[r][target]
        return cands[rng.randrange(len(cands))] if len(cands) > 1 else cands[0]

    def _prog_adaptive(self, r, pk, at_source, gp, dg):
        """CODES' progressive adaptive routing (DELTA scoring, non-minimal score doubled), in the source group."""
        mc = gp.get(dg)
        if mc:
            mport = self._best_global(mc)
        else:
            mport = self._best_local(self.lgw[r][dg])
        ig = pk.igroup
        nport = -1
        if ig >= 0:
            if at_source:
                nc = gp.get(ig)
                if nc:
                    nport = self._best_global(nc)
                else:
                    nc = self.lgw[r].get(ig)
                    if nc:
                        nport = self._best_local(nc)
            else:
                nc = gp.get(ig)
                if not nc and not pk.nonmin:
                    choices = [G for G in self.reach[r] if G != pk.src_group and G != dg]
                    if choices:
                        ig = pk.igroup = choices[self.rng.randrange(len(choices))]
                        nc = gp[ig]
                if nc:
                    nport = self._best_global(nc)
        if pk.nonmin and not pk.visited and nport >= 0:
            return nport
        ms = self._score(mport)
        if nport < 0 or ms <= 0:
            return mport
        if ms <= 2 * self._score(nport):
            return mport
        pk.nonmin = True
        return nport

    # ------------------------------------------------------------------------------------------------ background load
    def set_background(self, util_by_port: dict[int, float]) -> None:
        """Reduce the capacity of ports by a utilisation fraction (predicted jobs' load); ``{}`` restores all."""
        nspb = self.nspb
        nom = self.nspb_nominal
        for p in range(self.n_ports):
            nspb[p] = nom[p]
        for p, u in util_by_port.items():
            u = min(max(u, 0.0), 0.9)
            nspb[p] = nom[p] / (1.0 - u)

    # ------------------------------------------------------------------------------------------------ debug checks
    def _credit_checked(self, t, pv, b=None):
        self.credit(t, pv, b)
        p = pv // self.nv
        assert 0 <= self.occ[pv] <= self.cap[p], f"credit made occupancy of pv {pv} = {self.occ[pv]} (cap {self.cap[p]})"

    def _term_credit_checked(self, t, term, b=None):
        self.term_credit(t, term, b)
        assert 0 <= self.tocc[term] <= self.tcap, f"terminal {term} credit counter {self.tocc[term]}"

    def _term_arrive_checked(self, t, term, pk):
        assert pk.dst == term, f"packet for terminal {pk.dst} delivered to {term}"
        assert not getattr(pk.msg, "_delivered", False), "packet of an already delivered message"
        self.term_arrive(t, term, pk)
        if pk.msg.left == 0:
            pk.msg._delivered = True

    def check_invariants(self) -> None:
        """Buffers within capacity, credits non-negative, counters consistent (debug mode)."""
        NV = self.nv
        for pv, o in enumerate(self.occ):
            p = pv // NV
            if not 0 <= o <= self.cap[p]:
                raise AssertionError(f"port {p} VC {pv % NV}: occupancy {o} outside 0..{self.cap[p]}")
        for p in range(self.n_ports):
            s = sum(self.occ[p * NV:(p + 1) * NV])
            if s != self.port_occ[p]:
                raise AssertionError(f"port {p}: per-port occupancy {self.port_occ[p]} != sum over VCs {s}")
            q = sum(len(self.ovf[p * NV + v]) for v in range(NV))
            if q != self.qcount[p]:
                raise AssertionError(f"port {p}: overflow count {self.qcount[p]} != {q}")
            n = sum(len(self.pend[p * NV + v]) for v in range(NV))
            if n != self.npend[p]:
                raise AssertionError(f"port {p}: pending count {self.npend[p]} != {n}")
        for term, o in enumerate(self.tocc):
            if not 0 <= o <= self.tcap:
                raise AssertionError(f"terminal {term}: credit counter {o} outside 0..{self.tcap}")

    def bytes_in_network(self) -> int:
        """Bytes of packets still queued or in flight (scans queues and the event heap; debug and tests)."""
        total = 0
        for q in self.tq:
            total += sum(pk.size for pk in q)
        for q in self.pend:
            total += sum(pk.size for pk in q)
        for q in self.ovf:
            total += sum(pk.size for pk in q)
        for entry in self.loop.heap + self.loop.leftover:
            if isinstance(entry[4], Packet):
                total += entry[4].size
        return total
