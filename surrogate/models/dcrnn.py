"""DCRNN baseline: a diffusion-convolution GRU (Li et al., ICLR 2018) over the port graph.

Each of the last ``graph_lookback`` iterations is one step of the recurrence. Node input at a step: the iteration's
normalised port features plus, at the ports of the job's ranks, the rank's iteration time of that step relative to
its latest one (``log(y[s] / y[t])``) and a presence flag. The GRU gates use a real ``K``-step diffusion
convolution: ``DC(Z) = sum_k (D^-1 A)^k Z W_k`` with the port graph's random-walk matrix (symmetric graph, so the
forward and backward walks coincide). The final hidden state at each rank's port, concatenated with the rank's
relative history of ``k`` values, goes through a small MLP to ``log(y[t+1] / y[t])``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from hybridsim_common.topology import Dragonfly

from ..base import MAX_LAYERS, MAX_WIDTH, Context, SurrogateError, last_valid
from ..graphs import random_walk_matrix, shape_dict, shape_from_dict
from ..torch_surrogate import TorchSurrogate, fit_loop
from .lstm import history_windows, relative_inputs


class _DiffConv(nn.Module):
    def __init__(self, c_in: int, c_out: int, K: int):
        super().__init__()
        self.K = K
        self.lin = nn.Linear(c_in * (K + 1), c_out)

    def forward(self, z: torch.Tensor, P: torch.Tensor) -> torch.Tensor:  # z (B, N, C)
        B, N, C = z.shape
        outs = [z]
        cur = z.permute(1, 0, 2).reshape(N, B * C)
        for _ in range(self.K):
            cur = torch.sparse.mm(P, cur) if P.layout != torch.strided else P @ cur
            outs.append(cur.reshape(N, B, C).permute(1, 0, 2))
        return self.lin(torch.cat(outs, dim=-1))


class _DCGRUCell(nn.Module):
    def __init__(self, c_in: int, hidden: int, K: int):
        super().__init__()
        self.hidden = hidden
        self.gates = _DiffConv(c_in + hidden, 2 * hidden, K)
        self.cand = _DiffConv(c_in + hidden, hidden, K)

    def forward(self, x, h, P):
        ru = torch.sigmoid(self.gates(torch.cat([x, h], dim=-1), P))
        r, u = ru.chunk(2, dim=-1)
        c = torch.tanh(self.cand(torch.cat([x, r * h], dim=-1), P))
        return u * h + (1 - u) * c


class _DCRNNNet(nn.Module):
    def __init__(self, n_features: int, hidden: int, K: int, k_hist: int, layers: int = 1):
        super().__init__()
        c_in = n_features + 2
        self.cells = nn.ModuleList([_DCGRUCell(c_in if i == 0 else hidden, hidden, K) for i in range(layers)])
        self.head = nn.Sequential(nn.Linear(hidden + 3 * k_hist, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, node_in: torch.Tensor, rank_port: torch.Tensor, hist_feats: torch.Tensor, P) -> torch.Tensor:
        """node_in (B, S, N, C); rank_port (R,); hist_feats (B, R, 3k) -> (B, R) log ratio."""
        B, S, N, _ = node_in.shape
        hs = [node_in.new_zeros(B, N, c.hidden) for c in self.cells]
        for s in range(S):
            inp = node_in[:, s]
            for i, cell in enumerate(self.cells):
                hs[i] = cell(inp, hs[i], P)
                inp = hs[i]
        hr = hs[-1][:, rank_port]                                  # (B, R, hidden)
        return self.head(torch.cat([hr, hist_feats], dim=-1)).squeeze(-1)


class DCRNNSurrogate(TorchSurrogate):
    name = "dcrnn"
    needs_graphs = True
    shared = ("_P",)  # the sparse random-walk operator: read-only
    unbuilt = "checkpoint config lacks topology/n_features; cannot rebuild the network"
    bounds = {**TorchSurrogate.bounds, "K": MAX_LAYERS, "n_features": MAX_WIDTH}

    def __init__(self, graph_lookback: int = 4, k: int = 8, hidden: int = 16, K: int = 2, layers: int = 1,
                 epochs: int = 60, lr: float = 3e-3, batch_size: int = 4, patience: int = 10, tune_epochs: int = 2,
                 tune_lr: float = 1e-3, topology: dict | None = None, n_features: int | None = None,
                 scale: float | None = None, seed: int = 0):
        self.graph_lookback, self.k = int(graph_lookback), int(k)
        self.lookback = max(self.k, self.graph_lookback)
        self.hidden, self.K, self.layers = int(hidden), int(K), int(layers)
        self.epochs, self.lr, self.batch_size, self.patience = int(epochs), float(lr), int(batch_size), int(patience)
        self.tune_epochs, self.tune_lr = int(tune_epochs), float(tune_lr)
        self.topology, self.n_features, self.scale, self.seed = topology, n_features, scale, int(seed)
        self.net: _DCRNNNet | None = None
        self._P = None
        if topology is not None and n_features is not None:
            self._build()

    def config(self) -> dict:
        return {"graph_lookback": self.graph_lookback, "k": self.k, "hidden": self.hidden, "K": self.K,
                "layers": self.layers, "epochs": self.epochs, "lr": self.lr, "batch_size": self.batch_size,
                "patience": self.patience, "tune_epochs": self.tune_epochs, "tune_lr": self.tune_lr,
                "topology": self.topology, "n_features": self.n_features, "scale": self.scale, "seed": self.seed}

    def _build(self) -> None:
        torch.manual_seed(self.seed)
        self.net = _DCRNNNet(int(self.n_features), self.hidden, self.K, self.k, self.layers)
        topo = Dragonfly(shape_from_dict(self.topology))
        self.n_ports = topo.n_ports
        self._P = random_walk_matrix(topo)

    # ------------------------------------------------------------------------------------------------ inputs
    def _inputs(self, graphs: np.ndarray, hist: np.ndarray, rank_port: np.ndarray):
        """graphs (B, Lg, P, F) float32; hist (B, R, L) raw ns (L >= lookback) -> tensors and last (B, R)."""
        B, Lg, P, F = graphs.shape
        if P != self.n_ports or F != self.n_features:
            raise SurrogateError(f"dcrnn: graphs have {P} ports x {F} features, the model was built for "
                                 f"{self.n_ports} x {self.n_features} (topology {self.topology})")
        feats, last = relative_inputs(hist[..., -self.k:], self.scale)           # (B, R, k, 3)
        # time channel at rank ports for the graph steps
        g_hist = hist[..., -Lg:]                                                  # (B, R, Lg)
        present = ~np.isnan(g_hist)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(present, np.log(g_hist / last[..., None]), 0.0)
        rel = np.nan_to_num(rel, nan=0.0, posinf=0.0, neginf=0.0)
        extra = np.zeros((B, Lg, P, 2), np.float32)
        extra[:, :, rank_port, 0] = np.transpose(rel, (0, 2, 1))
        extra[:, :, rank_port, 1] = np.transpose(present, (0, 2, 1))
        node_in = torch.from_numpy(np.concatenate([graphs.astype(np.float32), extra], axis=-1))
        hf = torch.from_numpy(feats.reshape(B, feats.shape[1], -1).astype(np.float32))
        return node_in, hf, last

    def _batch(self, series, targets: np.ndarray):
        y = np.asarray(series.y, dtype=np.float64)
        T = series.T
        gi = np.clip(targets[:, None] - self.graph_lookback + np.arange(self.graph_lookback)[None, :], 0, T - 1)
        graphs = series.x[gi]                                                      # (B, Lg, P, F)
        hist = history_windows(y, targets, self.lookback)                          # (B, R, L)
        return graphs, hist

    def _loss_fn(self, series):
        y = np.asarray(series.y, dtype=np.float64)
        rp = torch.from_numpy(np.asarray(series.rank_port, dtype=np.int64))
        rank_port = np.asarray(series.rank_port, dtype=np.int64)

        def loss(targets: np.ndarray) -> torch.Tensor:
            graphs, hist = self._batch(series, targets)
            node_in, hf, last = self._inputs(graphs, hist, rank_port)
            out = self.net(node_in, rp, hf, self._P)
            tgt = torch.from_numpy(np.log(y[:, targets].T / last).astype(np.float32))
            return (out - tgt).abs().mean()

        return loss

    def _check_series(self, series) -> None:
        sd = shape_dict(series.shape)
        if self.topology is not None and self.topology != sd:
            raise SurrogateError(f"dcrnn: model built for topology {self.topology}, dataset is {sd}")
        if self.n_features is not None and self.n_features != series.n_features:
            raise SurrogateError(f"dcrnn: model built for {self.n_features} node features, dataset has "
                                 f"{series.n_features}")

    def fit(self, dataset, train_idx, val_idx=None, progress: bool = False, seed: int | None = None, **kw) -> dict:
        self._check_series(dataset)
        self.topology = shape_dict(dataset.shape)
        self.n_features = dataset.n_features
        if self.scale is None:
            self.scale = float(np.median(np.asarray(dataset.y)[:, np.asarray(train_idx)]))
        self._build()
        tr = np.asarray(train_idx, dtype=np.int64)
        tr = tr[tr >= 1]
        va = None if val_idx is None else np.asarray(val_idx, dtype=np.int64)
        return fit_loop(self.net, self._loss_fn(dataset), tr, va, epochs=self.epochs, lr=self.lr,
                        batch_size=self.batch_size, patience=self.patience, seed=self.seed, progress=progress,
                        desc=f"dcrnn {dataset.job}")

    def _tune_targets(self, series, window_idx) -> np.ndarray:
        self._check_series(series)
        w = np.asarray(window_idx, dtype=np.int64)
        return w[w >= 1]

    def _tune_plan(self) -> dict:
        return {"epochs": self.tune_epochs, "lr": self.tune_lr, "seed": self.seed, "shuffle": True}

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)
        if self.net is None:
            return last_valid(h)
        if ctx.graphs is None:
            raise SurrogateError("dcrnn: needs the port graphs of the context (Context.graphs)")
        if h.shape[1] < self.lookback:
            h = np.concatenate([np.full((h.shape[0], self.lookback - h.shape[1]), np.nan), h], axis=1)
        g = np.asarray(ctx.graphs)
        if g.shape[0] < self.graph_lookback:
            g = np.concatenate([np.repeat(g[:1], self.graph_lookback - g.shape[0], axis=0), g], axis=0)
        g = g[-self.graph_lookback:]
        if not np.isfinite(g).all():
            raise SurrogateError("dcrnn: non-finite node features in the context graphs")
        rank_port = np.asarray(ctx.rank_port, dtype=np.int64)
        node_in, hf, last = self._inputs(g[None], h[None], rank_port)
        self.net.eval()
        with torch.no_grad():
            out = self.net(node_in, torch.from_numpy(rank_port), hf, self._P)[0].double().numpy()
        pred = last[0] * np.exp(out)
        return np.where(np.isfinite(pred) & (pred > 0), pred, last[0])
