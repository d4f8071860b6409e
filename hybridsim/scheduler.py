"""Job streams: a batch scheduler (queue policy + allocation policy), a schedule-only dry run, and stream metrics.

The scheduler is pure logic, driven by whoever owns the clock (the engine, or :func:`dry_run` with known run times)::

    sched = Scheduler(shape, queue="easy", allocation="random", seed=1)
    sched.submit(job_id, size, arrival, walltime)     # every job, up front
    at each time t the driver reaches (t = sched.next_event_time() or a job's end):
        sched.release(job_id, t)                      # for each job that ended at t, first
        for job_id, terminals in sched.next_decisions(t):
            start job_id at t on terminals            # terminals[r] = terminal of rank r

Decisions change only when a job arrives or one ends, so a driver needs no other wake-ups.

Queue policies. ``fcfs`` starts jobs strictly in arrival order (ties: submission order); the first job that does not
fit blocks every later one. ``easy`` is EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001): the head of the
queue gets a reservation at the *shadow time*, the earliest time enough terminals are free if every running job ends
at its start plus its ``walltime``; a later job may start now only if it fits in the free terminals and either ends
(by its walltime) no later than the shadow time, or uses only the *extra* terminals the head will not need then. So a
backfilled job never delays the head's reservation, provided jobs end within their walltime (a job that overruns
its walltime is treated as ending any moment: its estimated end is ``max(start + walltime, now)``).

Allocation policies are :mod:`hybridsim.placement`'s (:func:`~hybridsim.placement.terminal_order`): one order of all
terminals is drawn once from ``numpy.random.default_rng(seed)``; a job gets the first ``size`` *free* terminals in
that order (``contiguous``: the lowest free ids). With every job at arrival 0 and all of them fitting, the scheduler
therefore allocates exactly what ``placement: {policy: P, seed: S}`` places today.

A job with ``walltime = inf`` (a background job that runs until the others end) holds its terminals for good; a job
that needs more terminals than those left is an error, not a silent wait.

Metrics (:func:`stream_metrics`): wait = start - arrival; run time = end - start; bounded slowdown
``max(1, (wait + run) / max(run, tau))`` with a floor ``tau`` that keeps very short jobs from dominating (the
convention: 10 s of trace time, scaled with the trace, see :mod:`hybridsim.swf`); makespan = last end - first arrival;
utilisation = sum(size x run time) / (terminals x makespan). Jobs that never end are left out of the metrics.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

import numpy as np

from .placement import ORDER_POLICIES, terminal_order
from .topology import DragonflyShape

QUEUE_POLICIES = ("fcfs", "easy")
ALLOCATION_POLICIES = ORDER_POLICIES


class SchedulerError(ValueError):
    """A job cannot be scheduled (bad size, arrival or walltime; larger than the terminals it could ever get)."""


@dataclass(frozen=True, order=True)
class _Waiting:
    arrival: float
    seq: int
    job_id: Hashable = field(compare=False)
    size: int = field(compare=False)
    walltime: float = field(compare=False)


@dataclass(frozen=True)
class _Running:
    size: int
    start: float
    walltime: float
    terminals: np.ndarray

    def estimated_end(self, now: float) -> float:
        return max(self.start + self.walltime, now)


class Scheduler:
    """Queue + allocation over the terminals of a Dragonfly of ``shape``.

    Args:
        shape: the Dragonfly (:class:`~hybridsim.topology.DragonflyShape`; a ``Dragonfly`` passes ``.shape``).
        queue: ``fcfs`` or ``easy``.
        allocation: ``contiguous``, ``random``, ``random-router`` or ``random-group``.
        seed: seeds the allocation order (the scenario's placement seed convention).

    Times are plain floats in one unit chosen by the driver (ns in the engine); they must not go backwards.
    """

    def __init__(self, shape: DragonflyShape, queue: str = "fcfs", allocation: str = "contiguous", seed: int = 0):
        if queue not in QUEUE_POLICIES:
            raise SchedulerError(f"unknown queue policy {queue!r} (valid: {', '.join(QUEUE_POLICIES)})")
        if allocation not in ALLOCATION_POLICIES:
            raise SchedulerError(f"unknown allocation policy {allocation!r} (valid: {', '.join(ALLOCATION_POLICIES)})")
        self.queue, self.allocation, self.seed = queue, allocation, seed
        self._order = terminal_order(allocation, shape, np.random.default_rng(seed))
        self.n_terminals = len(self._order)
        self._free = np.ones(self.n_terminals, dtype=bool)  # indexed by terminal id
        self._future: list[_Waiting] = []  # heap of jobs not yet arrived, by (arrival, submission)
        self._queue: list[_Waiting] = []   # arrived and not started, in (arrival, submission) order
        self._running: dict[Hashable, _Running] = {}
        self._known: set[Hashable] = set()
        self._now = -math.inf
        self._seq = 0
        self.reservation: tuple[Hashable, float] | None = None
        """``(job_id, shadow time)`` of the queue head at the last decision that left it waiting (``easy`` only)."""

    # ------------------------------------------------------------------------------------------------ driver API
    def submit(self, job_id: Hashable, size: int, arrival: float = 0.0, walltime: float = math.inf) -> None:
        """Announce a job: ``size`` terminals (one per rank), arriving at ``arrival``, estimated to run at most
        ``walltime`` (``inf``: a job that runs until the others end; ``easy`` backfills it only on extra terminals,
        and while it runs the terminals it holds are never counted on)."""
        if job_id in self._known:
            raise SchedulerError(f"job {job_id!r} submitted twice")
        if isinstance(size, bool) or int(size) != size or not 1 <= size <= self.n_terminals:
            raise SchedulerError(f"job {job_id!r}: size {size} outside 1..{self.n_terminals} (the machine's terminals)")
        if not math.isfinite(arrival) or arrival < 0:
            raise SchedulerError(f"job {job_id!r}: arrival {arrival} is not a finite time >= 0")
        if math.isnan(walltime) or walltime < 0:
            raise SchedulerError(f"job {job_id!r}: walltime {walltime} is not a duration >= 0")
        if arrival < self._now:
            raise SchedulerError(f"job {job_id!r}: arrival {arrival} is before the scheduler's time {self._now}")
        self._known.add(job_id)
        heapq.heappush(self._future, _Waiting(float(arrival), self._seq, job_id, int(size), float(walltime)))
        self._seq += 1

    def next_decisions(self, now: float) -> list[tuple[Hashable, np.ndarray]]:
        """The jobs that start at ``now`` and their terminals (rank order), in start order. Call after releasing
        every job that ended at ``now``."""
        self._advance(now)
        while self._future and self._future[0].arrival <= now:
            self._queue.append(heapq.heappop(self._future))
        queue = self._queue
        started: list[tuple[Hashable, np.ndarray]] = []
        free = int(self._free.sum())
        n_head = 0
        while n_head < len(queue) and queue[n_head].size <= free:
            free -= queue[n_head].size
            started.append(self._start(queue[n_head], now))
            n_head += 1
        del queue[:n_head]
        self.reservation = None
        if queue:
            self._check_can_ever_fit(queue[0])
            if self.queue == "easy":
                shadow, extra = self._shadow(queue[0], now, free)
                self.reservation = (queue[0].job_id, shadow)
                started += self._backfill(now, free, shadow, extra)
        return started

    def release(self, job_id: Hashable, now: float) -> np.ndarray:
        """Job ``job_id`` ended at ``now``: free its terminals (returned)."""
        self._advance(now)
        try:
            run = self._running.pop(job_id)
        except KeyError:
            raise SchedulerError(f"job {job_id!r} is not running") from None
        self._free[run.terminals] = True
        return run.terminals

    def next_event_time(self) -> float | None:
        """When the next job not yet seen arrives (not before the last time seen; ``None``: no job still to arrive).
        Job ends are the driver's."""
        return max(self._future[0].arrival, self._now) if self._future else None

    # ------------------------------------------------------------------------------------------------ state
    @property
    def running(self) -> dict[Hashable, np.ndarray]:
        """Running jobs and their terminals."""
        return {j: r.terminals for j, r in self._running.items()}

    @property
    def waiting(self) -> list[Hashable]:
        """Jobs submitted and not started (arrived or not), in queue order."""
        return [w.job_id for w in self._queue + sorted(self._future)]

    # ------------------------------------------------------------------------------------------------ internals
    def _advance(self, now: float) -> None:
        if now < self._now:
            raise SchedulerError(f"time went backwards: {now} after {self._now}")
        self._now = now

    def _start(self, w: _Waiting, now: float) -> tuple[Hashable, np.ndarray]:
        order_free = self._order[self._free[self._order]]
        terminals = np.array(order_free[:w.size], dtype=np.int64)
        self._free[terminals] = False
        self._running[w.job_id] = _Running(w.size, now, w.walltime, terminals)
        return w.job_id, terminals

    def _backfill(self, now: float, free: int, shadow: float, extra: int) -> list[tuple[Hashable, np.ndarray]]:
        """EASY: start queued jobs behind the head that fit now and end by the shadow time or use only extra
        terminals."""
        started, kept = [], [self._queue[0]]
        for w in self._queue[1:]:
            ends_in_time = now + w.walltime <= shadow
            if w.size <= free and (ends_in_time or w.size <= extra):
                free -= w.size
                if not ends_in_time:
                    extra -= w.size
                started.append(self._start(w, now))
            else:
                kept.append(w)
        self._queue[:] = kept
        return started

    def _check_can_ever_fit(self, head: _Waiting) -> None:
        forever = sum(r.size for r in self._running.values() if math.isinf(r.walltime))
        if head.size > self.n_terminals - forever:
            raise SchedulerError(
                f"job {head.job_id!r} needs {head.size} terminals but only {self.n_terminals - forever} of "
                f"{self.n_terminals} are not held by jobs that never end")

    def _shadow(self, head: _Waiting, now: float, free: int) -> tuple[float, int]:
        """Shadow time of ``head`` and the terminals to spare then (the running jobs end by their walltimes)."""
        avail = free
        for end, size in sorted((r.estimated_end(now), r.size) for r in self._running.values()):
            avail += size
            if avail >= head.size:
                return end, avail - head.size
        raise AssertionError("unreachable: _check_can_ever_fit passed")


# ---------------------------------------------------------------------------------------------------------- dry run
@dataclass(frozen=True)
class StreamJob:
    """One job of a stream for :func:`dry_run`: what the scheduler sees plus the run time it will actually take
    (``inf``: never ends)."""

    job_id: Hashable
    size: int
    arrival: float
    walltime: float
    run_time: float


@dataclass(frozen=True)
class JobOutcome:
    """When a job ran and where; ``end`` is ``inf`` for a job that never ends."""

    job_id: Hashable
    size: int
    arrival: float
    walltime: float
    start: float
    end: float
    terminals: np.ndarray

    @property
    def wait(self) -> float:
        return self.start - self.arrival

    @property
    def run_time(self) -> float:
        return self.end - self.start

    def row(self, tau: float) -> dict:
        """The per-job result record: arrival, start, end, wait, run time, bounded slowdown (floor ``tau``; NaN for
        a job that never ends), size and terminals."""
        bsld = bounded_slowdown(self.wait, self.run_time, tau) if math.isfinite(self.end) else math.nan
        return {"job": self.job_id, "arrival": self.arrival, "start": self.start, "end": self.end, "wait": self.wait,
                "run_time": self.run_time, "bounded_slowdown": bsld, "size": self.size,
                "terminals": self.terminals.tolist()}


def dry_run(jobs: Sequence[StreamJob], shape: DragonflyShape, queue: str = "fcfs",
            allocation: str = "contiguous", seed: int = 0) -> list[JobOutcome]:
    """Schedule ``jobs`` with known run times, without simulating them: the start, end and terminals of each job
    (in the order of ``jobs``), exactly as an engine driving :class:`Scheduler` would see them if each job took its
    ``run_time``."""
    sched = Scheduler(shape, queue, allocation, seed)
    by_id = {}
    for j in jobs:
        if not (j.run_time >= 0):
            raise SchedulerError(f"job {j.job_id!r}: run time {j.run_time} is not a duration >= 0")
        sched.submit(j.job_id, j.size, j.arrival, j.walltime)
        by_id[j.job_id] = j
    ends: list[tuple[float, int, Hashable]] = []
    started: dict[Hashable, tuple[float, np.ndarray]] = {}
    seq = 0
    while True:
        candidates = [t for t in (sched.next_event_time(), ends[0][0] if ends else None) if t is not None]
        if not candidates:
            break
        now = min(candidates)
        while ends and ends[0][0] == now:
            sched.release(heapq.heappop(ends)[2], now)
        for job_id, terminals in sched.next_decisions(now):
            started[job_id] = (now, terminals)
            end = now + by_id[job_id].run_time
            if math.isfinite(end):
                heapq.heappush(ends, (end, seq, job_id))
                seq += 1
    never = [j.job_id for j in jobs if j.job_id not in started]
    if never:  # only possible if a never-ending job blocks the queue, which next_decisions reports first
        raise SchedulerError(f"jobs never started: {never}")
    out = []
    for j in jobs:
        start, terminals = started[j.job_id]
        out.append(JobOutcome(j.job_id, j.size, j.arrival, j.walltime, start, start + j.run_time, terminals))
    return out


# ---------------------------------------------------------------------------------------------------------- metrics
def bounded_slowdown(wait, run_time, tau: float):
    """``max(1, (wait + run) / max(run, tau))``; works on scalars and numpy arrays."""
    if not tau > 0:
        raise ValueError(f"bounded-slowdown floor tau must be > 0, got {tau}")
    wait, run_time = np.asarray(wait, dtype=float), np.asarray(run_time, dtype=float)
    out = np.maximum(1.0, (wait + run_time) / np.maximum(run_time, tau))
    return float(out) if out.ndim == 0 else out


def stream_metrics(outcomes: Iterable[JobOutcome], n_terminals: int, tau: float) -> dict[str, float]:
    """Makespan, mean wait, mean bounded slowdown (floor ``tau``) and utilisation of the jobs that ended."""
    done = [o for o in outcomes if math.isfinite(o.end)]
    if not done:
        return {"jobs": 0, "makespan": 0.0, "mean_wait": 0.0, "mean_bounded_slowdown": 0.0, "utilisation": 0.0}
    arrival = np.array([o.arrival for o in done])
    start = np.array([o.start for o in done])
    end = np.array([o.end for o in done])
    size = np.array([o.size for o in done], dtype=float)
    wait, run = start - arrival, end - start
    makespan = float(end.max() - arrival.min())
    util = float((size * run).sum() / (n_terminals * makespan)) if makespan > 0 else 0.0
    return {"jobs": len(done), "makespan": makespan, "mean_wait": float(wait.mean()),
            "mean_bounded_slowdown": float(np.mean(bounded_slowdown(wait, run, tau))), "utilisation": util}
