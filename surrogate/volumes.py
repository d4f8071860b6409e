"""Workload volume normalisation for the offline evaluation (the hybrid loop's ``volumes``, see
:mod:`hybridsim.hybrid`).

Each job's relative message volume per iteration ``v[t]`` (bytes sent in iteration ``t`` over the job's mean, so
``mean(v) = 1``) comes from the job's workload definition (:func:`hybridsim.runner.workload_volumes`), known before
anything is simulated. With it the models see ``y[:, t] / v[t]`` (history, fit and tuning targets) and their
prediction of iteration ``t`` is multiplied by ``v[t]``; the MAPE stays on raw times. Jobs whose volume never
changes (MILC, nearest neighbour) get no scaling, so their results are identical.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from .base import SurrogateError


def relative_volumes(v) -> np.ndarray | None:
    """``v / mean(v)``, or ``None`` when ``v`` is empty, not all positive, or constant (the hybrid loop's rule)."""
    v = np.asarray(v, dtype=np.float64)
    if not len(v) or not np.all(v > 0) or np.ptp(v) == 0:
        return None
    return v / v.mean()


def scenario_of_dataset(dataset):
    """The :class:`hybridsim.scenario.Scenario` of the run a dataset was built from: ``manifest.json["scenario"]`` of
    ``meta["source"]["run_dir"]`` (engine runs and CODES imports both write it); for a CODES import without one,
    :func:`codes_bridge.scenario_from_codes.scenario_from_codes` of the manifest's ``codes_run_dir``."""
    from hybridsim.scenario import Scenario

    src = (dataset.meta or {}).get("source") or {}
    run_dir = src.get("run_dir")
    if not run_dir or not (Path(run_dir) / "manifest.json").is_file():
        raise SurrogateError(f"volume scaling: the dataset's source run directory {run_dir!r} has no manifest.json "
                             "(its scenario is needed for the workload volumes)")
    man = json.loads((Path(run_dir) / "manifest.json").read_text())
    scen = man.get("scenario")
    if scen:
        try:
            return Scenario.model_validate(scen)
        except Exception as exc:
            raise SurrogateError(f"volume scaling: {run_dir}/manifest.json: scenario invalid: {exc}") from None
    if man.get("codes_run_dir"):
        from codes_bridge.scenario_from_codes import scenario_from_codes

        return scenario_from_codes(man["codes_run_dir"])
    raise SurrogateError(f"volume scaling: {run_dir}/manifest.json holds no scenario")


def dataset_volumes(dataset, scenario=None) -> dict[str, np.ndarray]:
    """``{job: relative volume (T,)}`` for every dataset job whose volume varies (others left out). Jobs are matched
    to the scenario's by name; iteration ``t`` of the dataset is iteration ``t`` of the workload."""
    from hybridsim.runner import workload_volumes

    scenario = scenario if scenario is not None else scenario_of_dataset(dataset)
    index = {j.name: i for i, j in enumerate(scenario.jobs)}
    out = {}
    for name, js in dataset.jobs.items():
        if name not in index:
            raise SurrogateError(f"volume scaling: dataset job {name!r} is not in the scenario "
                                 f"(jobs: {', '.join(index)})")
        v = relative_volumes(workload_volumes(scenario, index[name], js.T))
        if v is not None:
            out[name] = v
    return out


def scaled_series(series, v: np.ndarray):
    """A copy of ``series`` whose targets are ``y[:, t] / v[t]`` (everything else shared)."""
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (series.T,):
        raise SurrogateError(f"volume scaling: job {series.job!r} has {series.T} iterations, volumes {v.shape}")
    return dataclasses.replace(series, y=series.y / v[None, :])
