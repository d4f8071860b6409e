"""The two cores behind :class:`~.engine.Engine`: which one runs a scenario, and its three pieces.

An engine core is an event loop, a network and an MPI layer. The **Python core** is :class:`~.core.EventLoop`,
:class:`~.network.Network` and :class:`~.mpi.MpiLayer`, the reference. The **native core** is the same model in C++
(``hybridsim/engine/native/``: ``core.hpp`` and one ``.cpp`` a concern, built as the optional extension ``hybridsim.engine.native._core``): one
heap of ``(time, seq)``-ordered events whose handlers are line-by-line ports of network.py and mpi.py, with CPython's
Mersenne Twister taken over from the run's ``random.Random`` (its state goes back when the run returns). The engine's
own events (iteration starts, simulated iterations' ends, the director, jobs, sampling read during the run,
keep_background phases) stay Python callables on the same heap with the same insertion counter, so the events run in
the same order and the records are identical, float for float. The engine's commonest events run in the core, as the
Python handlers would: predicted iterations' ends with the parking of ranks at the next predicted iteration and the
iterations of a fast-forward stretch (:meth:`~.mpi.MessageLayer.stretch`; their records handed to the engine in
bursts, summed up per job and iteration, before any Python code runs), the port-sampling event where nobody reads the
windows during the run (:meth:`~.sampling.PortSampler.run_natively`), and the periodic sends of ``uniform``
background senders (:meth:`NativeMpi.start_background`).

:func:`choose` applies ``backend.embedded.core`` (``auto`` | ``native`` | ``python``); :func:`build` makes the
pieces. The classes below give the native core the Python pieces' interface (what :class:`~.engine.Engine` and
:class:`~.sampling.PortSampler` use), so there is one engine, not two.

The native core holds Python objects (the handlers on its heap, the ranks' op lists, :class:`NativeMpi`'s callback)
that refer back to the pieces holding it: it is a GC type (``bindings.cpp``: ``Core::py_traverse`` / ``py_clear``),
so a finished run's engine and core are freed by the cyclic collector like any other cycle, not kept for the life of
the process.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .core import EngineError, EventLoop
from .mpi import MessageLayer, MpiLayer
from .network import MAX_BACKGROUND_UTILISATION, Network, too_many_packets

try:
    from .native._core import Core as NativeCore
    NATIVE_MISSING = None
except ImportError as exc:  # not built (no C++ compiler at install time)
    NativeCore = None
    NATIVE_MISSING = f"the native core is not built ({exc}; `pip install -e .` with a C++17 compiler builds it)"

CORES = ("auto", "native", "python")
_said: set = set()


def choose(requested: str) -> str:
    """``"native"`` or ``"python"`` for ``backend.embedded.core = requested``. ``auto``: native when it is built,
    else python with one line on stderr saying why (once per process and reason); ``native`` where it is not built:
    :class:`EngineError`."""
    if requested not in CORES:
        raise EngineError(f"backend.embedded.core must be one of {CORES}, got {requested!r}")
    if requested == "python":
        return "python"
    why = NATIVE_MISSING
    if why is None:
        return "native"
    if requested == "native":
        raise EngineError(f"backend.embedded.core: native, but {why}")
    if why not in _said:
        _said.add(why)
        print(f"hybridsim: embedded engine on the Python core: {why}", file=sys.stderr)
    return "python"


def build(kind: str, topo, tcfg, rng, debug: bool = False, max_packets=math.inf, bg_rng=None):
    """``(loop, net, mpi)`` of core ``kind`` for topology ``topo`` with ``tcfg`` (the scenario's topology section),
    drawing from ``rng`` (a ``random.Random``); ``bg_rng``: the background senders' generator, which the native core
    draws from when it runs them (:meth:`NativeMpi.start_background`)."""
    if kind == "python":
        loop = EventLoop()
        net = Network(topo, tcfg, loop, rng, debug, max_packets=max_packets)
        return loop, net, MpiLayer(net, loop, rng)
    if NativeCore is None:
        raise EngineError(NATIVE_MISSING)
    mpi = NativeMpi()
    net = NativeNetwork(topo, tcfg, rng, max_packets, mpi, debug)
    mpi.attach(net.core)
    return NativeLoop(net.core, rng, bg_rng), net, mpi


class NativeLoop:
    """:class:`~.core.EventLoop`'s interface over the native heap; ``at`` takes any Python handler ``(t, a, b)``."""

    def __init__(self, core, rng, bg_rng=None):
        self.core = core
        self.rng = rng
        self.bg_rng = bg_rng
        self.at = core.at

    def stop(self) -> None:
        self.core.stop()

    def run(self, until: float = math.inf, max_events: int | None = None, on_check=None,
            check_every: int = 65536) -> bool:
        """As :meth:`.core.EventLoop.run`. The core draws from its copies of the run's generators (the network's and
        the background senders'): their states go back to ``rng`` and ``bg_rng`` when the run returns, however it
        returns."""
        core = self.core
        st = self.rng.getstate()
        core.set_rng_state(list(st[1]))
        bst = self.bg_rng.getstate() if self.bg_rng is not None else None
        if bst is not None:
            core.set_bg_rng_state(list(bst[1]))
        try:
            return core.run(float(until), -1 if max_events is None else int(max_events), on_check, int(check_every))
        finally:
            self.rng.setstate((st[0], tuple(core.rng_state()), st[2]))
            if bst is not None:
                self.bg_rng.setstate((bst[0], tuple(core.bg_rng_state()), bst[2]))

    now = property(lambda self: self.core.now)
    events = property(lambda self: self.core.events)
    pending = property(lambda self: self.core.pending)


def _counter(name: str, doc: str) -> property:
    return property(lambda self: self.core.counters()[name], doc=doc)


class NativeNetwork:
    """:class:`~.network.Network`'s interface (constants, counters, background load) over the native core.

    The topology's tables and constants come from a Python :class:`~.network.Network` built once here, so both cores
    read them from one home; its event handlers are never called, and it is not kept."""

    def __init__(self, topo, tcfg, rng, max_packets, mpi: "NativeMpi", debug: bool = False):
        st = Network(topo, tcfg, EventLoop(), rng, max_packets=max_packets, state=False)
        self.topo = topo
        for name in ("a", "p", "g", "radix", "nv", "P", "n_ports", "port_class", "bw_bpns", "nspb_nominal",
                     "delay_nominal", "n_terminals", "tcap", "routing"):
            setattr(self, name, getattr(st, name))
        self.cap = st.cap
        ports = st.ports
        NV = st.nv
        g = st.g
        R = topo.n_routers

        def flat(tables):
            off, ln, flat_ = [], [], []
            for r in range(R):
                for G in range(g):
                    c = tables[r].get(G) or ()
                    off.append(len(flat_))
                    ln.append(len(c))
                    flat_.extend(pt.pid for pt in c)
            return off, ln, flat_

        gp_off, gp_len, gp_ports = flat(st.gports)
        lg_off, lg_len, lg_ports = flat(st.lgw)
        reach_off, reach_len, reach_g = [], [], []
        for r in range(R):
            reach_off.append(len(reach_g))
            reach_len.append(len(st.reach[r]))
            reach_g.extend(st.reach[r])
        P = st.P

        def raise_limit(size, npk):
            raise too_many_packets(size, npk, P, max_packets)

        cfg = dict(
            a=st.a, p=st.p, g=g, nv=NV, P=P, routing=st.routing, tcap=st.tcap,
            credit_delay=st.credit_delay, t_nspb=st.t_nspb, t_lat=st.t_lat, max_packets=float(max_packets),
            exact_credits=bool(st.exact_credits), debug=bool(debug),
            cap=[pt.cap for pt in ports], nspb=[pt.nspb for pt in ports], delay=[pt.delay for pt in ports],
            nspb_nominal=list(st.nspb_nominal), delay_nominal=list(st.delay_nominal),
            max_background=float(MAX_BACKGROUND_UTILISATION),
            dest=[pt.dest for pt in ports], to_term=[pt.to_term for pt in ports], local=[pt.local for pt in ports],
            term_router=[tm.router for tm in st.terms],
            tvc=[pid * NV + st.vc_dest for pid in topo.terminal_port_ids.tolist()],  # the ports' VC vc_dest
            lport=[(pt.pid if pt is not None else -1) for lp in st.lport for pt in lp],
            gp_off=gp_off, gp_len=gp_len, gp_ports=gp_ports, lg_off=lg_off, lg_len=lg_len, lg_ports=lg_ports,
            reach_off=reach_off, reach_len=reach_len, reach_g=reach_g,
            on_iteration_end=mpi.iteration_end, raise_limit=raise_limit)
        self.core = NativeCore(cfg)
        #: ``sample_ports(t, win, bw, cap, prev, prev_int, out)``: a port sample's features, computed in C++
        #: (:meth:`.sampling.PortSampler.sample`; the Python network has no such method and numpy computes them)
        self.sample_ports = self.core.sample_ports
        #: the engine's sampling event in C++ (:meth:`.sampling.PortSampler.run_natively`): ``sample_every``,
        #: ``sample_count`` and ``sample_pull`` (the windows so far, copied into the sampler's rows), ``sample_stop``
        self.sample_every = self.core.sample_every
        self.sample_count = self.core.sample_count
        self.sample_pull = self.core.sample_pull
        self.sample_stop = self.core.sample_stop

    # counters, by port id or (port id * num_vcs + vc), as the Python network's flat views
    bytes_out = _counter("bytes", "bytes sent per port")
    pkts_out = _counter("pkts", "packets sent per port")
    stalled = _counter("stalled", "packets that found the downstream buffer full, per port")
    busy_acc = _counter("busy_acc", "closed busy-on-credits time per port (ns)")
    busy_start = _counter("busy_start", "start of the open busy-on-credits interval per port (-1: none)")
    qcount = _counter("qcount", "packets in the overflow lists per port")
    port_occ = _counter("port_occ", "packets accounted downstream per port")
    nspb = _counter("nspb", "ns per byte in effect per port")
    occ = _counter("occ", "occupancy per (port, VC) (packets)")
    occ_int = _counter("occ_int", "time integral of occupancy per (port, VC) (packet-ns)")
    occ_t = _counter("occ_t", "time of the last occupancy change per (port, VC)")

    packets = property(lambda self: self.core.packets)
    bytes_self = property(lambda self: self.core.bytes_self)
    bytes_injected = property(lambda self: self.core.bytes_injected())
    bytes_delivered = property(lambda self: self.core.bytes_delivered())

    def counters(self) -> dict:
        """As :meth:`.network.Network.counters`, as numpy arrays, in one call (each property above copies them all)."""
        return self.core.counters()

    def check_invariants(self) -> None:
        """As :meth:`.network.Network.check_invariants` (debug mode; same messages)."""
        self.core.check_invariants()

    def bytes_in_network(self) -> int:
        """As :meth:`.network.Network.bytes_in_network`."""
        return self.core.bytes_in_network()

    def set_port_background(self, ports, utils, backlog=None) -> None:
        """As :meth:`.network.Network.set_port_background`: :func:`~.network.loaded_ports`' formula, computed by the
        core (``set_port_loads``, for performance: a predicted job's stand-in sets its ports at each decision)."""
        self.core.set_port_loads(np.asarray(ports, dtype=np.int64), np.asarray(utils, dtype=np.float64),
                                 None if backlog is None else np.asarray(backlog, dtype=np.float64))


class NativeMpi(MessageLayer):
    """The :class:`~.mpi.MessageLayer` of the native core. ``ranks``: the Python :class:`~.mpi.Rank` objects
    of the running jobs by global id (the engine's bookkeeping: iteration, start, done); the core keeps their MPI
    state."""

    def __init__(self):
        self.core = None
        self.ranks: dict = {}
        self.on_iteration_end = None

    def attach(self, core) -> None:
        """Run over ``core``. The calls the engine makes once per rank iteration go straight to the core's bound
        methods (instance attributes over the class's, for performance: one Python frame less each)."""
        self.core = core
        self.park, self.set_mode, self.pred_ends = core.park, core.set_mode, core.pred_ends

    def iteration_end(self, t, gid):
        self.on_iteration_end(t, self.ranks[gid])

    messages = property(lambda self: self.core.messages)

    def add_ranks(self, ranks) -> None:
        add = self.core.add_rank
        for rs in ranks:
            self.ranks[rs.gid] = rs
            add(rs.gid, rs.job, rs.local, int(rs.term))

    def drop_ranks(self, ranks) -> None:
        for rs in ranks:
            del self.ranks[rs.gid]
            self.core.drop_rank(rs.gid)

    def stop_rank(self, rs) -> None:
        rs.done = True
        self.core.stop_rank(rs.gid)

    def start_iteration(self, t, rs, ops) -> None:
        self.core.start_iteration(t, rs.gid, rs.it, ops)

    def send_background(self, t, rs, dst: int, nbytes: int) -> None:
        self.core.send_background(t, rs.gid, int(dst), int(nbytes))

    def start_background(self, t, rs, n_ranks: int, nbytes: int, interval: float) -> None:
        """Background rank ``rs`` (of a job of ``n_ranks`` whose destinations follow the ``"uniform"`` rule, see
        :attr:`~hybridsim.workloads.base.JobWorkload.destination_rule`) sends its first message at ``t`` and one
        every ``interval`` ns after: the engine's ``_bg_gen`` run by the core, the same draws from the loop's
        ``bg_rng``, the same events in the same order."""
        self.core.start_background(float(t), rs.gid, int(n_ranks), int(nbytes), float(interval))

    def count_bytes(self, j: int) -> None:
        self.core.count_bytes(j)

    def job_bytes(self, j: int):
        return self.core.job_bytes(j)

    def job_work(self, j: int):
        return self.core.job_work(j)

    def forget_bytes(self, j: int) -> None:
        self.core.forget_bytes(j)

    # predicted iterations: the core ends them and parks ranks whose next iteration is already decided PREDICT
    # itself (the hybrid loop's commonest events), handing the records over in bursts before any Python code runs
    def set_pred_callbacks(self, records, next_, parked, names) -> None:
        # the core keeps the records (keeps_records) and hands a burst over as its rows in that store
        self.core.set_pred_callbacks(records, next_, parked)

    #: the core keeps the run's records itself, simulated and predicted (no Python call or object a record): the
    #: engine takes them at the end of the run (take_records); a burst's rows are read with record_columns
    keeps_records = True

    def take_records(self) -> tuple:
        """The run's records as ``(job ids, ranks, iterations, starts, ends, simulated)`` arrays, in event order (the
        core's store, handed over without a copy and emptied)."""
        return self.core.take_records()

    def record_columns(self, lo: int, hi: int) -> tuple:
        """Rows ``lo`` .. ``hi - 1`` of the core's record store, as :meth:`take_records` gives them (copied)."""
        return self.core.record_columns(int(lo), int(hi))

    def pred_job(self, j: int, iters: int, n_ranks: int) -> None:
        self.core.pred_job(j, iters, n_ranks)

    def forget_job(self, j: int) -> None:
        self.core.forget_job(j)

    def set_mode(self, j: int, it: int, predict: bool) -> None:
        self.core.set_mode(j, it, predict)

    def park(self, j: int, it: int, gid: int, t: float):
        return self.core.park(j, it, gid, t)

    def unpark(self, j: int) -> None:
        self.core.unpark(j)

    def pred_ends(self, gids, its, t0s, ends) -> None:
        self.core.pred_ends(gids, its, t0s, ends)

    def stretch(self, j: int, first: int, durations) -> None:
        self.core.stretch(j, first, durations)

    def stretch_state(self, j: int, since: int = -1):
        return self.core.stretch_state(j, since)

    def cut(self, j: int, h: int) -> None:
        self.core.cut(j, h)


__all__ = ["CORES", "NATIVE_MISSING", "NativeCore", "NativeLoop", "NativeMpi", "NativeNetwork", "build", "choose"]
