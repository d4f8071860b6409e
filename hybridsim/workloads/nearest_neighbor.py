"""SWM nearest_neighbor skeleton (``SWM/nearest_neighbor/nearest_neighbor_swm_user_code.cpp``;
docs/workloads.md §5).

Per SWM iteration and rank: for each neighbour n in list order, ``Irecv(source=n, tag=n)`` then immediately
``Isend(dest=n, tag=my_rank, msg_size B)``; after ``iterations_per_sync`` iterations (or at the last one) one Waitall
over all of those handles. No compute, no collective, no iteration mark in CODES.

Neighbours: like MILC, but per dimension the recursion tries (-1, unchanged, +1); with max_dimension_distance 3 in 3D
that is all 26 neighbours of the 27-point stencil. Duplicates are kept.

Iterations here: one hybridsim iteration = one sync group of ``iterations_per_sync`` SWM iterations (so request ids
stay local to an iteration); with the default 1 they coincide. ``compute_delay`` is dead code in CODES (it is only
used in the aborting asynchronous branch); hybridsim runs it, when non-zero, after the Waitall as an extension
(``from_codes_json`` always maps it to 0 so CODES runs are reproduced).
"""

from __future__ import annotations

from .base import JobWorkload, WorkloadCost, cycles_to_ns, neighbour_count, packets_of
from .collectives import Program
from .milc import coords_to_rank, rank_to_coords


def nn_neighbors(rank: int, dims: list[int], max_distance: int) -> list[int]:
    out: list[int] = []
    nd = len(dims)

    def rec(coords: list[int], d: int, dist: int) -> None:
        if dist == max_distance or (d == nd and dist > 0):
            out.append(coords_to_rank(coords, dims))
            return
        if d == nd:
            return
        c = list(coords)
        c[d] = (c[d] - 1) % dims[d]
        rec(c, d + 1, dist + 1)
        rec(coords, d + 1, dist)
        c = list(coords)
        c[d] = (c[d] + 1) % dims[d]
        rec(c, d + 1, dist + 1)

    rec(rank_to_coords(rank, dims), 0, 0)
    return out


def cost(n_ranks: int, w, packet_size: int) -> WorkloadCost:
    """Per rank and SWM iteration (the scenario's ``iterations``): an Irecv and an Isend per neighbour, and a share
    of the Waitall (and compute) that ends each group of ``iterations_per_sync`` (see :class:`~.base.WorkloadCost`)."""
    nb = neighbour_count(len(w.dimension_sizes), w.max_dimension_distance)
    return WorkloadCost(ops=2 * nb + (2 if w.compute_delay else 1) / w.iterations_per_sync, packets=nb * packets_of(w.msg_size, packet_size),
                        max_message=w.msg_size if nb else 0, message_field="msg_size",
                        compute_ns=cycles_to_ns(w.compute_delay, w.cpu_freq) / w.iterations_per_sync)


class NearestNeighborJob(JobWorkload):
    kind = "nearest_neighbor"

    def __init__(self, name: str, n_ranks: int, iterations: int, w):
        self.per_sync = int(getattr(w, "iterations_per_sync", 1) or 1)
        self.swm_iterations = int(iterations)
        super().__init__(name, n_ranks, -(-self.swm_iterations // self.per_sync))
        self.dims = list(w.dimension_sizes)
        self.msg_size = int(w.msg_size)
        self.max_distance = int(w.max_dimension_distance)
        self.compute_ns = cycles_to_ns(w.compute_delay, w.cpu_freq) if w.compute_delay else 0.0
        self._nbrs: dict[int, list[int]] = {}

    def neighbors(self, rank: int) -> list[int]:
        n = self._nbrs.get(rank)
        if n is None:
            n = self._nbrs[rank] = nn_neighbors(rank, self.dims, self.max_distance)
        return n

    def swm_iterations_in(self, iteration: int) -> int:
        """How many SWM iterations hybridsim iteration ``iteration`` holds."""
        return min(self.per_sync, self.swm_iterations - iteration * self.per_sync)

    def bytes_sent(self, rank: int, iteration: int) -> int:
        """One ``msg_size`` ISEND per neighbour per SWM iteration (:meth:`iteration_ops`), without making the ops."""
        self._check(rank, iteration)
        return self.swm_iterations_in(iteration) * len(self.neighbors(rank)) * self.msg_size

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        self._check(rank, iteration)
        p = Program(rank, self.n_ranks)
        nbrs = self.neighbors(rank)
        reqs = []
        for _ in range(self.swm_iterations_in(iteration)):
            for n in nbrs:
                reqs.append(p.irecv(n, n))
                reqs.append(p.isend(n, self.msg_size, rank))
        p.waitall(reqs)
        if self.compute_ns:
            p.compute(self.compute_ns)
        return p.ops
