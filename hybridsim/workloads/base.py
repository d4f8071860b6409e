"""The object the engine drives: one per job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .ops import COMPUTE, ISEND, SEND


class WorkloadError(ValueError):
    """A workload cannot be built or produced an invalid op; the message names the job."""


@dataclass(frozen=True)
class WorkloadCost:
    """What one rank-iteration of a job asks of the generator and the network, estimated in closed form from the
    workload's parameters before anything is generated (each workload module's ``cost``; the scenario's limits are
    checked against it). ``ops``: op tuples the generator builds per rank and iteration (at least one per loop step,
    so a loop that emits nothing still counts); ``packets``: packets it sends to other ranks; ``max_message``: the
    largest message to another rank, bytes, and ``message_field``: the workload field that sets it; ``compute_ns``:
    compute time of one iteration of one rank, ns (a lower bound on the iteration's duration)."""

    ops: float
    packets: float
    max_message: int
    message_field: str
    compute_ns: float = 0.0


def packets_of(nbytes: float, packet_size: int) -> float:
    """Packets of one message (a 0-byte message is one packet)."""
    return max(1.0, -(-nbytes // packet_size))


def neighbour_count(n_dims: int, max_distance: int) -> float:
    """Neighbours of a rank that differ by +-1 in 1..``max_distance`` of ``n_dims`` dimensions (MILC's and
    nearest_neighbor's recursion, duplicates kept): sum over k of C(n_dims, k) 2^k; a float, so that a million
    dimensions cost a loop, not a big integer (past 1e30 it stops counting)."""
    total, term = 0.0, 1.0
    for k in range(1, min(n_dims, max_distance) + 1):
        term *= 2.0 * (n_dims - k + 1) / k
        total += term
        if total > 1e30:
            break
    return total


def allreduce_ops(n_ranks: int, nbytes: int) -> tuple[float, float]:
    """(ops, messages) of one CODES allreduce of ``nbytes`` on ``n_ranks`` ranks for a rank past the fold (most of
    them): log2 of the largest power of two <= P Sendrecvs (3 ops each), twice for Rabenseifner's long-message path;
    at least one op (the generator's loop step)."""
    log2 = max(0, int(n_ranks).bit_length() - 1)
    steps = log2 * (2 if nbytes > 2048 and nbytes >= 1 << log2 else 1)
    return max(1.0, 3.0 * steps), float(steps)


class JobWorkload:
    """Per-rank iteration streams of one job.

    ``n_ranks``: ranks of the job. ``iterations``: number of iterations (``None`` for background jobs, which run
    until every other job has finished). ``ops(rank, iteration)`` returns that rank's ops of that iteration in program
    order (a fresh list; deterministic): a ``COMPUTE`` op of :attr:`job_compute_ns` when it is > 0, then the
    workload's own ops of the iteration (:meth:`iteration_ops`, what a subclass implements). ``kind`` is the workload
    kind (``"milc"``, ``"lammps"``, ...).
    """

    kind: str = "?"
    background: bool = False
    #: a background job whose :meth:`destination` is the uniform draw of
    #: :meth:`~.simple.UniformRandomJob.destination` (``randrange(n_ranks)``, the sender itself becoming the next rank)
    #: says so here, and the native core then runs its periodic sends itself (the same draws from the same
    #: generator); None: the engine calls :meth:`destination` per message
    destination_rule: Optional[str] = None
    #: ns of compute the job spends at the start of every rank's iteration (the scenario's compute phase, set by
    #: :func:`hybridsim.workloads.build_workload`; 0: none)
    job_compute_ns: float = 0.0

    def __init__(self, name: str, n_ranks: int, iterations: Optional[int]):
        self.name = name
        self.n_ranks = int(n_ranks)
        self.iterations = iterations

    def ops(self, rank: int, iteration: int) -> list[tuple]:
        ops = self.iteration_ops(rank, iteration)
        return [(COMPUTE, self.job_compute_ns)] + ops if self.job_compute_ns > 0 else ops

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        """The workload's ops of ``rank``'s ``iteration`` (without the job's compute phase)."""
        raise NotImplementedError

    def bytes_sent(self, rank: int, iteration: int) -> int:
        """Bytes ``rank`` sends in ``iteration`` (its ISEND and SEND ops; what the hybrid controller's volume
        normalisation reads before the run, :func:`hybridsim.workloads.workload_volumes`). A workload that knows it
        without generating the ops may say so (for performance: the controller asks for every iteration)."""
        return sum(op[2] for op in self.ops(rank, iteration) if op[0] in (ISEND, SEND))

    def _check(self, rank: int, iteration: int) -> None:
        if not 0 <= rank < self.n_ranks:
            raise IndexError(f"job {self.name!r}: rank {rank} out of range 0..{self.n_ranks - 1}")
        if iteration < 0 or (self.iterations is not None and iteration >= self.iterations):
            raise IndexError(f"job {self.name!r}: iteration {iteration} out of range 0..{self.iterations}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} job={self.name!r} kind={self.kind} ranks={self.n_ranks} " \
               f"iterations={self.iterations}>"


def cycles_to_ns(cycles: float, cpu_freq_hz: float) -> float:
    """CODES glue: ``nsecs = cycles / (cpu_freq / 1e9)``; a cpu_freq of 0 means 2 GHz (GLUE 317-346)."""
    ghz = cpu_freq_hz / 1e9
    if ghz == 0:
        ghz = 2.0
    return cycles / ghz
