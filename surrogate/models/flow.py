"""The interference-aware surrogate: a job's iteration time from the flow-level model, before any truth of it, and
recent truth moved by what the model says the co-runners changed.

The hybrid run gives this model, for every history column and for the iteration to predict, the job's iteration
time under a flow-level model of the network (``Context.flow`` / ``flow_now``, from ``hybridsim.flow``: the jobs'
per-phase traffic routed over the Dragonfly with the routing's non-minimal share, shared max-min fairly with the
co-runners, plus the MPI protocol's latency and the compute of each phase) with the co-runners running when that
iteration started. Per rank:

    start (no usable column):  ŷ = flow_now · c_now
    ratio (default):           ŷ = mean over the last k usable columns c of ( y_c (1 + g (flow_now / flow_c - 1)) ) · c_now / c_c
    delta:                     ŷ = mean over the last k usable columns c of ( y_c + g (flow_now - flow_c) ) · c_now / c_c

``c = exp(beta . x)`` is the learned correction of the model's residual (:mod:`surrogate.flow_correction`;
``correction``: ``none`` for c = 1, the default, ``shipped`` or a checkpoint folder), from the job's descriptors
(``Context.info``), its co-runner load (``Context.load`` / ``load_now``), the flow time itself and whether the
iteration is the job's first or second (``Context.columns`` / ``iteration``); without ``info`` it is 1. Refitted on
the flow model with its replay and calibration, it made the validation runs' starts and changes worse
(benchmarks/RESULTS.md, issue 32): it is off by default. ``g`` (``gain``, default 1) scales the model's change: 0 is MEAN of the last k (k = 1: LAST).

A usable column has a finite time and a finite flow value. Without flow inputs (a run that does not record them, the
gRPC service, CODES' director) it is MEAN of the last ``k`` (k = 1: LAST), and a rank without history gets NaN (the
caller's fallback). ``ratio`` is the default: it matched the engine's changes at co-runner starts and ends best
(benchmarks/change_prediction.py, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import numpy as np

from ..base import MAX_LOOKBACK, Context, Surrogate, SurrogateError
from ..flow_correction import Correction, features

MODES = ("delta", "ratio")

#: per workload kind the relative error within which 68 % of the flow model's start and change predictions fell on the
#: validation runs (corpora/valstream-72.yaml's 12 runs, moving-72's 5 and moving-1056's 2 held-out runs;
#: benchmarks/RESULTS.md, issue 32): :meth:`Flow.change_error`, ``hybridsim.flow.FlowModel.uncertainty``
UNCERTAINTY: dict[str, dict[str, float]] = {"lammps": {"start": 0.083, "change": 0.032},
                                             "milc": {"start": 0.116, "change": 0.034},
                                             "nearest_neighbor": {"start": 0.175, "change": 0.039}}


class Flow(Surrogate):
    """The flow model's start prediction and its ratio at co-runner changes (see the module docstring)."""
    cheap_fit = True   # (Surrogate.cheap_fit)

    name = "flow"
    needs_flow = True
    bounds = {"k": MAX_LOOKBACK}

    def __init__(self, k: int = 1, mode: str = "ratio", gain: float = 1.0, correction: str = "none"):
        self.k = self.lookback = int(k)
        self.gain = float(gain)
        if not np.isfinite(self.gain):
            raise SurrogateError(f"flow: gain must be a finite number, got {gain}")
        if self.k < 1:
            raise SurrogateError(f"flow: k must be >= 1, got {k}")
        if mode not in MODES:
            raise SurrogateError(f"flow: mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.correction = str(correction)
        self._corr = None if self.correction == "none" else Correction.load(self.correction)

    def config(self) -> dict:
        return {"k": self.k, "mode": self.mode, "gain": self.gain, "correction": self.correction}

    def change_error(self, workload: str) -> float | None:
        """The flow model's measured 68 % band at changes for the kind (:data:`UNCERTAINTY`, in %), with ``gain`` 1
        and no correction (the setting it was measured in); None otherwise or for a kind not measured."""
        band = UNCERTAINTY.get(workload, {}).get("change")
        return 100.0 * band if band is not None and self.gain == 1.0 and self._corr is None else None

    def _residual(self, ctx: Context, flow, load, iteration) -> float:
        """``beta . x`` of one iteration (0 without a correction or the job's info; NaN for an unknown flow)."""
        if self._corr is None or ctx.info is None:
            return 0.0
        if flow is None or not np.isfinite(flow) or flow <= 0:
            return float("nan")
        return float(self._corr.residual(features(ctx.info, flow, load, iteration)))

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)
        L = h.shape[1]
        now = ctx.flow_now
        f = None if ctx.flow is None else np.asarray(ctx.flow, dtype=np.float64)[-L:] if L else np.zeros(0)
        known = now is not None and np.isfinite(now) and now > 0
        target = (ctx.iteration + 1) if ctx.iteration is not None else 0
        if f is not None and known and len(f) == L:
            ok = np.isfinite(f) & (f > 0)
            if self._corr is not None and ctx.info is not None:
                cols = ctx.columns if ctx.columns is not None else np.arange(target - L, target)
                loads = ctx.load if ctx.load is not None else np.full(L, np.nan)
                r_now = self._residual(ctx, now, ctx.load_now, target)
                r_c = np.array([self._residual(ctx, f[c], loads[c], cols[c]) if ok[c] else np.nan for c in range(L)])
                factor = np.exp(r_now - r_c)
                ok &= np.isfinite(factor)
            else:
                factor = np.ones(L)
            with np.errstate(invalid="ignore", divide="ignore"):
                g = self.gain
                adj = h + g * (now - f)[None, :] if self.mode == "delta" else h * (1 + g * (now / f - 1))[None, :]
                adj = adj * factor[None, :]
            # columns without a flow value keep their time as it is (no correction known for them)
            h = np.where(ok[None, :], adj, h)
        h = np.where(np.isfinite(h), h, np.nan)
        out = np.full(h.shape[0], np.nan)
        for i, row in enumerate(h):
            v = row[~np.isnan(row)][-self.k:]
            if len(v):
                out[i] = v.mean()
        if known and np.isnan(out).any():
            # no truth of this rank yet: the flow model's own time (corrected), before any truth of the job
            r_now = self._residual(ctx, now, ctx.load_now, target)
            out[np.isnan(out)] = now * (np.exp(r_now) if np.isfinite(r_now) else 1.0)
        return out
