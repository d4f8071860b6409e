"""A flow-level interference model: each job's iteration time with the co-runners running now, before any truth.

The packet engine (:mod:`hybridsim.engine.network`) says how long an iteration takes once it has been simulated; this
model says, in microseconds of arithmetic, how that time should *change* when the set of co-runners changes -- the
input a surrogate needs at a co-runner's start or end, when its history describes another network. It is the
flow-level view SimGrid takes of a network (a flow per communicating pair, shared links, max-min fair bandwidth),
reduced to what one number per (job, co-runner set) needs:

1. **Traffic** (:func:`traffic_phases`): bytes each rank sends each other rank in one iteration, from the workload's
   own ops (``ISEND``/``SEND``; collectives are expanded into them), in phases cut at blocking ops, the mean over a
   few iterations, and the compute of one iteration (the slowest rank's ``COMPUTE`` ops). Background jobs
   (``uniform_random``) are a fixed rate instead: ``msg_size / interval`` per rank, to uniformly drawn peers.
2. **Routing** (:class:`Routes`): the rank-to-rank bytes mapped to terminals by the placement and routed minimally
   over the Dragonfly as the engine's ``minimal`` routing draws its ports -- the injection link, a local hop to a
   router with a global link to the destination group (unless the source router has one: then its own), the global
   link (spread evenly over the parallel ones), a local hop, the ejection port -- giving each job's bytes per
   iteration on every channel (a router output port, or a terminal's injection link).
3. **Sharing** (:func:`maxmin_share`, :meth:`FlowModel.iteration_time`): on a channel, the job's flow is elastic and
   every co-runner's flow has a demand, its bytes there over its own iteration time (a background job: its rate);
   max-min fairness gives the job the water level ``x`` with ``sum_k min(d_k, x) + x = capacity``. A co-runner's
   iteration time is its measured one once the hybrid loop has it (:meth:`FlowModel.set_period`). Per phase, the
   job's communication time is its alone time (its busiest channel's bytes at full capacity) times the byte-weighted
   mean slowdown ``capacity / x`` over its channels (``rule="weighted"``, the default; ``rule="max"``: the slowest
   channel's ``bytes / x``, the textbook bound, which follows one hot channel and matched the engine's changes worse:
   benchmarks/RESULTS.md); its iteration time is ``compute`` plus the phases' sum. Co-runners not measured yet get
   their iteration times from the same rule, solved to a fixed point.

Adaptive routing spreads a hot spot over non-minimal paths and messages also pay latency and waits that no
bandwidth share accounts for, so the absolute time is rough; what a surrogate uses is the *change* between two of its
answers for the same job (see :mod:`surrogate.models.flow`).
"""

from __future__ import annotations

import numpy as np

from hybridsim_common.topology import GLOBAL, LOCAL, Dragonfly
from hybridsim_common.units import GIB

#: iterations of a job's workload averaged into its traffic matrix (evenly spread over the job)
SAMPLE_ITERATIONS = 8
#: fixed-point passes over the co-runners' iteration times (a pass changes them by a few percent at most after 10)
FIXED_POINT_PASSES = 30


def traffic_phases(workload, n_iterations: int, sample: int = SAMPLE_ITERATIONS) -> tuple[list, float]:
    """``(phases, compute_ns)`` of a :class:`hybridsim.workloads.base.JobWorkload`. A rank's iteration is cut into
    phases at every blocking op (``SEND``, ``RECV``, ``WAITALL``): the sends of one phase are in flight together, the
    next phase starts after them (LAMMPS' exchanges run one after another, MILC's halo sends all at once). Phase k of
    every rank is taken together (the ranks of these codes run one program). ``phases``: for each phase with traffic,
    ``(src, dst, bytes)`` arrays, the mean bytes per iteration over the sampled iterations; ``compute_ns``: the mean
    over the sampled iterations of the slowest rank's compute."""
    from .workloads.ops import COMPUTE, ISEND, RECV, SEND, WAITALL

    R = int(workload.n_ranks)
    its = np.unique(np.linspace(0, max(int(n_iterations) - 1, 0), min(sample, max(int(n_iterations), 1))).astype(int))
    acc: list[dict] = []
    compute = np.zeros(len(its))
    for k, it in enumerate(its):
        for r in range(R):
            c, ph = 0.0, 0
            for op in workload.ops(r, int(it)):
                kind = op[0]
                if kind in (ISEND, SEND):
                    while len(acc) <= ph:
                        acc.append({})
                    key = (r, int(op[1]))
                    acc[ph][key] = acc[ph].get(key, 0.0) + op[2]
                elif kind == COMPUTE:
                    c += op[1]
                if kind in (SEND, RECV, WAITALL):
                    ph += 1
            compute[k] = max(compute[k], c)
    n = len(its)
    phases = []
    for d in acc:
        if d:
            keys = np.asarray(list(d), dtype=np.int64).reshape(-1, 2)
            phases.append((keys[:, 0], keys[:, 1], np.asarray(list(d.values()), dtype=np.float64) / n))
    return phases, float(compute.mean())


def traffic_matrix(workload, n_iterations: int, sample: int = SAMPLE_ITERATIONS) -> tuple[np.ndarray, float]:
    """``(tm, compute_ns)``: :func:`traffic_phases` summed into one (R, R) matrix of mean bytes rank i sends rank j
    per iteration."""
    phases, compute = traffic_phases(workload, n_iterations, sample)
    R = int(workload.n_ranks)
    tm = np.zeros((R, R))
    for src, dst, w in phases:
        np.add.at(tm, (src, dst), w)
    return tm, compute


def maxmin_share(capacity: float, demands) -> float:
    """The max-min fair share of one elastic flow on a channel of ``capacity`` beside flows of fixed ``demands``
    (same unit): the water level ``x`` with ``sum_k min(d_k, x) + x = capacity``, 0 < x <= capacity."""
    d = np.asarray(list(demands), dtype=np.float64).reshape(-1, 1)
    return float(maxmin_levels(np.array([float(capacity)]), d)[0])


def maxmin_levels(capacity: np.ndarray, demands: np.ndarray) -> np.ndarray:
    """:func:`maxmin_share` of every channel at once: ``capacity`` (C,), ``demands`` (n, C) -> (C,). With the demands
    sorted, d_0 <= .. <= d_{n-1}, the level is the first ``(capacity - sum_{k<i} d_k) / (n - i + 1)`` that is at most
    d_i (the elastic flow and the n - i unserved flows share what the served ones leave), else the last (i = n)."""
    cap = np.asarray(capacity, dtype=np.float64)
    d = np.sort(np.maximum(np.asarray(demands, dtype=np.float64).reshape(-1, len(cap)), 0.0), axis=0)
    n = d.shape[0]
    if n == 0:
        return cap.copy()
    before = np.vstack([np.zeros((1, len(cap))), np.cumsum(d, axis=0)])          # (n+1, C): served before i
    level = (cap[None, :] - before) / (n - np.arange(n + 1) + 1)[:, None]         # (n+1, C)
    stop = np.vstack([d >= level[:n], np.ones((1, len(cap)), bool)])              # the last level always stands
    return level[np.argmax(stop, axis=0), np.arange(len(cap))]


class Routes:
    """Minimal routes of a :class:`~hybridsim_common.topology.Dragonfly`, as channel fractions.

    Channels: ``0 .. n_ports-1`` router output ports (global port id ``router * radix + port``; a terminal port is its
    terminal's ejection), ``n_ports + t`` terminal ``t``'s injection link. :attr:`capacity` is each channel's bandwidth
    in bytes per ns."""

    def __init__(self, topo: Dragonfly, bandwidth_gib=(5.25, 4.7, 5.25), nonminimal: float = 0.0):
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

    def channel_bytes(self, tm: np.ndarray, terminals) -> np.ndarray:
        """(n_channels,) bytes per iteration of traffic matrix ``tm`` (R, R) on ranks placed on ``terminals`` (R,)."""
        tm = np.asarray(tm, dtype=np.float64)
        src, dst = np.nonzero(tm)
        return self.flow_bytes(src, dst, tm[src, dst], terminals)

    def flow_bytes(self, src, dst, w, terminals) -> np.ndarray:
        """(n_channels,) bytes of the rank-to-rank flows ``src`` -> ``dst`` of ``w`` bytes (arrays of one length) on
        ranks placed on ``terminals``."""
        topo = self.topo
        terms = np.asarray(terminals, dtype=np.int64)
        out = np.zeros(self.n_channels)
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        w = np.asarray(w, dtype=np.float64)
        ts, td = terms[src], terms[dst]
        keep = ts != td  # a rank pair on one terminal never enters the network
        src, dst, w, ts, td = src[keep], dst[keep], w[keep], ts[keep], td[keep]
        np.add.at(out, topo.n_ports + ts, w)
        np.add.at(out, topo.terminal_port_ids[td], w)
        rs, rd = ts // topo.p, td // topo.p
        pair = {}
        for s, d, v in zip(rs.tolist(), rd.tolist(), w.tolist()):
            pair[(s, d)] = pair.get((s, d), 0.0) + v
        q = self.nonminimal
        spread = 0.0
        for (s, d), v in pair.items():
            inter = s // topo.a != d // topo.a
            if inter and q > 0:
                spread += q * v
                v = (1 - q) * v
            for ch, f in self.router_route(s, d).items():
                out[ch] += v * f
        if spread:
            pc = topo.port_class
            glob = np.nonzero((pc == GLOBAL) & (topo.peer_router >= 0))[0]
            loc = np.nonzero(pc == LOCAL)[0]
            out[glob] += 2 * spread / len(glob)
            out[loc] += 2 * spread / len(loc)
        return out


class FlowModel:
    """Jobs' modelled iteration times beside a given set of co-runners (see the module docstring).

    A job's traffic is declared in rank space (:meth:`set_traffic`; background traffic: :meth:`set_background`) and
    routed when the job is placed (:meth:`place`: before the run, or when a stream job starts); only placed jobs count.
    :meth:`iteration_time` answers for a job and the set of jobs running beside it; answers are cached per set."""

    def __init__(self, routes: Routes, rule: str = "weighted"):
        self.routes = routes
        #: per phase, "max": the slowest channel's bytes / share; "weighted": the phase's alone time (its busiest
        #: channel at full capacity) x the byte-weighted mean slowdown capacity / share over its channels
        if rule not in ("max", "weighted"):
            raise ValueError(f"rule must be 'max' or 'weighted', got {rule!r}")
        self.rule = rule
        self.traffic: dict[int, tuple] = {}        # job -> ("iterating" | "background", phases) (compute: below)
        self.phases: dict[int, np.ndarray] = {}   # placed iterating job -> (P, n_channels) bytes per iteration
        self.bytes: dict[int, np.ndarray] = {}    # placed iterating job -> (n_channels,) bytes per iteration
        self.compute: dict[int, float] = {}       # iterating job -> compute ns per iteration
        self.rate: dict[int, np.ndarray] = {}     # placed background job -> (n_channels,) bytes per ns
        #: job -> measured iteration time (ns): a co-runner's demand is its bytes over this when known, over its
        #: modelled time otherwise (the hybrid loop sets it from a job's first simulated iteration; the model's own
        #: time leaves latency and waits out, and overstated a latency-bound co-runner's demand 2-3x)
        self.period: dict[int, float] = {}
        self._cache: dict[tuple, float] = {}

    @staticmethod
    def _phases(tm) -> list:
        """A traffic declaration as a list of (src, dst, bytes) phases: a 2-D array is one phase; a sequence holds
        2-D arrays or (src, dst, bytes) triples."""
        if isinstance(tm, np.ndarray) and tm.ndim == 2:
            tm = [tm]
        out = []
        for ph in tm:
            if isinstance(ph, np.ndarray) and ph.ndim == 2:
                src, dst = np.nonzero(ph)
                out.append((src, dst, ph[src, dst].astype(np.float64)))
            else:
                out.append(tuple(np.asarray(x) for x in ph))
        return out

    def set_traffic(self, job: int, tm, compute_ns: float) -> None:
        """An iterating job: ``tm`` its bytes per iteration, (R, R) rank i to rank j, one phase, or a sequence of
        phases (:func:`traffic_phases`; each an (R, R) array or (src, dst, bytes) arrays); ``compute_ns`` per
        iteration."""
        self.traffic[job] = ("iterating", self._phases(tm))
        self.compute[job] = float(compute_ns)

    def set_background(self, job: int, n_ranks: int, msg_size: float, interval: float) -> None:
        """A background job: each rank sends ``msg_size`` bytes every ``interval`` ns to a uniformly drawn other
        rank."""
        n = int(n_ranks)
        if n < 2 or interval <= 0:
            return
        tm = np.full((n, n), float(msg_size) / float(interval) / (n - 1))
        np.fill_diagonal(tm, 0.0)
        self.set_rate(job, tm)

    def set_rate(self, job: int, tm) -> None:
        """A job of fixed-rate traffic: ``tm`` (R, R) bytes per ns rank i sends rank j, whatever the others do."""
        self.traffic[job] = ("background", self._phases(tm))

    def place(self, job: int, terminals) -> None:
        """Job ``job``'s ranks are on ``terminals`` (rank r on terminals[r]): route its traffic."""
        t = self.traffic.get(job)
        if t is None:
            return
        routed = np.array([self.routes.flow_bytes(s, d, w, terminals) for s, d, w in t[1]]).reshape(
            -1, self.routes.n_channels)
        if t[0] == "iterating":
            self.phases[job] = routed[routed.sum(axis=1) > 0]
            self.bytes[job] = routed.sum(axis=0)
        else:
            self.rate[job] = routed.sum(axis=0)
        self._cache.clear()

    def set_period(self, job: int, ns: float) -> None:
        """Job ``job``'s measured iteration time: its demand as a co-runner is its bytes over it from now on."""
        self.period[job] = float(ns)
        self._cache.clear()

    def __contains__(self, job: int) -> bool:
        return job in self.bytes

    def _comm(self, job: int, demand: np.ndarray) -> float:
        """Communication ns of ``job`` with the other flows' ``demand`` (n_others, n_channels) bytes per ns: the sum
        over its phases (see :attr:`rule`)."""
        B = self.phases[job]
        if not B.size:
            return 0.0
        used = np.nonzero(B.sum(axis=0))[0]
        B = B[:, used]
        cap = self.routes.capacity[used]
        x = maxmin_levels(cap, demand[:, used]) if len(demand) else cap
        if self.rule == "max":
            return float(np.max(B / x[None, :], axis=1).sum())
        alone = np.max(B / cap[None, :], axis=1)
        slow = (B @ (cap / x)) / B.sum(axis=1)
        return float((alone * slow).sum())

    def alone(self, job: int) -> float:
        """The job's modelled iteration time with nothing beside it (ns)."""
        return self.iteration_time(job, ())

    def iteration_time(self, job: int, others) -> float:
        """Modelled iteration time (ns) of ``job`` beside the jobs ``others`` (job ids; unknown or unplaced ones are
        ignored); NaN for a job that is not placed."""
        if job not in self.bytes:
            return float("nan")
        others = tuple(sorted(k for k in set(others) if k != job and (k in self.bytes or k in self.rate)))
        key = (job, others)
        if key in self._cache:
            return self._cache[key]
        jobs = [job] + [k for k in others if k in self.bytes]
        bg = [self.rate[k] for k in others if k in self.rate]
        none = np.zeros((0, self.routes.n_channels))
        T = {k: self.compute[k] + self._comm(k, none) for k in jobs}
        for _ in range(FIXED_POINT_PASSES):
            new = {}
            for k in jobs:
                dem = [self.bytes[m] / max(self.period.get(m, T[m]), 1e-9) for m in jobs if m != k] + bg
                new[k] = self.compute[k] + self._comm(k, np.asarray(dem) if dem else none)
            if len(jobs) == 1 or all(abs(new[k] - T[k]) <= 1e-6 * T[k] for k in jobs):
                T = new  # one job beside fixed-rate traffic only: no fixed point to look for
                break
            T = {k: 0.5 * (T[k] + new[k]) for k in jobs}  # damped: two heavy jobs would otherwise oscillate
        # the fixed point is every job's of the set: each is cached under its own key (the same numbers a call for
        # it would give), so a set costs one solve whichever of its jobs asks first
        everyone = set(others) | {job}
        for k in jobs:
            self._cache[(k, tuple(sorted(everyone - {k})))] = T[k]
        return T[job]


def flow_model(scenario, placement=None, *, nonminimal: float = 0.0, rule: str = "weighted") -> FlowModel:
    """The :class:`FlowModel` of a scenario: every job's traffic from its workload, placed on ``placement`` (per-job
    terminal arrays; None for a stream, whose jobs are placed as they start: :meth:`FlowModel.place`)."""
    from .workloads import build_workload

    topo = scenario.build_topology()
    model = FlowModel(Routes(topo, scenario.topology.bandwidth.as_tuple(), nonminimal), rule)
    for i, job in enumerate(scenario.jobs):
        wl = build_workload(job, i, scenario.seed, scenario=scenario)
        if getattr(wl, "background", False):
            if hasattr(wl, "msg_size") and hasattr(wl, "interval"):
                model.set_background(i, job.ranks, wl.msg_size, wl.interval)
        else:
            model.set_traffic(i, *traffic_phases(wl, job.iterations))
        if placement is not None and placement[i] is not None and len(placement[i]):
            model.place(i, placement[i])
    return model
