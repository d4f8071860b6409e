"""Allreduce-only jobs and the synthetic uniform-random background (CODES ``synthetic1``)."""

from __future__ import annotations

from .base import JobWorkload, WorkloadCost, allreduce_ops, packets_of
from .collectives import Program


def allreduce_cost(n_ranks: int, w, packet_size: int) -> WorkloadCost:
    """Per rank-iteration: ``count`` allreduces of ``size`` bytes (see :class:`~.base.WorkloadCost`)."""
    ar_ops, ar_steps = allreduce_ops(n_ranks, w.size)
    return WorkloadCost(ops=w.count * ar_ops, packets=w.count * ar_steps * packets_of(w.size, packet_size),
                        max_message=w.size if n_ranks > 1 else 0, message_field="size")


def uniform_random_cost(n_ranks: int, w, packet_size: int) -> WorkloadCost:
    """Per rank and message (background traffic has no iterations): one message of ``msg_size`` bytes."""
    return WorkloadCost(ops=1.0, packets=packets_of(w.msg_size, packet_size), max_message=w.msg_size,
                        message_field="msg_size")


class AllreduceJob(JobWorkload):
    """``count`` allreduces of ``size`` bytes per iteration (CODES' MPICH algorithm, see collectives)."""

    kind = "allreduce"

    def __init__(self, name: str, n_ranks: int, iterations: int, w):
        super().__init__(name, n_ranks, iterations)
        self.size = int(w.size)
        self.count = int(w.count)
        self._cache: dict[int, tuple] = {}

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        self._check(rank, iteration)
        t = self._cache.get(rank)
        if t is None:
            p = Program(rank, self.n_ranks)
            for _ in range(self.count):
                p.allreduce(self.size)
            t = self._cache[rank] = tuple(p.ops)
        return list(t)


class UniformRandomJob(JobWorkload):
    """Background traffic as CODES ``synthetic1`` (REPLAY 960-1157; docs/workloads.md §2): every rank fires at t = 0
    and then every ``interval`` ns (a fixed period, all ranks in lock-step), each time one message of ``msg_size``
    bytes to :meth:`destination`, injected straight into the network (no MPI overheads, no eager/rendezvous protocol).
    It runs until every non-background job has finished. ``ops`` is not used for it."""

    kind = "uniform_random"
    background = True

    def __init__(self, name: str, n_ranks: int, w):
        super().__init__(name, n_ranks, None)
        self.msg_size = int(w.msg_size)
        self.interval = float(w.interval)

    @property
    def destination_rule(self):
        """``"uniform"`` (:attr:`JobWorkload.destination_rule`) unless a subclass replaced :meth:`destination`."""
        return "uniform" if type(self).destination is UniformRandomJob.destination else None

    def destination(self, rank: int, k: int, rng) -> int:
        """Destination of ``rank``'s ``k``-th message: a uniform draw over the job's ranks; a draw equal to the sender
        becomes (sender+1) mod n (CODES' rule, so the next rank has twice the probability). ``rng`` is a
        ``numpy.random.Generator`` (``integers``) or a ``random.Random`` (``randrange``); ``k`` is not used by this
        rule (kept for patterns that depend on it)."""
        n = self.n_ranks
        d = int(rng.integers(n)) if hasattr(rng, "integers") else rng.randrange(n)
        if d == rank:
            d = (rank + 1) % n
        return d

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        raise TypeError(f"job {self.name!r} is background traffic ({self.kind}); use msg_size, interval and "
                        f"destination() instead of ops()")
