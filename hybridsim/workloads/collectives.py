"""Collectives expanded into point-to-point ops, exactly as CODES' SWM glue does it.

Source: CODES a5958cfa ``src/workload/methods/codes-online-comm-wrkld.cxx`` (GLUE), summarised in
docs/workloads.md §1:

* ``Sendrecv(send to a, recv from b)`` is not an op: Irecv(b) + blocking Send(a) + Wait(irecv) (GLUE 403-414).
* ``Barrier``: dissemination; for mask = 1, 2, 4, ... < P a 0-byte Sendrecv, tag 1234, to (r+mask) mod P,
  from (r-mask) mod P (GLUE 159-211).
* ``Allreduce(count)``: MPICH. pof2 = largest power of two <= P, rem = P - pof2. Fold: even r < 2*rem Send count B
  to r+1 and sit out, odd r < 2*rem Recv from r-1 (newrank r/2), others newrank r-rem. If count <= 2048 or
  count < pof2: recursive doubling, one Sendrecv of count B per mask = 1..pof2/2 with partner newrank^mask mapped back
  (newdst < rem ? 2*newdst+1 : newdst+rem). Else Rabenseifner: reduce-scatter by recursive halving then allgather by
  recursive doubling with per-step byte counts from ``cnts``. Unfold: odd r < 2*rem Send count B to r-1, even Recv.
  Tag 1235 throughout (GLUE 474-668).

:class:`Program` is the builder every generator uses: it hands out request ids and appends ops.
"""

from __future__ import annotations

from .ops import (ALLREDUCE_TAG, BARRIER_TAG, COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL)

#: GLUE line 35: messages up to this many bytes take the recursive-doubling path.
ALLREDUCE_SHORT_MSG_SIZE = 2048


class Program:
    """Op list of one rank's iteration under construction.

    ``p = Program(rank, n_ranks)``; ``r = p.irecv(src, tag)``; ``p.send(dst, nbytes, tag)``; ``p.wait(r)``;
    ``p.allreduce(8)``; ``p.barrier()``; ``p.ops`` is the list of op tuples (see :mod:`hybridsim.workloads.ops`).
    Request ids start at 0 and increase by one per Isend/Irecv, like CODES' per-rank ``wait_id``.
    """

    __slots__ = ("rank", "n_ranks", "ops", "_next_req")

    def __init__(self, rank: int, n_ranks: int):
        if not 0 <= rank < n_ranks:
            raise ValueError(f"rank {rank} out of range for {n_ranks} ranks")
        self.rank = rank
        self.n_ranks = n_ranks
        self.ops: list[tuple] = []
        self._next_req = 0

    # -- point to point ---------------------------------------------------------------------------------------------
    def compute(self, ns: float) -> None:
        self.ops.append((COMPUTE, float(ns)))

    def isend(self, peer: int, nbytes: int, tag: int) -> int:
        req = self._next_req
        self._next_req += 1
        self.ops.append((ISEND, peer, int(nbytes), tag, req))
        return req

    def irecv(self, peer: int, tag: int) -> int:
        req = self._next_req
        self._next_req += 1
        self.ops.append((IRECV, peer, tag, req))
        return req

    def send(self, peer: int, nbytes: int, tag: int) -> None:
        self.ops.append((SEND, peer, int(nbytes), tag))

    def recv(self, peer: int, tag: int) -> None:
        self.ops.append((RECV, peer, tag))

    def waitall(self, reqs) -> None:
        self.ops.append((WAITALL, tuple(reqs)))

    def wait(self, req: int) -> None:
        self.ops.append((WAITALL, (req,)))

    def sendrecv(self, dest: int, nbytes: int, source: int, sendtag: int = 0, recvtag: int | None = None) -> None:
        """CODES' SWM_Sendrecv: Irecv(source) + blocking Send(dest) + Wait."""
        r = self.irecv(source, sendtag if recvtag is None else recvtag)
        self.send(dest, nbytes, sendtag)
        self.wait(r)

    # -- collectives ------------------------------------------------------------------------------------------------
    def barrier(self) -> None:
        for dest, src in barrier_schedule(self.rank, self.n_ranks):
            self.sendrecv(dest, 0, src, BARRIER_TAG)

    def allreduce(self, count: int) -> None:
        for step in allreduce_schedule(self.rank, self.n_ranks, count):
            kind = step[0]
            if kind == "send":
                self.send(step[1], step[2], ALLREDUCE_TAG)
            elif kind == "recv":
                self.recv(step[1], ALLREDUCE_TAG)
            else:  # sendrecv with the same partner
                self.sendrecv(step[1], step[2], step[1], ALLREDUCE_TAG)


def _pof2(p: int) -> int:
    pof2 = 1
    while pof2 <= p:
        pof2 <<= 1
    return pof2 >> 1


def barrier_schedule(rank: int, p: int) -> list[tuple[int, int]]:
    """(dest, source) of each 0-byte Sendrecv of the dissemination barrier."""
    out = []
    mask = 1
    while mask < p:
        out.append(((rank + mask) % p, (rank - mask + p) % p))
        mask <<= 1
    return out


def allreduce_schedule(rank: int, p: int, count: int) -> list[tuple]:
    """The point-to-point steps of CODES' MPICH allreduce for ``rank`` of ``p`` and ``count`` bytes, in order:
    ``("send", peer, nbytes)`` blocking, ``("recv", peer)`` blocking, ``("sendrecv", peer, nbytes)``."""
    pof2 = _pof2(p)
    rem = p - pof2
    steps: list[tuple] = []
    if rank < 2 * rem:
        if rank % 2 == 0:
            steps.append(("send", rank + 1, count))
            newrank = -1
        else:
            steps.append(("recv", rank - 1))
            newrank = rank // 2
    else:
        newrank = rank - rem

    def real(newdst: int) -> int:
        return newdst * 2 + 1 if newdst < rem else newdst + rem

    if newrank != -1:
        if count <= ALLREDUCE_SHORT_MSG_SIZE or count < pof2:
            mask = 1
            while mask < pof2:
                steps.append(("sendrecv", real(newrank ^ mask), count))
                mask <<= 1
        else:
            cnts = [count // pof2] * (pof2 - 1) + [count - (count // pof2) * (pof2 - 1)]
            mask = 1
            send_idx = recv_idx = 0
            last_idx = pof2
            while mask < pof2:  # reduce-scatter, recursive halving
                newdst = newrank ^ mask
                if newrank < newdst:
                    send_idx = recv_idx + pof2 // (mask * 2)
                    send_cnt = sum(cnts[send_idx:last_idx])
                else:
                    recv_idx = send_idx + pof2 // (mask * 2)
                    send_cnt = sum(cnts[send_idx:recv_idx])
                steps.append(("sendrecv", real(newdst), send_cnt))
                send_idx = recv_idx
                mask <<= 1
                if mask < pof2:
                    last_idx = recv_idx + pof2 // mask
            mask >>= 1
            while mask > 0:  # allgather, recursive doubling
                newdst = newrank ^ mask
                if newrank < newdst:
                    if mask != pof2 // 2:
                        last_idx = last_idx + pof2 // (mask * 2)
                    recv_idx = send_idx + pof2 // (mask * 2)
                    send_cnt = sum(cnts[send_idx:recv_idx])
                else:
                    recv_idx = send_idx - pof2 // (mask * 2)
                    send_cnt = sum(cnts[send_idx:last_idx])
                steps.append(("sendrecv", real(newdst), send_cnt))
                if newrank > newdst:
                    send_idx = recv_idx
                mask >>= 1
    if rank < 2 * rem:
        if rank % 2:
            steps.append(("send", rank - 1, count))
        else:
            steps.append(("recv", rank + 1))
    return steps


def allreduce_partners(rank: int, p: int, count: int = 8) -> list[int]:
    """Peers of ``rank`` in allreduce order (for tests and inspection)."""
    return [s[1] for s in allreduce_schedule(rank, p, count)]
