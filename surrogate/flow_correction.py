"""The flow model's learned correction: a small linear model of its residual (in the spirit of m3/m4: a flow-level
estimate whose error a learned part takes out).

The flow model (``hybridsim.flow``) gives each job's iteration time beside its co-runners from traffic, routes,
protocol latency and max-min shares; what it leaves out (queueing inside a phase, a job's first iteration running
before its ranks drift apart, adaptive routing's choices) is learned as the residual

    r = log(y / flow) ~ beta . x(info, flow, load, iteration)

with ``x`` (:func:`features`): a constant, the workload kind (one-hot), log ranks, the share of the machine's groups
the job spans, the co-runner load, log of the flow time, and whether the iteration is the job's first or second (a
job's first iterations run before its ranks drift apart: a nearest-neighbour job's first is 10-15 % faster). It is
fitted by ridge regression on pure runs of a corpus in which co-runners start and end (``python -m
hybridsim.flow_tables``) and applied by the ``flow`` surrogate: at a job's start ``flow_now x exp(beta . x_now)``, at a change every history
column's ``y_c x (flow_now / flow_c) x exp(beta . (x_now - x_c))``.

A checkpoint is a folder with ``config.json`` (the coefficients, their feature names and the fit's provenance): a
dozen numbers, so no safetensors file beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .base import KNOWN_WORKLOADS, JobInfo, SurrogateError

#: the feature names, in order (:func:`features`)
FEATURES = ("const", *(f"kind_{k}" for k in KNOWN_WORKLOADS), "log_ranks", "group_share", "load", "log_flow",
            "first", "second")
#: where the shipped correction lives
SHIPPED = Path(__file__).resolve().parent / "checkpoints" / "flow-correction"


def features(info: JobInfo, flow: float, load: float, iteration: int) -> np.ndarray:
    """(len(FEATURES),) features of one iteration of a job: ``info`` the job's descriptors, ``flow`` the flow
    model's time (ns), ``load`` the co-runner load (NaN counts as 0), ``iteration`` its index."""
    kind = [1.0 if info.workload == k else 0.0 for k in KNOWN_WORKLOADS]
    load = float(load) if load is not None and math.isfinite(load) else 0.0
    return np.array([1.0, *kind, math.log(max(info.ranks, 1) / 64.0),
                     info.groups / max(info.machine_groups, 1), load,
                     math.log(max(float(flow), 1.0) / 1e5), 1.0 if int(iteration) == 0 else 0.0,
                     1.0 if int(iteration) == 1 else 0.0])


class Correction:
    """The fitted coefficients (see the module docstring); :meth:`residual` of a feature row."""

    def __init__(self, coef, provenance: dict | None = None):
        self.coef = np.asarray(coef, dtype=np.float64).reshape(-1)
        if self.coef.shape != (len(FEATURES),) or not np.isfinite(self.coef).all():
            raise SurrogateError(f"flow correction: {len(FEATURES)} finite coefficients needed ({', '.join(FEATURES)}),"
                                 f" got {self.coef.shape[0]}")
        self.provenance = dict(provenance or {})

    @classmethod
    def fit(cls, X: np.ndarray, r: np.ndarray, ridge: float = 1.0) -> "Correction":
        """Ridge regression of ``r`` (n,) on ``X`` (n, F); the constant is not penalised. Rows whose residual is more
        than a factor e off (|r| > 1: a run's outlier, not a bias) are left out."""
        X, r = np.asarray(X, np.float64), np.asarray(r, np.float64)
        keep = np.isfinite(r) & (np.abs(r) <= 1.0) & np.isfinite(X).all(axis=1)
        X, r = X[keep], r[keep]
        if len(r) < len(FEATURES):
            raise SurrogateError(f"flow correction: {len(r)} usable rows, at least {len(FEATURES)} needed")
        pen = np.full(X.shape[1], float(ridge))
        pen[0] = 0.0
        coef = np.linalg.solve(X.T @ X + np.diag(pen), X.T @ r)
        return cls(coef)

    def residual(self, x: np.ndarray) -> np.ndarray:
        """``beta . x`` of each row of ``x`` (..., F)."""
        return np.asarray(x, np.float64) @ self.coef

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        cfg = {"model": "flow-correction", "features": list(FEATURES), "coef": self.coef.tolist(),
               "provenance": self.provenance}
        (folder / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> "Correction":
        """From a folder :meth:`save` wrote (``shipped``: the packaged one)."""
        folder = SHIPPED if str(folder) == "shipped" else Path(folder).expanduser()
        f = folder / "config.json"
        try:
            cfg = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            raise SurrogateError(f"flow correction: {f}: {exc}") from None
        if not isinstance(cfg, dict) or cfg.get("model") != "flow-correction" or cfg.get("features") != list(FEATURES):
            raise SurrogateError(f"flow correction: {f} is not a flow-correction checkpoint with the features "
                                 f"{', '.join(FEATURES)}")
        return cls(cfg.get("coef", []), cfg.get("provenance"))
