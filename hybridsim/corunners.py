"""What the hybrid loop records of a job's co-runners at every decision, for the models that read it.

At each decision the controller hands the jobs running beside a job to the :class:`CorunnerFeed`, which writes into
the job's timeline (:class:`hybridsim.timeline.JobState`) the co-runner load (``JobState.load``: their ranks over the
machine's terminals, :meth:`surrogate.base.JobInfo.load`) and, where a model reads it, the job's modelled iteration
time beside them under the flow-level interference model (``JobState.flow``, :mod:`hybridsim.flow`), so a co-runner's
start or end reaches the model before any truth of it does (``Context.load`` / ``flow``).

The flow model is made once for a run by :func:`flow_for` from what the run's models declare
(``Surrogate.needs_flow``): the controller never asks which kind of model it runs, it records through the feed.
"""

from __future__ import annotations

import math

import numpy as np

from .online_fit import job_time


class CorunnerFeed:
    """The co-runner inputs of one hybrid run. ``jobs``: (name, kind, ranks, iterations) per job id; ``infos``: job
    id -> :class:`surrogate.base.JobInfo` (the controller's dict, a stream job's entry replaced when it is placed);
    ``flow``: the run's :class:`hybridsim.flow.FlowModel`, or None when no model reads it."""

    def __init__(self, jobs, infos: dict, flow=None):
        self.jobs = jobs
        self.infos = infos
        self.flow = flow
        #: job id -> iteration -> the co-runners it was decided beside (what its flow value was computed from)
        self._sets: dict[int, dict[int, tuple]] = {}

    def place(self, job_id: int, terminals) -> None:
        """A stream job starts on ``terminals``."""
        if self.flow is not None:
            self.flow.place(job_id, terminals)

    def load(self, job_id: int, corunners) -> float:
        """:meth:`JobInfo.load` of the co-runners' ranks; NaN without the job's info."""
        info = self.infos.get(job_id)
        if info is None:
            return math.nan
        return info.load(sum(self.jobs[k][2] for k in corunners))

    def flow_time(self, job_id: int, corunners, start: bool = False) -> float | None:
        """The job's modelled iteration time beside ``corunners`` (``start``: of its first iteration,
        :meth:`hybridsim.flow.FlowModel.start_time`; None without a flow model)."""
        if self.flow is None:
            return None
        return (self.flow.start_time if start else self.flow.iteration_time)(job_id, corunners)

    def decided(self, st, iterations: range, corunners, load: float | None = None, flow=None) -> None:
        """Job ``st``'s ``iterations`` were decided beside ``corunners``: their load and flow values (computed here
        unless given, as a stretch computes them once)."""
        a, b = iterations.start, iterations.stop
        st.load[a:b] = self.load(st.job_id, corunners) if load is None else load
        if self.flow is not None:
            sets = self._sets.setdefault(st.job_id, {})
            key = tuple(corunners)
            for it in iterations:
                sets[it] = key
            st.flow[a:b] = self.flow_time(st.job_id, corunners) if flow is None else flow
            if a == 0 and b > 0 and flow is None:   # a job's first iteration: the model's start (its own factor)
                st.flow[0] = self.flow_time(st.job_id, corunners, start=True)

    def ready(self, running, states) -> bool:
        """Whether every running job's flow inputs are settled (each has its first truth): a stretch may be granted
        only then, since a job's first truth moves every job's flow values."""
        return self.flow is None or all(k in self.flow.period for k in running if states.get(k) is not None)

    def first_truth(self, st, it: int, states) -> None:
        """Job ``st``'s simulated iteration ``it`` is complete: its first one sets the flow model's co-runner demand
        of the job (its measured iteration time: the model's own time is far off for latency-bound jobs) and every
        recorded flow value is recomputed with it, so a history column and ``flow_now`` are always computed
        alike."""
        if self.flow is None or st.job_id in self.flow.period:
            return
        jt = job_time(st.truth[:, it])
        if not (np.isfinite(jt) and jt > 0):
            return
        self.flow.set_period(st.job_id, jt)
        for jid, sets in self._sets.items():
            s = states.get(jid)
            if s is not None:
                for i, others in sets.items():
                    s.flow[i] = self.flow_time(jid, others, start=i == 0)


def flow_for(scenario, models, placement):
    """The flow-level model of a hybrid run of ``scenario`` (its jobs placed by ``placement``; a stream job when it
    starts) when one of its ``models`` reads it (``Surrogate.needs_flow``), else None: what
    :class:`CorunnerFeed` records its flow values from."""
    if not any(m.needs_flow for m in models):
        return None
    from .flow import flow_model

    return flow_model(scenario, placement)
