"""The embedded backend: a scenario's jobs on its Dragonfly, packet by packet, streaming records as it runs.

:class:`Engine` wires the pieces around one :class:`~.core.EventLoop`: the :class:`~.network.Network` (terminals,
routers, routing, credits), the :class:`~.mpi.MpiLayer` (ranks, MPI protocol), the workloads of
:mod:`hybridsim.workloads` (per-rank, per-iteration op lists), a :class:`~.sampling.PortSampler` and the
:class:`~hybridsim_common.backend.Director` that chooses, per job and iteration, SIMULATE or PREDICT (see
:mod:`hybridsim_common.backend` for the protocol).

Job streams (a scenario with a ``scheduler`` section): a :class:`~hybridsim.scheduler.Scheduler` decides at each
arrival and after each job end which waiting jobs start and on which terminals. A job's ranks are created when it
starts (consecutive global ids) and dropped with its per-job state when it ends, so the engine's memory follows the
jobs running at once; only the results (records, per-job start/end/terminals) grow with the stream. With
``scheduler.kill_at_walltime`` a job still running at its start plus its walltime is killed then (:meth:`Engine._kill`):
its ranks stop where they are, its messages still in the network are dropped on arrival, and it ends (terminals freed,
the scheduler asked again) at that instant. Without a ``scheduler`` section every job starts at t = 0 on
``placement``, as before.

Over 600 lines: the embedded backend's run is one protocol with the director (modes, predictions, stretches,
records, job starts and ends) and the two cores behind it; the network and message layer live in their own modules.
"""

from __future__ import annotations

import dataclasses
import gc
import random
import sys
import time
from typing import Optional

import numpy as np

from hybridsim_common.backend import (AlwaysSimulate, Backend, Director, Mode, SimulationResult, records_sink,
                                      takes_bursts)
from hybridsim_common.records import IterationColumns, IterationRecord, RecordBlock, RecordRows
from .cores import build as build_core, choose as choose_core
from .core import EngineError, LimitExceeded, RunStop, current_stop
from .mpi import Rank
from .sampling import PortSampler


_PREDICT = Mode.PREDICT  # one global lookup where the hot path compares modes (an Enum attribute costs a descriptor)


def _new_record(job, job_id, rank, iteration, start, end) -> IterationRecord:
    """``IterationRecord(job, job_id, rank, iteration, start, end)``, the same object, made without the frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` call per field): the engine makes one per rank-iteration, so
    this is for performance. The slots are set through their descriptors, as ``__init__`` would."""
    rec = _rec_new(IterationRecord)
    _set_job(rec, job)
    _set_job_id(rec, job_id)
    _set_rank(rec, rank)
    _set_iteration(rec, iteration)
    _set_start(rec, start)
    _set_end(rec, end)
    return rec


_REC_FIELDS = ("job", "job_id", "rank", "iteration", "start", "end")
if tuple(f.name for f in dataclasses.fields(IterationRecord)) != _REC_FIELDS:  # pragma: no cover - a guard
    raise ImportError(f"engine._new_record sets {_REC_FIELDS}; IterationRecord now has other fields")
_rec_new = IterationRecord.__new__
_set_job, _set_job_id, _set_rank, _set_iteration, _set_start, _set_end = (
    getattr(IterationRecord, f).__set__ for f in _REC_FIELDS)


def jobs_progress(names, done, totals, modes) -> str:
    """The progress bar's per-job part: ``name:done/total`` plus the mode of the iteration in progress, ``S``
    (simulated) or ``P`` (predicted); nothing once the job is done or before its mode is known."""
    out = []
    for name, d, tot, m in zip(names, done, totals, modes):
        tag = "" if m is None or d >= tot else ("P" if m is Mode.PREDICT else "S")
        out.append(f"{name}:{d}/{tot}{tag}")
    return " ".join(out)


def background_seed(seed: int) -> int:
    """Seed of the background-traffic generator: a fixed affine map (prime factor) of the scenario seed, so the
    background draws stay apart from the main generator's and are reproducible per seed."""
    return seed * 7919 + 17


#: phases of a predicted job's load profile (``keep_background: profile``): its last simulated iteration is cut into
#: this many equal phases, and the per-port load of each is replayed at the predicted pace
PROFILE_PHASES = 8

#: consecutive phases whose per-port loads differ by less than this utilisation everywhere are merged into one (one
#: event fewer per predicted iteration; a compute phase with no traffic is one phase however long)
PROFILE_MERGE = 0.02


#: the most of a port one predicted job's profile phase takes from the simulated traffic beside it: the port's
#: round-robin arbitration gives a competing flow at least its fair share, so a burst that filled a port alone (the
#: 1 / (1 - u) stretch diverging as u -> 1) slows a simulated flow meeting it by about 2x, not 1 / (1 - u)
PROFILE_MAX_LOAD = 0.5


#: the sample windows a run whose port samples nobody keeps may take (each costs a time and a count, no values)
UNKEPT_WINDOWS = 2**31 - 1


def background_mode(keep_background) -> str | None:
    """A director's ``keep_background`` as the engine's stand-in for a predicted job: None (false: silent),
    ``"mean"`` (true: its last measured mean per-port load) or ``"profile"`` (its phase-resolved per-port load)."""
    if keep_background == "profile":
        return "profile"
    if isinstance(keep_background, str):
        raise ValueError(f"keep_background must be true, false or 'profile', got {keep_background!r}")
    return "mean" if keep_background else None


def load_profile(times, cum, bw, phases: int, merge: float = PROFILE_MERGE):
    """A job's per-port load profile over one iteration from cumulative byte counters.

    ``times`` (n,): increasing sample times, the first the iteration's start and the last its end; ``cum`` (n,
    ports): the job's cumulative bytes sent by each port at those times; ``bw`` (ports,): bytes per ns. The window is
    cut into ``phases`` equal phases; a phase's load on a port is the bytes it sent then (``cum`` interpolated
    linearly in time at the phase boundaries) / (bw x phase length); consecutive phases within ``merge`` of each
    other on every port are merged (their time-weighted mean). Returns (ports that carried bytes (k,), phase starts
    as fractions of the iteration (m,) with 0 first, loads (m, k)), or None when no port carried any."""
    times = np.asarray(times, dtype=np.float64)
    cum = np.asarray(cum, dtype=np.float64)
    ports = np.nonzero(cum[-1] - cum[0] > 0)[0]
    if len(ports) == 0 or times[-1] <= times[0]:
        return None
    win = times[-1] - times[0]
    if phases == 1 and len(times) == 2:
        # one phase between two snapshots (keep_background's mean, at every decision that turns a job predicted):
        # the general path's interpolation weights are exactly 0 and 1 there, so its load is this difference over
        # (bw x window), float for float, without its dozen array operations (for performance)
        util = (cum[1, ports] - cum[0, ports]) / (np.asarray(bw, dtype=np.float64)[ports] * win)
        return ports, np.zeros(1), util[None, :]
    cum = cum[:, ports]
    b = times[0] + win * np.arange(phases + 1) / phases
    b[-1] = times[-1]
    idx = np.clip(np.searchsorted(times, b, side="right") - 1, 0, len(times) - 2)
    w = ((b - times[idx]) / (times[idx + 1] - times[idx]))[:, None]
    at = cum[idx] * (1.0 - w) + cum[idx + 1] * w
    util = np.diff(at, axis=0) / (np.asarray(bw, dtype=np.float64)[ports] * (win / phases))
    starts, loads, weights = [0], [util[0].copy()], [1]
    for m in range(1, phases):
        if np.abs(util[m] - loads[-1]).max() < merge:
            n = weights[-1]
            loads[-1] = (loads[-1] * n + util[m]) / (n + 1)
            weights[-1] = n + 1
        else:
            starts.append(m)
            loads.append(util[m].copy())
            weights.append(1)
    return ports, np.asarray(starts, dtype=np.float64) / phases, np.vstack(loads)


class Engine(Backend):
    """Packet-level simulation of ``scenario``.

    Args:
        scenario: a :class:`hybridsim.scenario.Scenario`.
        topology: a prebuilt :class:`~hybridsim_common.topology.Dragonfly` (default: built from the scenario).
        placement: list of per-job terminal arrays (default: :func:`hybridsim.placement.place_jobs`).
        progress: show a tqdm bar on stderr (rank-iterations done of all, their rate and an ETA; virtual time,
            iterations done per job, events/s); a string: the bar's label (``hybridsim bench``: "run k/N: NAME").
        debug: check invariants as it runs (default: ``scenario.backend.embedded.debug``).
        workloads: per-job :class:`~hybridsim.workloads.base.JobWorkload` objects (default: built from the jobs).
        keep_ports: keep the port samples in the result (``SimulationResult.ports``); False: the sampling events run
            as with them (same events, same limits, same records) and nothing is kept unless ``run`` is given an
            ``on_samples`` (:class:`~.sampling.PortSampler` ``keep``): for a run whose samples nobody writes.

    The run stops (:class:`~.core.LimitExceeded` ``deadline``, or the cancelling exception) when the
    :class:`~.core.RunStop` active on the constructing thread says so -- checked while the workloads are built and
    every :data:`CHECK_EVERY` events -- or, without one, when ``limits.deadline`` seconds have passed since
    construction.
    """

    #: events between two checks of the run's :class:`~.core.RunStop` (a clock read: cheap against the events)
    CHECK_EVERY = 1024
    #: checks between two sums of the bytes waiting in the network (``limits.max_queued_packets``: bounded memory)
    QUEUE_CHECK_EVERY = 16

    def __init__(self, scenario, topology=None, placement=None, progress: bool = False, debug: Optional[bool] = None,
                 workloads=None, keep_ports: bool = True):
        self.scenario = scenario
        self.keep_ports = bool(keep_ports)
        self.stop = current_stop() or RunStop(scenario.limits.deadline)
        self.topo = topology if topology is not None else scenario.build_topology()
        self.stream = scenario.is_stream
        if self.stream:
            if placement is not None:
                raise EngineError("a job stream (scheduler section) allocates terminals as jobs start; no placement")
            self.placement = [None] * len(scenario.jobs)
        else:
            if placement is None:
                from ..placement import place_jobs
                placement = place_jobs(scenario, self.topo)
            self.placement = [np.asarray(p, dtype=np.int64) for p in placement]
        self.progress = progress
        self.debug = scenario.backend.embedded.debug if debug is None else bool(debug)
        if workloads is None:
            from ..workloads import build_workload
            workloads = []
            for j, job in enumerate(scenario.jobs):
                self.stop.check(f"while building the workload of job {job.name!r}")
                workloads.append(build_workload(job, j, scenario.seed, scenario=scenario))
            self.stop.check("while building the workloads")
        self.workloads = list(workloads)
        if len(self.workloads) != len(scenario.jobs) or len(self.placement) != len(scenario.jobs):
            raise EngineError("one workload and one placement array are needed per job")
        for j, (job, wl, pl) in enumerate(zip(scenario.jobs, self.workloads, self.placement)):
            if wl.n_ranks != job.ranks or (pl is not None and len(pl) != job.ranks):
                raise EngineError(f"job {job.name!r}: {job.ranks} ranks, workload has {wl.n_ranks}, placement "
                                  f"{len(pl)}")
            if not wl.background and not wl.iterations:
                raise EngineError(f"job {job.name!r}: a non-background workload needs a number of iterations")

    # ------------------------------------------------------------------------------------------------ run
    def run(self, director: Director | None = None, on_record=None, on_samples=None) -> SimulationResult:
        """Simulate until every non-background job has finished (or ``end_time`` / ``max_events``)."""
        sc = self.scenario
        emb = sc.backend.embedded
        director = director if director is not None else AlwaysSimulate()
        self.director = director
        self.on_record = on_record
        self.on_records = records_sink(director, on_record)  # predicted records, in bursts on the native core
        #: simulated records the director has not seen yet, as (job, rank, iteration, start, end): a director that
        #: takes bursts gets them in one call before its next other call (:meth:`_flush`; for performance: no record
        #: object and no call per rank-iteration); None: ``on_record`` on each as it comes
        self._truth = [] if takes_bursts(director, on_record) else None
        self.on_samples = on_samples
        self.rng = random.Random(sc.seed)
        self.bg_rng = random.Random(background_seed(sc.seed))
        lim = sc.limits
        #: "native" or "python" (backend.embedded.core; see hybridsim.engine.cores)
        self.core = choose_core(emb.core)
        # the native core runs the background senders itself (for performance) when every background job follows
        # the "uniform" destination rule; one job with its own rule keeps them all in Python, as they share bg_rng
        self.native_bg = self.core == "native" and all(
            wl.destination_rule == "uniform" for wl in self.workloads if wl.background)
        loop, net, mpi = build_core(self.core, self.topo, sc.topology, self.rng, self.debug,
                                    lim.max_packets_per_message, bg_rng=self.bg_rng if self.native_bg else None)
        self.loop, self.net, self.mpi = loop, net, mpi
        self.max_windows = max(1, lim.max_samples // max(net.n_ports, 1))
        jobs = sc.jobs
        self.n_jobs = len(jobs)
        self.job_names = [j.name for j in jobs]
        self.n_ranks = [j.ranks for j in jobs]
        self.iters = [wl.iterations if not wl.background else 0 for wl in self.workloads]
        self.is_bg = [bool(wl.background) for wl in self.workloads]

        # a job's ranks get consecutive global ids when it starts (mpi.add_ranks) and are dropped when it ends
        self.job_ranks: dict[int, list[Rank]] = {}
        self.next_gid = 0
        self.bg_mode = background_mode(director.keep_background)
        self.keep_bg = self.bg_mode is not None
        mpi.on_iteration_end = self._iteration_end
        # predicted iterations: the message layer parks ranks and ends their iterations (mpi.MessageLayer; the native
        # core parks ranks whose next iteration is already decided itself and hands the records over in bursts)
        mpi.set_pred_callbacks(self._pred_records, self._pred_next, self._pred_parked, self.job_names)
        # fast-forward (Director.fast_forward): job -> its open stretch [first iteration, length, reached, scheduled]
        # as last told to the director; a duck-typed director without the method is asked per iteration
        self.ffwd = director.fast_forward if isinstance(director, Director) else None
        self.stretches: dict[int, list] = {}
        self.rec_total = [self.iters[j] * self.n_ranks[j] for j in range(self.n_jobs)]
        self.iters_recorded: set[int] = set()   # jobs whose every iteration has been recorded
        self.job_start: dict[int, float] = {}

        #: the run's records in event order, as columns (nothing a record in Python unless read one by one); the
        #: native core keeps them itself (``keeps_records``) and hands them over at the end of the run
        self.records = IterationColumns(self.job_names)
        self.simulated = self.records.simulated
        self._keep = None if mpi.keeps_records else self.records.append
        self.modes: dict = {}
        self.ranks_done = [0] * self.n_jobs
        self.iters_done = [0] * self.n_jobs   # records emitted per job
        self.job_end: dict[str, float] = {}
        self.jobs_left = sum(1 for b in self.is_bg if not b)
        self.finished = False
        # keep_background: per job, its load profile while predicted (load_profile's triple), the phase applied now
        # (ports, loads), a generation that outdates scheduled phase/snapshot events, the start of the
        # predicted iteration being replayed, the byte snapshots of the simulated iteration in progress; the loads
        # of all predicted jobs summed per port
        self.profile: dict[int, tuple] = {}
        self.cur_load: dict[int, tuple] = {}
        self.bg_gen: dict[int, int] = {}
        self.replay_t0: dict[int, float] = {}
        self.psnaps: dict[int, list] = {}
        self.bg_total = np.zeros(net.n_ports)
        self.bg_backlog = np.zeros(net.n_ports)   # their time-averaged queued work summed per port (ns)
        self.snap: dict[int, tuple] = {}   # (time, bytes per port, queued work per port) at the job's last decision
        if self.jobs_left == 0 and emb.end_time is None and emb.max_events is None:
            raise EngineError("only background jobs: set backend.embedded.end_time (or max_events) to end the run")

        self.sched = None
        self.killed: list[int] = []
        self.kill_after = [float("inf")] * self.n_jobs   # a stream job's walltime when it is killed at it
        if self.stream:
            from ..scheduler import Scheduler

            sec = sc.scheduler
            if sec.kill_at_walltime:
                self.kill_after = [float("inf") if self.is_bg[j] else job.estimated_walltime()
                                   for j, job in enumerate(jobs)]
            self.sched = Scheduler(self.topo.shape, sec.queue, sec.allocation, sc.scheduler_seed)
            for j, job in enumerate(jobs):
                self.sched.submit(j, job.ranks, job.arrival, job.estimated_walltime())
            self._decide_at = None
            loop.at(self.sched.next_event_time(), self._arrival)
        else:
            for j, pl in enumerate(self.placement):
                self._start_job(0.0, j, pl)
        self.sampler = PortSampler(net, sc.sampling.interval, keep=self.keep_ports or on_samples is not None)
        if not self.sampler.keep:
            # windows whose values nobody keeps cost no memory: limits.max_samples (a memory bound) does not count
            # them (an 8,320-node run was stopped at 155 ms of 1,088 CPU-s by samples it never stored)
            self.max_windows = UNKEPT_WINDOWS
        # the native core runs the sampling event itself where nobody reads the windows as the run goes (for
        # performance: no Python call per window; PortSampler.run_natively)
        if sc.sampling.ports and (self.on_samples is not None or not self.sampler.run_natively(
                sc.sampling.interval, self.max_windows, self._sample)):
            loop.at(sc.sampling.interval, self._sample)

        until = emb.end_time if emb.end_time is not None else float("inf")
        pbar = None
        wall0 = time.perf_counter()
        state = {"last_done": 0, "last_bar": 0.0}
        stop = self.stop
        fg = [j for j in range(self.n_jobs) if not self.is_bg[j]]
        if self.progress:
            from tqdm import tqdm
            # counted in rank-iterations, whose total is known, so tqdm shows the rate and an ETA (by the iterations
            # done so far: a hybrid run's predicted ones go faster); a str progress is the bar's label
            total = sum(self.rec_total[j] for j in fg)
            pbar = tqdm(total=total or None, unit="rank-it", unit_scale=True, file=sys.stderr, dynamic_ncols=True,
                        desc=self.progress if isinstance(self.progress, str) else (sc.name or "engine"),
                        mininterval=0.5)

        state["checks"] = 0
        queued_cap = lim.max_queued_packets * sc.topology.packet_size  # bytes: what limits.max_queued_packets allows

        def on_check(t, n, final=False):
            stop.check(f"at t={t:,.0f} ns after {n:,} events")
            state["checks"] += 1
            if state["checks"] % self.QUEUE_CHECK_EVERY == 0:  # a sum over the terminals: not at every check
                queued = net.bytes_injected - net.bytes_delivered
                if queued > queued_cap:
                    raise LimitExceeded(
                        f"max_queued_packets: {queued:,} B (about {queued // sc.topology.packet_size:,} packets of "
                        f"{sc.topology.packet_size} B) wait in the network at t={t:,.0f} ns, over "
                        f"limits.max_queued_packets = {lim.max_queued_packets:,}: the jobs offer more than the "
                        "network carries (a background job's msg_size / interval?), so its queues grow with the run")
            if self.debug:
                net.check_invariants()
            el = time.perf_counter() - wall0
            if pbar is not None and (final or el - state["last_bar"] >= 0.5):
                state["last_bar"] = el
                done_ri = sum(self.iters_done[j] for j in fg)
                pbar.update(done_ri - state["last_done"])
                state["last_done"] = done_ri
                jobs = fg
                done = [self.iters_done[j] // self.n_ranks[j] for j in jobs]
                its = jobs_progress([self.job_names[j] for j in jobs], done, [self.iters[j] for j in jobs],
                                    [self.modes.get((j, d)) for j, d in zip(jobs, done)])
                pbar.set_postfix_str(f"t={t / 1e3:,.1f}us {its} {n / max(el, 1e-9) / 1e3:,.0f}k ev/s")

        # The model makes no reference cycles per event (packets, messages and requests are freed by reference
        # counting), so the cyclic collector only costs time here (~10 %): off while the loop runs.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            partial = loop.run(until=until, max_events=emb.max_events, on_check=on_check,
                               check_every=self.CHECK_EVERY)
            self._flush()   # the director's state as the run leaves it
            if self.stretches:  # the director's state as the per-iteration protocol leaves it
                self._settle(cut=True)
        finally:
            self.sampler.release()
            if gc_was_enabled:
                gc.enable()
            if pbar is not None:
                self.debug, debug = False, self.debug
                try:
                    on_check(loop.now, loop.events, final=True)
                except BaseException:  # noqa: BLE001 - the run's own exception, if any, goes on
                    pass
                self.debug = debug
                pbar.close()
        if self._keep is None:   # the native core's record store, handed over without a copy
            self.records.extend_columns(*mpi.take_records())
        wall = time.perf_counter() - wall0
        t_end = self.t_finish if self.finished else loop.now
        if not self.finished and not partial and self.jobs_left:
            raise EngineError(f"simulation stalled at t={loop.now:.1f} ns with {self.jobs_left} job(s) unfinished "
                              f"(no events left: unmatched sends/receives?)")
        if sc.sampling.ports and t_end > self.sampler.t0 + 1e-9:
            self._emit_samples(t_end)
        if self.debug:
            net.check_invariants()
            if not partial:
                inflight = net.bytes_in_network()
                if net.bytes_injected != net.bytes_delivered + inflight:
                    raise AssertionError(f"byte conservation: injected {net.bytes_injected} != delivered "
                                         f"{net.bytes_delivered} + in network {inflight}")
        stats = {
            "packets": net.packets,
            "messages": mpi.messages,
            "hops": int(sum(net.pkts_out)),      # router output-port sends = router arrival events
            "bytes_injected": net.bytes_injected,
            "bytes_delivered": net.bytes_delivered,
            "bytes_loopback": net.bytes_self,
            "events_per_s": loop.events / wall if wall > 0 else 0.0,
            "routing": sc.topology.routing,
            "core": self.core,
        }
        return SimulationResult(
            records=self.records, simulated=self.simulated,
            ports=self.sampler.combined() if sc.sampling.ports else None,
            events=loop.events, end_time=t_end, job_end=dict(self.job_end), wall_s=wall,
            partial=bool(partial), link_totals=self.sampler.link_totals(t_end),
            stats=stats, job_start={self.job_names[j]: t for j, t in self.job_start.items()},
            job_terminals={self.job_names[j]: self.placement[j] for j in self.job_start},
            job_killed=[self.job_names[j] for j in self.killed])

    # ------------------------------------------------------------------------------------------------ jobs
    def _start_job(self, t, j, terminals):
        """Create job ``j``'s ranks on ``terminals`` (rank r on terminals[r]) and start them at ``t``."""
        self.placement[j] = terminals = np.asarray(terminals, dtype=np.int64)
        self.job_start[j] = t
        base = self.next_gid
        self.next_gid += len(terminals)
        job_ranks = [Rank(base + local, j, local, term) for local, term in enumerate(terminals.tolist())]
        self.mpi.add_ranks(job_ranks)
        self.job_ranks[j] = job_ranks
        if not self.is_bg[j]:
            self.mpi.pred_job(j, self.iters[j], len(job_ranks))
        if self.keep_bg and not self.is_bg[j]:
            self.mpi.count_bytes(j)
        if self.stream:
            if self.stretches:
                self._settle(cut=True)
            self._flush()
            self.director.on_job_start(j, t, terminals)
            if self.kill_after[j] < float("inf"):
                self.loop.at(t + self.kill_after[j], self._kill, j)
        wl = self.workloads[j]
        if self.is_bg[j] and self.native_bg:
            # the native core runs the periodic sends itself (_bg_gen's draws and events, for performance)
            for rs in job_ranks:
                self.mpi.start_background(t, rs, wl.n_ranks, wl.msg_size, wl.interval)
            return
        handler = self._bg_gen if self.is_bg[j] else self._iter_start
        for rs in job_ranks:
            self.loop.at(t, handler, rs)

    def _end_job(self, t, j):
        """Job ``j``'s last rank finished at ``t``: drop its ranks and per-job state, free its terminals."""
        self.mpi.drop_ranks(self.job_ranks.pop(j))
        self.mpi.forget_bytes(j)
        self.snap.pop(j, None)
        for d in (self.profile, self.bg_gen, self.replay_t0, self.psnaps):
            d.pop(j, None)
        for key in [k for k in self.modes if k[0] == j]:
            del self.modes[key]
        if self.stretches:
            self._settle(cut=True)
            self.stretches.pop(j, None)
        self.mpi.forget_job(j)
        if self.stream:
            self._flush()
            self.director.on_job_end(j, t)
            self.sched.release(j, t)
            if self._decide_at != t:  # decide once every job ending at t has released its terminals
                self._decide_at = t
                self.loop.at(t, self._decide)

    def _kill(self, t, j, _=None):
        """Job ``j`` reached its walltime (event handler): if it still runs, its ranks stop (``done``: the MPI layer
        and the iteration handlers drop whatever of them is still scheduled), its partial iterations are not
        recorded, and it ends now."""
        if j not in self.job_ranks or self.ranks_done[j] == self.n_ranks[j]:
            return  # it ended first
        if self.stretches:
            self._settle(cut=True)
        for rs in self.job_ranks[j]:
            self.mpi.stop_rank(rs)
        self.mpi.unpark(j)
        self.killed.append(j)
        self.ranks_done[j] = self.n_ranks[j] - 1
        self._rank_done(t, self.job_ranks[j][0])  # the job's end, as when its last rank finishes

    def _arrival(self, t, _a=None, _b=None):
        """The next job(s) of the stream arrive (event handler)."""
        self._decide(t)
        nxt = self.sched.next_event_time()
        if nxt is not None:
            self.loop.at(nxt, self._arrival)

    def _decide(self, t, _a=None, _b=None):
        self._decide_at = None
        for j, terminals in self.sched.next_decisions(t):
            self._start_job(t, j, terminals)

    # ------------------------------------------------------------------------------------------------ iterations
    def _mode(self, t, j, it):
        key = (j, it)
        mode = self.modes.get(key)
        if mode is None:
            if self.stretches:
                self._settle(cut=False)
            self._flush()
            mode = self.director.mode_for(j, it)
            if self.stretches:  # a decision may change what was promised for the open stretches: what is kept
                self._kept()
            if type(mode) is not Mode:  # a duck-typed director may answer with the mode's value
                mode = Mode(mode)
            self.modes[key] = mode
            self.mpi.set_mode(j, it, mode is _PREDICT)
            if self.keep_bg:
                self._update_background(t, j, mode)
        return mode

    def _iter_start(self, t, rs, _=None):
        """Rank ``rs`` is ready for its next iteration (event handler; also called by :meth:`_pred_next`)."""
        j, it = rs.job, rs.it
        if rs.done:  # its job was killed at its walltime
            return
        if it >= self.iters[j]:
            self._rank_done(t, rs)
            return
        mode = self.modes.get((j, it))  # inlined _mode (once per rank-iteration: for performance)
        if mode is None:
            mode = self._mode(t, j, it)
        if mode is _PREDICT:  # parked until every rank of the job is there (the message layer's, mpi.MessageLayer)
            full = self.mpi.park(j, it, rs.gid, t)
            if full is not None:
                self._pred_parked(j, it, *full)
            return
        # generating a rank's ops can be slow (a custom function, LAMMPS' first call per rank): check before each
        self.stop.check(f"at t={t:,.0f} ns while generating the ops of job {self.job_names[j]!r}")
        ops = self.workloads[j].ops(rs.local, it)
        rs.start = t
        self.mpi.start_iteration(t, rs, ops)

    def _predict_ranks(self, j, it, rss, t0s):
        """Every rank of job ``j`` is parked at predicted iteration ``it``: ``rss`` in local order, parked at times
        ``t0s``. The director's durations end their iterations (the message layer's ``pred_ends``)."""
        ranks = np.array([rs.local for rs in rss], dtype=np.int64)
        starts = np.array(t0s, dtype=np.float64)
        if self.stretches:
            self._settle(cut=False)
        self._flush()
        dur = np.asarray(self.director.predict(j, it, ranks, starts), dtype=np.float64).reshape(-1)
        if dur.shape[0] != len(rss) or not np.isfinite(dur).all() or (dur < 0).any():
            raise EngineError(f"director.predict({j}, {it}) must return {len(rss)} finite durations >= 0")
        ends = starts + dur
        if self.stretches and ends.min() < starts.max():
            # a rank ends this iteration before the last one started it (per-rank ends): virtual time goes back, and
            # the open stretches' skipped decisions would no longer see it where they assumed: they end here
            self._settle(cut=True)
        self.mpi.pred_ends([rs.gid for rs in rss], [rs.it for rs in rss], starts.tolist(), ends.tolist())
        prof = self.profile.get(j)
        if prof is not None:  # the job's last rank has stopped injecting: its stand-in takes over
            self._set_load(j, 0)
            if len(prof[1]) > 1:
                self._replay(j, prof[1], float(ends.min()))
        # fast-forward: the iterations after this one that the director already knows, run by the message layer
        # without a call per iteration. Not where a skipped decision would change the stand-in load (keep_background
        # before the job has a profile, or a profile of several phases, whose replay is scheduled per iteration)
        if self.ffwd is not None and (not self.keep_bg or (prof is not None and len(prof[1]) == 1)):
            plan = self.ffwd(j, it, ends)
            if plan is not None:
                self._stretch(j, it, plan)

    def _stretch(self, j, it, plan):
        """Job ``j``'s iterations after ``it`` run on the director's durations ``plan`` (h, ranks) (a stretch)."""
        plan = np.asarray(plan, dtype=np.float64)
        if len(plan) == 0:
            return
        if (plan.ndim != 2 or plan.shape[1] != self.n_ranks[j] or not np.isfinite(plan).all() or (plan < 0).any()
                or it + 1 + len(plan) > self.iters[j]):
            raise EngineError(f"director.fast_forward({j}, {it}) must return (h, {self.n_ranks[j]}) finite durations "
                              f">= 0 for iterations before the job's last ({self.iters[j]}), got shape {plan.shape}")
        self.mpi.stretch(j, it + 1, plan)
        self.stretches[j] = [it + 1, len(plan), 0, 0]

    def _kept(self) -> None:
        """After a decision: each open stretch shortened to what the director still stands by
        (``Director.fast_forward_kept``)."""
        self._flush()
        for j in list(self.stretches):
            s = self.stretches[j]
            h = min(s[1], max(s[2], int(self.director.fast_forward_kept(j, s[2]))))
            if h < s[1]:
                self.mpi.cut(j, h)
                s[1] = h
                if s[3] == h:
                    self.director.fast_forwarded(j, s[2], s[3], h)
                    del self.stretches[j]

    def _settle(self, cut: bool) -> None:
        """Tell the director how far the open stretches got (``Director.fast_forwarded``) and apply what the
        skipped decisions do on the engine's side (their modes; keep_background's generation, replay start and byte
        snapshot, as ``_update_background`` for a predicted iteration after a predicted one); with ``cut``, end each
        at its latest reached iteration. Called before every director call that reads or changes what a stretch
        assumed."""
        self._flush()
        for j in list(self.stretches):
            s = self.stretches[j]
            reached, scheduled, t, jb = self.mpi.stretch_state(j, s[2])  # jb read only when reached > s[2]
            if reached > s[2]:
                for i in range(s[0] + s[2], s[0] + reached):
                    self.modes[(j, i)] = _PREDICT
                if self.keep_bg and jb is not None:
                    self.bg_gen[j] += reached - s[2]
                    self.replay_t0[j] = t
                    self.snap[j] = (t, list(jb), self.mpi.job_work(j))
            cut_here = cut and s[1] > reached
            if cut_here:
                self.mpi.cut(j, reached)
                s[1] = reached
            if reached > s[2] or scheduled > s[3] or cut_here:
                s[2], s[3] = reached, scheduled
                self.director.fast_forwarded(j, reached, scheduled, s[1])
            if s[3] == s[1]:
                del self.stretches[j]

    def _pred_records(self, burst, counts, spans=None):
        """The records of predicted iterations that ended (in event order; the native core hands over all since it
        last called Python, before any other Python code runs, as the rows ``(lo, hi)`` of its record store, which
        keeps them), ``counts`` of them per job; ``spans``: the native core's per-iteration summary of the burst
        (:meth:`Director.on_records`), None from the Python core (whose ``burst`` is a list of records)."""
        done = self.iters_done
        for j, n in counts.items():
            done[j] += n
        if type(burst) is tuple:   # the native core's: rows lo .. hi - 1 of its record store, kept there
            burst = RecordBlock(self.job_names, self.mpi.record_columns, *burst)
        else:
            self.records.extend(burst, False)
        if self.stretches:
            self._completed_cut()
        if self.on_records is not None:  # the whole burst in one call (Director.on_records)
            self._flush()
            self.on_records(burst, False, spans)

    def _completed_cut(self) -> None:
        """A job whose every iteration is now recorded changes the others' co-runners: the open stretches end."""
        done, tot, seen = self.iters_done, self.rec_total, self.iters_recorded
        new = [j for j in range(self.n_jobs) if tot[j] and done[j] == tot[j] and j not in seen]
        if new:
            seen.update(new)
            self._settle(cut=True)

    def _pred_next(self, t, gid, it):
        """Rank ``gid``'s predicted iteration ended and its next one, ``it``, is to start (the message layer calls
        this only where it cannot park the rank itself: mode not yet decided, simulated, or past the last)."""
        rs = self.mpi.ranks[gid]
        rs.it = it
        self._iter_start(t, rs)

    def _pred_parked(self, j, it, gids, times):
        """Every rank of job ``j`` is parked at predicted iteration ``it`` (``gids``, ``times``: in parking order)."""
        ranks = self.mpi.ranks
        order = sorted(range(len(gids)), key=gids.__getitem__)  # local order (a job's gids are its first + local)
        rss = [ranks[gids[k]] for k in order]
        for rs in rss:
            rs.it = it
        self._predict_ranks(j, it, rss, [times[k] for k in order])

    def _iteration_end(self, t, rs):
        """The MPI layer finished ``rs``'s iteration."""
        self._record(rs, rs.start, t, True)
        rs.it += 1
        self.loop.at(t, self._iter_start, rs)

    def _record(self, rs, start, end, simulated):
        j = rs.job
        if self._keep is not None:   # (the native core has kept it already)
            self._keep(j, rs.local, rs.it, start, end, simulated)
        self.iters_done[j] += 1
        if self.stretches:  # a simulated record reads the predicted spans of the others (their stretches too)
            self._settle(cut=False)
            self._completed_cut()
        if self._truth is not None and simulated:   # the director's, in its next burst (_flush)
            self._truth.append((j, rs.local, rs.it, start, end))
        elif self.on_record is not None:  # a record object only for whoever reads it
            self.on_record(_new_record(self.job_names[j], j, rs.local, rs.it, start, end), simulated)

    def _flush(self) -> None:
        """Hand the director the simulated records it has not seen yet (``_truth``), in one
        :meth:`Director.on_records` call: before each of its other calls and at the end of the run, so each call sees
        what a call per record would have shown it."""
        rows = self._truth
        if rows:
            self._truth = []
            self.on_records(RecordRows(self.job_names, rows), True)

    def _rank_done(self, t, rs):
        self.mpi.stop_rank(rs)
        j = rs.job
        self.ranks_done[j] += 1
        if self.ranks_done[j] == self.n_ranks[j]:
            self.job_end[self.job_names[j]] = t
            self.jobs_left -= 1
            if self.keep_bg:
                self.profile.pop(j, None)
                self._clear_load(j)
            self._end_job(t, j)
            if self.jobs_left == 0:
                self.finished = True
                self.t_finish = t
                self.loop.stop()

    # ------------------------------------------------------------------------------------------------ background
    def _bg_gen(self, t, rs, _=None):
        """A background rank's periodic message (event handler; the native core's ``bg_send`` where the job's
        :attr:`~hybridsim.workloads.base.JobWorkload.destination_rule` is ``"uniform"``)."""
        wl = self.workloads[rs.job]
        dst = wl.destination(rs.local, rs.bg_k, self.bg_rng)
        rs.bg_k += 1
        self.mpi.send_background(t, rs, rs.gid - rs.local + dst, wl.msg_size)
        self.loop.at(t + wl.interval, self._bg_gen, rs)

    def _update_background(self, t, j, mode):
        """At job ``j``'s mode decision for an iteration starting at ``t`` (``keep_background``): a job that turns
        predicted leaves its last simulated iteration's load behind (the window from its previous decision to this
        one): ``mean``, that window's mean per-port load and time-averaged queued work (the wait it leaves on each
        port instead of M/D/1's: :func:`~.network.loaded_ports`); ``profile``, its per-port load per phase (and the
        same queued work)
        (:func:`load_profile`), replayed over each predicted iteration at the predicted pace (from the decision on, once
        the job's last rank has stopped injecting: :meth:`_predict`, :meth:`_replay`; before that its straggling
        ranks still send their own packets, and a stand-in beside them would count their traffic twice). A simulated job injects its
        own packets (its load is removed); in ``profile`` mode its bytes are snapshot at :data:`PROFILE_PHASES`
        points per previous iteration's length (up to twice that), the profile's samples."""
        jb = self.mpi.job_bytes(j)
        if jb is None:
            return
        t_prev, prev, prev_w = self.snap.get(j, (self.job_start.get(j, 0.0), None, None))
        gen = self.bg_gen[j] = self.bg_gen.get(j, 0) + 1
        jw = self.mpi.job_work(j)
        if mode is Mode.PREDICT:
            if j not in self.profile and t > t_prev:
                snaps = [(ts, c) for ts, c in self.psnaps.get(j, ()) if t_prev < ts < t]
                times = [t_prev] + [ts for ts, _ in snaps] + [t]
                cum = [prev if prev is not None else [0] * len(jb)] + [c for _, c in snaps] + [jb]
                prof = load_profile(times, cum, self.net.bw_bpns, PROFILE_PHASES if self.bg_mode == "profile" else 1)
                if prof is not None:
                    loads = prof[2] if self.bg_mode == "mean" else np.minimum(prof[2], PROFILE_MAX_LOAD)
                    # its time-averaged queued work on those ports over the window (ns): what a packet of another
                    # job met ahead of it there, on average (measured, where M/D/1 assumes Poisson arrivals)
                    w = np.asarray(jw, dtype=np.float64)[prof[0]]
                    if prev_w is not None:
                        w = w - np.asarray(prev_w, dtype=np.float64)[prof[0]]
                    self.profile[j] = (prof[0], prof[1], list(loads), w / (t - t_prev))  # one array per phase
            if j in self.profile:
                self.replay_t0[j] = t  # its load starts when its last rank stops injecting (_predict)
        else:
            if j in self.profile:
                del self.profile[j]
                self._clear_load(j)
            if self.bg_mode == "profile":
                self.psnaps[j] = []
                if prev is not None and t > t_prev:
                    step = (t - t_prev) / PROFILE_PHASES
                    for k in range(1, 2 * PROFILE_PHASES):  # up to twice the previous length
                        self.loop.at(t + k * step, self._profile_snapshot, j, gen)
        self.snap[j] = (t, list(jb), jw)

    def _profile_snapshot(self, t, j, gen):
        """A byte snapshot of simulated job ``j`` (event handler; outdated once the job's next decision is made)."""
        if self.bg_gen.get(j) == gen:
            self.psnaps[j].append((t, list(self.mpi.job_bytes(j))))

    def _replay(self, j, fr, t_end):
        """Schedule phases 1.. of predicted job ``j``'s profile over its iteration [replay_t0, ``t_end``] (phases
        whose start has passed are applied at once)."""
        t0 = self.replay_t0[j]
        span = t_end - t0
        gen = self.bg_gen[j]
        now = self.loop.now
        for m in range(1, len(fr)):
            tm = t0 + fr[m] * span
            if tm <= now:
                self._set_load(j, m)
            else:
                self.loop.at(tm, self._phase, j, (gen, m))

    def _phase(self, t, j, gm):
        """Predicted job ``j``'s load moves to its next phase (event handler; outdated by the job's next decision)."""
        gen, m = gm
        if self.bg_gen.get(j) == gen:
            self._set_load(j, m)

    def _set_load(self, j, m):
        """Job ``j`` now loads its ports with phase ``m`` of its profile: the per-port totals change by the difference
        to what it loaded before, and only the ports whose load changed are set."""
        ports, _, loads, backlog = self.profile[j]
        new = loads[m]
        cur = self.cur_load.get(j)
        if cur is not None and cur[1] is new:
            return
        self.cur_load[j] = (ports, new, backlog)
        if cur is None:   # its first phase, and its queued work, held until it is cleared
            self.bg_total[ports] += new
            self.bg_backlog[ports] += backlog
            self._push(ports)
            return
        diff = new - cur[1]
        changed = np.nonzero(diff)[0]
        if len(changed):
            at = ports[changed]
            self.bg_total[at] += diff[changed]
            self._push(at)

    def _clear_load(self, j):
        cur = self.cur_load.pop(j, None)
        if cur is not None:
            self.bg_total[cur[0]] -= cur[1]
            self.bg_backlog[cur[0]] -= cur[2]
            self._push(cur[0])

    def _push(self, ports):
        tot, held = self.bg_total, self.bg_backlog
        vals, work = tot[ports], held[ports]
        gone = vals < 1e-12   # what is left of sums and differences once every load is gone
        vals[gone] = 0.0
        work[gone | (work < 0.0)] = 0.0
        tot[ports], held[ports] = vals, work
        self.net.set_port_background(ports, vals, work)

    # ------------------------------------------------------------------------------------------------ sampling
    def _sample(self, t, _a=None, _b=None):
        if self.finished:
            return
        self._emit_samples(t)
        if self.loop.pending:  # something else is still going on
            self.loop.at(t + self.sampler.interval, self._sample)

    def _emit_samples(self, t):
        self.stop.check(f"at t={t:,.0f} ns (sampling the ports)")  # a window can cost more than many events
        self.sampler.pull()   # the windows the native core took itself, if any
        if self.sampler.n_windows >= self.max_windows:
            raise LimitExceeded(f"max_samples: {self.sampler.n_windows} sample windows x {self.net.n_ports} ports "
                                f"reach limits.max_samples = {self.scenario.limits.max_samples} at t={t:,.0f} ns")
        block = self.sampler.sample(t)
        if self.on_samples is not None:
            self._flush()
            self.on_samples(block)
