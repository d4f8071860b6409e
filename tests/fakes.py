"""A stand-in backend with analytic iteration times, honouring the Director protocol (hybridsim_common/backend.py).

Rank r of job j runs iteration i in d(j, r, i) = base_j * (1 + 0.05 * sin(i / 3)) * (1 + 0.01 * r) ns, so a history
model can learn it and the expected numbers are known in closed form. Each simulated iteration costs
``events_per_iteration`` events; predicted ones cost none.
"""

import math

import numpy as np

from hybridsim_common.backend import AlwaysSimulate, Backend, Mode, SimulationResult
from hybridsim_common.records import IterationRecord


def duration(job_id: int, rank: int, it: int, base=(1000.0, 5000.0, 300.0)) -> float:
    return base[job_id % len(base)] * (1 + 0.05 * math.sin(it / 3.0)) * (1 + 0.01 * rank)


class FakeBackend(Backend):
    def __init__(self, scenario, events_per_iteration=100, duration_fn=None):
        self.scenario = scenario
        self.duration = duration_fn or duration
        self.epi = events_per_iteration
        self.calls = []

    def run(self, director=None, on_record=None, on_samples=None):
        director = director or AlwaysSimulate()
        records, simulated = [], []
        events = 0
        job_end = {}
        for jid, job in enumerate(self.scenario.jobs):
            if job.is_background:
                continue
            t = np.zeros(job.ranks)
            for it in range(job.iterations):
                mode = director.mode_for(jid, it)
                self.calls.append((jid, it, mode))
                if mode == Mode.PREDICT:
                    d = np.asarray(director.predict(jid, it, np.arange(job.ranks), t.copy()))
                else:
                    d = np.array([self.duration(jid, r, it) for r in range(job.ranks)])
                    events += self.epi * job.ranks
                for r in range(job.ranks):
                    rec = IterationRecord(job.name, jid, r, it, float(t[r]), float(t[r] + d[r]))
                    records.append(rec)
                    simulated.append(mode == Mode.SIMULATE)
                    if on_record:
                        on_record(rec, mode == Mode.SIMULATE)
                t = t + d
            job_end[job.name] = float(t.max())
        return SimulationResult(records, simulated, None, events, max(job_end.values()), job_end, 0.0)
