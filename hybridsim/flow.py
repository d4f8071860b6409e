"""A flow-level model of the network and the MPI layer: each job's iteration time beside any set of co-runners,
before any truth of it (issue 32's predictor).

The packet engine (:mod:`hybridsim.engine.network`) says how long an iteration takes once it has been simulated; this
model says it in milliseconds of arithmetic at a job's start (:meth:`FlowModel.iteration_time`) and how it changes
when the co-runners change (:meth:`FlowModel.ratio`). It is the flow-level view SimGrid takes of a network (a flow
per communicating pair, shared links, max-min fair bandwidth) plus what the engine's message layer adds:

1. **Phases** (:func:`workload_profile`, :class:`Phase`): bytes each rank sends each other rank in one iteration,
   from the workload's own ops (``ISEND``/``SEND``; collectives are expanded into them), in phases cut at blocking ops,
   the mean over a few iterations; per phase the compute before its first send (serial) and after it (overlapped
   with the sends, as MILC's), and each flow's largest message. Background jobs (``uniform_random``) are a fixed rate
   instead: ``msg_size / interval`` per rank, to uniformly drawn peers.
2. **Routing** (:class:`~hybridsim.flow_routes.Routes`, :mod:`hybridsim.flow_routes`): the rank-to-rank bytes
   mapped to terminals by the placement and routed over the Dragonfly as the engine's ``minimal`` routing draws its
   ports -- the injection link, a local hop to a router with a global link to the destination group (unless the
   source router has one: then its own), the global link (spread evenly over the parallel ones), a local hop, the
   ejection port -- and, for a non-minimal share of the inter-group bytes, two global and two local hops spread over
   every channel (Valiant: all of it; the adaptive routings: per phase the share that drains it fastest,
   :attr:`FlowModel.adaptive`); each job's bytes per iteration on every channel (a router output port, or a
   terminal's injection link).
3. **Latency** (:meth:`Routes.traversal`, :meth:`FlowModel._latency`): a message's first packet crosses every link
   of its minimal route (the adaptive routings send a lone packet minimally: its queues are empty) with its
   serialisation, the router delay and the link latency; the MPI protocol adds the engine's offsets (eager: one
   3.51 us offset and 0.55 ns per byte; rendezvous: three offsets and the RTS's and ACK's traversals). Each rank
   pays, per phase, its own slowest message's; the phase's bandwidth time leaves out the first packet, already in
   the traversal (:attr:`FlowModel.pipelined`).
4. **Sharing** (:func:`maxmin_share`, :meth:`FlowModel.iteration_time`): on a channel, the job's flow is elastic and
   every co-runner's flow has a demand, its bytes there over its own iteration time (a background job: its rate);
   max-min fairness gives the job the water level ``x`` with ``sum_k min(d_k, x) + x = capacity``. A co-runner's
   iteration time is its measured one once the hybrid loop has it (:meth:`FlowModel.set_period`). Per phase, the
   job's bandwidth time is its alone time (its busiest channel's bytes at full capacity; with
   :attr:`FlowModel.fifo` toward each slot of its ranks' send order alone, summed: a NIC sends one message after
   another) times the byte-weighted mean slowdown ``capacity / x`` over its channels (``rule="weighted"``, the
   default; ``rule="max"``: the slowest channel's ``bytes / x``, the textbook bound, which matched the engine's
   changes worse: benchmarks/RESULTS.md). A phase takes its serial compute, then its overlapped compute or its
   latency plus bandwidth time, whichever is longer; a job's iteration is its ranks' mean (or slowest, ``ranks``)
   sum over the phases. Co-runners not measured yet get their iteration times from the same rule, solved to a
   fixed point.
5. **Replay** (:mod:`hybridsim.flow_replay`, :attr:`FlowModel.replay`, on in :func:`flow_model`): a job's time alone
   is its first iterations replayed at message level (the engine's protocols, a FIFO NIC per rank, ranks waiting
   for the messages they need, each slot of a phase slowed by its busiest channel): the ranks' waits in collectives
   and exchanges that a sum over phases misses. Beside co-runners it adds what they take from its phases'
   bandwidth (4.). The replay's first iteration is the start's (:meth:`FlowModel.start_time`).
6. **Calibration** (:attr:`FlowModel.scale`, :attr:`FlowModel.first`, :data:`CALIBRATION`): per workload kind, the
   time alone and the co-runners' delta are each scaled by a factor fitted on a training corpus's pure runs
   (:func:`hybridsim.flow_tables.fit_calibration`), and the start by the kind's first-iteration factor;
   :meth:`FlowModel.uncertainty` says how far off each kind's predictions were on the validation runs.

What it leaves out (queueing inside a phase beyond the max-min shares, the adaptive routings' choices packet by
packet, the ranks' drift beyond the replayed iterations): how close it comes: benchmarks/RESULTS.md ("A predictor
that knows what changes before the truth does"); :mod:`surrogate.flow_correction` learns a residual on top.

Why one module of this size (over 600 lines: about 740): traffic phases, latency, sharing and the calibration are one
model read together; the routes (:mod:`hybridsim.flow_routes`), the replay (:mod:`hybridsim.flow_replay`), the
pure-run tables and the fits (:mod:`hybridsim.flow_tables`) live apart.

What it keeps between calls, for its cost inside a hybrid run (issue 32: at most 10 % of the run; benchmarks/RESULTS.md,
"Predictor cost, round two"), none of which changes an answer: each set's answers (dropped for the sets a job is part
of when it is placed or measured), each job's time alone per placement, the routes of every router pair asked for; a
set is solved only on the channels its jobs share, and a job's shares are not solved again in a pass where its
co-runners' periods did not change.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from surrogate.models.flow import UNCERTAINTY   # the flow predictor's measured errors (their home: what it declares)

from .flow_routes import Routes   # the routes' home; hybridsim.flow.Routes as before

#: iterations of a job's workload averaged into its traffic matrix (evenly spread over the job)
SAMPLE_ITERATIONS = 4
#: fixed-point passes over the co-runners' iteration times (a pass changes them by a few percent at most after 10)
FIXED_POINT_PASSES = 30


class Phase(NamedTuple):
    """One phase of a rank's iteration (:func:`workload_profile`), taken together over the job's ranks: ``src``,
    ``dst``, ``w`` the rank-to-rank bytes per iteration (mean over the sampled iterations); ``serial_ns``: the
    compute before the phase's first send (the slowest rank's); ``overlap_ns``: the compute after it, before the
    blocking op that ends the phase (it runs while the sends are in flight: MILC's ``Compute`` between its Isends
    and its Waitalls); ``largest``: the phase's largest message (bytes; 0 without one); ``msg``: each flow's largest
    message (bytes, one per ``src``/``dst`` pair; None: unknown), which sets the MPI protocol it pays (eager below
    :data:`EAGER_THRESHOLD`, else rendezvous); ``slot``: each flow's place among its rank's sends of the phase (0 the
    first; None: unknown): a rank's NIC sends its messages one after another (:meth:`FlowModel.place`)."""

    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    serial_ns: float = 0.0
    overlap_ns: float = 0.0
    largest: float = 0.0
    msg: np.ndarray | None = None
    slot: np.ndarray | None = None


def workload_profile(workload, n_iterations: int, sample: int = SAMPLE_ITERATIONS) -> list[Phase]:
    """The phases of one iteration of a :class:`hybridsim.workloads.base.JobWorkload` (see :class:`Phase`). A rank's
    iteration is cut into phases at every blocking op (``SEND``, ``RECV``, ``WAITALL``): the sends of one phase are
    in flight together, the next phase starts after them (LAMMPS' exchanges run one after another, MILC's halo sends
    all at once, a collective's steps one by one). Phase k of every rank is taken together (the ranks of these codes
    run one program); a phase of compute only is kept (no traffic, its compute serial)."""
    from .workloads.ops import COMPUTE, ISEND, RECV, SEND, WAITALL

    R = int(workload.n_ranks)
    its = np.unique(np.linspace(0, max(int(n_iterations) - 1, 0), min(sample, max(int(n_iterations), 1))).astype(int))
    n = len(its)
    # for performance (every op of every rank of the sampled iterations passes here), per phase the sends as
    # (rank, dst, nth, bytes) in program order, summed per (rank, dst, nth) flow at the end in that order
    sends: list[list] = []
    serial: list[list] = []    # per phase: (n_sampled,) slowest rank's compute before / after its first send
    overlap: list[list] = []
    blocking = (SEND, RECV, WAITALL)

    for k, it in enumerate(its):
        for r in range(R):
            ph, sent, c, nth = 0, False, 0.0, 0
            if not sends:
                sends.append([])
                serial.append([0.0] * n)
                overlap.append([0.0] * n)
            out = sends[0]
            for op in workload.ops(r, int(it)):
                kind = op[0]
                if kind == COMPUTE:
                    c += op[1]
                    continue
                if kind == ISEND or kind == SEND:
                    if not sent:
                        row = serial[ph]
                        if c > row[k]:
                            row[k] = c
                        sent, c = True, 0.0
                    out.append((r, op[1], nth, op[2]))
                    nth += 1
                if kind in blocking:
                    row = (overlap if sent else serial)[ph]
                    if c > row[k]:
                        row[k] = c
                    ph, sent, c, nth = ph + 1, False, 0.0, 0
                    if len(sends) <= ph:
                        sends.append([])
                        serial.append([0.0] * n)
                        overlap.append([0.0] * n)
                    out = sends[ph]
            row = (overlap if sent else serial)[ph]
            if c > row[k]:
                row[k] = c
    out = []
    for lst, s, o in zip(sends, serial, overlap):
        s, o = np.asarray(s, dtype=np.float64), np.asarray(o, dtype=np.float64)
        if lst:
            a = np.asarray(lst, dtype=np.float64).reshape(-1, 4)
            src, dst, nth = a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64)
            key = (src * R + dst) * (int(nth.max()) + 1) + nth
            uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")          # the flows in their first send's order
            rank_of = np.empty(len(order), dtype=np.int64)
            rank_of[order] = np.arange(len(order))
            flow = rank_of[inv.reshape(-1)]
            # the bytes summed in program order (bincount adds one after another), the largest message per flow
            w = np.bincount(flow, weights=a[:, 3], minlength=len(order)) / n
            big = np.zeros(len(order))
            np.maximum.at(big, flow, a[:, 3])
            f0 = first[order]
            out.append(Phase(src[f0], dst[f0], w, float(s.mean()), float(o.mean()), float(a[:, 3].max()), big,
                             nth[f0]))
        elif s.mean() > 0 or o.mean() > 0:
            out.append(Phase(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64), float(s.mean()),
                             float(o.mean()), 0.0, np.zeros(0, np.float64), np.zeros(0, np.int64)))
    return out


def traffic_phases(workload, n_iterations: int, sample: int = SAMPLE_ITERATIONS) -> tuple[list, float]:
    """``(phases, compute_ns)``: the ``(src, dst, bytes)`` arrays of the phases of :func:`workload_profile` that
    carry traffic, and the compute of one iteration (the phases' serial and overlapped compute summed)."""
    prof = workload_profile(workload, n_iterations, sample)
    return ([(p.src, p.dst, p.w) for p in prof if len(p.w)],
            float(sum(p.serial_ns + p.overlap_ns for p in prof)))


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


#: the non-minimal shares an adaptive routing's phase is chosen from (:attr:`FlowModel.adaptive`)
SPREAD_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)

#: MPI protocol constants of the engine's message layer (hybridsim.engine.mpi): a message below the eager threshold
#: pays one software offset plus a copy per byte and one traversal; a larger one three offsets (RTS, ACK, data) and
#: three traversals (two of a control message)
EAGER_THRESHOLD = 8192
PROTOCOL_OFFSET = 3510.0
COPY_PER_BYTE = 0.55
CONTROL_SIZE = 64


class FlowModel:
    """Jobs' modelled iteration times beside a given set of co-runners (see the module docstring).

    A job's traffic is declared in rank space (:meth:`set_profile` from a workload's phases, or :meth:`set_traffic`
    from matrices; background traffic: :meth:`set_background`) and routed when the job is placed (:meth:`place`:
    before the run, or when a stream job starts); only placed jobs count. :meth:`iteration_time` answers for a job
    and the set of jobs running beside it, :meth:`ratio` for the change between two sets; answers are cached per
    set."""

    def __init__(self, routes: Routes, rule: str = "weighted", latency: bool = True, adaptive: bool = False,
                 fifo: float = 1.0, ranks: str = "mean", pipelined: bool = True, replay: bool = False,
                 sync: float = 1.0):
        self.routes = routes
        #: whether a job with op lists (:meth:`set_profile`) has its time alone from the replay of its first
        #: iterations (:mod:`hybridsim.flow_replay`) instead of its phases' sums
        self.replay = bool(replay)
        #: how the replay slows a phase's messages (:meth:`_slow`): 1 each slot by its own busiest channel (the ranks'
        #: k-th sends in step), 0 every message by the phase's busiest channel, between: a geometric mix
        self.sync = float(sync)
        #: whether a phase's bandwidth time leaves out its first packet (counted in its latency's traversal)
        self.pipelined = bool(pipelined) and bool(latency)
        #: a job's iteration from its ranks' sums over the phases: the slowest rank's ("max") or their mean ("mean":
        #: ranks that wait for different partners at different steps run at a common pace between the two)
        if ranks not in ("max", "mean"):
            raise ValueError(f"ranks must be 'max' or 'mean', got {ranks!r}")
        self.ranks = ranks
        #: how far a phase's bandwidth time goes from all its flows at once (0) to its ranks' messages one after
        #: another, as a NIC's FIFO injection queue sends them (1: each slot of the ranks' send order alone, summed)
        self.fifo = float(fifo)
        #: adaptive routing (UGAL, prog-adaptive): each phase's non-minimal share is the one of :data:`SPREAD_GRID`
        #: that drains the phase fastest alone (its busiest channel least loaded), as the routers move traffic off
        #: congested minimal paths; else every phase takes ``routes.nonminimal``
        self.adaptive = bool(adaptive)
        self.spread: dict[int, list] = {}   # adaptive: placed job -> each phase's non-minimal share
        self._used: dict[int, tuple] = {}    # placed iterating job -> what _comm reads (see place)
        #: per phase, "max": the slowest channel's bytes / share; "weighted": the phase's alone time (its busiest
        #: channel at full capacity) x the byte-weighted mean slowdown capacity / share over its channels
        if rule not in ("max", "weighted"):
            raise ValueError(f"rule must be 'max' or 'weighted', got {rule!r}")
        self.rule = rule
        #: whether a phase pays the MPI protocol's offsets and the first packet's traversal (False: bandwidth only,
        #: the model before issue 32)
        self.latency = bool(latency)
        self.traffic: dict[int, tuple] = {}        # job -> ("iterating", [Phase]) | ("background", [(s, d, w)])
        self.phases: dict[int, np.ndarray] = {}   # placed iterating job -> (P, n_channels) bytes per iteration
        self.bytes: dict[int, np.ndarray] = {}    # placed iterating job -> (n_channels,) bytes per iteration
        self.compute: dict[int, float] = {}       # iterating job -> compute ns per iteration
        #: placed iterating job -> per phase its serial and overlapped compute, (P,) each, and each rank's protocol
        #: latency, (P, R) (ns)
        self.fixed: dict[int, np.ndarray] = {}
        self.rate: dict[int, np.ndarray] = {}     # placed background job -> (n_channels,) bytes per ns
        #: job -> measured iteration time (ns): a co-runner's demand is its bytes over this when known, over its
        #: modelled time otherwise (the hybrid loop sets it from a job's first simulated iteration)
        self.period: dict[int, float] = {}
        self._cache: dict[tuple, float] = {}
        self.kind: dict[int, str | None] = {}     # iterating job -> its workload's kind (None: unknown)
        self.ops: dict[int, object] = {}          # iterating job -> ops(rank, iteration), for the replay
        #: placed iterating job with ops -> its replayed (first, steady) iteration alone (ns, mean over the ranks)
        self.replayed: dict[int, tuple[float, float]] = {}
        self._phase_alone: dict[int, float] = {}   # replayed job -> its phases' sums alone (ns)
        self._alone_t: dict[int, tuple] = {}      # placed job -> (its scale, its time alone): _alone_time
        #: workload kind -> (latency scale, bandwidth scale): the engine's time of a phase is about a L + b B of the
        #: model's latency L and bandwidth time B (:data:`CALIBRATION`, fitted on pure runs of a corpus:
        #: :func:`hybridsim.flow_tables.fit_calibration`); a kind not in it: (1, 1)
        self.scale: dict[str, tuple[float, float]] = {}
        #: workload kind -> its first iteration's time over its steady one (:data:`FIRST`; a kind not in it: 1)
        self.first: dict[str, float] = {}

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

    def set_profile(self, job: int, phases, kind: str | None = None, ops=None) -> None:
        """An iterating job from its :func:`workload_profile` (a list of :class:`Phase`); ``kind``: its workload's
        kind (``milc``, ...), which picks its :attr:`scale` and :attr:`first`; ``ops(rank, iteration)``: its op
        lists, for the replay of its first iterations alone (:mod:`hybridsim.flow_replay`; None: the phases' sums)."""
        phases = [p if isinstance(p, Phase) else Phase(*p) for p in phases]
        self.traffic[job] = ("iterating", phases)
        self.kind[job] = kind
        if ops is not None:
            self.ops[job] = ops
        self.compute[job] = float(sum(p.serial_ns + p.overlap_ns for p in phases))

    def set_traffic(self, job: int, tm, compute_ns: float) -> None:
        """An iterating job: ``tm`` its bytes per iteration, (R, R) rank i to rank j, one phase, or a sequence of
        phases (:func:`traffic_phases`; each an (R, R) array or (src, dst, bytes) arrays); ``compute_ns`` per
        iteration, serial (no message sizes: no protocol latency)."""
        phases = [Phase(s, d, w) for s, d, w in self._phases(tm)]
        if compute_ns > 0:
            phases.append(Phase(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), float(compute_ns)))
        self.set_profile(job, phases)

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

    def _latency(self, ph: Phase, terms: np.ndarray, n_ranks: int, nonminimal: float | None = None) -> np.ndarray:
        """(R,) protocol latency of a phase on ``terms`` for each sending rank (ns; 0 for a rank that sends nothing
        in it): the slowest of its flows, each its message's (:attr:`Phase.msg`, else the phase's largest) MPI
        offsets and first-packet traversal (eager: one offset, the copy and one traversal; rendezvous: three
        offsets, the RTS's and the ACK's traversals and the data's first packet)."""
        out = np.zeros(n_ranks)
        if not (self.latency and len(ph.w) and ph.largest > 0):
            return out
        ts, td = terms[ph.src], terms[ph.dst]
        keep = ts != td
        if not keep.any():
            return out
        src, ts, td = ph.src[keep], ts[keep], td[keep]
        size = np.full(len(src), ph.largest) if ph.msg is None else np.asarray(ph.msg, np.float64)[keep]
        eager = size < EAGER_THRESHOLD
        hops = self.routes.hop_counts(ts, td, nonminimal)   # once for both traversals
        lat = np.where(eager, PROTOCOL_OFFSET + COPY_PER_BYTE * size,
                       3 * PROTOCOL_OFFSET + 2 * self.routes.traversal_by_hops(ts, td, hops, CONTROL_SIZE))
        lat = lat + self.routes.traversal_by_hops(ts, td, hops, np.minimum(size, self.routes.packet_size))
        np.maximum.at(out, src, lat)
        return out

    def place(self, job: int, terminals) -> None:
        """Job ``job``'s ranks are on ``terminals`` (rank r on terminals[r]): route its traffic."""
        t = self.traffic.get(job)
        if t is None:
            return
        C = self.routes.n_channels
        terms = np.asarray(terminals, dtype=np.int64)
        phases = t[1] if t[0] == "iterating" else [Phase(*ph) for ph in t[1]]
        cap_all = self.routes.capacity
        B, lat, seq, slow = [], [], [], []
        tbw = float(self.routes.class_bw[2])
        spread = self.spread.setdefault(job, []) if self.adaptive else None
        if spread is not None:
            spread.clear()
        for p in phases:
            if not len(p.w):
                B.append(np.zeros(C))
                seq.append(0.0)
                slow.append(np.ones(0))
                if t[0] == "iterating":
                    lat.append(self._latency(p, terms, len(terms)))
                continue
            # the phase's flows by their place in their rank's send order (a rank's NIC sends one message after
            # another); the phase's bytes are the slots' summed (routing is linear in the bytes)
            slot = p.slot if p.slot is not None and t[0] == "iterating" else np.zeros(len(p.w), np.int64)
            base, mini, spr = self.routes.group_parts(slot, p.src, p.dst, p.w, terms)   # (K, C): a row per slot
            b0s, b1s = base + mini, base + spr
            b0, b1 = np.sum(b0s, axis=0), np.sum(b1s, axis=0)
            # per slot the busiest NIC's time (its rank's bytes of that slot at the terminal bandwidth): the bytes
            # summed per (slot, rank) in flow order, as a bincount per slot does
            _, si = np.unique(slot, return_inverse=True)
            si = si.reshape(-1)
            R = int(p.src.max()) + 1
            nic = np.bincount(si * R + p.src, weights=p.w, minlength=len(b0s) * R).reshape(len(b0s), R).max(axis=1)
            nic = nic / tbw
            if not self.adaptive:
                qn = self.routes.nonminimal
                B.append(b0 + qn * (b1 - b0))
                # each slot alone, routed as the phase is
                st = np.max((b0s + qn * (b1s - b0s)) / cap_all, axis=1)
                seq.append(float(st.sum()))
                slow.append(self._slow(st, nic, float(np.max(B[-1] / cap_all)), p, tbw))
                if t[0] == "iterating":
                    lat.append(self._latency(p, terms, len(terms)))
                continue
            # adaptive routing: per phase the non-minimal share that drains it fastest alone (bytes and latency are
            # linear in the share: routed at 0 and 1, mixed); each slot alone takes its own
            grid = np.asarray(SPREAD_GRID)
            busiest = np.max((b0 + grid[:, None] * (b1 - b0)) / cap_all, axis=1)     # (G,): the phase at each share
            q = SPREAD_GRID[int(np.argmin(busiest))]
            spread.append(q)
            B.append(b0 + q * (b1 - b0))
            # (K,): each slot at its best share (the same products and quotients as one slot and share at a time)
            st = np.max((b0s[None] + grid[:, None, None] * (b1s - b0s)[None]) / cap_all, axis=2).min(axis=0)
            seq.append(float(st.sum()))
            slow.append(self._slow(st, nic, float(np.max(B[-1] / cap_all)), p, tbw))
            if t[0] == "iterating":
                # a message's first packet meets empty queues: the adaptive routings send it minimally
                lat.append(self._latency(p, terms, len(terms), 0.0))
        B = np.array(B).reshape(-1, C)
        seq = np.array(seq)
        if t[0] == "iterating":
            self.phases[job] = B
            # what every _comm of this job reads, once: phases with traffic, the channels they use, their bytes there
            tot = B.sum(axis=1)
            has = tot > 0
            used = np.nonzero(B.sum(axis=0))[0]
            Bu, cap = B[has][:, used], self.routes.capacity[used]
            alone = np.max(Bu / cap[None, :], axis=1) if len(used) else np.zeros(0)
            # a phase's bandwidth time alone: between all its flows at once (its busiest channel) and its ranks'
            # sends one after another (the slots' busiest channels summed), FIFO of the way there
            alone = alone + self.fifo * np.maximum(seq[has] - alone, 0.0)
            # the first packet of a phase's messages is in its latency (its traversal, serialised on every link):
            # the bandwidth time is the rest, pipelined behind it
            first = np.array([min(p.largest, self.routes.packet_size) for p in phases])[has]
            first = first / self.routes.class_bw.min()
            alone = np.maximum(alone - first, 0.0) if self.pipelined else alone
            self._used[job] = (has, used, Bu, cap, alone, tot[has])
            self.fixed[job] = (np.array([p.serial_ns for p in phases]), np.array([p.overlap_ns for p in phases]),
                               np.array(lat).reshape(len(phases), -1))
            self.bytes[job] = B.sum(axis=0)
            if job in self.ops and self.replay:
                self._replay(job, terms, slow)
        else:
            self.rate[job] = B.sum(axis=0)
        self._alone_t.pop(job, None)
        # only the answers of the sets ``job`` is part of change (a set without it reads none of what was set here)
        self._cache = {k: v for k, v in self._cache.items() if k[0] != job and job not in k[1]}

    def _slow(self, slot_t: np.ndarray, slot_nic: np.ndarray, phase_t: float, p: Phase, tbw: float) -> np.ndarray:
        """Per slot of a phase, the factor by which the replay slows its messages below the NIC's bandwidth:
        ``(slot_t / slot_nic) ** sync * (phase_t / phase_nic) ** (1 - sync)`` (at least 1), between the slots sent in
        step by every rank (each slot's busiest channel over its busiest NIC: ``sync`` 1) and all the phase's flows
        spread over its time (the phase's: ``sync`` 0)."""
        by_slot = np.maximum(slot_t / np.maximum(slot_nic, 1e-12), 1.0)
        nic = np.bincount(p.src, weights=p.w).max() / tbw
        whole = max(phase_t / nic, 1.0) if nic > 0 else 1.0
        return by_slot ** self.sync * whole ** (1.0 - self.sync)

    def _replay(self, job: int, terms: np.ndarray, slow: list) -> None:
        """Replay ``job``'s first iterations alone (:func:`hybridsim.flow_replay.replay`): the messages of each slot of
        a phase (the k-th send of every rank) slowed by how much longer that slot's busiest channel takes than its
        busiest NIC (``slow``: per phase an array per slot)."""
        from .flow_replay import replay

        routes = self.routes
        tbw = float(routes.class_bw[2])

        # Routes.traversal's formula for one packet on its minimal route, with the hops cached per router pair and
        # the link constants as Python floats (the same IEEE operations as numpy's scalars, faster; for performance:
        # the replay asks for thousands)
        bw, lat = routes.class_bw.tolist(), routes.latency_ns.tolist()
        rd, P, p = float(routes.router_delay), routes.packet_size, routes.topo.p
        hops: dict = {}

        def trav(ts, td, size):
            if ts == td:
                return 0.0
            key = (ts // p, td // p)
            h = hops.get(key)
            if h is None:
                h = hops[key] = routes.hops(key[0], key[1], 0.0)
            pk = min(max(float(size), 1.0), P)
            return (2 * (pk / bw[2] + lat[2]) + rd + h[0] * (pk / bw[0] + lat[0] + rd)
                    + h[1] * (pk / bw[1] + lat[1] + rd))

        times = replay(self.ops[job], terms, trav, tbw, slow, packet_size=routes.packet_size)
        self.replayed[job] = (float(times[0].mean()), float(times[-1].mean()))
        self._phase_alone[job] = self._phase_time(job, np.zeros((0, routes.n_channels)))

    def _alone_time(self, job: int) -> float:
        """:meth:`_time` of ``job`` with nothing beside it, once per placement and :attr:`scale` (for performance:
        every set's fixed point starts from it)."""
        ab = self.scale.get(self.kind.get(job), (1.0, 1.0))
        got = self._alone_t.get(job)
        if got is None or got[0] != ab:
            got = self._alone_t[job] = (ab, self._time(job, np.zeros((0, self.routes.n_channels))))
        return got[1]

    def _set_view(self, job: int, others: list, bgs: list) -> tuple:
        """``(cols, rows, bg)`` of ``job`` beside the iterating ``others`` and the background jobs ``bgs``: ``cols``
        the indices into its used channels (:meth:`place`) where one of them has bytes, ``rows`` each other's
        bytes per iteration there, ``bg`` each background job's rate there (what :meth:`_comm` reads with
        ``cols``)."""
        used = self._used[job][1]
        flows = [self.bytes[m][used] for m in others]
        rates = [self.rate[g][used] for g in bgs]
        busy = np.zeros(len(used), dtype=bool)
        for f in flows + rates:
            busy |= f != 0
        cols = np.nonzero(busy)[0]
        return cols, [f[cols] for f in flows], [r[cols] for r in rates]

    def set_period(self, job: int, ns: float) -> None:
        """Job ``job``'s measured iteration time: its demand as a co-runner is its bytes over it from now on (the
        cached answers of the sets it is part of are dropped; the others stand)."""
        self.period[job] = float(ns)
        self._cache = {k: v for k, v in self._cache.items() if k[0] != job and job not in k[1]}

    def __contains__(self, job: int) -> bool:
        return job in self.bytes

    def _comm(self, job: int, demand: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
        """(P,) bandwidth ns of each phase of ``job`` with the other flows' ``demand`` (n_others, n_channels) bytes
        per ns (see :attr:`rule`); 0 for a phase without traffic. With ``cols`` (indices into the job's used
        channels), ``demand`` is (n_others, len(cols)) on those channels only and every other used channel carries
        no other flow: its share is its whole capacity, exactly what :func:`maxmin_levels` gives for zero demands
        (the level ``(capacity - 0) / 1``), so the answer is the same to the bit."""
        has, used, B, cap, alone, tot = self._used[job]
        out = np.zeros(len(has))
        if not len(used):
            return out
        if cols is not None:
            x = cap
            if len(demand) and len(cols):
                x = cap.copy()
                x[cols] = maxmin_levels(cap[cols], demand)
        else:
            x = maxmin_levels(cap, demand[:, used]) if len(demand) else cap
        if self.rule == "max":
            out[has] = np.max(B / x[None, :], axis=1)
        else:
            out[has] = alone * (B @ (cap / x)) / tot
        return out

    def _time(self, job: int, demand: np.ndarray, cols: np.ndarray | None = None) -> float:
        """A job's iteration time (ns) beside ``demand``: per phase its serial compute, then its overlapped compute
        or its communication (the rank's latency + the phase's bandwidth time), whichever is longer; summed over the
        phases for each rank; the slowest rank's (the ranks of a bulk-synchronous job wait for each other).
        ``cols``: see :meth:`_comm`."""
        a, b = self.scale.get(self.kind.get(job), (1.0, 1.0))
        if job in self.replayed:   # the replay alone, moved by the phases' ratio beside ``demand`` (see parts)
            steady = self.replayed[job][1]
            return a * steady + b * steady * (self._phase_ratio(job, demand, cols) - 1.0)
        return self._phase_time(job, demand, a, b, cols)

    def _phase_ratio(self, job: int, demand: np.ndarray, cols: np.ndarray | None = None) -> float:
        """The phases' sums beside ``demand`` over their sums alone; 1 for a job whose phases take no time alone (a
        one-rank job: no message, no compute modelled), which nothing beside it can slow."""
        alone = self._phase_alone[job]
        return self._phase_time(job, demand, cols=cols) / alone if alone > 0 else 1.0

    def _phase_time(self, job: int, demand: np.ndarray, a: float = 1.0, b: float = 1.0,
                    cols: np.ndarray | None = None) -> float:
        """The phases' sums (see :meth:`_time`), latency scaled by ``a`` and bandwidth time by ``b``."""
        serial, overlap, lat = self.fixed[job]
        comm = self._comm(job, demand, cols)[:, None]
        per_rank = (serial[:, None] + np.maximum(overlap[:, None], a * lat + b * comm)).sum(axis=0)
        return float(per_rank.max() if self.ranks == "max" else per_rank.mean())

    def parts(self, job: int, others=()) -> tuple[float, float, float]:
        """``(compute, latency, bandwidth)`` ns of ``job``'s iteration beside ``others`` (at the set's fixed point),
        unscaled (:attr:`scale` 1, 1), each the mean over the ranks of their sums over the phases: the terms that
        :data:`CALIBRATION` weighs (compute counts where it is longer than a phase's communication)."""
        T = self.iteration_time(job, others)   # the set's fixed point: the co-runners' periods
        others = tuple(sorted(k for k in set(others) if k != job and (k in self.bytes or k in self.rate)))
        dem = [self.bytes[m] / max(self.period.get(m, self._cache.get((m, tuple(sorted(set(others) - {m} | {job}))),
                                                                     T)), 1e-9)
               for m in others if m in self.bytes] + [self.rate[k] for k in others if k in self.rate]
        demand = np.asarray(dem) if dem else np.zeros((0, self.routes.n_channels))
        if job in self.replayed:   # the replay alone R and R (rho - 1), rho the phases' ratio beside the co-runners
            steady = self.replayed[job][1]
            return 0.0, steady, steady * (self._phase_ratio(job, demand) - 1.0)
        serial, overlap, lat = self.fixed[job]
        comm = self._comm(job, demand)[:, None]
        over = overlap[:, None] > lat + comm
        cmp_ = (serial[:, None] + np.where(over, overlap[:, None], 0.0)).sum(axis=0).mean()
        return (float(cmp_), float(np.where(over, 0.0, lat).sum(axis=0).mean()),
                float(np.where(over, 0.0, np.broadcast_to(comm, lat.shape)).sum(axis=0).mean()))

    def components(self, job: int, others=()) -> dict:
        """The parts of :meth:`iteration_time` of ``job`` beside ``others`` (ns): ``compute`` (serial and
        overlapped), ``latency`` (protocol and first-packet traversals), ``bandwidth`` (the phases' bandwidth time
        alone), ``total`` (beside ``others``, at the set's fixed point) and ``alone``."""
        serial, overlap, lat = self.fixed[job]
        return {"compute": float(serial.sum() + overlap.sum()), "latency": float(lat.sum(axis=0).max()),
                "bandwidth": float(self._comm(job, np.zeros((0, self.routes.n_channels))).sum()),
                "total": self.iteration_time(job, others), "alone": self.alone(job)}

    def alone(self, job: int) -> float:
        """The job's modelled iteration time with nothing beside it (ns)."""
        return self.iteration_time(job, ())

    def uncertainty(self, job: int, event: str = "change") -> float:
        """How far off a prediction for ``job`` is expected to be, as a relative error (0.05: 5 %): the error within
        which 68 % of its workload kind's predictions fell on the validation runs (:data:`UNCERTAINTY`), at a
        ``"start"`` (:meth:`start_time`) or a ``"change"`` (:meth:`ratio` times the job's last time); NaN for a kind
        not measured."""
        if event not in ("start", "change"):
            raise ValueError(f"event must be 'start' or 'change', got {event!r}")
        return float(UNCERTAINTY.get(self.kind.get(job), {}).get(event, float("nan")))

    def start_time(self, job: int, others) -> float:
        """Modelled time (ns) of ``job``'s first iteration beside ``others``: :meth:`iteration_time` (the steady
        iteration's) times its kind's :attr:`first` factor (a job's first iteration runs before its ranks drift
        apart: a nearest-neighbour job's is faster)."""
        f = self.first.get(self.kind.get(job), 1.0)
        T = self.iteration_time(job, others)
        if job in self.replayed:   # the replayed first iteration instead of the steady one
            first, steady = self.replayed[job]
            T += self.scale.get(self.kind.get(job), (1.0, 1.0))[0] * (first - steady)
        return T * f

    def ratio(self, job: int, old, new) -> float:
        """The factor by which ``job``'s iteration time changes when its co-runners go from ``old`` to ``new`` (job
        ids): ``iteration_time(job, new) / iteration_time(job, old)``; NaN for a job that is not placed."""
        a = self.iteration_time(job, old)
        return self.iteration_time(job, new) / a if a > 0 else float("nan")

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
        bgs = [k for k in others if k in self.rate]
        none = np.zeros((0, self.routes.n_channels))
        T = {k: self._alone_time(k) for k in jobs}
        # for performance, what each job's solve reads, once per set: the channels of its own where another flow of
        # the set has bytes (elsewhere its share is the whole capacity: see _comm), the others' bytes and the
        # background rates there; and per job the last divisors it was solved with and the answer (a pass whose
        # co-runners' periods are all measured repeats the same solve: its answer is reused, the same numbers)
        view = {k: self._set_view(k, [m for m in jobs if m != k], bgs) for k in jobs}
        last: dict = {}
        for _ in range(FIXED_POINT_PASSES):
            new = {}
            for k in jobs:
                cols, rows, bg = view[k]
                div = tuple(max(self.period.get(m, T[m]), 1e-9) for m in jobs if m != k)
                memo = last.get(k)
                if memo is not None and memo[0] == div:
                    new[k] = memo[1]
                    continue
                if all(d == d for d in div):   # no NaN period: the zero-demand channels stay at full capacity
                    dem = [r / d for r, d in zip(rows, div)] + bg
                    new[k] = self._time(k, np.asarray(dem) if dem else none, cols)
                else:
                    dem = [self.bytes[m] / d for m, d in zip([m for m in jobs if m != k], div)] \
                        + [self.rate[g] for g in bgs]
                    new[k] = self._time(k, np.asarray(dem) if dem else none)
                last[k] = (div, new[k])
            if len(jobs) == 1 or all(abs(new[k] - T[k]) <= 1e-5 * T[k] for k in jobs):
                T = new  # one job beside fixed-rate traffic only: no fixed point to look for
                break
            T = {k: 0.5 * (T[k] + new[k]) for k in jobs}  # damped: two heavy jobs would otherwise oscillate
        # the fixed point is every job's of the set: each is cached under its own key (the same numbers a call for
        # it would give), so a set costs one solve whichever of its jobs asks first
        everyone = set(others) | {job}
        for k in jobs:
            self._cache[(k, tuple(sorted(everyone - {k})))] = T[k]
        return T[job]


#: :attr:`FlowModel.fifo` of :func:`flow_model`: with the replay (which has the NICs' FIFO itself), the co-runners'
#: delta from all the phase's flows at once matched the validation runs' changes better than from the slots
FIFO = 0.0
#: :attr:`FlowModel.scale` of :func:`flow_model` (``calibration``): per workload kind the (latency, bandwidth) scales
#: fitted with :func:`hybridsim.flow_tables.fit_calibration` (the replay on, fifo 0) on the training runs of
#: corpora/moving-72.yaml (31), corpora/moving-1056.yaml (7) and corpora/trainstream-72.yaml (12): the replay alone
#: is about right (a near 1). The same fit puts the co-runners' gain b at 1.3-2.1 (the engine's time moves further
#: than the phases' max-min ratio says), but that gain made the validation runs' changes worse (160 of 305 within
#: 3 % against 187 at b = 1): b is 1
#: (benchmarks/RESULTS.md, issue 32: "A predictor that knows what changes")
CALIBRATION: dict[str, tuple[float, float]] = {"lammps": (1.014, 1.0), "milc": (1.025, 1.0),
                                               "nearest_neighbor": (0.914, 1.0)}
#: :attr:`FlowModel.first` of :func:`flow_model`: per workload kind the first iteration's time over the steady one's
FIRST: dict[str, float] = {"lammps": 1.014, "milc": 1.031, "nearest_neighbor": 1.046}   # same fit
#: :attr:`FlowModel.replay` of :func:`flow_model`
REPLAY = True
#: :attr:`FlowModel.sync` of :func:`flow_model`
SYNC = 1.0
#: :attr:`FlowModel.ranks` of :func:`flow_model`
RANKS = "mean"   # chosen over "max" on the validation runs

#: the non-minimal share of inter-group traffic the model routes per ``topology.routing`` (Valiant: all of it; the
#: adaptive routings: None, chosen per phase by load, :attr:`FlowModel.adaptive`)
NONMINIMAL_SHARE = {"minimal": 0.0, "nonminimal": 1.0, "adaptive": None, "prog-adaptive": None}


def flow_model(scenario, placement=None, *, nonminimal: float | None = None, rule: str = "weighted",
               latency: bool = True, fifo: float | None = None, ranks: str | None = None,
               pipelined: bool = True, calibration: dict | None = None, first: dict | None = None,
               replay: bool | None = None, sync: float | None = None) -> FlowModel:
    """The :class:`FlowModel` of a scenario: every job's phases from its workload (:func:`workload_profile`), routed
    with the scenario's link bandwidths, latencies, router delay, packet size and routing (``nonminimal``: the
    non-minimal share, default :data:`NONMINIMAL_SHARE` of the routing: adaptive per phase for the adaptive
    routings), placed on ``placement`` (per-job terminal
    arrays; None for a stream, whose jobs are placed as they start: :meth:`FlowModel.place`)."""
    from .workloads import build_workload

    topo = scenario.build_topology()
    tc = scenario.topology
    q = NONMINIMAL_SHARE[tc.routing] if nonminimal is None else float(nonminimal)
    routes = Routes(topo, tc.bandwidth.as_tuple(), q or 0.0, latency_ns=tc.link_latency(),
                    router_delay=tc.router_delay, packet_size=tc.packet_size)
    model = FlowModel(routes, rule, latency, adaptive=q is None, fifo=FIFO if fifo is None else fifo,
                      ranks=RANKS if ranks is None else ranks, pipelined=pipelined and latency,
                      replay=(REPLAY if replay is None else replay) and latency,   # the replay has the protocol
                      sync=SYNC if sync is None else sync)
    model.scale = dict(CALIBRATION if calibration is None else calibration)
    model.first = dict(FIRST if first is None else first)
    for i, job in enumerate(scenario.jobs):
        wl = build_workload(job, i, scenario.seed, scenario=scenario)
        if getattr(wl, "background", False):
            if hasattr(wl, "msg_size") and hasattr(wl, "interval"):
                model.set_background(i, job.ranks, wl.msg_size, wl.interval)
        else:
            last = max(int(job.iterations), 1) - 1   # a job of fewer iterations than replayed repeats its last

            def ops(rank, it, wl=wl, last=last):
                return wl.ops(rank, min(it, last))

            model.set_profile(i, workload_profile(wl, job.iterations), getattr(wl, "kind", None),
                              ops if model.replay else None)
        if placement is not None and placement[i] is not None and len(placement[i]):
            model.place(i, placement[i])
    return model
