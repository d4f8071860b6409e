"""Job streams: a batch scheduler (queue policy + allocation policy), a schedule-only dry run, and stream metrics.

The scheduler is pure logic, driven by whoever owns the clock (the engine, or :func:`dry_run` with known run times)::

    sched = Scheduler(shape, queue="easy", allocation="random", seed=1)
    sched.submit(job_id, size, arrival, walltime)     # every job, up front
    at each time t the driver reaches (t = sched.next_event_time() or a job's end):
        sched.release(job_id, t)                      # for each job that ended at t, first
        for job_id, terminals in sched.next_decisions(t):
            start job_id at t on terminals            # terminals[r] = terminal of rank r

Decisions change only when a job arrives or one ends, so a driver needs no other wake-ups.

Queue policies (:mod:`hybridsim.queues`; more through the ``hybridsim.queues`` entry points). ``fcfs`` starts jobs
strictly in arrival order (ties: submission order); the first job that does not fit blocks every later one. ``easy``
is EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001): the head of the queue gets a reservation at the *shadow
time*, the earliest time enough terminals are free if every running job ends at its start plus its ``walltime``; a
later job may start now only if it fits in the free terminals and either ends (by its walltime) no later than the
shadow time, or uses only the *extra* terminals the head will not need then. So a backfilled job never delays the
head's reservation, provided jobs end within their walltime (a job that overruns its walltime is treated as ending
any moment: its estimated end is ``max(start + walltime, now)``). ``conservative`` gives *every* waiting job a
reservation, in queue order, in the profile of free terminals; a job starts when its reservation is now, so no job
delays any earlier one. A policy may also reorder the queue (a priority fixed at arrival; e.g. ``sjf``).

Allocation policies are :mod:`hybridsim.placement`'s (:func:`~hybridsim.placement.terminal_order`): one order of all
terminals is drawn once from ``numpy.random.default_rng(seed)``; a job gets the first ``size`` *free* terminals in
that order (``contiguous``: the lowest free ids). With every job at arrival 0 and all of them fitting, the scheduler
therefore allocates exactly what ``placement: {policy: P, seed: S}`` places today.

A job with ``walltime = inf`` (a background job that runs until the others end) holds its terminals for good; a job
that needs more terminals than those left is an error, not a silent wait.

The dry run (:func:`dry_run_times`) also takes disjoint partitions (one scheduler each, node ids numbered partition
after partition), dependencies (a job submitted once the job it waits for has ended, plus a think time), node
failures (:meth:`Scheduler.node_down`: the job on the node is killed and requeued, the node held like a running job
until its repair) and each job's node ids as Batsim's interval sets.

Metrics (:func:`stream_metrics`): wait = start - arrival; run time = end - start; bounded slowdown
``max(1, (wait + run) / max(run, tau))`` with a floor ``tau`` that keeps very short jobs from dominating (the
convention: 10 s of trace time, scaled with the trace, see :mod:`hybridsim.swf`); makespan = last end - first arrival;
utilisation = sum(size x run time) / (terminals x makespan); throughput = jobs / makespan; mean, median, 95th
percentile and maximum of wait, response time (end - arrival) and bounded slowdown, overall and per power-of-two size
class. Jobs that never end are left out of the metrics. :func:`dry_run` can kill a job at its walltime.

Why one module of this size: the queue disciplines (FCFS, EASY, conservative) and the dry run share one free-node
profile and one reservation walk; split, that state would cross files.

Over 600 lines: the batch scheduler's event loop and its allocation orders, dependencies, partitions and failures
share the queue state they change.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from typing import Hashable, Iterable, Iterator, Sequence

import numpy as np

from .placement import ORDER_POLICIES, terminal_order
from .queues import QueuePolicy, QueuePolicyError, UsageHistory, queue_policy
from hybridsim_common.topology import DragonflyShape

#: the built-in queue policies (more through the ``hybridsim.queues`` entry-point group, see :mod:`hybridsim.queues`)
QUEUE_POLICIES = ("fcfs", "easy", "conservative")
ALLOCATION_POLICIES = ORDER_POLICIES


class SchedulerError(ValueError):
    """A job cannot be scheduled (bad size, arrival or walltime; larger than the terminals it could ever get)."""


class _Waiting:
    """A submitted job not yet started; ``alive`` goes False when it starts (the queue drops it lazily)."""

    __slots__ = ("arrival", "seq", "job_id", "size", "walltime", "alive", "key", "reserved", "user", "group",
                 "queue", "partition", "usage")

    def __init__(self, arrival: float, seq: int, job_id: Hashable, size: int, walltime: float, user: int = -1,
                 group: int = -1, queue: int = -1, partition: int = -1, usage: UsageHistory | None = None):
        self.arrival, self.seq, self.job_id, self.size, self.walltime = arrival, seq, job_id, size, walltime
        self.user, self.group, self.queue, self.partition, self.usage = user, group, queue, partition, usage
        self.alive = True
        self.key: tuple = ()                 # its place in the queue (set when it arrives)
        self.reserved: float | None = None   # conservative: its reservation in the kept pass


class _Queue:
    """Arrived jobs in service order -- ``(policy key, arrival, submission)`` ascending. Starting a job only marks it
    (O(1)); dead entries are skipped and compacted away once they are the majority, so a queue of 10^6 jobs costs
    no more per start than one of ten."""

    def __init__(self, track_walltimes: bool = False):
        self._track = track_walltimes  # conservative backfilling asks for the shortest walltime per size
        self._items: list[_Waiting] = []
        self._keys: list[tuple] = []
        self._head = 0           # items before it are all dead
        self._alive = 0
        self._sizes: dict[int, int] = {}
        self._walltimes: dict[int, list[tuple[float, int, _Waiting]]] = {}  # per size: a heap, dead entries lazy

    def __len__(self) -> int:
        return self._alive

    def push(self, key: tuple, w: _Waiting) -> None:
        w.key = key
        if not self._keys or key >= self._keys[-1]:  # FCFS and most arrivals: already in order
            self._items.append(w)
            self._keys.append(key)
        else:
            i = bisect_right(self._keys, key, lo=self._head)
            self._keys.insert(i, key)
            self._items.insert(i, w)
        self._alive += 1
        self._sizes[w.size] = self._sizes.get(w.size, 0) + 1
        if self._track:
            heapq.heappush(self._walltimes.setdefault(w.size, []), (w.walltime, w.seq, w))

    def first(self) -> _Waiting:
        items = self._items
        while not items[self._head].alive:
            self._head += 1
        return items[self._head]

    def __iter__(self) -> Iterator[_Waiting]:
        """Alive jobs in order; jobs may be removed while iterating."""
        items = self._items
        for i in range(self._head, len(items)):
            if items[i].alive:
                yield items[i]

    def after(self, key: tuple | None) -> Iterator[_Waiting]:
        """Alive jobs placed after ``key`` (all of them for ``None``), in order; jobs may be removed meanwhile."""
        items = self._items
        lo = self._head if key is None else max(self._head, bisect_right(self._keys, key, lo=self._head))
        for i in range(lo, len(items)):
            if items[i].alive:
                yield items[i]

    def remove(self, w: _Waiting) -> None:
        w.alive = False
        self._alive -= 1
        n = self._sizes[w.size] - 1
        if n:
            self._sizes[w.size] = n
        else:
            del self._sizes[w.size]

    def min_size(self) -> int:
        return min(self._sizes) if self._sizes else 0

    def shortest_by_size(self) -> list[tuple[int, float]]:
        """``(size, shortest walltime)`` of the waiting jobs, one per size present, largest size first."""
        out = []
        for size in sorted(self._sizes, reverse=True):
            h = self._walltimes[size]
            while not h[0][2].alive:
                heapq.heappop(h)
            out.append((size, h[0][0]))
        return out

    def compact(self) -> None:
        dead = len(self._items) - self._alive
        if dead > 1024 and dead > self._alive:
            keep = [i for i, w in enumerate(self._items) if w.alive]
            self._items = [self._items[i] for i in keep]
            self._keys = [self._keys[i] for i in keep]
            self._head = 0
            if self._track:
                self._walltimes = {size: [e for e in h if e[2].alive] for size, h in self._walltimes.items()}
                for h in self._walltimes.values():
                    heapq.heapify(h)


class _Running:
    """A running job; ``key`` = ``(start + walltime, start order, size)``, its place in the sorted estimated ends."""

    __slots__ = ("size", "start", "walltime", "terminals", "key", "user", "group")

    def __init__(self, size: int, start: float, walltime: float, terminals: np.ndarray, key: tuple, user: int = -1,
                 group: int = -1):
        self.size, self.start, self.walltime, self.terminals, self.key = size, start, walltime, terminals, key
        self.user, self.group = user, group


class Scheduler:
    """Queue + allocation over the terminals of a Dragonfly of ``shape``.

    Args:
        shape: the Dragonfly (:class:`~hybridsim_common.topology.DragonflyShape`; a ``Dragonfly`` passes ``.shape``), or a
            plain number of nodes (no topology: ``contiguous`` or ``random`` allocation only).
        queue: a queue policy name (``fcfs``, ``easy``, ``conservative``, or one of the ``hybridsim.queues`` entry
            points), ``module:Class``, or a :class:`~hybridsim.queues.QueuePolicy`.
        allocation: ``contiguous``, ``random``, ``random-router`` or ``random-group``.
        seed: seeds the allocation order (the scenario's placement seed convention).

    Times are plain floats in one unit chosen by the driver (ns in the engine); they must not go backwards.
    """

    def __init__(self, shape: DragonflyShape | int, queue: str | QueuePolicy = "fcfs", allocation: str = "contiguous",
                 seed: int = 0):
        try:
            self.policy = queue_policy(queue)
        except QueuePolicyError as exc:
            raise SchedulerError(str(exc)) from None
        if allocation not in ALLOCATION_POLICIES:
            raise SchedulerError(f"unknown allocation policy {allocation!r} (valid: {', '.join(ALLOCATION_POLICIES)})")
        self.queue = queue if isinstance(queue, str) else self.policy.name
        self.allocation, self.seed = allocation, seed
        rng = np.random.default_rng(seed)
        if isinstance(shape, DragonflyShape):
            self._order = terminal_order(allocation, shape, rng)
        elif isinstance(shape, (int, np.integer)) and not isinstance(shape, bool) and shape >= 1:
            if allocation not in ("contiguous", "random"):
                raise SchedulerError(f"allocation {allocation!r} needs a Dragonfly, not a plain node count")
            self._order = np.arange(int(shape)) if allocation == "contiguous" else rng.permutation(int(shape))
        else:
            raise SchedulerError(f"expected a Dragonfly shape or a node count >= 1, got {shape!r}")
        self.n_terminals = len(self._order)
        self._free = np.ones(self.n_terminals, dtype=bool)  # indexed by terminal id
        self._n_free = self.n_terminals
        self._future: list[tuple[float, int, _Waiting]] = []  # heap of jobs not yet arrived: (arrival, seq, job)
        self._queue = _Queue(self.policy.backfill == "conservative")  # arrived, not started, in service order
        self._running: dict[Hashable, _Running] = {}
        self._ends: list[tuple[float, int, int]] = []  # the running jobs' keys, sorted: estimated end first
        self._n_started = 0
        self._forever = 0                  # terminals held by running jobs that never end (walltime inf)
        self._known: set[Hashable] = set()
        self._now = -math.inf
        self._seq = 0
        self._pass: _Pass | None = None    # conservative: the pass kept between decisions
        self.usage = UsageHistory(self.policy.half_life)
        """Node-time used per user and per group by the jobs that ended (the queue policy's job view carries it)."""
        self.reservation: tuple[Hashable, float] | None = None
        """``(job_id, reserved start)`` of the queue head at the last decision that left it waiting (``easy``: the
        shadow time; ``conservative``: its reservation; ``None`` without backfilling)."""

    # ------------------------------------------------------------------------------------------------ driver API
    def submit(self, job_id: Hashable, size: int, arrival: float = 0.0, walltime: float = math.inf, *,
               user: int = -1, group: int = -1, queue: int = -1, partition: int = -1) -> None:
        """Announce a job: ``size`` terminals (one per rank), arriving at ``arrival``, estimated to run at most
        ``walltime`` (``inf``: a job that runs until the others end; ``easy`` backfills it only on extra terminals,
        and while it runs the terminals it holds are never counted on). ``user``, ``group``, ``queue`` and
        ``partition`` (-1: unknown) are what a queue policy may read, with :attr:`usage`."""
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
        w = _Waiting(float(arrival), self._seq, job_id, int(size), float(walltime), int(user), int(group), int(queue),
                     int(partition), self.usage)
        heapq.heappush(self._future, (w.arrival, w.seq, w))
        self._seq += 1

    def next_decisions(self, now: float) -> list[tuple[Hashable, np.ndarray]]:
        """The jobs that start at ``now`` and their terminals (rank order), in start order. Call after releasing
        every job that ended at ``now``."""
        self._advance(now)
        queue, key = self._queue, self.policy.key
        p = self._pass
        while self._future and self._future[0][0] <= now:
            w = heapq.heappop(self._future)[2]
            k = (*key(w), w.arrival, w.seq)
            if p is not None and p.last_key is not None and k < p.last_key:
                p.stale = True  # ahead of a job the kept pass reserved
            queue.push(k, w)
        started: list[tuple[Hashable, np.ndarray]] = []
        while queue and queue.first().size <= self._n_free:  # the head of the queue, as long as it fits
            started.append(self._start(queue.first(), now))
            if p is not None:
                p.stale = True
        self.reservation = None
        if queue:
            self._check_can_ever_fit(queue.first())
            if self.policy.backfill == "easy":
                started += self._easy(now)
            elif self.policy.backfill == "conservative":
                started += self._conservative(now)
        queue.compact()
        return started

    def release(self, job_id: Hashable, now: float) -> np.ndarray:
        """Job ``job_id`` ended at ``now`` (or was killed): free its terminals (returned)."""
        self._advance(now)
        try:
            run = self._running.pop(job_id)
        except KeyError:
            raise SchedulerError(f"job {job_id!r} is not running") from None
        self._known.discard(job_id)  # only jobs not ended are remembered: memory stays with the live jobs
        self._pass = None
        self._free[run.terminals] = True
        self._n_free += run.size
        del self._ends[bisect_left(self._ends, run.key)]
        if math.isinf(run.walltime):
            self._forever -= run.size
        if run.user is not None:  # not a terminal that was down
            self.usage.charge(run.user, run.group, run.size * (now - run.start), now)
        return run.terminals

    def node_down(self, terminal: int, now: float, until: float) -> Hashable | None:
        """Terminal ``terminal`` fails at ``now`` and is back at ``until``. If a job runs on it, nothing changes and
        the job's id is returned: the driver kills it (:meth:`release`), requeues it if it wants, and calls again.
        Otherwise the terminal is held like a running job that ends at ``until`` (backfilling counts on it from then
        on) until :meth:`node_up`; a terminal already down stays down. Returns ``None`` then."""
        self._advance(now)
        if not 0 <= terminal < self.n_terminals:
            raise SchedulerError(f"terminal {terminal} outside 0..{self.n_terminals - 1}")
        if not until > now:
            raise SchedulerError(f"terminal {terminal}: repair time {until} is not after the failure at {now}")
        down = ("node down", int(terminal))
        if down in self._running:
            return None
        for job_id, run in self._running.items():
            if not self._free[terminal] and terminal in run.terminals:
                return job_id  # the caller releases it, then calls again
        key = (until, self._n_started, 1)
        self._n_started += 1
        insort(self._ends, key)
        self._running[down] = _Running(1, now, until - now, np.array([terminal], dtype=np.int64), key, None, None)
        self._free[terminal] = False
        self._n_free -= 1
        self._pass = None
        return None

    def node_up(self, terminal: int, now: float) -> None:
        """Terminal ``terminal`` is repaired at ``now`` (after :meth:`node_down`)."""
        self.release(("node down", int(terminal)), now)

    def next_event_time(self) -> float | None:
        """When the next job not yet seen arrives (not before the last time seen; ``None``: no job still to arrive).
        Job ends are the driver's."""
        return max(self._future[0][0], self._now) if self._future else None

    # ------------------------------------------------------------------------------------------------ state
    @property
    def running(self) -> dict[Hashable, np.ndarray]:
        """Running jobs and their terminals."""
        return {j: r.terminals for j, r in self._running.items()}

    @property
    def waiting(self) -> list[Hashable]:
        """Jobs submitted and not started (arrived or not), in queue order."""
        return [w.job_id for w in list(self._queue)] + [f[2].job_id for f in sorted(self._future)]

    # ------------------------------------------------------------------------------------------------ internals
    def _advance(self, now: float) -> None:
        if now < self._now:
            raise SchedulerError(f"time went backwards: {now} after {self._now}")
        self._now = now

    def _start(self, w: _Waiting, now: float) -> tuple[Hashable, np.ndarray]:
        self._queue.remove(w)
        order_free = self._order[self._free[self._order]]
        terminals = np.array(order_free[:w.size], dtype=np.int64)
        self._free[terminals] = False
        self._n_free -= w.size
        if math.isinf(w.walltime):
            self._forever += w.size
        key = (now + w.walltime, self._n_started, w.size)
        self._n_started += 1
        insort(self._ends, key)
        self._running[w.job_id] = _Running(w.size, now, w.walltime, terminals, key, w.user, w.group)
        return w.job_id, terminals

    def _easy(self, now: float) -> list[tuple[Hashable, np.ndarray]]:
        """EASY: the head gets the shadow time; start queued jobs behind it that fit now and end by the shadow
        time or use only extra terminals. Stops as soon as no queued job can fit the free terminals."""
        head = self._queue.first()
        shadow, extra = self._shadow(head, now)
        self.reservation = (head.job_id, shadow)
        started = []
        smallest = self._queue.min_size()
        items = self._queue._items  # inlined iteration of the queue, for performance: an overloaded queue of 10^4
        for i in range(self._queue._head, len(items)):  # jobs is walked at every decision
            if self._n_free < smallest:
                break
            w = items[i]
            if not w.alive or w is head or w.size > self._n_free:
                continue
            ends_in_time = now + w.walltime <= shadow
            if ends_in_time or w.size <= extra:
                if not ends_in_time:
                    extra -= w.size
                started.append(self._start(w, now))
        return started

    def _conservative(self, now: float) -> list[tuple[Hashable, np.ndarray]]:
        """Conservative backfilling (Mu'alem & Feitelson 2001): every queued job, in queue order, gets the earliest
        reservation that fits the free-terminal profile (running jobs end by their walltimes, earlier jobs'
        reservations taken out); a job whose reservation is ``now`` starts. The reservations are those of a rebuild
        from scratch at every decision, so a job never starts later than a reservation it was given (jobs ending
        within their walltime).

        Incremental (:class:`_Pass`): the pass stops once no queued job can fit the terminals free now (later jobs
        cannot start, and their reservations cannot move an earlier job's), and it is *kept* between decisions.
        While no job has ended and no running job has outlived its walltime, the profile from ``now`` on is the one
        the kept pass saw (no breakpoint lies between the two decisions), so every reservation it made is still the
        one a rebuild would make: the pass resumes after the last job it reserved, and an arrival costs one
        reservation instead of a rebuild. A job end, an overrun, or an arrival ahead of a reserved job (a policy
        key) rebuilds it."""
        p = self._pass
        if p is None or not p.valid_at(now):
            p = self._pass = _Pass(now, self._n_free, self._ends)
        else:
            p.profile.advance(now)
        started = []
        queue = self._queue
        smallest = queue.min_size()
        head = queue.first()
        prof = p.profile
        shortest = queue.shortest_by_size()  # once a decision: jobs started below only make the test looser
        neg_sizes = [-size for size, _ in shortest]
        reach = -math.inf  # a reservation from here on cannot change the last "some job fits" answer
        for w in queue.after(p.last_key):
            if self._n_free < smallest:
                break
            if w is not head and reach is not None and (reach == -math.inf or last_t < reach):
                reach = prof.any_fits(shortest, neg_sizes)
                if reach is None:
                    break
            t = last_t = prof.earliest_fit(w.size, w.walltime)
            w.reserved = t
            p.last_key = w.key
            if t == now:
                started.append(self._start(w, now))
            prof.reserve(t, w.size, w.walltime)
        if head.alive and head.reserved is not None and p.last_key is not None and head.key <= p.last_key:
            self.reservation = (head.job_id, head.reserved)
        return started

    def _check_can_ever_fit(self, head: _Waiting) -> None:
        if head.size > self.n_terminals - self._forever:
            raise SchedulerError(
                f"job {head.job_id!r} needs {head.size} terminals but only {self.n_terminals - self._forever} of "
                f"{self.n_terminals} are not held by jobs that never end")

    def _shadow(self, head: _Waiting, now: float) -> tuple[float, int]:
        """Shadow time of ``head`` and the terminals to spare then (the running jobs end by their walltimes)."""
        avail, shadow = self._n_free, None
        for end, _, size in self._ends:  # sorted by estimated end; one past its walltime ends "now"
            end = max(end, now)
            if shadow is not None and end > shadow:
                break
            avail += size  # every job ending at the shadow time frees its terminals for the extra ones
            if shadow is None and avail >= head.size:
                shadow = end
        if shadow is None:
            raise AssertionError("unreachable: _check_can_ever_fit passed")
        return shadow, avail - head.size


class _Profile:
    """The free-terminal profile of a conservative pass: ``avail[k]`` terminals free on ``[times[k], times[k + 1])``,
    the last value for ever (plain lists: at the few hundred steps of an overloaded queue a Python walk beats
    numpy's per-call cost)."""

    __slots__ = ("times", "avail", "_first", "_last")

    def __init__(self, now: float, n_free: int, ends: list[tuple[float, int, int]]):
        times, avail = [now], [n_free]
        after = math.nextafter(now, math.inf)  # a job past its walltime ends "any moment", never at now
        for end, _, size in ends:
            if math.isinf(end):
                break
            end = max(end, after)
            if end != times[-1]:
                times.append(end)
                avail.append(avail[-1])
            avail[-1] += size
        self.times, self.avail = times, avail
        # Lower bounds that only grow, since reservations only take terminals away: the first time ``size``
        # terminals are free (a job of that size cannot start before), and the last fit of each (size, walltime).
        # A fit scans from there instead of from now -- in an overloaded queue most jobs land far down the profile.
        self._first: dict[int, float] = {}
        self._last: dict[tuple[int, float], float] = {}

    @property
    def n(self) -> int:
        return len(self.times)

    def advance(self, now: float) -> None:
        """Move the start of the first step to ``now`` (no breakpoint lies before ``now``: :meth:`_Pass.valid_at`)."""
        self.times[0] = now

    def earliest_fit(self, size: int, walltime: float) -> float:
        """The earliest breakpoint ``times[k]`` from which ``avail`` stays >= ``size`` for ``walltime``."""
        times, avail = self.times, self.avail
        n = len(times)
        lb = max(self._first.get(size, -math.inf), self._last.get((size, walltime), -math.inf))
        k = bisect_left(times, lb) if lb > times[0] else 0
        first = k == 0 or lb == self._first.get(size)  # scanning from the first step that could hold ``size``
        while k < n:
            if avail[k] < size:
                k += 1
                continue
            if first:
                first = False
                self._first[size] = times[k]
            end = times[k] + walltime
            m = k + 1
            while m < n and times[m] < end and avail[m] >= size:
                m += 1
            if m == n or times[m] >= end:
                self._last[(size, walltime)] = times[k]
                return times[k]
            k = m + 1
        raise AssertionError("unreachable: the last profile step holds every terminal not held for ever")

    def reserve(self, t: float, size: int, walltime: float) -> None:
        """Take ``size`` terminals out of the profile on ``[t, t + walltime)``."""
        times, avail = self.times, self.avail
        end = t + walltime
        for x in (t, end):
            if math.isfinite(x):
                i = bisect_left(times, x)
                if i == len(times) or times[i] != x:
                    times.insert(i, x)
                    avail.insert(i, avail[i - 1])
        i = bisect_left(times, t)
        while i < len(times) and times[i] < end:
            avail[i] -= size
            i += 1

    def any_fits(self, shortest: list[tuple[int, float]], neg_sizes: list[int]) -> float | None:
        """Whether some waiting job could start at ``times[0]``: one of size ``s`` whose walltime ends by the first
        time the profile holds fewer than ``s`` terminals. Exact, since a job that did not fit a profile fits no
        profile with more reservations: the pass stops once it is False (an overloaded queue of 10^4 jobs then
        costs a few reservations per decision, not 10^4). ``shortest``: :meth:`_Queue.shortest_by_size` (a job in
        it that has started since only keeps the pass going a little longer, never changes a reservation);
        ``neg_sizes``: its sizes negated (ascending, for bisection).

        Returns ``None`` (nothing fits) or how far the answer looked: a reservation starting at or after that time
        leaves the answer as it is."""
        times, avail = self.times, self.avail
        now, a0, n = times[0], avail[0], len(times)
        k, low = 0, a0
        for i in range(bisect_left(neg_sizes, -a0), len(shortest)):  # sizes that fit now, largest first
            size, wt = shortest[i]
            while k < n:  # advance to the first step with fewer than ``size`` terminals
                a = avail[k]
                if a < low:
                    low = a
                if low < size:
                    break
                k += 1
            until = times[k] if k < n else math.inf
            if now + wt <= until:
                return until
        return None


class _Pass:
    """A conservative pass kept between decisions: its profile (running jobs and the reservations made) and the
    queue key of the last job it reserved."""

    __slots__ = ("profile", "last_key", "stale")

    def __init__(self, now: float, n_free: int, ends: list[tuple[float, int, int]]):
        self.profile = _Profile(now, n_free, ends)
        self.last_key: tuple | None = None
        self.stale = False

    def valid_at(self, now: float) -> bool:
        """Still the pass a rebuild at ``now`` would make: nothing invalidated it (a job end, a start outside the
        pass, an arrival ahead of a reserved job) and no breakpoint lies in ``(its time, now]`` (one would be a
        running job past its walltime)."""
        prof = self.profile
        return not self.stale and (prof.n == 1 or prof.times[1] > now)


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
    killed: bool = False
    """ended at its walltime, before its run time (:func:`dry_run` with ``kill_at_walltime``)"""

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


def dry_run(jobs: Sequence[StreamJob], shape: DragonflyShape | int, queue: str | QueuePolicy = "fcfs",
            allocation: str = "contiguous", seed: int = 0, kill_at_walltime: bool = False) -> list[JobOutcome]:
    """Schedule ``jobs`` with known run times, without simulating them: the start, end and terminals of each job
    (in the order of ``jobs``), exactly as an engine driving :class:`Scheduler` would see them if each job took its
    ``run_time`` -- or, with ``kill_at_walltime``, ``min(run_time, walltime)`` (the job is killed at its walltime,
    as a batch system does; ``killed`` says so). ``shape``: a Dragonfly shape or a plain node count."""
    for j in jobs:
        if not (j.run_time >= 0):
            raise SchedulerError(f"job {j.job_id!r}: run time {j.run_time} is not a duration >= 0")
    ids = [j.job_id for j in jobs]
    if len(set(ids)) < len(ids):
        seen: set = set()
        dup = next(i for i in ids if i in seen or seen.add(i))
        raise SchedulerError(f"job {dup!r} submitted twice")
    terms: list[np.ndarray | None] = [None] * len(jobs)
    start, end, killed = _drive(np.array([j.size for j in jobs], dtype=np.int64),
                                np.array([j.arrival for j in jobs], dtype=float),
                                np.array([j.walltime for j in jobs], dtype=float),
                                np.array([j.run_time for j in jobs], dtype=float),
                                [Scheduler(shape, queue, allocation, seed)], kill_at_walltime, terms, ids)
    return [JobOutcome(j.job_id, j.size, j.arrival, j.walltime, s, e, t, k)
            for j, s, e, t, k in zip(jobs, start.tolist(), end.tolist(), terms, killed.tolist())]


def dry_run_times(size, arrival, walltime, run_time, shape: DragonflyShape | int, queue: str | QueuePolicy = "fcfs",
                  allocation: str = "contiguous", seed: int = 0, kill_at_walltime: bool = False, *,
                  partition=None, partition_nodes: Sequence[int] | None = None, after=None, think=None,
                  attrs: dict | None = None, intervals: list | None = None, failures=None,
                  requeued: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`dry_run` on arrays (job ``i`` = index ``i``), for streams of 10^6 jobs: ``(start, end, killed)``
    arrays, no terminals kept, jobs submitted to the scheduler only as their arrival comes (memory: the arrays and
    the jobs waiting or running).

    Optional, per job: ``partition`` (index into ``partition_nodes``: disjoint partitions of that many nodes, node
    ids numbered partition after partition, one scheduler each with the same policy; ``shape`` is then ignored);
    ``after`` (index of a job that must end first, -1: none) and ``think`` (seconds after that end: the job is
    submitted at ``max(arrival, end of after + think)``, SWF fields 17-18); ``attrs`` (arrays ``user``, ``group``,
    ``queue``, ``partition`` the queue policy sees, :class:`hybridsim.queues.JobView`); ``intervals``: a list
    filled with each job's node ids as an interval set (``"0-3 8"``, Batsim's ``allocated_resources``).
    ``failures``: ``(time, node, repaired at)`` rows: the job running on the node is killed and requeued at once
    (submitted again with its whole run time; its start and end are the last attempt's, ``requeued[i]`` counts its
    kills) and the node stays out of service until it is repaired."""
    size, arrival = np.asarray(size, dtype=np.int64), np.asarray(arrival, dtype=float)
    walltime, run_time = np.asarray(walltime, dtype=float), np.asarray(run_time, dtype=float)
    bad = np.flatnonzero(~(run_time >= 0))
    if len(bad):
        raise SchedulerError(f"job {int(bad[0])}: run time {run_time[bad[0]]} is not a duration >= 0")
    if partition is None:
        scheds, offsets, part = [Scheduler(shape, queue, allocation, seed)], [0], None
    else:
        part = np.asarray(partition, dtype=np.int64)
        scheds = [Scheduler(int(n), queue, allocation, seed) for n in partition_nodes]
        offsets = np.concatenate([[0], np.cumsum(partition_nodes)[:-1]]).astype(np.int64).tolist()
    return _drive(size, arrival, walltime, run_time, scheds, kill_at_walltime, part=part, offsets=offsets,
                  after=after, think=think, attrs=attrs, intervals=intervals, failures=failures, requeued=requeued)


def interval_set(terminals: np.ndarray) -> str:
    """Node ids as Batsim writes an interval set: sorted, runs as ``a-b``, separated by spaces (``"0-3 8 10-11"``)."""
    t = np.asarray(terminals, dtype=np.int64)
    n = len(t)
    if not n:
        return ""
    lo, hi = int(t[0]), int(t[-1])
    if hi - lo == n - 1 and (n == 1 or (t[1:] > t[:-1]).all()):  # one run, as contiguous allocation gives
        return str(lo) if n == 1 else f"{lo}-{hi}"
    t = np.sort(t)
    cut = np.flatnonzero(np.diff(t) != 1) + 1
    lo, hi = t[np.concatenate([[0], cut])], t[np.concatenate([cut - 1, [len(t) - 1]])]
    return " ".join(str(a) if a == b else f"{a}-{b}" for a, b in zip(lo.tolist(), hi.tolist()))


def _drive(size: np.ndarray, arrival: np.ndarray, walltime: np.ndarray, run_time: np.ndarray,
           scheds: "Scheduler | list[Scheduler]", kill: bool, terms: list | None = None, ids: list | None = None, *,
           part: np.ndarray | None = None, offsets: list[int] | None = None, after=None, think=None,
           attrs: dict | None = None, intervals: list | None = None, failures=None,
           requeued: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dry-run clock: submit each job as its arrival comes (arrival order, ties by index -- the submission order
    the scheduler breaks ties with; a job that waits for another one is submitted when that one has ended plus the
    think time), end jobs after their run time, ask each scheduler that saw an arrival or an end for decisions."""
    if isinstance(scheds, Scheduler):
        scheds = [scheds]
    offsets = offsets or [0] * len(scheds)
    n = len(size)
    runs = np.minimum(run_time, walltime) if kill else run_time
    key = ids if ids is not None else range(n)
    index = {k: i for i, k in enumerate(key)} if ids is not None else None
    start = np.full(n, math.nan)
    held = np.zeros(n, dtype=bool)
    followers: dict[int, list[int]] = {}
    if after is not None:
        after = np.asarray(after, dtype=np.int64)
        think = np.zeros(n) if think is None else np.asarray(think, dtype=float)
        held = after >= 0
        for i in np.flatnonzero(held).tolist():
            followers.setdefault(after.item(i), []).append(i)
    free_jobs = np.flatnonzero(~held)
    order = free_jobs[np.argsort(arrival[free_jobs], kind="stable")]
    arr_sorted = arrival[order]  # numpy arrays read one element at a time (.item): no 10^6-element lists
    late: list[tuple[float, int]] = []  # jobs released by the end of the job they wait for: (arrival, index)
    extra = {}
    if attrs:
        extra = {k: np.asarray(v) for k, v in attrs.items()}
    ends: list[tuple[float, int, Hashable, int]] = []  # (end, seq, job, attempt): a killed attempt's end is stale
    attempt = np.zeros(n, dtype=np.int64)
    fails = sorted((float(t), int(x), float(u)) for t, x, u in (failures if failures is not None else ()))
    bounds = np.cumsum([s.n_terminals for s in scheds])
    ups: list[tuple[float, int]] = []
    f = 0
    p, seq, m = 0, 0, len(order)
    while True:
        cands = [t for t in (arr_sorted.item(p) if p < m else None, late[0][0] if late else None,
                             ends[0][0] if ends else None, fails[f][0] if f < len(fails) else None,
                             ups[0][0] if ups else None) if t is not None]
        if not cands:
            break
        if not (p < m or late or ends) and all(not s_.waiting for s_ in scheds):
            break  # only failures and repairs left, no job to run
        now = min(cands)
        touched: set[int] = set()
        while (p < m and arr_sorted.item(p) <= now) or (late and late[0][0] <= now):
            if late and (p >= m or late[0] < (arr_sorted.item(p), order.item(p))):
                t_arr, i = heapq.heappop(late)
            else:
                t_arr, i = arr_sorted.item(p), order.item(p)
                p += 1
            q = part.item(i) if part is not None else 0
            scheds[q].submit(key[i], size.item(i), t_arr, walltime.item(i),
                             **{k: v.item(i) for k, v in extra.items()})
            touched.add(q)
        while ends and ends[0][0] == now:
            _, _, job_id, att = heapq.heappop(ends)
            i = index[job_id] if index is not None else job_id
            if att != attempt.item(i):
                continue  # that attempt was killed by a failure
            q = part.item(i) if part is not None else 0
            scheds[q].release(job_id, now)
            touched.add(q)
            for fo in followers.pop(i, ()):
                heapq.heappush(late, (max(arrival.item(fo), now + think.item(fo)), fo))
        while ups and ups[0][0] == now:
            _, x = heapq.heappop(ups)
            q = int(np.searchsorted(bounds, x, side="right"))
            scheds[q].node_up(x - offsets[q], now)
            touched.add(q)
        while f < len(fails) and fails[f][0] == now:
            _, x, until = fails[f]
            f += 1
            if not 0 <= x < bounds[-1]:
                raise SchedulerError(f"failure of node {x}: outside 0..{int(bounds[-1]) - 1}")
            q = int(np.searchsorted(bounds, x, side="right"))
            sched = scheds[q]
            if ("node down", x - offsets[q]) in sched._running:
                continue  # already down
            victim = sched.node_down(x - offsets[q], now, until)
            if victim is not None:  # kill it, requeue it, then take the node down
                i = index[victim] if index is not None else victim
                sched.release(victim, now)
                attempt[i] += 1
                if requeued is not None:
                    requeued[i] += 1
                start[i] = math.nan
                sched.submit(victim, size.item(i), now, walltime.item(i),
                             **{k: v.item(i) for k, v in extra.items()})
                sched.node_down(x - offsets[q], now, until)
            heapq.heappush(ups, (until, x))
            touched.add(q)
        for q in sorted(touched):
            for job_id, terminals in scheds[q].next_decisions(now):
                i = index[job_id] if index is not None else job_id
                start[i] = now
                if offsets[q]:
                    terminals = terminals + offsets[q]
                if terms is not None:
                    terms[i] = terminals
                if intervals is not None:
                    intervals[i] = interval_set(terminals)
                end = now + runs.item(i)
                if math.isfinite(end):
                    heapq.heappush(ends, (end, seq, job_id, attempt.item(i)))
                    seq += 1
    never = np.flatnonzero(np.isnan(start))
    if len(never):  # a never-ending job blocks the queue (next_decisions reports it first) or waits on one
        raise SchedulerError(f"jobs never started (each waits for a job that never ends or never starts): "
                             f"{[key[i] for i in never[:10].tolist()]}")
    return start, start + runs, (run_time > walltime) if kill else np.zeros(n, dtype=bool)


# ---------------------------------------------------------------------------------------------------------- metrics
def bounded_slowdown(wait, run_time, tau: float):
    """``max(1, (wait + run) / max(run, tau))``; works on scalars and numpy arrays."""
    if not tau > 0:
        raise ValueError(f"bounded-slowdown floor tau must be > 0, got {tau}")
    wait, run_time = np.asarray(wait, dtype=float), np.asarray(run_time, dtype=float)
    out = np.maximum(1.0, (wait + run_time) / np.maximum(run_time, tau))
    return float(out) if out.ndim == 0 else out


#: quantiles reported for waits, response times and bounded slowdowns
_STATS = (("mean", np.mean), ("median", np.median), ("p95", lambda x: np.percentile(x, 95)), ("max", np.max))


def size_class(size) -> str:
    """The power-of-two size class of a job of ``size`` terminals: ``"1"``, ``"2"``, ``"3-4"``, ``"5-8"``, ..."""
    size = int(size)
    if size <= 2:
        return str(size)
    hi = 1 << (size - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


def _stats(name: str, x: np.ndarray) -> dict[str, float]:
    return {f"{stat}_{name}": float(f(x)) for stat, f in _STATS}


def stream_metrics(outcomes: Iterable[JobOutcome], n_terminals: int, tau: float, *,
                   by_size: bool = True) -> dict:
    """The standard batch-scheduling metrics of the jobs that ended (times in the outcomes' unit):

    * ``jobs``, ``killed`` (ended at their walltime), ``makespan`` = last end - first arrival;
    * ``mean_``/``median_``/``p95_``/``max_`` of ``wait`` (start - arrival), ``response`` (end - arrival) and
      ``bounded_slowdown`` (floor ``tau``, :func:`bounded_slowdown`);
    * ``utilisation`` = sum(size x run time) / (``n_terminals`` x makespan); ``throughput`` = jobs / makespan
      (jobs per time unit);
    * ``by_size``: the same job counts, waits, responses and slowdowns per :func:`size_class`.

    The 95th percentile interpolates linearly (numpy's default)."""
    done = [o for o in outcomes if math.isfinite(o.end)]
    return metrics_of(np.array([o.arrival for o in done], dtype=float), np.array([o.start for o in done], dtype=float),
                      np.array([o.end for o in done], dtype=float), np.array([o.size for o in done], dtype=float),
                      np.array([o.killed for o in done], dtype=bool), n_terminals, tau, by_size=by_size)


def metrics_of(arrival: np.ndarray, start: np.ndarray, end: np.ndarray, size: np.ndarray, killed: np.ndarray,
               n_terminals: int, tau: float, *, by_size: bool = True) -> dict:
    """:func:`stream_metrics` on arrays (jobs that never end left out)."""
    done = np.isfinite(end)
    arrival, start, end, size, killed = arrival[done], start[done], end[done], size[done].astype(float), killed[done]
    if not len(end):
        return {"jobs": 0, "killed": 0, "makespan": 0.0, "mean_wait": 0.0, "mean_bounded_slowdown": 0.0,
                "utilisation": 0.0, "throughput": 0.0}
    wait, run = start - arrival, end - start
    resp, bsld = end - arrival, np.atleast_1d(bounded_slowdown(wait, run, tau))
    makespan = float(end.max() - arrival.min())
    out = {"jobs": int(len(end)), "killed": int(killed.sum()), "makespan": makespan,
           **_stats("wait", wait), **_stats("response", resp), **_stats("bounded_slowdown", bsld),
           "utilisation": float((size * run).sum() / (n_terminals * makespan)) if makespan > 0 else 0.0,
           "throughput": len(end) / makespan if makespan > 0 else 0.0}
    if by_size:
        hi = np.where(size <= 2, size, 2.0 ** np.ceil(np.log2(np.maximum(size, 1))))  # class upper bound
        out["by_size"] = {}
        for h in np.unique(hi).tolist():
            sel = hi == h
            out["by_size"][size_class(h)] = {"jobs": int(sel.sum()), **_stats("wait", wait[sel]),
                                             **_stats("response", resp[sel]),
                                             **_stats("bounded_slowdown", bsld[sel])}
    return out
