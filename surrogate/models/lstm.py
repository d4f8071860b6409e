"""LSTM baseline: one LSTM shared by all ranks of a job over each rank's last ``k`` iteration times.

Input per rank: ``log(y[t-k+1..t] / y[t])`` (0 where the history is shorter, with a presence flag) plus
``log(y[t] / scale)``; output: ``log(y[t+1] / y[t])``; prediction ``y[t] * exp(out)``. Trained with L1 loss on the
log ratio (close to MAPE for small errors), Adam, early stopping on the validation split.

Gaps are normal in the hybrid loop's series (NaN where an iteration was predicted, a window edge, or a rank had not
finished it yet): a (rank, target) pair is learnt from only where the target and the rank's last value before it are
finite and positive, ``scale`` is the median of the finite training times, and :meth:`LSTMSurrogate.can_fit` says
whether any such pair exists (the loop defers the fit until one does, e.g. after a warm-up of one iteration).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..base import Context, SurrogateError, last_valid
from ..torch_surrogate import TorchSurrogate, fit_loop


def history_windows(y: np.ndarray, targets: np.ndarray, k: int) -> np.ndarray:
    """``(B, R, k)`` windows ``y[:, t-k .. t-1]`` for each target ``t`` (NaN where the index is negative)."""
    y = np.asarray(y, dtype=np.float64)
    R, T = y.shape
    targets = np.asarray(targets, dtype=np.int64)
    idx = targets[:, None] - k + np.arange(k)[None, :]          # (B, k)
    ok = idx >= 0
    g = y[:, np.clip(idx, 0, T - 1)]                            # (R, B, k)
    g = np.where(ok[None], g, np.nan)
    return np.transpose(g, (1, 0, 2))


def relative_inputs(hist: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """From ``(..., k)`` raw histories: ``(..., k, 2)`` inputs ``[log(h/last), present]`` and ``(...)`` last values;
    plus the level feature in the caller. NaN-safe."""
    last = hist[..., -1]
    if np.isnan(last).any():
        # fall back to the last valid value per row
        flat = hist.reshape(-1, hist.shape[-1])
        lv = last_valid(flat).reshape(last.shape)
        last = lv
    present = ~np.isnan(hist)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(present, np.log(hist / last[..., None]), 0.0)
    rel = np.nan_to_num(rel, nan=0.0, posinf=0.0, neginf=0.0)
    lvl = np.log(np.maximum(last, 1e-9) / scale)
    feats = np.stack([rel, present.astype(np.float64), np.broadcast_to(lvl[..., None], rel.shape)], axis=-1)
    return feats, last


class _LSTMNet(nn.Module):
    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.lstm = nn.LSTM(3, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden + 3, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, k, 3) -> (N,)
        out, _ = self.lstm(x)
        return self.head(torch.cat([out[:, -1], x[:, -1]], dim=1)).squeeze(-1)


class LSTMSurrogate(TorchSurrogate):
    name = "lstm"

    def __init__(self, k: int = 16, hidden: int = 32, layers: int = 1, epochs: int = 150, lr: float = 3e-3,
                 batch_size: int = 16, patience: int = 20, tune_epochs: int = 3, tune_lr: float = 1e-3,
                 scale: float | None = None, seed: int = 0):
        self.k = self.lookback = int(k)
        self.hidden, self.layers = int(hidden), int(layers)
        self.epochs, self.lr, self.batch_size, self.patience = int(epochs), float(lr), int(batch_size), int(patience)
        self.tune_epochs, self.tune_lr = int(tune_epochs), float(tune_lr)
        self.scale = scale
        self.seed = int(seed)
        torch.manual_seed(self.seed)
        self.net = _LSTMNet(self.hidden, self.layers)
        self.fitted = False

    def config(self) -> dict:
        return {"k": self.k, "hidden": self.hidden, "layers": self.layers, "epochs": self.epochs, "lr": self.lr,
                "batch_size": self.batch_size, "patience": self.patience, "tune_epochs": self.tune_epochs,
                "tune_lr": self.tune_lr, "scale": self.scale, "seed": self.seed}

    # ------------------------------------------------------------------------------------------------ training
    def _usable(self, y: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """(B, R) bool: (target, rank) pairs with a finite, positive target and last value before it."""
        targets = np.asarray(targets, dtype=np.int64)
        if targets.size == 0:
            return np.zeros((0, y.shape[0]), bool)
        last = last_valid(history_windows(y, targets, self.k).reshape(-1, self.k)).reshape(len(targets), -1)
        tgt = y[:, targets].T
        with np.errstate(invalid="ignore"):
            return (targets[:, None] >= 1) & np.isfinite(tgt) & (tgt > 0) & np.isfinite(last) & (last > 0)

    def _targets(self, y: np.ndarray, idx) -> np.ndarray:
        """The target iterations of ``idx`` with at least one usable pair."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        idx = idx[(idx >= 1) & (idx < y.shape[1])]
        return idx[self._usable(y, idx).any(axis=1)]

    def can_fit(self, series, train_idx) -> bool:
        return self._targets(np.asarray(series.y, dtype=np.float64), train_idx).size > 0

    def _loss_fn(self, series):
        y = np.asarray(series.y, dtype=np.float64)

        def loss(targets: np.ndarray) -> torch.Tensor:
            hist = history_windows(y, targets, self.k)          # (B, R, k)
            ok = self._usable(y, targets).reshape(-1)
            feats, last = relative_inputs(hist, self.scale)
            B, R = hist.shape[:2]
            xt = torch.from_numpy(feats.reshape(B * R, self.k, 3)[ok].astype(np.float32))
            tgt = torch.from_numpy(np.log(y[:, targets].T.reshape(-1)[ok] / last.reshape(-1)[ok]).astype(np.float32))
            return (self.net(xt) - tgt).abs().mean()

        return loss

    def fit(self, dataset, train_idx, val_idx=None, progress: bool = False, seed: int | None = None, **kw) -> dict:
        y = np.asarray(dataset.y, dtype=np.float64)
        tr = self._targets(y, train_idx)
        if self.scale is None:
            v = y[:, np.asarray(train_idx, dtype=np.int64)]
            v = v[np.isfinite(v) & (v > 0)]
            if v.size == 0:
                raise SurrogateError(f"lstm: no finite iteration time in the training window of job {dataset.job!r}")
            self.scale = float(np.median(v))
        torch.manual_seed(self.seed if seed is None else seed)
        va = None if val_idx is None else self._targets(y, val_idx)
        info = fit_loop(self.net, self._loss_fn(dataset), tr, va, epochs=self.epochs, lr=self.lr,
                        batch_size=self.batch_size, patience=self.patience, seed=self.seed, progress=progress,
                        desc=f"lstm {dataset.job}")
        self.fitted = True
        return info

    @property
    def tunable(self) -> bool:
        return self.fitted

    def _tune_targets(self, series, window_idx) -> np.ndarray:
        return self._targets(np.asarray(series.y, dtype=np.float64), window_idx)

    def _tune_plan(self) -> dict:
        return {"epochs": self.tune_epochs, "lr": self.tune_lr, "seed": self.seed, "shuffle": True}

    # ------------------------------------------------------------------------------------------------ predict
    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)
        if h.shape[1] < self.k:
            h = np.concatenate([np.full((h.shape[0], self.k - h.shape[1]), np.nan), h], axis=1)
        h = h[:, -self.k:]
        if self.scale is None:
            return last_valid(h)
        feats, last = relative_inputs(h, self.scale)
        self.net.eval()
        with torch.no_grad():
            out = self.net(torch.from_numpy(feats.astype(np.float32))).double().numpy()
        pred = last * np.exp(out)
        return np.where(np.isfinite(pred) & (pred > 0), pred, last)

    def _loaded(self) -> None:
        self.fitted = True
