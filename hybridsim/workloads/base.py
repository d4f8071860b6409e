"""The object the engine drives: one per job."""

from __future__ import annotations

from typing import Optional

from .ops import COMPUTE


class WorkloadError(ValueError):
    """A workload cannot be built or produced an invalid op; the message names the job."""


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
