"""Workload generators: per-rank iteration streams of MPI point-to-point ops, as CODES' SWM skeletons produce them.

::

    from hybridsim.workloads import build_workload
    wl = build_workload(job, job_index, seed)      # job: hybridsim.scenario.Job
    wl.n_ranks, wl.iterations, wl.background, wl.kind
    wl.ops(rank, iteration) -> [op tuple, ...]     # program order, deterministic; see hybridsim.workloads.ops

Background jobs (``uniform_random`` / ``synthetic1``) have ``background = True``, ``msg_size``, ``interval`` (ns) and
``destination(rank, k, rng)`` instead of ops. Built-ins: ``milc``, ``lammps``, ``nearest_neighbor`` (alias ``nn``),
``allreduce``, ``uniform_random``; ``custom`` runs a user function (contract in :mod:`hybridsim.workloads.custom`).
``from_codes_json(path)`` maps a CODES SWM JSON file to the scenario's workload fields.

``Job.compute.delay`` (a compute phase at the start of every iteration, on top of the workload's own) becomes the
workload's ``job_compute_ns`` here, and :meth:`JobWorkload.ops <hybridsim.workloads.base.JobWorkload.ops>` puts it first
in each rank's ops as a ``COMPUTE`` op when it is > 0, so the engine must not add it again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from .base import JobWorkload, WorkloadCost, WorkloadError, cycles_to_ns
from .collectives import Program, allreduce_partners, allreduce_schedule, barrier_schedule
from .ops import (ALLREDUCE_TAG, BARRIER_TAG, COMPUTE, IRECV, ISEND, KIND_NAMES, RECV, SEND, WAITALL, OpError,
                  compute, format_op, irecv, isend, recv, send, validate_ops, waitall)

__all__ = [
    "build_workload", "estimate_cost", "WorkloadCost", "from_codes_json", "check_matching", "JobWorkload", "WorkloadError", "Program",
    "COMPUTE", "ISEND", "IRECV", "SEND", "RECV", "WAITALL", "KIND_NAMES", "ALLREDUCE_TAG", "BARRIER_TAG",
    "compute", "isend", "irecv", "send", "recv", "waitall", "allreduce", "barrier", "sendrecv", "format_op",
    "validate_ops", "OpError", "allreduce_schedule", "allreduce_partners", "barrier_schedule", "cycles_to_ns",
]


#: typical simulated time of one iteration per workload kind, ns: MILC and LAMMPS as measured on the 1,056-node
#: reference runs (DESIGN 4b), nearest-neighbour 90 us (benchmarks/RESULTS.md), uniform-random one message interval,
#: allreduce and custom rough guesses. Used to turn trace run times into iterations (:mod:`hybridsim.swf`) and for the
#: default walltime of a stream job (:meth:`hybridsim.scenario.Job.estimated_walltime`).
ITERATION_TIME_NS = {"milc": 430e3, "lammps": 1.7e6, "nearest_neighbor": 90e3, "nn": 90e3, "uniform_random": 4e3,
                     "synthetic1": 4e3, "allreduce": 20e3, "custom": 1e6}


def allreduce(rank: int, n_ranks: int, nbytes: int, first_req: int = 0) -> list[tuple]:
    """Ops of one allreduce of ``nbytes`` for ``rank`` (request ids from ``first_req``). Prefer ``Program``."""
    p = Program(rank, n_ranks)
    p._next_req = first_req
    p.allreduce(nbytes)
    return p.ops


def barrier(rank: int, n_ranks: int, first_req: int = 0) -> list[tuple]:
    """Ops of one dissemination barrier for ``rank`` (request ids from ``first_req``)."""
    p = Program(rank, n_ranks)
    p._next_req = first_req
    p.barrier()
    return p.ops


def sendrecv(dest: int, nbytes: int, source: int, tag: int, req: int) -> list[tuple]:
    """CODES' Sendrecv: Irecv(source, tag, req) + blocking Send(dest) + Wait(req)."""
    return [irecv(source, tag, req), send(dest, nbytes, tag), waitall((req,))]


def build_workload(job, job_index: int = 0, seed: int = 0, scenario=None) -> JobWorkload:
    """The :class:`JobWorkload` of a scenario job. ``job_index`` and ``seed`` are accepted for workloads that need
    randomness; the built-ins are deterministic without them (background destinations take the engine's rng).
    With ``scenario`` given and compute kernels in the job's ``compute`` section, the per-iteration compute phase is
    the node model's (``hybridsim.energy.compute_phase_ns``: delay + roofline time of the kernels on the machine)."""
    w = job.workload
    kind = w.kind
    name = job.name
    try:
        if kind == "milc":
            from .milc import MilcJob
            wl: JobWorkload = MilcJob(name, job.ranks, job.iterations, w)
        elif kind == "lammps":
            from .lammps import LammpsJob
            wl = LammpsJob(name, job.ranks, job.iterations, w)
        elif kind in ("nearest_neighbor", "nn"):
            from .nearest_neighbor import NearestNeighborJob
            wl = NearestNeighborJob(name, job.ranks, job.iterations, w)
        elif kind == "allreduce":
            from .simple import AllreduceJob
            wl = AllreduceJob(name, job.ranks, job.iterations, w)
        elif kind in ("uniform_random", "synthetic1"):
            from .simple import UniformRandomJob
            return UniformRandomJob(name, job.ranks, w)
        elif kind == "custom":
            from .custom import CustomJob
            wl = CustomJob(name, job.ranks, job.iterations, w)
        else:
            raise WorkloadError(f"job {name!r}: unknown workload kind {kind!r}")
    except WorkloadError:
        raise
    except (ValueError, AssertionError) as exc:
        raise WorkloadError(f"job {name!r} ({kind}): {exc}") from exc
    wl.job_index = job_index
    delay = getattr(getattr(job, "compute", None), "delay", 0.0) or 0.0
    if scenario is not None and getattr(job.compute, "kernels", None):
        from ..energy import compute_phase_ns

        delay = compute_phase_ns(scenario, job_index)
    wl.job_compute_ns = float(delay)
    return wl


def estimate_cost(job, packet_size: int) -> WorkloadCost | None:
    """What one rank-iteration of ``job`` (one message of a background job) costs, in closed form from its
    parameters, nothing generated (:class:`~.base.WorkloadCost`); ``None`` where it cannot be known beforehand (a
    custom workload's function). Raises :class:`WorkloadError` for parameters the workload cannot run (a LAMMPS
    problem its ranks cannot decompose), as building it would."""
    w = job.workload
    kind = w.kind
    if kind == "milc":
        from .milc import cost
    elif kind == "lammps":
        from .lammps import cost
    elif kind in ("nearest_neighbor", "nn"):
        from .nearest_neighbor import cost
    elif kind == "allreduce":
        from .simple import allreduce_cost as cost
    elif kind in ("uniform_random", "synthetic1"):
        from .simple import uniform_random_cost as cost
    else:
        return None
    return cost(job.ranks, w, packet_size)


def check_matching(wl: JobWorkload, iteration: int, ranks: Optional[range] = None) -> list[str]:
    """Global send/receive matching of one iteration: for every (source, dest, tag) the number of sends equals the
    number of receives posted. Returns a list of problems (empty = every message is matched)."""
    sends: Counter = Counter()
    recvs: Counter = Counter()
    for r in (ranks if ranks is not None else range(wl.n_ranks)):
        for op in wl.ops(r, iteration):
            k = op[0]
            if k == ISEND or k == SEND:
                sends[(r, op[1], op[3])] += 1
            elif k == IRECV or k == RECV:
                recvs[(op[1], r, op[2])] += 1
    problems = []
    for key in sorted(set(sends) | set(recvs)):
        if sends[key] != recvs[key]:
            problems.append(f"iteration {iteration}: {sends[key]} send(s) {key[0]}->{key[1]} tag {key[2]} but "
                            f"{recvs[key]} receive(s)")
    return problems


# ------------------------------------------------------------------------------------------------------ CODES JSON
def from_codes_json(path) -> tuple[str, dict[str, Any], Optional[int]]:
    """Map a CODES SWM workload JSON (``{"jobs": {"size": P, "cfg": {"app": ..., ...}}}``) to the scenario's workload
    fields: returns ``(kind, params, iterations)`` where ``params`` are the keyword fields of the matching workload
    model (without ``kind``). ``jobs.size`` is not returned: the rank count comes from the CODES workload file line.
    Raises :class:`WorkloadError` naming the file for unsupported apps or settings CODES itself aborts on."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        raise WorkloadError(f"{path}: expected a top-level object with a 'jobs' object (CODES SWM JSON)")
    cfg = jobs.get("cfg", {})
    if not isinstance(cfg, dict):
        raise WorkloadError(f"{path}: jobs.cfg must be an object")
    app = cfg.get("app") or jobs.get("app")
    if app is None:
        stem = path.stem.lower()
        app = next((a for a in ("milc", "lammps", "nearest_neighbor") if a in stem), None)
    if app is None:
        raise WorkloadError(f"{path}: jobs.cfg.app is missing (expected 'milc', 'lammps' or 'nearest_neighbor')")

    def get(key, default=None, typ=float):
        v = cfg.get(key, default)
        if v is None:
            raise WorkloadError(f"{path}: jobs.cfg.{key} is required for app {app!r}")
        try:
            return typ(v)
        except (TypeError, ValueError):
            raise WorkloadError(f"{path}: jobs.cfg.{key}: expected {typ.__name__}, got {v!r}") from None

    if "cpu_freq" not in cfg:
        raise WorkloadError(f"{path}: jobs.cfg.cpu_freq is missing; CODES' SWM glue requires it (GLUE 872-881)")
    if app == "milc":
        if cfg.get("randomize_communication_order"):
            raise WorkloadError(f"{path}: jobs.cfg.randomize_communication_order = true is nondeterministic in CODES "
                                f"(std::random_shuffle) and is not supported")
        dims = cfg.get("dimension_sizes")
        if not isinstance(dims, list) or not dims:
            raise WorkloadError(f"{path}: jobs.cfg.dimension_sizes must be a non-empty list")
        if "dimension_cnt" in cfg and int(cfg["dimension_cnt"]) != len(dims):
            raise WorkloadError(f"{path}: jobs.cfg.dimension_cnt = {cfg['dimension_cnt']} but dimension_sizes has "
                                f"{len(dims)} entries")
        params = dict(dimension_sizes=[int(d) for d in dims], msg_size=get("msg_size", 0, int),
                      compute_delay=get("compute_delay", 1, float),
                      max_dimension_distance=get("max_dimension_distance", 0, int),
                      cpu_freq=get("cpu_freq"))
        return "milc", params, get("iteration_cnt", 1, int)
    if app == "lammps":
        params = dict(num_x_replicas=get("num_x_replicas", 1, int), num_y_replicas=get("num_y_replicas", 1, int),
                      num_z_replicas=get("num_z_replicas", 1, int), router_freq=get("router_freq", 800e6),
                      cpu_freq=get("cpu_freq"), cpu_sim_speedup=get("cpu_sim_speedup", 1.0))
        return "lammps", params, get("num_time_steps", 100, int)
    if app == "nearest_neighbor":
        if get("noop_cnt", 1, int) > 0:
            raise WorkloadError(f"{path}: jobs.cfg.noop_cnt must be 0 (CODES aborts on NOOPs; default is 1)")
        if not cfg.get("synchronous", True):
            raise WorkloadError(f"{path}: jobs.cfg.synchronous = false generates no traffic in CODES (assert)")
        if cfg.get("randomize_communication_order"):
            raise WorkloadError(f"{path}: jobs.cfg.randomize_communication_order = true is nondeterministic in CODES "
                                f"and is not supported")
        dims = cfg.get("dimension_sizes")
        if not isinstance(dims, list) or not dims:
            raise WorkloadError(f"{path}: jobs.cfg.dimension_sizes must be a non-empty list")
        params = dict(dimension_sizes=[int(d) for d in dims], msg_size=get("msg_size", 0, int),
                      max_dimension_distance=get("max_dimension_distance", 0, int), compute_delay=0.0,
                      cpu_freq=get("cpu_freq"), iterations_per_sync=get("iterations_per_sync", 1, int))
        return "nearest_neighbor", params, get("iteration_cnt", 1, int)
    raise WorkloadError(f"{path}: app {app!r} is not supported (milc, lammps, nearest_neighbor)")


def workload_volumes(scenario, job_index: int, n_iterations: int, sample_ranks: int = 4) -> np.ndarray:
    """Bytes sent per iteration (mean over up to ``sample_ranks`` evenly spread ranks) from the job's workload
    definition -- known before anything is simulated."""
    import numpy as np

    job = scenario.jobs[job_index]
    wl = build_workload(job, job_index, scenario.seed, scenario=scenario)
    ranks = np.unique(np.linspace(0, job.ranks - 1, min(sample_ranks, job.ranks)).astype(int))
    vol = np.zeros(n_iterations)
    for it in range(n_iterations):
        for r in ranks:
            vol[it] += wl.bytes_sent(int(r), it)
    return vol / len(ranks)
