"""Models that predict from each rank's own iteration-time history: LAST, MEAN of the last k, EWMA, and ridge
regression on the last k (CODES' stock ML director predictor)."""

from __future__ import annotations

import numpy as np

from ..base import MAX_LOOKBACK, Context, Surrogate, last_valid


class _Repeating(Surrogate):
    """A model whose prediction reads only ``ctx.history``: a stretch of k predictions from one context is one
    prediction repeated (:meth:`Surrogate.predict_many`, computed once)."""
    cheap_fit = True   # (Surrogate.cheap_fit)
    history_only = True   # (Surrogate.history_only)

    def predict_many(self, ctx: Context, k: int) -> np.ndarray:
        y = np.asarray(self.predict(ctx), dtype=np.float64).reshape(1, -1)
        return np.repeat(y, max(int(k), 0), axis=0)


class Last(_Repeating):
    """ŷ(t+1) = y(t)."""

    name = "last"
    lookback = 1

    def predict(self, ctx: Context) -> np.ndarray:
        return last_valid(ctx.history)


class Mean(_Repeating):
    """ŷ(t+1) = mean of the last k values."""

    name = "mean"
    bounds = {"k": MAX_LOOKBACK}

    def __init__(self, k: int = 8):
        self.k = self.lookback = int(k)

    def config(self) -> dict:
        return {"k": self.k}

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)[:, -self.k:]
        with np.errstate(invalid="ignore"):
            return np.nanmean(np.where(np.isnan(h).all(axis=1, keepdims=True), 0.0, h), axis=1)


class Ewma(_Repeating):
    """Exponentially weighted moving average with smoothing ``alpha`` over the last ``k`` values."""

    name = "ewma"
    bounds = {"k": MAX_LOOKBACK}

    def __init__(self, alpha: float = 0.3, k: int = 16):
        self.alpha = float(alpha)
        self.k = self.lookback = int(k)

    def config(self) -> dict:
        return {"alpha": self.alpha, "k": self.k}

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)[:, -self.k:]
        out = np.full(h.shape[0], np.nan)
        for j in range(h.shape[1]):
            col = h[:, j]
            ok = ~np.isnan(col)
            first = ok & np.isnan(out)
            out[first] = col[first]
            upd = ok & ~first
            out[upd] = self.alpha * col[upd] + (1 - self.alpha) * out[upd]
        return out


class Ridge(_Repeating):
    """Ridge regression from the last ``k`` iteration times to the next one (CODES' stock director fits a ridge on the
    last 4 values). Fitted on all gap-free (rank, window) pairs of the training history, in relative form:
    features ``x_i / x_last - 1``, target ``y / x_last - 1``, no intercept, coefficients penalised by ``alpha`` -- so
    one model serves ranks of different scales, a constant history is a fixed point (an intercept would compound
    into geometric drift over multi-step forecasts), and strong regularisation shrinks it to LAST. Without a fit it
    is LAST."""

    name = "ridge"
    fits_series = True
    bounds = {"k": MAX_LOOKBACK}

    def __init__(self, k: int = 4, alpha: float = 0.1):
        self.k = self.lookback = int(k)
        self.alpha = float(alpha)
        self.coef: np.ndarray | None = None  # (k-1,) relative lags

    def config(self) -> dict:
        return {"k": self.k, "alpha": self.alpha}

    def fit_series(self, series: list[np.ndarray]) -> int:
        """Fit on a list of 1-D iteration-time series; returns the number of training windows."""
        wins = []
        for s in series:
            s = np.asarray(s, dtype=np.float64)
            if len(s) > self.k:
                wins.append(self._windows(s[None, :]))
        return self._solve(np.concatenate(wins) if wins else np.zeros((0, self.k + 1)))

    def _windows(self, rows: np.ndarray) -> np.ndarray:
        """The gap-free training windows ``(n, k + 1)`` of the series ``rows`` (R, L), L > k: rank by rank, each
        rank's in time order (what one series at a time gives, in the same order: for performance, one call for
        every rank)."""
        ok = np.isfinite(rows) & (rows > 0)
        # a window has no gap where its k + 1 values are all usable: counted by a running sum over each rank's
        # (for performance: no (R, L - k, k + 1) tensor of every window is made to keep a few)
        run = np.zeros((ok.shape[0], ok.shape[1] + 1), np.int64)
        np.cumsum(ok, axis=1, out=run[:, 1:])
        r, i = np.nonzero(run[:, self.k + 1:] - run[:, :-self.k - 1] == self.k + 1)   # rank-major, in time order
        return rows[r[:, None], i[:, None] + np.arange(self.k + 1)]

    def _solve(self, w: np.ndarray) -> int:
        """The coefficients from the windows ``w`` (n, k + 1) (kept as they are when there are none); returns n."""
        n = len(w)
        if not n:
            return 0
        rel = w / w[:, -2:-1] - 1.0
        A = rel[:, :self.k - 1]
        y = rel[:, -1]
        self.coef = np.linalg.solve(A.T @ A / n + self.alpha * np.eye(A.shape[1]), A.T @ y / n)
        return n

    def fit(self, dataset, train_idx, val_idx=None, **kw) -> dict:
        y = np.asarray(dataset.y, dtype=np.float64)[:, train_idx]
        if y.ndim != 2 or y.shape[1] <= self.k:
            return {"windows": 0}
        return {"windows": self._solve(self._windows(y))}

    def tune(self, dataset, window_idx, **kw) -> dict:
        return self.fit(dataset, window_idx)

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)
        if self.coef is None or h.shape[1] < self.k:
            return last_valid(h)
        x = h[:, -self.k:]
        bad = np.isnan(x).any(axis=1)
        any_bad = bad.any()
        # with no NaN in the last k, each row's last valid value is its last one (for performance: no search)
        last = last_valid(h) if any_bad else x[:, -1]
        rel = x[:, :-1] / last[:, None] - 1.0
        if not np.isfinite(rel).all():   # (nan_to_num changes nothing else, and costs 5x the check: performance)
            np.nan_to_num(rel, copy=False)   # rel is this call's own array
        pred = last * (1.0 + rel @ self.coef)
        usable = np.isfinite(pred) & (pred > 0)
        if not any_bad and usable.all():   # every rank's own prediction stands (pred is this call's own array)
            return pred
        return np.where(bad | ~usable, last, pred)

    def _state(self) -> dict:
        import torch  # only to save a fitted model: naming or checking one needs no torch

        return {} if self.coef is None else {"coef": torch.from_numpy(self.coef.copy())}

    def _load_state(self, state: dict) -> None:
        if "coef" in state:
            self.coef = state["coef"].numpy().astype(np.float64)
