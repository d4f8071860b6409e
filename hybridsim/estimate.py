"""What a run of a scenario will cost, before it runs: the pure run's events, CPU time and memory, and whether a hybrid
run can save anything on it.

Arithmetic on the scenario only (each workload's closed-form :func:`~hybridsim.workloads.estimate_cost`: packets per
rank-iteration), nothing built or simulated, so ``validate`` prints it at once and the hybrid loop can decline to run
where it cannot pay:

* events = packets x :data:`EVENTS_PER_PACKET` (a packet's injection, hops, credits and delivery on the embedded
  engine; 10-13 measured on the examples' pure runs, 72 and 1,056 nodes);
* CPU seconds = events x ns per event, which grows with the machine (the heap and the routers' state leave the
  caches): :func:`ns_per_event`, fitted on pure runs of the native core (130-156 ns at 252 ports, 456 at 3,960,
  587 at 32,240); the Python core is :data:`PYTHON_CORE_FACTOR` slower;
* memory: a base plus a share per router port (coarse: within 2x of the measured peaks);
* background jobs (no iterations) send for the whole run, whose length is taken as the longest job's compute and
  serialisation time (a lower bound: they may send more).

A hybrid run saves at most the events of the iterations it predicts, and the default policy predicts nothing while
any job is in its warm-up (a job's warm-up meets the others' traffic: every running job is simulated then). A job's
warm-up is taken as :data:`MIN_WARMUP` iterations from its start (a job too short to leave :data:`MIN_WARMUP`
iterations after it holds no one: the policy exempts it), each iteration its compute and serialisation time
(contention left out, so the warm-ups are short and the estimate optimistic); a job's events after its own warm-up
and outside every other job's are what can be saved (:func:`saveable_share`). The loop costs a decision per job and
iteration and a Python record per simulated rank-iteration. :attr:`RunEstimate.pays` is False
when the best case saves less CPU than :data:`PAY_FACTOR` times the loop's cost, less than :data:`MIN_SAVED` of the
events or less than :data:`MIN_SAVED_CPU` of the pure run's CPU: the default controller then runs the truth (``runner.build_controller``) and says why in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: engine events per packet sent (measured: 10.1-13.0 on the examples' pure runs)
EVENTS_PER_PACKET = 11.0
#: the Python core's CPU per event over the native core's (13-16x measured)
PYTHON_CORE_FACTOR = 14.0
#: iterations a job is simulated at least before it can be predicted (the default policy's warm-up: a stationarity
#: test on its completed iterations, which needs 3 and leaves the one just run out, then the backtest)
MIN_WARMUP = 8
#: a hybrid run must be able to save this many times the loop's own CPU cost
PAY_FACTOR = 2.0
#: ... and at least this share of the pure run's events
MIN_SAVED = 0.10
#: ... and its best case at least this share of the pure run's CPU: a default run realises 45-80 % of its best case's
#: savings on the examples (quickstart, hybrid-72-long, dragonfly-1056-3jobs-corun, stream-1056, mix-72-600:
#: benchmarks/RESULTS.md, "The default pays"), the windows and the co-runners' starts taking the rest
MIN_SAVED_CPU = 0.20
#: the loop's Python per decision (one per job and iteration) and per simulated rank-iteration record, seconds
DECISION_S = 60e-6
RECORD_S = 2.5e-6
#: what fitting and tuning a model costs per job, seconds (history models: milliseconds)
MODEL_S = 0.01


def ns_per_event(n_ports: int) -> float:
    """Native-core CPU ns per event on a machine of ``n_ports`` router ports (fitted on pure runs: 140 ns at 252
    ports, 456 at 3,960, 587 at 32,240)."""
    return 140.0 + 95.0 * math.log(max(n_ports, 252) / 252.0)


@dataclass
class RunEstimate:
    """The estimate of one scenario's runs (see the module docstring)."""

    events: float                 # the pure run's events
    cpu_s: float                  # the pure run's CPU seconds (on the scenario's engine core)
    memory_bytes: float           # the pure run's peak memory
    saveable_events: float        # events of the iterations a hybrid run could predict at best
    loop_cpu_s: float             # the hybrid loop's own CPU seconds (decisions, records, models)
    per_job_events: dict          # job name -> its events (background jobs included)
    pays: bool                    # a hybrid run can save more than it costs
    reason: str                   # why not (empty when it pays)

    @property
    def hybrid_cpu_s(self) -> float:
        """The best hybrid run's CPU seconds: the pure run's less what it can save, plus the loop."""
        return self.cpu_s * (1.0 - self.saveable_events / max(self.events, 1.0)) + self.loop_cpu_s

    def line(self) -> str:
        """One line for ``validate`` and the run's log."""
        mb = self.memory_bytes / 2**20
        mem = f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"
        out = (f"estimate: pure {self.events:.3g} events, {_duration(self.cpu_s)} CPU, {mem}; hybrid at best "
               f"{_duration(self.hybrid_cpu_s)} CPU ({self.cpu_s / max(self.hybrid_cpu_s, 1e-9):.1f}x)")
        return out if self.pays else out + f"; the default runs the truth: {self.reason}"


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def estimate(scenario) -> RunEstimate:
    """The :class:`RunEstimate` of ``scenario`` (a :class:`hybridsim.scenario.Scenario`)."""
    from hybridsim_common.units import bytes_to_ns

    from .workloads import WorkloadError, estimate_cost

    topo = scenario.topology
    ps = topo.packet_size
    costs = {}
    for j in scenario.jobs:
        try:
            costs[j.name] = estimate_cost(j, ps) if j.ranks <= topo.n_terminals else None
        except WorkloadError:
            costs[j.name] = None
    # the run's length: the longest job's compute and serialisation of its sends (background jobs send throughout)
    length, per_its = 0.0, {}
    for j in scenario.jobs:
        c = costs[j.name]
        if j.iterations is None or c is None:
            continue
        per_it = per_its[j.name] = max((j.compute.delay or 0.0) + c.compute_ns
                                       + bytes_to_ns(c.packets * ps, topo.bandwidth.terminal), 1e-9)
        length = max(length, (j.arrival if scenario.is_stream else 0.0) + per_it * j.iterations)
    per_job, lives, decisions = {}, {}, 0
    for j in scenario.jobs:
        c = costs[j.name]
        if c is None:
            per_job[j.name] = 0.0
            continue
        if j.iterations is None:
            interval = max(float(getattr(j.workload, "interval", 0.0) or 0.0), 1.0)
            per_job[j.name] = j.ranks * (length / interval) * c.packets * EVENTS_PER_PACKET
            continue
        per_job[j.name] = j.ranks * j.iterations * c.packets * EVENTS_PER_PACKET
        lives[j.name] = ((j.arrival if scenario.is_stream else 0.0), per_its[j.name], j.iterations)
        decisions += j.iterations
    shares = saveable_share(lives)
    saveable = sum(per_job[n] * f for n, f in shares.items())
    records = sum(j.ranks * j.iterations * (1.0 - shares[j.name]) for j in scenario.jobs if j.name in shares)
    events = sum(per_job.values())
    core = getattr(getattr(scenario.backend, "embedded", None), "core", "auto")
    factor = PYTHON_CORE_FACTOR if core == "python" or not _native_built() else 1.0
    per_event = ns_per_event(topo.n_ports) * 1e-9 * factor
    cpu = events * per_event
    n_models = sum(1 for j in scenario.jobs if j.iterations is not None)
    loop = decisions * DECISION_S + records * RECORD_S + n_models * MODEL_S
    memory = 120e6 + 70e3 * topo.n_ports
    saved_cpu = saveable * per_event
    reason = ""
    if saveable < MIN_SAVED * events:
        short = [j.name for j in scenario.jobs if j.iterations is not None and j.iterations <= MIN_WARMUP]
        reason = (f"at most {saveable / max(events, 1.0):.0%} of the events can be predicted"
                  + (f" (jobs {', '.join(short)} run {MIN_WARMUP} iterations or fewer: all warm-up)" if short else ""))
    elif saved_cpu < PAY_FACTOR * loop:
        reason = (f"the pure run is cheap ({_duration(cpu)} CPU): predicting could save {_duration(saved_cpu)}, "
                  f"the loop costs about {_duration(loop)}")
    elif cpu - saved_cpu + loop > (1.0 - MIN_SAVED_CPU) * cpu:
        reason = (f"its best case saves {1.0 - (cpu - saved_cpu + loop) / max(cpu, 1e-12):.0%} of the pure run's "
                  f"CPU, under the {MIN_SAVED_CPU:.0%} a hybrid run needs to pay for its truth windows")
    return RunEstimate(events, cpu, memory, saveable, loop, per_job, not reason, reason)


def saveable_share(lives: dict) -> dict:
    """Per job, the share of its iterations the default policy could predict at best. ``lives``: job name ->
    (start, iteration time, iterations), times in any one unit. A job holds every running job in truth through its
    warm-up, [start, start + w x iteration time) with w = :data:`MIN_WARMUP` iterations, unless it has no more than
    :data:`MIN_WARMUP` iterations after it (too short to be worth a model: simulated throughout, holding no one). A
    job's share is the part of its life [start, start + iterations x iteration time) after its own warm-up and
    outside every other job's."""
    holds = sorted((t0, t0 + MIN_WARMUP * dt) for t0, dt, n in lives.values() if n > 2 * MIN_WARMUP)
    merged: list[list[float]] = []
    for a, b in holds:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out = {}
    for name, (t0, dt, n) in lives.items():
        end, free_from = t0 + n * dt, t0 + min(n, MIN_WARMUP) * dt
        free = max(0.0, end - free_from)
        for a, b in merged:
            free -= max(0.0, min(b, end) - max(a, free_from))
        out[name] = max(0.0, free) / (end - t0) if end > t0 else 0.0
    return out


def _native_built() -> bool:
    from .engine import cores

    return cores.NATIVE_MISSING is None
