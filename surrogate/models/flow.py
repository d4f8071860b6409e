"""The interference-aware surrogate: recent truth, moved by what a flow-level model says the co-runners changed.

A history model predicts the next iteration from the last ones, so when a co-runner starts or ends it keeps
predicting the old network until truth of the new one arrives. The hybrid run gives this model, for every history
column and for the iteration to predict, the job's iteration time under a flow-level model of the network
(``Context.flow`` / ``flow_now``, from ``hybridsim.flow``: the co-runners' traffic matrices routed over the Dragonfly
and shared max-min fairly) with the co-runners running when that iteration started. The model's absolute time is
rough (it leaves out latency and waits), its *change* between two co-runner sets is what is used:

    ratio (default):  ŷ = mean over the last k usable columns c of ( y_c (1 + g (flow_now / flow_c - 1)) )
    delta:            ŷ = mean over the last k usable columns c of ( y_c + g (flow_now - flow_c) )

``g`` (``gain``, default 1) scales the model's change: 0 is MEAN of the last k (k = 1: LAST).

A usable column has a finite time and a finite flow value. Without flow inputs (a run that does not record them, the
gRPC service, CODES' director) it is MEAN of the last ``k`` (k = 1: LAST). ``ratio`` is the default: with the
co-runners' demands taken from their measured iteration times it matched the engine's changes at co-runner starts
and ends best (benchmarks/flow_model_quality.py, benchmarks/RESULTS.md); ``delta`` moves a bandwidth-bound job
(LAMMPS) too little, since the model's absolute time is about half the engine's.
"""

from __future__ import annotations

import numpy as np

from ..base import MAX_LOOKBACK, Context, Surrogate, SurrogateError

MODES = ("delta", "ratio")


class Flow(Surrogate):
    """Recent truth corrected by the flow model's change of iteration time (see the module docstring)."""
    cheap_fit = True   # (Surrogate.cheap_fit)

    name = "flow"
    needs_flow = True
    bounds = {"k": MAX_LOOKBACK}

    def __init__(self, k: int = 1, mode: str = "ratio", gain: float = 1.0):
        self.k = self.lookback = int(k)
        self.gain = float(gain)
        if not np.isfinite(self.gain):
            raise SurrogateError(f"flow: gain must be a finite number, got {gain}")
        if self.k < 1:
            raise SurrogateError(f"flow: k must be >= 1, got {k}")
        if mode not in MODES:
            raise SurrogateError(f"flow: mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode

    def config(self) -> dict:
        return {"k": self.k, "mode": self.mode, "gain": self.gain}

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)
        now = ctx.flow_now
        f = None if ctx.flow is None else np.asarray(ctx.flow, dtype=np.float64)[-h.shape[1]:]
        if f is not None and now is not None and np.isfinite(now) and len(f) == h.shape[1]:
            ok = np.isfinite(f)[None, :] & (f > 0)[None, :]
            with np.errstate(invalid="ignore", divide="ignore"):
                g = self.gain
                adj = h + g * (now - f)[None, :] if self.mode == "delta" else h * (1 + g * (now / f - 1))[None, :]
            # columns without a flow value keep their time as it is (no correction known for them)
            h = np.where(ok, adj, h)
        h = np.where(np.isfinite(h), h, np.nan)
        out = np.full(h.shape[0], np.nan)
        for i, row in enumerate(h):
            v = row[~np.isnan(row)][-self.k:]
            if len(v):
                out[i] = v.mean()
        return out
