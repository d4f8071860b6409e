"""A job's first iterations replayed alone at message level, without the packet network: the flow model's time of a
job before any truth of it (issue 32).

The flow model (:mod:`hybridsim.flow`) sums, per rank, each phase's latency and bandwidth time; the engine's ranks do
not wait for each other at every phase, they wait for the messages they need: a rank idle in a collective waits for
its partner's chain of steps, ranks of a pairwise exchange drift apart, a rendezvous message waits for its receiver's
acknowledgement behind the receiver's own data in its NIC. This replay runs the ranks' ops as the engine's message
layer does (:mod:`hybridsim.engine.mpi`), with a network reduced to what a message meets on an otherwise idle
machine:

* **Protocols** as the engine's: eager (``< EAGER_THRESHOLD``) after ``10 + 0.55 B + 3500`` ns of software; a
  rendezvous message sends a 64-B RTS (3510 ns), the receiver's 64-B ACK follows once the receive is posted (3510
  ns), then the data (3510 ns). A send completes when its last packet starts injection, a receive when the last
  packet has arrived; matching is FIFO per (source, tag); a message to the rank's own terminal never enters the
  network (delivered when posted).
* **The NIC** of each rank sends one message after another (a FIFO: control messages wait behind data), each data
  message at the terminal bandwidth divided by its slot's ``slow`` factor (the slot: the message's place among its
  rank's sends of the phase): how much longer that slot's busiest channel takes than its busiest NIC when every rank
  sends its k-th message at once (:meth:`hybridsim.flow.FlowModel._slow`; 1 where the NICs are the bottleneck).
* **A message's first packet** crosses the links of its minimal route (:meth:`hybridsim.flow.Routes.traversal`);
  the rest follows at the message's rate.

:func:`replay` returns the ranks' iteration times; the flow model takes the mean over the ranks of the first and of
the last replayed iteration as the job's time alone at its start and in its steady state, and moves it by the
phases' max-min ratio beside its co-runners (:meth:`hybridsim.flow.FlowModel.iteration_time`). Checked against the
engine: tests/test_flow_replay.py (by hand), benchmarks/RESULTS.md (issue 32, "Second pass").
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

import numpy as np

from .workloads.ops import COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL

#: the engine's message-layer constants (:mod:`hybridsim.engine.mpi`)
EAGER_THRESHOLD = 8192
CONTROL_SIZE = 64
CONTROL_OFFSET = 3510.0
EAGER_OFFSET = 3510.0   # 10 + 2500 + 1000 (the copy is per byte)
COPY_PER_BYTE = 0.55
#: how many iterations are replayed: the first, and the second as the steady one (a third changed no start or change
#: of the validation runs: benchmarks/RESULTS.md, issue 32)
ITERATIONS = 2


def replay(ops, terminals, traversal, term_bw: float, slow=None, iterations: int = ITERATIONS,
           packet_size: int = 4096) -> np.ndarray:
    """(iterations, R) ns: each rank's time of each replayed iteration (see the module docstring).

    ``ops(rank, iteration)``: the rank's op list; ``terminals`` (R,); ``traversal(ts, td, size)``: the first
    packet's ns from terminal ``ts`` to ``td`` (a ``size``-byte packet); ``term_bw``: the NIC's bytes per ns;
    ``slow``: per phase of a rank's iteration (cut at blocking ops, as :func:`hybridsim.flow.workload_profile`
    does) and per slot (the rank's k-th send of the phase) the factor by which the message goes slower than the NIC
    (missing: 1)."""
    terms = [int(t) for t in terminals]
    R = len(terms)
    slow = [np.asarray(x, np.float64).reshape(-1).tolist() for x in (slow if slow is not None else ())]
    heap: list = []
    tick = itertools.count()
    push = heapq.heappush

    def at(t, fn, *args):
        push(heap, (t, next(tick), fn, args))

    nic = [0.0] * R                          # when each rank's NIC is free
    posted = [dict() for _ in range(R)]      # (src, tag) -> deque of request keys
    unexpected = [dict() for _ in range(R)]  # (src, tag) -> deque of ("eager" | "rts", size, sender's request)
    reqs = [dict() for _ in range(R)]        # request id -> its completion time (None: not known yet)
    waiting = [set() for _ in range(R)]      # request ids the rank blocks on whose completion is not known yet
    wake = [0.0] * R                         # the latest known completion of those it blocks on
    state = [None] * R                       # [ops, pc, iteration, its start, phase, sends in the phase so far]
    times = np.zeros((iterations, R))
    trav_cache: dict = {}

    def trav(s, d, size):
        key = (s, d, size)
        v = trav_cache.get(key)
        if v is None:
            v = trav_cache[key] = float(traversal(s, d, size))
        return v

    def rate(ph, k):
        f = slow[ph] if ph < len(slow) else ()
        return term_bw / (f[k] if k < len(f) else 1.0)

    def inject(r, t, size, v=term_bw):
        """``size`` bytes through rank r's NIC at ``v`` bytes per ns from ``t`` on: (start, last packet's start, end
        of injection)."""
        start = max(nic[r], t)
        end = start + size / v
        nic[r] = end
        return start, end - min(size, packet_size) / v, end

    def deliver_time(r, d, start, size, v):
        pk = min(size, packet_size)
        return start + trav(terms[r], terms[d], pk) + max(size - pk, 0) / v

    def complete(r, req, tc):
        """Request ``req`` of rank r completes at ``tc`` (known now, maybe later than now: no event for it)."""
        d = reqs[r]
        if req not in d:   # a request of an iteration the rank has left
            return
        d[req] = tc
        w = waiting[r]
        if req in w:
            w.discard(req)
            if tc > wake[r]:
                wake[r] = tc
            if not w:
                at(wake[r], advance, r)

    # ------------------------------------------------------------------------------------------------- messages
    def send(r, t, d, size, tag, req):
        st = state[r]
        v = rate(st[4], st[5])   # the phase and slot the send is posted in
        st[5] += 1
        if terms[r] == terms[d]:     # loopback: the protocol's software only
            off = EAGER_OFFSET + COPY_PER_BYTE * size if size < EAGER_THRESHOLD else 3 * CONTROL_OFFSET
            at(t + off, arrive_data, r, d, tag, size, req)
            if req is not None:
                complete(r, req, t + off)
            return
        if size < EAGER_THRESHOLD:
            at(t + EAGER_OFFSET + COPY_PER_BYTE * size, eager_post, r, d, tag, size, req, v)
        else:
            at(t + CONTROL_OFFSET, rts_post, r, d, tag, (size, v), req)

    def eager_post(t, r, d, tag, size, req, v):
        start, last, _ = inject(r, t, size, v)
        if req is not None:
            complete(r, req, last)
        at(deliver_time(r, d, start, size, v), arrive_data, r, d, tag, size, None)

    def rts_post(t, r, d, tag, size, req):
        start, _, _ = inject(r, t, CONTROL_SIZE)
        at(start + trav(terms[r], terms[d], CONTROL_SIZE), rts_arrive, r, d, tag, size, req)

    def rts_arrive(t, r, d, tag, size, req):
        q = posted[d].get((r, tag))
        if q:
            rq = q.popleft()
            at(t + CONTROL_OFFSET, ack_post, d, r, tag, size, req, rq)
        else:
            unexpected[d].setdefault((r, tag), deque()).append(("rts", size, req))

    def ack_post(t, d, r, tag, size, sreq, rreq):
        start, _, _ = inject(d, t, CONTROL_SIZE)
        at(start + trav(terms[d], terms[r], CONTROL_SIZE) + CONTROL_OFFSET, data_post, r, d, tag, size, sreq, rreq)

    def data_post(t, r, d, tag, size_v, sreq, rreq):
        size, v = size_v
        start, last, _ = inject(r, t, size, v)
        if sreq is not None:
            complete(r, sreq, last)
        complete(d, rreq, deliver_time(r, d, start, size, v))

    def arrive_data(t, r, d, tag, size, _req):
        q = posted[d].get((r, tag))
        if q:
            complete(d, q.popleft(), t)
        else:
            unexpected[d].setdefault((r, tag), deque()).append(("eager", size, None))

    def irecv(r, t, s, tag, req):
        q = unexpected[r].get((s, tag))
        if q:
            kind, size, sreq = q.popleft()
            if kind == "eager":
                reqs[r][req] = t
            else:
                at(t + CONTROL_OFFSET, ack_post, r, s, tag, size, sreq, req)
            return
        posted[r].setdefault((s, tag), deque()).append(req)

    # ------------------------------------------------------------------------------------------------- ranks
    def begin(r, t, it):
        state[r] = [list(ops(r, it)), 0, it, t, 0, 0]
        reqs[r] = {}
        advance(t, r)

    def advance(t, r):
        st = state[r]
        o, i = st[0], st[1]
        n = len(o)
        while i < n:
            op = o[i]
            i += 1
            k = op[0]
            if k == ISEND:
                reqs[r][op[4]] = None
                send(r, t, op[1], op[2], op[3], op[4])
            elif k == IRECV:
                reqs[r][op[3]] = None
                irecv(r, t, op[1], op[2], op[3])
            elif k == COMPUTE:
                if op[1] <= 0:   # nothing to wait for (LAMMPS' compute at its default speed-up)
                    continue
                st[1] = i
                at(t + op[1], advance, r)
                return
            elif k in (WAITALL, SEND, RECV):
                d = reqs[r]
                if k == WAITALL:
                    names = op[1]
                else:
                    names = (("b", i),)
                    d[names[0]] = None
                    (send(r, t, op[1], op[2], op[3], names[0]) if k == SEND else irecv(r, t, op[1], op[2], names[0]))
                vals = [d.get(q, t) for q in names]   # a request never made counts as done
                left = {q for q, v in zip(names, vals) if v is None}
                known = max([v for v in vals if v is not None], default=t)
                st[4] += 1   # the next phase
                st[5] = 0
                if left:
                    waiting[r] = left
                    wake[r] = max(t, known)
                    st[1] = i
                    return
                if known > t:
                    st[1] = i
                    at(known, advance, r)
                    return
        it = st[2]
        times[it, r] = t - st[3]
        if it + 1 < iterations:
            begin(r, t, it + 1)

    for r in range(R):
        begin(r, 0.0, 0)
    pop = heapq.heappop
    while heap:
        t, _, fn, args = pop(heap)
        fn(t, *args)
    return times
