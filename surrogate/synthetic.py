"""Small synthetic run directories for tests and smoke checks (no simulator needed).

:func:`make_synthetic_run` writes a complete run directory (manifest.json, description.json with the topology shape,
jobs and placement, iterations.parquet, ports.parquet) through the same writers the backends use. Iteration times are
periodic per rank (period ``period`` iterations) plus a small deterministic noise; port features follow the jobs'
activity so graph models have a signal to find.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hybridsim_common.records import PORT_FEATURES, IterationRecord, PortSamples, write_iterations, write_ports
from hybridsim_common.rundir import JobDescription, RunDescription, RunDir, write_description
from hybridsim_common.topology import Dragonfly, DragonflyShape

SMALL_SHAPE = DragonflyShape(groups=3, routers_per_group=2, terminals_per_router=2, global_channels_per_router=1)


def make_synthetic_run(path: str | Path, *, shape: DragonflyShape = SMALL_SHAPE, jobs=(("A", "milc", 4, 60),
                       ("B", "lammps", 3, 40)), interval: float = 100.0, period: int = 8, noise: float = 0.01,
                       seed: int = 0, placement: dict[str, list[int]] | None = None, force: bool = True,
                       times: dict[str, np.ndarray] | None = None) -> Path:
    """Write a synthetic run directory. ``jobs``: tuples ``(name, workload, ranks, iterations)``. ``times``: optional
    iteration times (ranks, iterations) per job name replacing the periodic formula."""
    rng = np.random.default_rng(seed)
    topo = Dragonfly(shape)
    if placement is None:
        order = rng.permutation(topo.n_terminals)
        placement, pos = {}, 0
        for name, _w, R, _T in jobs:
            placement[name] = [int(v) for v in order[pos:pos + R]]
            pos += R
    recs = []
    t_max = 0.0
    for j, (name, _w, R, T) in enumerate(jobs):
        base = 1000.0 * (j + 1)
        tt = np.arange(T)
        for r in range(R):
            y = base * (1 + 0.2 * np.sin(2 * np.pi * tt / period) + 0.02 * r) * (1 + noise * rng.standard_normal(T))
            if times is not None and name in times:
                y = np.asarray(times[name], dtype=np.float64)[r]
            ends = np.cumsum(y)
            starts = ends - y
            for i in range(T):
                recs.append(IterationRecord(name, j, r, i, float(starts[i]), float(ends[i])))
            t_max = max(t_max, float(ends[-1]))
    S = int(np.ceil(t_max / interval)) + 1
    t_end = interval * (np.arange(S) + 1)
    P = topo.n_ports
    vals = np.zeros((S, P, len(PORT_FEATURES)), np.float32)
    phase = np.sin(2 * np.pi * t_end / (interval * 11.0))[:, None]
    load = rng.random(P)[None, :]
    for k in range(len(PORT_FEATURES)):
        vals[:, :, k] = (k + 1) * 100.0 * (1.0 + phase) * load + rng.random((S, P)) * 10.0
    samples = PortSamples(t_end, interval, shape.radix, PORT_FEATURES, vals)
    rd = RunDir.create(path, kind="synthetic", force=force, argv=["synthetic"])
    write_description(rd.path, RunDescription(
        shape, [JobDescription(name=n, workload=w, params={}, ranks=R, iterations=T,
                               terminals=[int(t) for t in placement[n]], volumes=None) for n, w, R, T in jobs],
        sampling_interval=float(interval), port_features=list(PORT_FEATURES)))
    write_iterations(recs, rd.file("iterations.parquet"))
    write_ports(samples, rd.file("ports.parquet"))
    rd.complete()
    return rd.path
