"""User workloads named ``module:function`` in the scenario.

Contract::

    def my_workload(rank: int, iteration: int, n_ranks: int, **params) -> Iterable[op tuple]

It is called once per (rank, iteration) and returns (or yields) that rank's ops of that iteration in program order,
built with the helpers exported by :mod:`hybridsim.workloads` (``compute``, ``isend``, ``irecv``, ``send``, ``recv``,
``waitall``), or with a :class:`~hybridsim.workloads.Program` (``p = Program(rank, n_ranks)``; ``p.isend(...)``
returns a request id; ``p.allreduce(8)``, ``p.barrier()``, ``p.sendrecv(...)`` expand the collectives as CODES does;
``return p.ops``). It must be deterministic. Request ids must be unique within the rank's iteration and every send
must have a matching receive (source, tag) on its peer in the same iteration. ``params`` are the scenario's
``workload.params``. Example (a ring shift plus an allreduce)::

    from hybridsim.workloads import Program

    def ring(rank, iteration, n_ranks, nbytes=4096):
        p = Program(rank, n_ranks)
        r = p.irecv((rank - 1) % n_ranks, tag=0)
        s = p.isend((rank + 1) % n_ranks, nbytes, tag=0)
        p.compute(1000.0)
        p.waitall([r, s])
        p.allreduce(8)
        return p.ops
"""

from __future__ import annotations

import inspect

from hybridsim_common import plugins
from .base import JobWorkload, WorkloadError
from .ops import OpError, validate_ops


def resolve_function(spec: str, job_name: str = "?"):
    if ":" not in spec:
        raise WorkloadError(f"job {job_name!r}: workload.function must be 'module:function', got {spec!r}")
    mod_name, fn_name = spec.split(":", 1)
    try:
        mod = plugins.import_module(mod_name)  # installed or --plugin-path folders only (hybridsim_common.plugins)
    except Exception as exc:  # ImportError, or an error raised while importing the user's module
        raise WorkloadError(f"job {job_name!r}: cannot import module {mod_name!r} of workload.function {spec!r}: "
                            f"{type(exc).__name__}: {exc}") from exc
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise WorkloadError(f"job {job_name!r}: module {mod_name!r} has no attribute {fn_name!r} "
                            f"(workload.function {spec!r})")
    if not callable(fn):
        raise WorkloadError(f"job {job_name!r}: {spec!r} is not callable")
    return fn


class CustomJob(JobWorkload):
    kind = "custom"

    def __init__(self, name: str, n_ranks: int, iterations: int, w, validate: bool = True):
        super().__init__(name, n_ranks, iterations)
        self.spec = w.function
        self.params = dict(w.params)
        self.fn = resolve_function(w.function, name)
        self.validate = validate
        try:
            inspect.signature(self.fn).bind(0, 0, n_ranks, **self.params)
        except TypeError as exc:
            raise WorkloadError(f"job {name!r}: {self.spec} cannot be called as fn(rank, iteration, n_ranks, "
                                f"**params) with params {sorted(self.params)}: {exc}") from None

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        self._check(rank, iteration)
        try:
            out = self.fn(rank, iteration, self.n_ranks, **self.params)
            ops = list(out) if out is not None else []
        except Exception as exc:
            raise WorkloadError(f"job {self.name!r}: workload function {self.spec} failed for rank {rank}, "
                                f"iteration {iteration}: {type(exc).__name__}: {exc}") from exc
        if self.validate:
            try:
                validate_ops(ops, self.n_ranks)
            except OpError as exc:
                raise WorkloadError(f"job {self.name!r}: workload function {self.spec}, rank {rank}, iteration "
                                    f"{iteration}: invalid {exc}") from None
        return ops
