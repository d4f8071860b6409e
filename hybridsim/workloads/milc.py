"""SWM MILC skeleton (``SWM/milc/milc_swm_user_code.cpp``; docs/workloads.md §3).

Per iteration and rank::

    repeat 2 (even, odd sites):
        Irecv(source=n, tag=n) for each neighbour n in list order
        Isend(dest=n, tag=my_rank, msg_size B) for each neighbour n
        Compute(compute_delay cycles)
        Waitall(Isends); Waitall(Irecvs)
    repeat allreduce_count (2): Allreduce(allreduce_size = 8 B)

Neighbours: every rank that differs by +-1 (periodic) in 1..max_dimension_distance dimensions, found by recursion over
the dimensions trying (-1, +1, unchanged); dimension 0 is the fastest in the rank -> coordinate map. Duplicates are
kept (a dimension of size 2 gives the same partner twice, size 1 gives a self-message), as in CODES.
"""

from __future__ import annotations

from .base import JobWorkload, WorkloadCost, allreduce_ops, cycles_to_ns, neighbour_count, packets_of
from .collectives import Program


def rank_to_coords(rank: int, dims: list[int]) -> list[int]:
    out, div = [], 1
    for n in dims:
        out.append((rank // div) % n)
        div *= n
    return out


def coords_to_rank(coords: list[int], dims: list[int]) -> int:
    r, mult = 0, 1
    for c, n in zip(coords, dims):
        r += c * mult
        mult *= n
    return r


def milc_neighbors(rank: int, dims: list[int], max_distance: int) -> list[int]:
    """MILC's neighbour list (``derive_neighbors_recurse``): per dimension try -1, +1, unchanged."""
    out: list[int] = []
    nd = len(dims)

    def rec(coords: list[int], d: int, dist: int) -> None:
        if dist == max_distance or (d == nd and dist > 0):
            out.append(coords_to_rank(coords, dims))
            return
        if d == nd:
            return
        for delta in (-1, +1):
            c = list(coords)
            c[d] = (c[d] + delta) % dims[d]
            rec(c, d + 1, dist + 1)
        rec(coords, d + 1, dist)

    rec(rank_to_coords(rank, dims), 0, 0)
    return out


def cost(n_ranks: int, w, packet_size: int) -> WorkloadCost:
    """Per rank-iteration: two half-steps of an Irecv and an Isend per neighbour, a compute and two Waitalls, then
    ``allreduce_count`` allreduces (see :class:`~.base.WorkloadCost`)."""
    nb = neighbour_count(len(w.dimension_sizes), w.max_dimension_distance)
    ar_ops, ar_steps = allreduce_ops(n_ranks, w.allreduce_size)
    biggest = max((w.msg_size if nb else 0, "msg_size"), (w.allreduce_size if w.allreduce_count else 0,
                                                          "allreduce_size"))
    return WorkloadCost(ops=2 * (2 * nb + 3) + w.allreduce_count * ar_ops,
                        packets=2 * nb * packets_of(w.msg_size, packet_size)
                        + w.allreduce_count * ar_steps * packets_of(w.allreduce_size, packet_size),
                        max_message=biggest[0], message_field=biggest[1],
                        compute_ns=2 * cycles_to_ns(w.compute_delay, w.cpu_freq))


class MilcJob(JobWorkload):
    kind = "milc"

    def __init__(self, name: str, n_ranks: int, iterations: int, w):
        super().__init__(name, n_ranks, iterations)
        self.dims = list(w.dimension_sizes)
        self.msg_size = int(w.msg_size)
        self.max_distance = int(w.max_dimension_distance)
        self.compute_ns = cycles_to_ns(w.compute_delay, w.cpu_freq)
        self.allreduce_count = int(w.allreduce_count)
        self.allreduce_size = int(w.allreduce_size)
        self._cache: dict[int, tuple] = {}
        self._bytes: dict[int, int] = {}

    def neighbors(self, rank: int) -> list[int]:
        return milc_neighbors(rank, self.dims, self.max_distance)

    def _build(self, rank: int) -> tuple:
        p = Program(rank, self.n_ranks)
        nbrs = self.neighbors(rank)
        for _half in range(2):
            recvs = [p.irecv(n, n) for n in nbrs]
            sends = [p.isend(n, self.msg_size, rank) for n in nbrs]
            p.compute(self.compute_ns)
            p.waitall(sends)
            p.waitall(recvs)
        for _ in range(self.allreduce_count):
            p.allreduce(self.allreduce_size)
        return tuple(p.ops)

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        self._check(rank, iteration)
        t = self._cache.get(rank)
        if t is None:
            t = self._cache[rank] = self._build(rank)
        return list(t)

    def bytes_sent(self, rank: int, iteration: int) -> int:
        """The same every iteration (one op list per rank): counted once per rank."""
        self._check(rank, iteration)
        b = self._bytes.get(rank)
        if b is None:
            b = self._bytes[rank] = super().bytes_sent(rank, iteration)
        return b
