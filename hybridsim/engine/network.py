"""The Dragonfly network at packet granularity, with CODES dragonfly-dally semantics (docs/workloads.md §7).

What is modelled (packet = chunk):

* **Terminals (NICs).** A FIFO injection queue per terminal. The head packet leaves when the NIC is idle and the
  credit counter of the injection link allows it (``occupancy + 1 packet <= terminal VC buffer``); it serialises at
  the terminal bandwidth and reaches its router after the serialisation plus the terminal link latency. The last
  packet of a message starting to serialise is the message's *local completion* (MPI Isend completion).
* **Router output ports, per VC.** Buffers are accounted per (output port, VC) at the upstream router, as CODES does:
  an arriving packet is routed, then *admitted* to its (port, VC) if ``occupancy + 1 packet <= buffer`` (occupancy
  grows, a credit goes upstream after the credit delay) or kept in that (port, VC)'s overflow list (no credit yet,
  the port's ``stalled`` counter grows and, if not running, its busy-on-credits clock starts; as CODES'
  ``last_buf_full``, the port's next credit or next send stops it and adds the interval to ``busy_time``). A credit from
  downstream frees one packet
  of occupancy and admits the head of the overflow list. Occupancy is counted in whole packets (CODES adds
  ``chunk_size`` per chunk, whatever its real size).
* **Port send loop.** Each output port serves its VCs round-robin. A packet of ``s`` bytes occupies the port for its
  serialisation time ``s / bandwidth``; it reaches the next hop after serialisation + router delay + link latency
  (the router delay adds latency but does not occupy the port).
* **Delivery.** At the destination terminal every packet returns a credit to the last router at once; a message is
  delivered when its last packet has arrived.
* **Routing** (:meth:`Network.route`): ``minimal``, ``nonminimal`` (Valiant), ``adaptive`` (UGAL-L at the source
  router) and ``prog-adaptive`` (CODES' rule, re-evaluated at every router of the source group). VCs: 0/1 in the
  source group (number of local hops taken there), 2 in an intermediate group, 3 in the destination group; as in
  CODES the source group is tested first, so a packet that never leaves its group uses 0/1 up to its terminal.

State lives in small ``__slots__`` objects, one :class:`Port` per router output port (global id
``p = router * radix + port``), one :class:`VC` per (port, VC) and one :class:`Terminal` per NIC, so that what one
event touches sits together in memory. Handlers have the event-loop signature ``handler(t, a, b)``.

Why one module of this size: the routers, links and credits are the engine's hot path; their event handlers are
inlined side by side (marked "for performance"), which a split would scatter.

Over 600 lines: the Python reference of the router model (credits, virtual channels, the four routings, background
load and sampling counters) is one event flow, kept readable beside its compiled twin.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappush
from operator import attrgetter

import numpy as np

from hybridsim_common.topology import GLOBAL, LOCAL, TERMINAL, Dragonfly
from hybridsim_common.units import GIB
from .core import LimitExceeded, current_stop

ROUTINGS = ("minimal", "nonminimal", "adaptive", "prog-adaptive")
MINIMAL, NONMINIMAL, ADAPTIVE, PROG_ADAPTIVE = range(4)


#: a predicted job's background load is clamped to this link utilisation: at u -> 1 the capacity left (1 - u) and the
#: M/D/1 wait u / (2 (1 - u)) diverge, which would stall the simulated jobs on a measurement artefact
MAX_BACKGROUND_UTILISATION = 0.9

#: packets of one message cut between two checks of the run's deadline (the default limits.max_packets_per_message
#: allows one chunk: the check costs nothing on a message of sane size)
BIG_MESSAGE = 65_536


def too_many_packets(size: int, npk: int, P: int, max_packets) -> LimitExceeded:
    """The error of a message of ``size`` bytes cut into ``npk`` packets of ``P`` bytes, over
    ``limits.max_packets_per_message`` (both cores raise it before building the packets)."""
    return LimitExceeded(f"max_packets_per_message: a message of {size} B is {npk} packets of {P} B, "
                         f"over limits.max_packets_per_message = {max_packets}")


def loaded_ports(nspb, delay, P: int, u, backlog=None) -> tuple[list, list]:
    """Ports' ns per byte and hop delay under background loads ``u`` (nominal ``nspb``, ``delay``, each a sequence
    over the ports; packets of ``P`` bytes): see :meth:`Network.set_background`. With ``backlog`` (ns, per port: the
    predicted jobs' measured time-averaged queued work there), a packet waits that long instead of the M/D/1 mean
    wait. In float64 element by element (numpy, for performance: a predicted job's stand-in sets hundreds of ports at
    once); a load ``<= 0`` leaves a port nominal. The native core computes the same expressions in the same order
    (``set_port_loads``; tests/test_native_core.py compares them value for value)."""
    nspb, delay, u = (np.asarray(x, dtype=np.float64) for x in (nspb, delay, u))
    um = np.minimum(u, MAX_BACKGROUND_UTILISATION)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(u <= 0.0, nspb, nspb / (1.0 - um))
        wait = P * nspb * um / (2.0 * (1.0 - um)) if backlog is None else np.asarray(backlog, dtype=np.float64)
        d = np.where(u <= 0.0, delay, delay + wait)
    return s.tolist(), d.tolist()


class Packet:
    """One packet (= one CODES chunk) of a message.

    ``up`` is the :class:`VC` whose credit this packet holds upstream, or ``None`` while it holds the injection
    credit of its source terminal ``src``.
    """

    __slots__ = ("msg", "size", "src", "dst", "dst_router", "dst_group", "src_group", "igroup", "nonmin", "visited",
                 "lhops", "hops", "up", "last", "jb", "t_in")

    def __init__(self, msg, size, src, dst, dst_router, dst_group, src_group, last, jb):
        self.msg = msg
        self.size = size
        self.src = src
        self.dst = dst
        self.dst_router = dst_router
        self.dst_group = dst_group
        self.src_group = src_group
        self.igroup = -1
        self.nonmin = False
        self.visited = False
        self.lhops = 0
        self.hops = 0
        self.up = None
        self.last = last
        self.jb = jb
        self.t_in = 0.0   # arrival at its current router (a counted job's queued work: port_send)


class Port:
    """A router output port and the link behind it.

    ``busy_until``: end of the current serialisation; ``sched``: a send event is queued; ``rr``: last VC served
    (``pends``: the VCs' pending queues);
    ``npend``: admitted packets waiting; ``occ``: packets accounted downstream (sum over VCs); ``qcount``: packets in
    the overflow lists; ``nspb``: ns per byte in effect; ``delay``: router delay + link latency; ``dest``: next router
    (or terminal id if ``to_term``); ``local``: a local (intra-group) link; counters ``bytes``, ``pkts``,
    ``stalled``, ``busy_acc`` and the open busy-on-credits interval ``busy_start`` (-1 if none).
    """

    __slots__ = ("pid", "busy_until", "sched", "rr", "npend", "occ", "qcount", "cap", "nspb", "delay", "dest",
                 "to_term", "local", "vcs", "pends", "bytes", "pkts", "stalled", "busy_acc", "busy_start")

    def __init__(self, pid, cap, nspb, delay, dest, to_term, local):
        self.pid = pid
        self.busy_until = 0.0
        self.sched = False
        self.rr = 0
        self.npend = 0
        self.occ = 0
        self.qcount = 0
        self.cap = cap
        self.nspb = nspb
        self.delay = delay
        self.dest = dest
        self.to_term = to_term
        self.local = local
        self.vcs = ()
        self.pends = ()
        self.bytes = 0
        self.pkts = 0
        self.stalled = 0
        self.busy_acc = 0.0
        self.busy_start = -1.0


class VC:
    """One (output port, VC) buffer, accounted at the upstream router: ``occ`` packets admitted and not yet credited
    back, ``pend`` admitted and waiting for the port, ``ovf`` not admitted (downstream full), ``occ_int`` the time
    integral of ``occ`` up to ``occ_t`` (packet-ns)."""

    __slots__ = ("port", "v", "occ", "pend", "ovf", "occ_int", "occ_t")

    def __init__(self, port, v):
        self.port = port
        self.v = v
        self.occ = 0
        self.pend = deque()
        self.ovf = deque()
        self.occ_int = 0.0
        self.occ_t = 0.0


class Terminal:
    """A NIC: FIFO injection queue ``q``, ``occ`` injection credits in use, ``busy`` end of its serialisations,
    ``sched`` a send event is queued; ``router`` it attaches to; bytes injected and delivered."""

    __slots__ = ("tid", "router", "q", "occ", "busy", "sched", "bytes_in", "bytes_out")

    def __init__(self, tid, router):
        self.tid = tid
        self.router = router
        self.q = deque()
        self.occ = 0
        self.busy = 0.0
        self.sched = False
        self.bytes_in = 0
        self.bytes_out = 0


def _per_port(attr: str) -> property:
    get = attrgetter(attr)
    return property(lambda self: [get(pt) for pt in self.ports], doc=f"``Port.{attr}`` of every port (by port id)")


def _per_vc(attr: str) -> property:
    get = attrgetter(attr)
    return property(lambda self: [get(vc) for pt in self.ports for vc in pt.vcs],
                    doc=f"``VC.{attr}`` of every (port, VC) pair (index port id * num_vcs + vc)")


class Network:
    """Terminals, routers, links and routing of one Dragonfly; see the module docstring.

    ``on_local(t, msg)`` and ``on_deliver(t, msg)`` are the hooks of the message layer: the first when the last
    packet of ``msg`` starts injection at its source NIC, the second when its last packet has reached the destination
    terminal. A message is any object with ``src_term``, ``dst_term``, ``wire`` (bytes), ``left`` and ``jb`` (per-port
    byte counters of its job, or ``None``) attributes.
    """

    #: a port sample's features computed by the network itself, and the sampling event run by it
    #: (:class:`~.sampling.PortSampler`): the native core's (cores.NativeNetwork); here none, numpy computes them and
    #: the engine schedules its own events
    sample_ports = None
    sample_every = None

    def __init__(self, topo: Dragonfly, tcfg, loop, rng, debug: bool = False, exact_credits: bool = False,
                 max_packets: float = math.inf, state: bool = True):
        # ``state`` False: the constants and routing tables only (ports without VC buffers, no ``tvc``, no event
        # handlers): what the native core reads from here (cores.NativeNetwork), built in a third of the time
        self.topo = topo
        self.max_packets = max_packets  # per message (limits.max_packets_per_message): refuse before building them
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
        peer = topo.peer_router.tolist()
        peer_port = topo.peer_port.tolist()
        self.ports = []
        for pid in range(n):
            c = pc[pid]
            pt = Port(pid, caps[c] // P, self.nspb_nominal[pid], self.router_delay + float(lat[c]),
                      peer_port[pid] if c == TERMINAL else peer[pid], c == TERMINAL, c == LOCAL)
            if state:
                pt.vcs = tuple(VC(pt, v) for v in range(NV))
                pt.pends = tuple(vc.pend for vc in pt.vcs)
            pt.rr = NV - 1
            self.ports.append(pt)
        self.delay_nominal = [pt.delay for pt in self.ports]

        T = topo.n_terminals
        self.n_terminals = T
        self.terms = [Terminal(t, t // p) for t in range(T)]
        self.tcap = caps[TERMINAL] // P
        self.t_nspb = 1.0 / (bw[TERMINAL] * GIB / 1e9)
        self.t_lat = float(lat[TERMINAL])

        # routing tables (Port objects)
        ports = self.ports
        self.tvc = [ports[pid].vcs[self.vc_dest] for pid in topo.terminal_port_ids.tolist()] if state else None
        self.lport = []                    # lport[r][j]: Port from r to router j of its group
        self.gports = []                   # gports[r][G]: global Ports of r to group G
        self.lgw = []                      # lgw[r][G]: local Ports of r to routers of its group with links to G
        self.reach = []                    # reach[r]: groups r reaches over its own global ports (sorted)
        for r in range(topo.n_routers):
            base = r * R
            lp = [None] * a
            gp: dict[int, list[Port]] = {}
            for k in range(R):
                pid = base + k
                if pc[pid] == LOCAL:
                    lp[peer[pid] % a] = ports[pid]
                elif pc[pid] == GLOBAL and peer[pid] >= 0:
                    gp.setdefault(peer[pid] // a, []).append(ports[pid])
            self.lport.append(lp)
            self.gports.append(gp)
            self.reach.append(sorted(gp))
        for r in range(topo.n_routers):
            G0 = r // a
            lg: dict[int, list[Port]] = {}
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
        self.packets = 0
        self.bytes_self = 0
        if state:
            self._bind()

    # ------------------------------------------------------------------------------------------------ handlers
    def _bind(self) -> None:
        """Create the event handlers.

        The per-packet handlers are closures over the loop's heap and the model constants rather than methods: a
        free-variable load is several times cheaper than ``self.attribute`` in CPython, and these few functions run
        tens of millions of times. Each one is an event handler ``(t, a, b)``; the public names are:

        ``inject(t, msg)``            the message reaches its source NIC: cut it into packets, queue them;
        ``term_send(t, term)``        the NIC, if idle, starts its queued packets that hold credits, back to back;
        ``local_done(t, msg)``        the last packet of ``msg`` starts injection (when that lies after ``term_send``);
        ``term_arrive(t, term, pk)``  a packet reaches its destination terminal (credit back, message count);
        ``router_arrive(t, r, pk)``   a packet reaches router ``r``: route, then admit or overflow;
        ``port_send(t, port)``        output ``port`` starts its next packet (VCs round-robin);
        ``credit(t, vc)``             a credit for ``vc`` arrives: free a slot, admit the overflow head;
        ``term_credit(t, term)``      an injection credit arrives at terminal ``term``.
        """
        heap = self.loop.heap
        seq = self.loop.seq
        NV = self.nv
        P = self.P
        n_ports = self.n_ports
        max_packets = self.max_packets
        a, p_per_r = self.a, self.p
        terms = self.terms
        tcap, t_nspb, t_lat = self.tcap, self.t_nspb, self.t_lat
        cdelay = self.credit_delay
        exact = self.exact_credits
        tvc, lport, gports, lgw = self.tvc, self.lport, self.gports, self.lgw
        vc_dest, vc_inter = self.vc_dest, self.vc_inter
        rr_order = tuple(tuple((v0 + k) % NV for k in range(1, NV + 1)) for v0 in range(NV))
        mode = self.routing
        randrange = self.rng.randrange
        ugal = self._ugal
        rng = self.rng
        rand = rng.random
        reach = self.reach
        g = self.g
        net = self

        def draw_igroup(sg, dg):
            # an intermediate group drawn uniformly from all groups but the source and destination groups
            if g <= 2 or sg == dg:
                return -1
            lo, hi = (sg, dg) if sg < dg else (dg, sg)
            k = randrange(g - 2)
            if k >= lo:
                k += 1
            if k >= hi:
                k += 1
            return k

        def best_global(cands):
            # CODES' global pick: two distinct random candidates, the lower score wins (ties at random)
            n = len(cands)
            if n == 1:
                return cands[0]
            i = randrange(n)
            j = randrange(n - 1)
            if j >= i:
                j += 1
            x, y = cands[i], cands[j]
            sx, sy = x.occ + x.qcount, y.occ + y.qcount
            if sx < sy:
                return x
            if sy < sx:
                return y
            return x if rand() < 0.5 else y

        def best_local(cands):
            # CODES' local pick: the lowest score of all candidates (ties at random)
            if len(cands) == 1:
                return cands[0]
            best = None
            bs = 1 << 60
            ties = 0
            for c in cands:
                sc = c.occ + c.qcount
                if sc < bs:
                    best, bs, ties = c, sc, 1
                elif sc == bs:
                    ties += 1
                    if randrange(ties) == 0:
                        best = c
            return best

        def prog_adaptive(r, pk, at_source, gp, dg):
            # CODES' progressive adaptive routing (DELTA scoring, non-minimal score doubled), in the source group
            mc = gp.get(dg)
            mport = best_global(mc) if mc else best_local(lgw[r][dg])
            ig = pk.igroup
            nport = None
            if ig >= 0:
                if at_source:
                    nc = gp.get(ig)
                    if nc:
                        nport = best_global(nc)
                    else:
                        nc = lgw[r].get(ig)
                        if nc:
                            nport = best_local(nc)
                else:
                    nc = gp.get(ig)
                    if not nc and not pk.nonmin:
                        choices = [G for G in reach[r] if G != pk.src_group and G != dg]
                        if choices:
                            ig = pk.igroup = choices[randrange(len(choices))]
                            nc = gp[ig]
                    if nc:
                        nport = best_global(nc)
            if pk.nonmin and not pk.visited and nport is not None:
                return nport
            ms = mport.occ + mport.qcount
            if nport is None or ms <= 0:
                return mport
            if ms <= 2 * (nport.occ + nport.qcount):
                return mport
            pk.nonmin = True
            return nport

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
            if npk > max_packets:
                raise too_many_packets(size, npk, P, max_packets)
            msg.left = npk
            dr = dst // p_per_r
            dg = dr // a
            sg = src // p_per_r // a
            term = terms[src]
            q = term.q
            jb = msg.jb
            n_full = npk - 1
            if n_full > BIG_MESSAGE:  # only with limits.max_packets_per_message raised: the deadline is checked
                stop = current_stop()  # between chunks while such a message is cut into packets
                while n_full > BIG_MESSAGE:
                    if stop is not None:
                        stop.check(f"at t={t:,.0f} ns while cutting a message of {npk:,} packets")
                    for _i in range(BIG_MESSAGE):
                        q.append(Packet(msg, P, term, dst, dr, dg, sg, False, jb))
                    n_full -= BIG_MESSAGE
            for _i in range(n_full):
                q.append(Packet(msg, P, term, dst, dr, dg, sg, False, jb))
            q.append(Packet(msg, size - P * (npk - 1), term, dst, dr, dg, sg, True, jb))
            net.packets += npk
            term.bytes_in += size
            if not term.sched:
                term_send(t, term)

        def term_send(t, term, _=None):
            term.sched = False
            q = term.q
            if not q:
                return
            if t < term.busy:
                term.sched = True
                heappush(heap, (term.busy, next(seq), h_tsend, term, None))
                return
            # Send back to back every queued packet that holds a credit now: credits only come back over time, so
            # each of them would find one at its own start too. Same times as one event per packet, fewer events.
            o = term.occ
            if o >= tcap:
                return  # wait for a credit
            r = term.router
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
            term.occ = o
            term.busy = start

        def local_done(t, msg, _=None):
            net.on_local(t, msg)

        def term_credit(t, term, _=None):
            term.occ -= 1
            if not term.sched:
                term_send(t, term)

        def term_arrive(t, tid, pk):
            credit_up(t, pk)
            terms[tid].bytes_out += pk.size
            msg = pk.msg
            msg.left -= 1
            if msg.left == 0:
                net.on_deliver(t, msg)

        # ---------------------------------------------------------------------------------------------- routers
        def route(r, pk):
            """The output VC of ``pk`` at router ``r`` (may update the packet's path state)."""
            dr = pk.dst_router
            if r == dr:
                if pk.src_group == pk.dst_group:  # a packet that never left its group: source-group VC (CODES)
                    return tvc[pk.dst].port.vcs[pk.lhops]
                return tvc[pk.dst]
            c = r // a
            dg = pk.dst_group
            if c == dg:
                if c == pk.src_group:  # the same: VC = local hops taken (0), then one local hop taken
                    pk.lhops = 1
                    return lport[r][dr % a].vcs[0]
                return lport[r][dr % a].vcs[vc_dest]
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
                return port.vcs[vc_inter]
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
            if port.local:
                pk.lhops = 1
            return port.vcs[vc]

        def router_arrive(t, r, pk):
            pk.t_in = t
            vc = route(r, pk)
            pk.hops += 1
            port = vc.port
            o = vc.occ
            if o < port.cap:
                vc.occ_int += o * (t - vc.occ_t)
                vc.occ_t = t
                vc.occ = o + 1
                port.occ += 1
                vc.pend.append(pk)
                port.npend += 1
                credit_up(t, pk)
                pk.up = vc
                if not port.sched:
                    if t >= port.busy_until:
                        port_send(t, port)
                    else:
                        port.sched = True
                        heappush(heap, (port.busy_until, next(seq), h_port, port, None))
            else:
                vc.ovf.append(pk)
                port.qcount += 1
                port.stalled += 1
                if port.busy_start < 0.0:
                    port.busy_start = t

        def port_send(t, port, _=None):
            port.sched = False
            pends = port.pends
            for v in rr_order[port.rr]:  # round-robin: the VCs after the last one served, in turn
                q = pends[v]
                if q:
                    break
            else:
                return
            port.rr = v
            bs = port.busy_start
            if bs >= 0.0:
                port.busy_acc += t - bs
                port.busy_start = -1.0
            pk = q.popleft()
            n = port.npend - 1
            port.npend = n
            size = pk.size
            end = t + size * port.nspb
            port.busy_until = end
            port.bytes += size
            port.pkts += 1
            jb = pk.jb
            if jb is not None:   # a counted job: [bytes per port] + [queued work per port integrated over time]
                pid = port.pid
                jb[pid] += size
                sv = size * port.nspb   # its service time; its work in the queue since t_in, then draining
                jb[n_ports + pid] += sv * (t - pk.t_in) + 0.5 * sv * sv
            heappush(heap, (end + port.delay, next(seq), h_tarrive if port.to_term else h_arrive, port.dest, pk))
            if n:
                port.sched = True
                heappush(heap, (end, next(seq), h_port, port, None))

        def credit_up(t, pk):
            # Return the credit ``pk`` holds upstream (a router VC, or its source terminal's injection credit). With
            # exact_credits, or when a packet waits for it, it travels as an event arriving after the credit delay.
            # Otherwise only an arrival within the credit delay (1.4 ns by default) could tell the difference, so it
            # is applied at once: one event less per packet hop.
            up = pk.up
            if up is not None:
                if exact or up.ovf:
                    heappush(heap, (t + cdelay, next(seq), h_credit, up, None))
                    return
                o = up.occ
                up.occ_int += o * (t - up.occ_t)
                up.occ_t = t
                up.occ = o - 1
                port = up.port
                port.occ -= 1
                bs = port.busy_start
                if bs >= 0.0:
                    port.busy_acc += t - bs
                    port.busy_start = -1.0
            else:
                term = pk.src
                if exact or (term.q and not term.sched):
                    heappush(heap, (t + cdelay, next(seq), h_tcredit, term, None))
                else:
                    term.occ -= 1

        def credit(t, vc, _=None):
            port = vc.port
            o = vc.occ
            vc.occ_int += o * (t - vc.occ_t)
            vc.occ_t = t
            q = vc.ovf
            if q:
                # the freed slot goes to the overflow head at once: occupancy unchanged
                pk = q.popleft()
                port.qcount -= 1
                vc.pend.append(pk)
                port.npend += 1
                credit_up(t, pk)
                pk.up = vc
                if not port.sched:
                    if t >= port.busy_until:
                        port_send(t, port)
                    else:
                        port.sched = True
                        heappush(heap, (port.busy_until, next(seq), h_port, port, None))
            else:
                vc.occ = o - 1
                port.occ -= 1
            bs = port.busy_start
            if bs >= 0.0:
                port.busy_acc += t - bs
                port.busy_start = -1.0

        self.inject, self.term_send, self.term_credit, self.term_arrive = inject, term_send, term_credit, term_arrive
        self.route, self.router_arrive, self.port_send, self.credit = route, router_arrive, port_send, credit
        h_arrive, h_port, h_credit, h_tsend, h_tcredit, h_tarrive = (router_arrive, port_send, credit, term_send,
                                                                       term_credit, term_arrive)
        h_local = local_done
        if self.debug:
            h_credit, h_tcredit, h_tarrive = self._credit_checked, self._term_credit_checked, self._term_arrive_checked
        #: the handlers pushed on the heap (debug mode wraps three of them with invariant checks)
        self.h_arrive, self.h_port, self.h_credit, self.h_tsend = h_arrive, h_port, h_credit, h_tsend
        self.h_tcredit, self.h_tarrive, self.h_inject = h_tcredit, h_tarrive, inject

    # ------------------------------------------------------------------------------------------------ routing
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
            if (mp.occ + mp.qcount) * m_hops <= (np_.occ + np_.qcount) * n_hops:
                return mp
            pk.nonmin = True
            return np_
        target = pk.igroup if (pk.nonmin and not pk.visited) else dg
        cands = gp.get(target) or self.lgw[r][target]
        return cands[rng.randrange(len(cands))] if len(cands) > 1 else cands[0]

    # ------------------------------------------------------------------------------------------------ background load
    def set_background(self, util_by_port: dict[int, float]) -> None:
        """Model predicted jobs' load ``u`` (utilisation fraction per port) on the ports they used; ``{}`` restores
        all. Two effects of sharing a port with background packets: the capacity left is ``(1 - u)`` (serialisation
        stretched by ``1 / (1 - u)``), and a packet first waits behind background packets already queued -- the
        M/D/1 mean wait ``u / (2 (1 - u))`` packet times, added to the hop latency."""
        for pt, nom, d0 in zip(self.ports, self.nspb_nominal, self.delay_nominal):
            pt.nspb = nom
            pt.delay = d0
        self.set_port_background(list(util_by_port), list(util_by_port.values()))

    def set_port_background(self, ports, utils, backlog=None) -> None:
        """:meth:`set_background` of the ports ``ports`` only (their total load ``utils``; ``<= 0``: nominal), the
        others untouched: what a phase change of a predicted job's load costs (its own ports, not the network's).
        ``backlog``: the queued work (ns) the predicted jobs hold there, the wait instead of M/D/1's
        (:func:`loaded_ports`)."""
        nom_s, nom_d, pts = self.nspb_nominal, self.delay_nominal, self.ports
        ports = list(ports)
        ns, ds = loaded_ports([nom_s[p] for p in ports], [nom_d[p] for p in ports], self.P, list(utils),
                              None if backlog is None else list(backlog))
        for p, a, b in zip(ports, ns, ds):
            pts[p].nspb, pts[p].delay = a, b

    # ------------------------------------------------------------------------------------------------ flat views
    # Lists over all ports (index = global port id) or all (port, VC) pairs (index = pid * num_vcs + vc), built on
    # demand for sampling, tests and checks.
    nspb = _per_port("nspb")
    bytes_out = _per_port("bytes")
    pkts_out = _per_port("pkts")
    stalled = _per_port("stalled")
    busy_acc = _per_port("busy_acc")
    busy_start = _per_port("busy_start")
    qcount = _per_port("qcount")
    port_occ = _per_port("occ")
    cap = _per_port("cap")
    occ = _per_vc("occ")
    occ_int = _per_vc("occ_int")
    occ_t = _per_vc("occ_t")

    #: the names :meth:`counters` returns, each as one of the flat views above
    COUNTERS = {"bytes": "bytes_out", "pkts": "pkts_out", "stalled": "stalled", "busy_acc": "busy_acc",
                "busy_start": "busy_start", "qcount": "qcount", "port_occ": "port_occ", "nspb": "nspb",
                "occ": "occ", "occ_int": "occ_int", "occ_t": "occ_t"}

    def counters(self) -> dict:
        """Every running counter at once, by name (:data:`COUNTERS`), as flat lists: what a port sample reads. The
        native core returns the same names (numpy arrays) in one call, where each flat view would copy them all."""
        return {name: getattr(self, attr) for name, attr in self.COUNTERS.items()}

    @property
    def bytes_injected(self) -> int:
        return sum(tm.bytes_in for tm in self.terms)

    @property
    def bytes_delivered(self) -> int:
        return sum(tm.bytes_out for tm in self.terms)

    # ------------------------------------------------------------------------------------------------ debug checks
    def _credit_checked(self, t, vc, b=None):
        self.credit(t, vc, b)
        assert 0 <= vc.occ <= vc.port.cap, f"credit made occupancy of port {vc.port.pid} VC {vc.v} = {vc.occ}"

    def _term_credit_checked(self, t, term, b=None):
        self.term_credit(t, term, b)
        assert 0 <= term.occ <= self.tcap, f"terminal {term.tid} credit counter {term.occ}"

    def _term_arrive_checked(self, t, tid, pk):
        assert pk.dst == tid, f"packet for terminal {pk.dst} delivered to {tid}"
        assert not getattr(pk.msg, "_delivered", False), "packet of an already delivered message"
        self.term_arrive(t, tid, pk)
        if pk.msg.left == 0:
            pk.msg._delivered = True

    def check_invariants(self) -> None:
        """Buffers within capacity, credits non-negative, counters consistent (debug mode)."""
        for pt in self.ports:
            for vc in pt.vcs:
                if not 0 <= vc.occ <= pt.cap:
                    raise AssertionError(f"port {pt.pid} VC {vc.v}: occupancy {vc.occ} outside 0..{pt.cap}")
            s = sum(vc.occ for vc in pt.vcs)
            if s != pt.occ:
                raise AssertionError(f"port {pt.pid}: per-port occupancy {pt.occ} != sum over VCs {s}")
            q = sum(len(vc.ovf) for vc in pt.vcs)
            if q != pt.qcount:
                raise AssertionError(f"port {pt.pid}: overflow count {pt.qcount} != {q}")
            n = sum(len(vc.pend) for vc in pt.vcs)
            if n != pt.npend:
                raise AssertionError(f"port {pt.pid}: pending count {pt.npend} != {n}")
        for tm in self.terms:
            if not 0 <= tm.occ <= self.tcap:
                raise AssertionError(f"terminal {tm.tid}: credit counter {tm.occ} outside 0..{self.tcap}")

    def bytes_in_network(self) -> int:
        """Bytes of packets still queued or in flight (scans queues and the event heap; debug and tests)."""
        total = 0
        for tm in self.terms:
            total += sum(pk.size for pk in tm.q)
        for pt in self.ports:
            for vc in pt.vcs:
                total += sum(pk.size for pk in vc.pend) + sum(pk.size for pk in vc.ovf)
        for entry in self.loop.heap + self.loop.leftover:
            if isinstance(entry[4], Packet):
                total += entry[4].size
        return total
