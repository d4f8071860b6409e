"""Workload volume normalisation for the offline evaluation (the hybrid loop's ``volumes``, see
:mod:`hybridsim.hybrid`).

Each job's relative message volume per iteration ``v[t]`` (bytes sent in iteration ``t`` over the job's mean, so
``mean(v) = 1``) comes from the job's workload definition, known before anything is simulated: the run directory's
description lists every job's bytes per iteration (``volumes`` of :class:`hybridsim_common.rundir.JobDescription`). With it
the models see ``y[:, t] / v[t]`` (history, fit and tuning targets) and their prediction of iteration ``t`` is
multiplied by ``v[t]``; the MAPE stays on raw times. Jobs whose volume never changes (MILC, nearest neighbour) get no
scaling, so their results are identical.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .base import SurrogateError


def relative_volumes(v) -> np.ndarray | None:
    """``v / mean(v)`` (bytes sent per iteration relative to their mean, what volume-normalised times are divided by),
    or ``None`` when ``v`` is None, empty, not all positive, or constant (the hybrid loop's rule): times are then left
    as they are."""
    if v is None:
        return None
    v = np.asarray(v, dtype=np.float64)
    if not len(v) or not np.all(v > 0) or np.ptp(v) == 0:
        return None
    return v / v.mean()


def description_of_dataset(dataset):
    """The :class:`hybridsim_common.rundir.RunDescription` of the run a dataset was built from (``meta["source"]
    ["run_dir"]``)."""
    from hybridsim_common.rundir import RunDirError, read_description

    run_dir = ((dataset.meta or {}).get("source") or {}).get("run_dir")
    if not run_dir or not Path(run_dir).is_dir():
        raise SurrogateError(f"volume scaling: the dataset's source run directory {run_dir!r} is not there (its "
                             "description holds the workload volumes)")
    try:
        return read_description(run_dir)
    except RunDirError as exc:
        raise SurrogateError(f"volume scaling: {exc}") from None


def dataset_volumes(dataset, description=None) -> dict[str, np.ndarray]:
    """``{job: relative volume (T,)}`` for every dataset job whose volume varies (others left out). Jobs are matched
    to the run description's by name (``description``: default that of the dataset's source run); iteration ``t`` of
    the dataset is iteration ``t`` of the workload."""
    from hybridsim_common.rundir import DESCRIPTION

    desc = description if description is not None else description_of_dataset(dataset)
    run_dir = ((dataset.meta or {}).get("source") or {}).get("run_dir")
    where = f"{run_dir}/{DESCRIPTION}" if run_dir else DESCRIPTION
    index = {j.name: i for i, j in enumerate(desc.jobs)}
    out = {}
    for name, js in dataset.jobs.items():
        if name not in index:
            raise SurrogateError(f"volume scaling: {where}: no job {name!r} (jobs: {', '.join(index)})")
        vol = desc.jobs[index[name]].volumes
        if vol is None or len(vol) < js.T:
            have = "null" if vol is None else f"{len(vol)} long"
            raise SurrogateError(f"volume scaling: {where}: field 'jobs[{index[name]}].volumes' is {have}; job "
                                 f"{name!r} needs the message volumes of its {js.T} iterations")
        v = relative_volumes(np.asarray(vol[:js.T], dtype=np.float64))
        if v is not None:
            out[name] = v
    return out


def scaled_series(series, v: np.ndarray):
    """A copy of ``series`` whose targets are ``y[:, t] / v[t]`` (everything else shared)."""
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (series.T,):
        raise SurrogateError(f"volume scaling: job {series.job!r} has {series.T} iterations, volumes {v.shape}")
    return dataclasses.replace(series, y=series.y / v[None, :])
