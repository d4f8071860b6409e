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
* **A message's first packet** crosses the links of its minimal route (:meth:`hybridsim.flow_routes.Routes.traversal`);
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


#: the replay's event kinds (what a heap entry's third field says happens at its time)
_ADVANCE, _EAGER_POST, _RTS_POST, _RTS_ARRIVE, _ACK_POST, _DATA_POST, _ARRIVE_DATA = range(7)


def replay(ops, terminals, traversal, term_bw: float, slow=None, iterations: int = ITERATIONS,
           packet_size: int = 4096) -> np.ndarray:
    """(iterations, R) ns: each rank's time of each replayed iteration (see the module docstring).

    ``ops(rank, iteration)``: the rank's op list; ``terminals`` (R,); ``traversal(ts, td, size)``: the first
    packet's ns from terminal ``ts`` to ``td`` (a ``size``-byte packet); ``term_bw``: the NIC's bytes per ns;
    ``slow``: per phase of a rank's iteration (cut at blocking ops, as :func:`hybridsim.flow.workload_profile`
    does) and per slot (the rank's k-th send of the phase) the factor by which the message goes slower than the NIC
    (missing: 1).

    One event loop over a heap of ``(time, insertion counter, kind, ...)`` entries, ties broken by the counter; the
    message layer's steps are inlined in it and in :func:`advance` for performance (the replay is most of a job's
    placement cost in a hybrid run: benchmarks/RESULTS.md, issue 32, "Predictor cost, round two"). ``min`` and
    ``max`` are written as the conditional expressions they evaluate to (``b if b < a else a``), the same numbers.
    """
    terms = [int(t) for t in terminals]
    R = len(terms)
    slow = [np.asarray(x, np.float64).reshape(-1).tolist() for x in (slow if slow is not None else ())]
    n_slow = len(slow)
    heap: list = []
    tick = itertools.count().__next__
    push = heapq.heappush

    nic = [0.0] * R                          # when each rank's NIC is free
    posted = [dict() for _ in range(R)]      # (src, tag) -> deque of request keys
    unexpected = [dict() for _ in range(R)]  # (src, tag) -> deque of ("eager" | "rts", size, sender's request)
    reqs = [dict() for _ in range(R)]        # request id -> its completion time (None: not known yet)
    waiting = [set() for _ in range(R)]      # request ids the rank blocks on whose completion is not known yet
    wake = [0.0] * R                         # the latest known completion of those it blocks on
    state = [None] * R                       # [ops, pc, iteration, its start, phase, sends in the phase so far]
    times = np.zeros((iterations, R))
    trav_cache: dict = {}
    # the module's constants as locals (for performance: read per op and per event)
    compute_, isend_, send_, irecv_, recv_, waitall_ = COMPUTE, ISEND, SEND, IRECV, RECV, WAITALL
    eager_threshold, eager_offset, copy_per_byte = EAGER_THRESHOLD, EAGER_OFFSET, COPY_PER_BYTE
    control_offset, control_size = CONTROL_OFFSET, CONTROL_SIZE
    advance_, eager_post_, rts_post_, rts_arrive_, ack_post_, arrive_data_ = (_ADVANCE, _EAGER_POST, _RTS_POST,
                                                                              _RTS_ARRIVE, _ACK_POST, _ARRIVE_DATA)

    def trav(s, d, size):
        key = (s, d, size)
        v = trav_cache.get(key)
        if v is None:
            v = trav_cache[key] = float(traversal(s, d, size))
        return v

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
                push(heap, (wake[r], tick(), advance_, r))

    def begin(r, t, it):
        state[r] = [list(ops(r, it)), 0, it, t, 0, 0]
        reqs[r] = {}
        advance(t, r)

    def advance(t, r):
        """Rank r runs its ops from ``t`` until it blocks (or ends its iteration)."""
        st = state[r]
        o, i = st[0], st[1]
        n = len(o)
        d_req = reqs[r]
        while i < n:
            op = o[i]
            i += 1
            k = op[0]
            if k == compute_:
                if op[1] <= 0:   # nothing to wait for (LAMMPS' compute at its default speed-up)
                    continue
                st[1] = i
                push(heap, (t + op[1], tick(), advance_, r))
                return
            if k == isend_ or k == send_:
                if k == isend_:
                    req = op[4]
                else:
                    req = ("b", i)
                d_req[req] = None
                # the send: its rate from the phase and slot it is posted in
                ph, sl = st[4], st[5]
                f = slow[ph] if ph < n_slow else ()
                v = term_bw / (f[sl] if sl < len(f) else 1.0)
                st[5] = sl + 1
                dst, size, tag = op[1], op[2], op[3]
                if terms[r] == terms[dst]:     # loopback: the protocol's software only
                    off = eager_offset + copy_per_byte * size if size < eager_threshold else 3 * control_offset
                    push(heap, (t + off, tick(), arrive_data_, r, dst, tag, size))
                    if req is not None:
                        complete(r, req, t + off)
                elif size < eager_threshold:
                    push(heap, (t + eager_offset + copy_per_byte * size, tick(), eager_post_, r, dst, tag, size, req,
                                v))
                else:
                    push(heap, (t + control_offset, tick(), rts_post_, r, dst, tag, (size, v), req))
                if k == isend_:
                    continue
                names = (req,)
            elif k == irecv_ or k == recv_:
                if k == irecv_:
                    src, tag, req = op[1], op[2], op[3]
                else:
                    src, tag, req = op[1], op[2], ("b", i)
                d_req[req] = None
                # the receive: matched against what arrived unexpected, else posted
                q = unexpected[r].get((src, tag))
                if q:
                    kind, size, sreq = q.popleft()
                    if kind == "eager":
                        d_req[req] = t
                    else:
                        push(heap, (t + control_offset, tick(), ack_post_, r, src, tag, size, sreq, req))
                else:
                    pq = posted[r].get((src, tag))
                    if pq is None:
                        pq = posted[r][(src, tag)] = deque()
                    pq.append(req)
                if k == irecv_:
                    continue
                names = (req,)
            elif k == waitall_:
                names = op[1]
            else:
                continue
            # a blocking op: the rank waits for ``names`` (a request never made counts as done)
            left = None
            known = t
            for q in names:
                v = d_req.get(q, t)
                if v is None:
                    if left is None:
                        left = {q}
                    else:
                        left.add(q)
                elif v > known:
                    known = v
            st[4] += 1   # the next phase
            st[5] = 0
            if left:
                waiting[r] = left
                wake[r] = known
                st[1] = i
                return
            if known > t:
                st[1] = i
                push(heap, (known, tick(), advance_, r))
                return
        it = st[2]
        times[it, r] = t - st[3]
        if it + 1 < iterations:
            begin(r, t, it + 1)

    for r in range(R):
        begin(r, 0.0, 0)
    pop = heapq.heappop
    while heap:
        e = pop(heap)
        t, code = e[0], e[2]
        if code == advance_:
            advance(t, e[3])
        elif code == eager_post_:   # the eager message leaves the sender's NIC
            _, _, _, r, d, tag, size, req, v = e
            a = nic[r]
            start = t if t > a else a
            end = start + size / v
            nic[r] = end
            pk = packet_size if packet_size < size else size
            if req is not None:
                complete(r, req, end - pk / v)
            rest = size - pk
            key = (terms[r], terms[d], pk)
            tv = trav_cache.get(key)
            if tv is None:
                tv = trav(*key)
            push(heap, (start + tv + (0 if 0 > rest else rest) / v, tick(), arrive_data_, r, d, tag, size))
        elif code == arrive_data_:   # an eager (or loopback) message is at its receiver
            _, _, _, r, d, tag, size = e
            q = posted[d].get((r, tag))
            if q:
                complete(d, q.popleft(), t)
            else:
                uq = unexpected[d].get((r, tag))
                if uq is None:
                    uq = unexpected[d][(r, tag)] = deque()
                uq.append(("eager", size, None))
        elif code == rts_post_:   # a rendezvous message's RTS leaves the sender's NIC
            _, _, _, r, d, tag, size, req = e
            a = nic[r]
            start = t if t > a else a
            nic[r] = start + control_size / term_bw
            push(heap, (start + trav(terms[r], terms[d], control_size), tick(), rts_arrive_, r, d, tag, size, req))
        elif code == rts_arrive_:
            _, _, _, r, d, tag, size, req = e
            q = posted[d].get((r, tag))
            if q:
                rq = q.popleft()
                push(heap, (t + control_offset, tick(), ack_post_, d, r, tag, size, req, rq))
            else:
                uq = unexpected[d].get((r, tag))
                if uq is None:
                    uq = unexpected[d][(r, tag)] = deque()
                uq.append(("rts", size, req))
        elif code == ack_post_:   # the receiver's ACK leaves its NIC
            _, _, _, d, r, tag, size, sreq, rreq = e
            a = nic[d]
            start = t if t > a else a
            nic[d] = start + control_size / term_bw
            push(heap, (start + trav(terms[d], terms[r], control_size) + control_offset, tick(), _DATA_POST, r, d, tag,
                        size, sreq, rreq))
        else:   # _DATA_POST: the rendezvous data leaves the sender's NIC
            _, _, _, r, d, tag, size_v, sreq, rreq = e
            size, v = size_v
            a = nic[r]
            start = t if t > a else a
            end = start + size / v
            nic[r] = end
            pk = packet_size if packet_size < size else size
            if sreq is not None:
                complete(r, sreq, end - pk / v)
            rest = size - pk
            complete(d, rreq, start + trav(terms[r], terms[d], pk) + (0 if 0 > rest else rest) / v)
    return times
