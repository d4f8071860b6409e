"""The message layer: MPI ranks running per-iteration op lists, with CODES' MPI replay timing (docs/workloads.md §2).

* **Eager** (``nbytes < 8192``): one network message of ``nbytes`` that reaches the NIC after
  ``10 + 0.55 * nbytes + 2500 + 1000`` ns of software overhead. The receiver matches it on arrival.
* **Rendezvous** (``nbytes >= 8192``): a 64-B RTS (3510 ns offset); when it meets a posted receive, a 64-B ACK goes
  back (3510 ns); on the ACK the sender sends the data (3510 ns). The receive completes when the data has arrived.
* **Completion.** Isend (and blocking Send) completes when the last packet of the eager or data message *starts*
  injection at the source NIC; Irecv (and Recv) when the matched eager or data message has fully arrived. Matching is
  FIFO per (source rank, tag).
* **Offsets** also carry CODES' ``codes_local_latency`` (0.005 + U(0.5, 1) ns) on every message's way to the NIC.
* **Background ranks** (synthetic uniform-random) send ``msg_size`` bytes every ``interval`` ns, no MPI protocol, from
  t = 0 until every non-background job has finished.

Ranks are identified by a global id: a job's ranks get consecutive ids when the job starts (``ranks`` maps id ->
Rank, for the running jobs only). A rank's iteration ends when its last op completes; the rank then starts its next
iteration at once (an event at the same instant).
"""

from __future__ import annotations

import abc
from collections import deque

from hybridsim_common.records import IterationRecord

from ..workloads.ops import COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL

EAGER_THRESHOLD = 8192
CONTROL_SIZE = 64
SELF_OVERHEAD = 10.0
SOFT_DELAY = 2500.0
NIC_DELAY = 1000.0
COPY_PER_BYTE = 0.55
CONTROL_OFFSET = SELF_OVERHEAD + SOFT_DELAY + NIC_DELAY  # 3510 ns

EAGER, RTS, ACK, DATA, BG = range(5)


class Message:
    """One network message. ``wire`` is its size on the network; ``size`` the MPI payload it stands for."""

    __slots__ = ("kind", "src", "dst", "tag", "size", "wire", "src_term", "dst_term", "left", "sreq", "rreq", "jb",
                 "_delivered")

    def __init__(self, kind, src, dst, tag, size, wire, src_term, dst_term, sreq, rreq, jb):
        self.kind = kind
        self.src = src
        self.dst = dst
        self.tag = tag
        self.size = size
        self.wire = wire
        self.src_term = src_term
        self.dst_term = dst_term
        self.left = 0
        self.sreq = sreq
        self.rreq = rreq
        self.jb = jb


def _match(waiting: dict, parked: dict, key, item):
    """MPI matching by (source, tag), either way round: the oldest entry of ``waiting[key]`` (a posted receive for an
    arriving message, an unexpected message for a new receive), or None after parking ``item`` in ``parked[key]``."""
    q = waiting.get(key)
    if q:
        return q.popleft()
    p = parked.get(key)
    if p is None:
        p = parked[key] = deque()
    p.append(item)
    return None


class Request:
    """An MPI request of ``rank``: ``done`` once completed; ``waited`` while the rank blocks on it."""

    __slots__ = ("done", "waited", "rank")

    def __init__(self, rank):
        self.done = False
        self.waited = False
        self.rank = rank


class Rank:
    """One MPI rank: its place, its current iteration's ops and program counter, and its matching queues."""

    __slots__ = ("gid", "job", "local", "term", "it", "ops", "pc", "nwait", "reqs", "start", "posted", "unexpected",
                 "done", "bg_k")

    def __init__(self, gid, job, local, term):
        self.gid = gid
        self.job = job
        self.local = local
        self.term = term
        self.it = 0
        self.ops = ()
        self.pc = 0
        self.nwait = 0
        self.reqs: dict = {}
        self.start = 0.0
        self.posted: dict = {}       # (src gid, tag) -> deque[Request]
        self.unexpected: dict = {}   # (src gid, tag) -> deque[Message] (EAGER arrived or RTS waiting)
        self.done = False
        self.bg_k = 0


class MessageLayer(abc.ABC):
    """What the engine asks of a core's message layer: :class:`MpiLayer` here, ``NativeMpi`` over the native core
    (:mod:`hybridsim.engine.cores`).

    ``ranks``: the running jobs' :class:`Rank` objects by global id; ``messages``: network messages posted so far;
    ``on_iteration_end(t, rank)``: set by the engine, called when a rank has finished its current iteration (the
    engine records it and starts the next one)."""

    ranks: dict
    on_iteration_end = None

    @abc.abstractmethod
    def add_ranks(self, ranks) -> None:
        """A job starts: its ranks (consecutive global ids) can send and receive."""

    @abc.abstractmethod
    def drop_ranks(self, ranks) -> None:
        """A job ended: messages still arriving for its ranks are dropped."""

    @abc.abstractmethod
    def stop_rank(self, rs: Rank) -> None:
        """``rs`` is done (finished, or its job was killed): whatever of it is still scheduled does nothing."""

    @abc.abstractmethod
    def start_iteration(self, t, rs: Rank, ops) -> None:
        """Run ``rs``'s next iteration, the op list ``ops`` (``rs.it`` set by the caller), from ``t``."""

    @abc.abstractmethod
    def send_background(self, t, rs: Rank, dst: int, nbytes: int) -> None:
        """A background message: straight to the NIC, no protocol."""

    @abc.abstractmethod
    def count_bytes(self, j: int) -> None:
        """Count job ``j``'s bytes per port from now on (its messages carry the counters)."""

    @abc.abstractmethod
    def job_bytes(self, j: int):
        """Job ``j``'s bytes per port so far (a sequence by port id), or None if not counted."""

    @abc.abstractmethod
    def job_work(self, j: int):
        """Job ``j``'s queued work per port so far (ns^2: each packet's service time s times its wait at the router
        plus s^2 / 2, summed; over a window of length T, the increase / T is the job's time-averaged queued work
        there), or None if not counted."""

    @abc.abstractmethod
    def forget_bytes(self, j: int) -> None:
        """Stop counting job ``j``'s bytes."""

    # predicted iterations: the engine parks a job's ranks at an iteration the director predicts until all are
    # there, asks for the durations, and has each rank's predicted iteration end at its start plus its duration
    #: whether the message layer keeps the run's records itself (the native core's does, see
    #: :meth:`take_records`); otherwise the engine keeps them as they reach it
    keeps_records = False

    def take_records(self) -> tuple:
        """(``keeps_records``) the run's records as ``(job ids, ranks, iterations, starts, ends, simulated)`` arrays
        in event order, handed over once at the end of the run."""
        raise NotImplementedError

    def record_columns(self, lo: int, hi: int) -> tuple:
        """(``keeps_records``) rows ``lo`` .. ``hi - 1`` of the records kept, as :meth:`take_records` gives them."""
        raise NotImplementedError

    @abc.abstractmethod
    def set_pred_callbacks(self, records, next_, parked, names) -> None:
        """The engine's hooks: ``records(recs, counts)`` the records of predicted iterations that ended (event
        order; job ``j`` named ``names[j]``: a list of :class:`~hybridsim_common.records.IterationRecord`, or the
        native core's columns, see :meth:`~hybridsim_common.records.IterationColumns.extend`) and how many per job,
        ``next_(t, gid, it)`` rank ``gid`` is ready for its next iteration ``it``, ``parked(j, it, gids, times)``
        every rank of job ``j`` is parked at predicted iteration ``it``."""

    @abc.abstractmethod
    def pred_job(self, j: int, iters: int, n_ranks: int) -> None:
        """Job ``j`` (``iters`` iterations of ``n_ranks`` ranks) started."""

    @abc.abstractmethod
    def forget_job(self, j: int) -> None:
        """Job ``j`` ended."""

    @abc.abstractmethod
    def set_mode(self, j: int, it: int, predict: bool) -> None:
        """The director decided iteration ``it`` of job ``j`` (a layer may use it to park ranks without asking)."""

    @abc.abstractmethod
    def park(self, j: int, it: int, gid: int, t: float):
        """Rank ``gid`` waits at predicted iteration ``it`` from ``t``: ``(gids, times)`` of the job's ranks once
        every one is parked (and they are forgotten), else None."""

    @abc.abstractmethod
    def unpark(self, j: int) -> None:
        """Forget job ``j``'s parked ranks (it was killed)."""

    @abc.abstractmethod
    def pred_ends(self, gids, its, t0s, ends) -> None:
        """Rank ``gids[k]``'s predicted iteration ``its[k]``, started at ``t0s[k]``, ends at ``ends[k]``: then
        ``records``, then ``next_`` (or ``parked``)."""

    # a fast-forward stretch (Director.fast_forward): iterations the director has decided PREDICT and predicted
    # already, which the layer runs without the engine: at each, it parks the job's ranks and, once all are there,
    # ends them at their park time plus their duration (what ``parked`` and ``pred_ends`` would do, the same events)
    @abc.abstractmethod
    def stretch(self, j: int, first: int, durations) -> None:
        """Job ``j``'s iterations ``first`` .. ``first + len(durations) - 1`` are a stretch: row m of the float64
        array ``durations`` the durations of iteration ``first + m``, one per rank in local order."""

    @abc.abstractmethod
    def stretch_state(self, j: int, since: int = -1):
        """``(reached, scheduled, t, job_bytes)`` of job ``j``'s latest stretch: how many of its iterations a rank
        has reached (the decisions they replace) and had their ends scheduled (the predictions), the time the
        latest was reached and the job's byte counters then (None if not counted or none reached). A layer may
        also give None for the counters while ``reached <= since`` (the caller read them when it last saw ``since``
        reached; the native core copies them only when asked for new ones)."""

    @abc.abstractmethod
    def cut(self, j: int, h: int) -> None:
        """Shorten job ``j``'s stretch to its first ``h`` iterations, ``h`` at least those reached (the later ones
        go back to the engine)."""


class MpiLayer(MessageLayer):
    """Runs ranks' op lists over a :class:`~hybridsim.engine.network.Network` (the Python core's
    :class:`MessageLayer`)."""

    def __init__(self, net, loop, rng):
        self.net = net
        self.loop = loop
        self.ranks: dict[int, Rank] = {}   # the running jobs' ranks by global id
        self.rng = rng
        self.jb: dict[int, list] = {}      # per-port byte counters of the jobs counted (keep_background)
        self.pred_ranks: dict[int, int] = {}         # ranks per running job (park)
        self.parked: dict[tuple, tuple] = {}         # (job, iteration) -> (gids, times) of the ranks parked there
        self.ff: dict[int, list] = {}                # job -> its stretch [first, durations, reached, scheduled, t, bytes]
        net.on_local = self.local_complete
        net.on_deliver = self.deliver
        self.on_iteration_end = None
        self.messages = 0
        self.h_resume = self.resume

    # ------------------------------------------------------------------------------------------------ the engine's side
    def add_ranks(self, ranks) -> None:
        for rs in ranks:
            self.ranks[rs.gid] = rs

    def drop_ranks(self, ranks) -> None:
        for rs in ranks:
            del self.ranks[rs.gid]

    def stop_rank(self, rs: Rank) -> None:
        rs.done = True

    def start_iteration(self, t, rs: Rank, ops) -> None:
        rs.ops = ops
        rs.pc = 0
        rs.reqs = {}
        self.advance(t, rs)

    def count_bytes(self, j: int) -> None:
        self.jb[j] = [0] * self.net.n_ports + [0.0] * self.net.n_ports   # bytes, then queued work (port_send)

    def job_bytes(self, j: int):
        jb = self.jb.get(j)
        return None if jb is None else jb[:self.net.n_ports]

    def job_work(self, j: int):
        jb = self.jb.get(j)
        return None if jb is None else jb[self.net.n_ports:]

    def forget_bytes(self, j: int) -> None:
        self.jb.pop(j, None)

    # ------------------------------------------------------------------------------------------------ predicted iterations
    def set_pred_callbacks(self, records, next_, parked, names) -> None:
        self._pred_records, self._pred_next, self._pred_parked = records, next_, parked
        self.names = names

    def pred_job(self, j: int, iters: int, n_ranks: int) -> None:
        self.pred_ranks[j] = n_ranks

    def forget_job(self, j: int) -> None:
        self.pred_ranks.pop(j, None)
        self.ff.pop(j, None)
        self.unpark(j)

    def set_mode(self, j: int, it: int, predict: bool) -> None:
        pass  # every rank comes back to the engine (next_), which knows the modes

    def park(self, j: int, it: int, gid: int, t: float):
        key = (j, it)
        parked = self.parked.get(key)
        if parked is None:
            parked = self.parked[key] = ([], [])
        parked[0].append(gid)
        parked[1].append(t)
        if len(parked[0]) < self.pred_ranks[j]:
            return None
        return self.parked.pop(key)

    def unpark(self, j: int) -> None:
        for key in [k for k in self.parked if k[0] == j]:
            del self.parked[key]

    def pred_ends(self, gids, its, t0s, ends) -> None:
        at, ranks, h = self.loop.at, self.ranks, self._pred_end
        for gid, it, t0, t in zip(gids, its, t0s, ends):
            at(t, h, ranks[gid], (it, t0))

    def _pred_end(self, t, rs: Rank, it_t0):
        """A predicted iteration of ``rs`` ends (event handler)."""
        if rs.done:  # its job was killed at its walltime
            return
        it, t0 = it_t0
        j = rs.job
        self._pred_records([IterationRecord(self.names[j], j, rs.local, it, t0, t)], {j: 1})
        ff = self.ff.get(j)
        if ff is not None and ff[0] <= it + 1 < ff[0] + len(ff[1]):
            self._stretch_park(t, rs, it + 1, ff)
            return
        self._pred_next(t, rs.gid, it + 1)

    def stretch(self, j: int, first: int, durations) -> None:
        self.ff[j] = [first, [[float(x) for x in row] for row in durations], 0, 0, 0.0, None]

    def stretch_state(self, j: int, since: int = -1):
        ff = self.ff.get(j)
        if ff is None:
            return 0, 0, 0.0, None
        return ff[2], ff[3], ff[4], ff[5]

    def cut(self, j: int, h: int) -> None:
        ff = self.ff.get(j)
        if ff is not None:
            del ff[1][max(h, ff[2]):]

    def _stretch_park(self, t, rs: Rank, it: int, ff: list) -> None:
        """``rs`` reached iteration ``it`` of its job's stretch: parked; once the job's ranks are all there, their
        ends scheduled in local order (the engine's ``_pred_parked`` with the stretch's durations)."""
        j = rs.job
        if (j, it) not in self.parked:  # the first rank there: the decision the engine would have asked for
            ff[2], ff[4] = it - ff[0] + 1, t
            jb = self.jb.get(j)
            ff[5] = None if jb is None else jb[:self.net.n_ports]
        full = self.park(j, it, rs.gid, t)
        if full is None:
            return
        gids, times = full
        order = sorted(range(len(gids)), key=gids.__getitem__)  # local order
        dur = ff[1][it - ff[0]]
        starts = [times[k] for k in order]
        self.pred_ends([gids[k] for k in order], [it] * len(gids), starts, [s + d for s, d in zip(starts, dur)])
        ff[3] = it - ff[0] + 1

    # ------------------------------------------------------------------------------------------------ sending
    def _post(self, t, msg):
        """Hand ``msg`` to its source NIC after ``t`` plus CODES' local latency."""
        self.messages += 1
        self.loop.at(t + 0.505 + 0.5 * self.rng.random(), self.net.h_inject, msg)

    def _send(self, t, rs: Rank, dst: int, nbytes: int, tag: int, req: Request):
        d = self.ranks[dst]
        jb = self.jb.get(rs.job)
        if nbytes < EAGER_THRESHOLD:
            msg = Message(EAGER, rs.gid, dst, tag, nbytes, nbytes, rs.term, d.term, req, None, jb)
            self._post(t + SELF_OVERHEAD + COPY_PER_BYTE * nbytes + SOFT_DELAY + NIC_DELAY, msg)
        else:
            msg = Message(RTS, rs.gid, dst, tag, nbytes, CONTROL_SIZE, rs.term, d.term, req, None, jb)
            self._post(t + CONTROL_OFFSET, msg)

    def send_background(self, t, rs: Rank, dst: int, nbytes: int):
        d = self.ranks[dst]
        msg = Message(BG, rs.gid, dst, 0, nbytes, nbytes, rs.term, d.term, None, None,
                      self.jb.get(rs.job))
        self._post(t, msg)

    # ------------------------------------------------------------------------------------------------ network hooks
    def local_complete(self, t, msg):
        """The last packet of ``msg`` started injection: an eager or data message's send request completes."""
        k = msg.kind
        if k == EAGER or k == DATA:
            self.complete(t, msg.sreq)

    def deliver(self, t, msg):
        """The last packet of ``msg`` arrived at its destination terminal."""
        k = msg.kind
        if k == DATA:
            self.complete(t, msg.rreq)
        elif k == EAGER or k == RTS:
            rd = self.ranks.get(msg.dst)
            if rd is None:  # its job was killed at its walltime (the engine's job streams): dropped
                return
            rq = _match(rd.posted, rd.unexpected, (msg.src, msg.tag), msg)
            if rq is not None:
                if k == EAGER:
                    self.complete(t, rq)
                else:
                    self._ack(t, msg, rq)
        elif k == ACK:
            if msg.dst not in self.ranks:  # the sender's job was killed at its walltime
                return
            # back at the sender: send the data
            data = Message(DATA, msg.dst, msg.src, msg.tag, msg.size, msg.size, msg.dst_term, msg.src_term,
                           msg.sreq, msg.rreq, msg.jb)
            self._post(t + CONTROL_OFFSET, data)
        # BG: nothing to do

    def _ack(self, t, rts, rreq):
        ack = Message(ACK, rts.dst, rts.src, rts.tag, rts.size, CONTROL_SIZE, rts.dst_term, rts.src_term,
                      rts.sreq, rreq, rts.jb)
        self._post(t + CONTROL_OFFSET, ack)

    def _irecv(self, t, rs: Rank, src: int, tag: int, rq: Request):
        msg = _match(rs.unexpected, rs.posted, (src, tag), rq)
        if msg is not None:
            if msg.kind == EAGER:
                self.complete(t, rq)
            else:
                self._ack(t, msg, rq)

    # ------------------------------------------------------------------------------------------------ ranks
    def complete(self, t, rq: Request):
        rq.done = True
        if rq.waited:
            rq.waited = False
            rs = rq.rank
            rs.nwait -= 1
            if rs.nwait == 0:
                self.advance(t, rs)

    def resume(self, t, rs, _=None):
        """End of a COMPUTE op (event handler)."""
        self.advance(t, rs)

    def advance(self, t, rs: Rank):
        """Issue ``rs``'s ops from its program counter until one blocks; report the iteration end if none is left.
        Nothing for a rank that is done (its job was killed at its walltime while a request or compute was pending)."""
        if rs.done:
            return
        ops = rs.ops
        i = rs.pc
        n = len(ops)
        base = rs.gid - rs.local
        while i < n:
            op = ops[i]
            i += 1
            k = op[0]
            if k == ISEND:
                rq = Request(rs)
                rs.reqs[op[4]] = rq
                self._send(t, rs, base + op[1], op[2], op[3], rq)
            elif k == IRECV:
                rq = Request(rs)
                rs.reqs[op[3]] = rq
                self._irecv(t, rs, base + op[1], op[2], rq)
            elif k == WAITALL:
                reqs = rs.reqs
                nw = 0
                for rid in op[1]:
                    try:
                        rq = reqs[rid]
                    except KeyError:
                        raise ValueError(f"job {rs.job} rank {rs.local} iteration {rs.it}: WAITALL names request "
                                         f"{rid}, which no ISEND/IRECV of this iteration created (op {op!r})") from None
                    if not rq.done:
                        rq.waited = True
                        nw += 1
                if nw:
                    rs.pc = i
                    rs.nwait = nw
                    return
            elif k == COMPUTE:
                rs.pc = i
                self.loop.at(t + op[1], self.h_resume, rs)
                return
            elif k == SEND:
                rq = Request(rs)
                self._send(t, rs, base + op[1], op[2], op[3], rq)
                if not rq.done:
                    rq.waited = True
                    rs.pc = i
                    rs.nwait = 1
                    return
            elif k == RECV:
                rq = Request(rs)
                self._irecv(t, rs, base + op[1], op[2], rq)
                if not rq.done:
                    rq.waited = True
                    rs.pc = i
                    rs.nwait = 1
                    return
            else:
                raise ValueError(f"rank {rs.local} of job {rs.job}: unknown op {op!r}")
        rs.pc = i
        self.on_iteration_end(t, rs)
