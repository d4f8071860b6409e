"""SMART (Surrogate Model for predicting Application RunTime): GCN + temporal transformer + Time-LLM, and its
ablation without the LLM branch.

For a job with R ranks (rank r attached to port p_r), Lg graphs of the look-back (P ports, F features) and each
rank's last L iteration times y_r::

    H_i  = GCN(X_i, Â)                       i = t-Lg+1..t         per-port embeddings (only ports p_r are needed;
                                                                    the GCN is pruned to their receptive field)
    z_r  = Transformer([H_i[p_r] + PE(i)]_i)[-1]                   (hidden,)   temporal node embedding
    ŷ_r  = exp( TimeLLM(log y_r ; prompt(workload, stats) ; extra = z_r) )       next iteration time

``TimeLLM`` (:mod:`surrogate.models.timellm`) normalises the look-back (RevIN), patches, embeds and reprograms it
onto text prototypes of the frozen LM, runs it behind the prompt through the frozen LM, concatenates the last
hidden state with ``z_r`` (SMART's fusion of the LLM state with the active node's embedding) and with the normalised
look-back itself (a linear autoregressive skip, so SMART contains its no-LLM ablation as a special case) and maps
that through one linear layer to the normalised next value, which is de-normalised. Everything but the frozen LM
trains end to end (L1 loss on log times, i.e. relative error, the MAPE the paper reports).

``smart-nollm`` (the ablation) drops the LLM branch: ``ŷ_r = exp(denorm(W [z_r ; x̂_r] + b))`` with x̂_r the
RevIN-normalised look-back (the linear map of the look-back stands in for the LLM state).

Both predict in log space relative to each rank's last value (scale robust; one model serves ranks whose times
differ by orders of magnitude). Histories shorter than L are back-filled with their first value.

Job context (``job_context=True``, the default; an addition to the paper's model): a rank's look-back alone cannot
tell its own skew from the job's trend (a rank that waited for a late neighbour catches up in the next iteration;
the whole job slows down while another job's traffic passes), and the paper's per-rank inputs hide the other ranks.
So the prediction becomes ``base_r + (network_r - mean(look-back_r))``, where ``base_r`` is a linear
autoregression on the rank's look-back and the job's mean look-back (both relative to the rank's last value),
fitted in closed form on the training split with its lags and ridge penalty chosen on the validation split, and
shrunk towards the plain look-back mean. The untrained network then reproduces the base, and training (and online
tuning) learns the residual. ``job_context=False`` gives the paper's model.

No graph (``use_graph=False``, an ablation): the GCN and the temporal transformer are not built and ``z_r`` is only
the look-back's level features, so the prediction comes from the look-back alone (base, LLM or linear head). The model
still declares ``needs_graphs`` (a class-level property of the surrogate interface, and the graph series gives it the
topology it is built for); it ignores the graphs it is given.

No load features (``port_features=False``, an ablation): the GCN and the temporal transformer are kept, but every
port's feature vector is replaced by a constant (all ones) before the GCN, so ``z_r`` can only carry what the
router-port topology (through ``Â``'s degree normalisation and the rank's port) and the job's own look-back tell;
the measured per-port loads (the co-runners' traffic) cannot reach the prediction. Against the full model it shows
what the load features add; against ``use_graph=False`` what the graph's structure adds on its own.
"""

from __future__ import annotations

import copy
import inspect
import math

import numpy as np
import torch
from torch import nn

from ..base import MAX_BATCH, MAX_EPOCHS, MAX_LAYERS, MAX_WIDTH, Context, SurrogateError
from ..torch_surrogate import TorchSurrogate, evaluate_loss, fit_loop
from .gcn import GCNEncoder
from .timellm import RevIN, TimeLLM, make_head, reset_head

#: a tune step uses this many times ``ranks_per_window`` ranks: a window has few target iterations, so more ranks
#: per step keep its gradient about as averaged as a fit step's
TUNE_RANKS_FACTOR = 4

#: a fit without validation targets (the hybrid loop's) on fewer training targets than this keeps the untrained net
#: (it predicts the look-back's geometric mean): fitted on a warm-up of a few iterations, its chain of predictions drifts
MIN_UNVALIDATED_TARGETS = 5

_LM_CACHE: dict = {}


def frozen_lm(path, n_layers, dtype="float32"):
    """Shared :class:`~surrogate.llm.FrozenLM` per (path, layers, dtype): frozen, so all models may use one."""
    from ..llm import FrozenLM, resolve_lm_path

    key = (str(resolve_lm_path(path)), n_layers, dtype)
    lm = _LM_CACHE.get(key)
    if lm is None:
        lm = _LM_CACHE[key] = FrozenLM(path, n_layers, dtype)
    return lm


def positional_encoding(n: int, d: int) -> torch.Tensor:
    """Sinusoidal positional encoding (n, d) (Vaswani et al.)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return pe


class SmartNet(nn.Module):
    """The trainable network (the frozen LM is referenced by ``timellm`` but is not part of this module's state).

    Shapes: ``forward(graphs (B, Lg, P, F), ports (r,) np.int64, logh (B, r, L), workload) -> (B, r)`` predicted
    log next iteration time relative to the inputs' frame (``logh`` is log time minus each row's last log time)."""

    def __init__(self, in_features: int, adjacency, lookback: int = 8, hidden: int = 64, gcn_layers: int = 3,
                 tf_heads: int = 4, tf_layers: int = 1, tf_ff: int = 128, head_hidden: int = 0, lm=None,
                 timellm_kw: dict | None = None, job_context: bool = True, use_graph: bool = True,
                 port_features: bool = True):
        super().__init__()
        self.hidden, self.lookback = hidden, lookback
        self.use_graph = bool(use_graph)
        #: False: the no-load-features ablation (constant node features; see the module docstring)
        self.port_features = bool(port_features)
        emb = hidden if self.use_graph else 0  # size of the graph embedding z_r joins the head with
        if self.use_graph:
            self.gcn = GCNEncoder(in_features, hidden, gcn_layers, adjacency)
            self.register_buffer("pe", positional_encoding(64, hidden), persistent=False)
            layer = nn.TransformerEncoderLayer(hidden, tf_heads, tf_ff, dropout=0.0, batch_first=True)
            self.temporal = nn.TransformerEncoder(layer, tf_layers, enable_nested_tensor=False)
        #: log of the job's typical iteration time (training median), for the absolute-level features
        self.register_buffer("log_scale", torch.zeros(()))
        if lm is not None:
            self.timellm = TimeLLM(lm, lookback=lookback, extra_dim=emb + 2, head_hidden=head_hidden,
                                   **(timellm_kw or {}))
        else:
            self.timellm = None
            self.revin = RevIN()
            self.head = make_head(emb + 2 + lookback, head_hidden)
        self.job_context = bool(job_context)
        if self.job_context:
            #: the job-relative linear base (see ``forward``): weights of [own look-back, job look-back] and the bias,
            #: fitted in closed form by :meth:`Smart.fit` (buffers: saved, not trained)
            self.register_buffer("base_w", torch.zeros(2 * lookback))
            self.register_buffer("base_b", torch.zeros(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.use_graph:
            self.gcn.reset_parameters()
            for layer in self.temporal.layers:
                layer.self_attn._reset_parameters()
                for lin in (layer.linear1, layer.linear2):
                    lin.reset_parameters()
                layer.norm1.reset_parameters()
                layer.norm2.reset_parameters()
        if self.timellm is not None:
            self.timellm.reset_parameters()
        else:
            self.revin.reset_parameters()
            reset_head(self.head)  # starts close to the look-back's (geometric) mean

    def node_embeddings(self, graphs: torch.Tensor, ports: np.ndarray) -> torch.Tensor:
        B, Lg, P, F = graphs.shape
        r = len(ports)
        if not self.port_features:  # the ablation: topology only, the measured loads never reach the GCN
            graphs = torch.ones_like(graphs)
        h = self.gcn(graphs.reshape(B * Lg, P, F), ports)  # (B*Lg, r, H)
        h = h.view(B, Lg, r, self.hidden).permute(0, 2, 1, 3).reshape(B * r, Lg, self.hidden)
        return self.temporal(h + self.pe[:Lg])[:, -1]  # (B*r, H)

    def forward(self, graphs: torch.Tensor | None, ports: np.ndarray, logh: torch.Tensor, workload: str,
                last: torch.Tensor, jobh: torch.Tensor | None = None) -> torch.Tensor:
        """``last`` (B, r): each row's last log iteration time (absolute). Instance normalisation hides the absolute
        level, so ``[log(mean/scale), std]`` of the look-back join the head's inputs (level relative to the job's
        training median: a slow rank or a congested phase is recognisable).

        ``jobh`` (B, r, L): the job's mean log look-back (over all its ranks) minus each row's last log time. A rank's
        look-back alone cannot tell its own skew from the job's trend (ranks that waited for a late neighbour catch
        up in the next iteration; the whole job slows down when another job's traffic arrives). With
        ``job_context`` the prediction is a linear autoregression on ``[logh ; jobh]`` (fitted in closed form on the
        training split) plus what the network adds to the look-back mean: ``base + (net - mean(logh))``, so the
        untrained network reproduces the linear base and training only has to learn the residual.

        Without ``use_graph`` ``graphs`` is not read (may be None) and ``z`` is the level features alone."""
        B, r, L = logh.shape
        lvl = torch.stack([logh.mean(-1) + last - self.log_scale, logh.std(-1, unbiased=False)], dim=-1)
        z = lvl.reshape(B * r, 2)
        if self.use_graph:
            z = torch.cat([self.node_embeddings(graphs, ports), z], dim=-1)
        if self.timellm is not None:
            protos = self.timellm.prototypes()  # once per step (a (d_llm x vocab) @ (vocab x K) product)
            outs = [self.timellm(logh[b], workload, extra=z[b * r:(b + 1) * r], protos=protos) for b in range(B)]
            out = torch.stack(outs)
        else:
            x = logh.reshape(B * r, L)
            xn, mu, sigma = self.revin.norm(x)
            out = self.head(torch.cat([z, xn], dim=-1)).squeeze(-1)
            out = self.revin.denorm(out[:, None], mu, sigma).view(B, r)
        if self.job_context:
            if jobh is None:
                raise ValueError("job_context needs jobh")
            out = out - logh.mean(-1) + self.linear_base(logh, jobh)
        return out

    def linear_base(self, logh: torch.Tensor, jobh: torch.Tensor) -> torch.Tensor:
        L = self.lookback
        return logh @ self.base_w[:L] + jobh @ self.base_w[L:] + self.base_b


class Smart(TorchSurrogate):
    """SMART. Constructor arguments (all JSON-able, saved in the checkpoint config):

    Architecture: ``lookback`` (LLM look-back L, default 8), ``graph_lookback`` (GNN look-back Lg, 2), ``hidden``
    (64), ``gcn_layers`` (3), ``tf_heads``/``tf_layers``/``tf_ff`` (temporal transformer), ``llm_path`` (local Hugging
    Face checkpoint folder; default the packaged all-MiniLM-L6-v2), ``llm_layers`` (LM layers kept, default 1),
    ``llm_dtype`` (``bfloat16`` default, as Time-LLM runs its LLM; or ``float32``), ``job_context`` (True: a linear
    path from the job's mean look-back, see :meth:`SmartNet.forward`; False: the paper's per-rank inputs only),
    ``use_graph`` (True; False: the no-graph ablation, no GCN or temporal transformer, graphs ignored),
    ``port_features`` (True; False: the no-load-features ablation, the GCN sees a constant feature on every port, so
    only the topology and the job's own look-back remain),
    Time-LLM ``patch_len``/``stride``/``d_model``/``n_heads``/``d_keys``/``n_prototypes``/``top_k_lags``/
    ``prompt_decimals``.
    Training: ``epochs``, ``lr``, ``batch_windows`` (iterations per step), ``ranks_per_window`` (ranks sampled per
    training step), ``patience`` (early stopping on the validation split; the untrained net, which predicts about the
    look-back's geometric mean, is kept if no epoch beats it on validation), ``weight_decay``,
    ``tune_steps``/``tune_lr`` (online tuning),
    ``seed``. Set by ``fit``: ``topology`` (shape dict), ``in_features``.
    """

    name = "smart"
    needs_graphs = True
    use_llm = True
    shared = ("lm",)  # the frozen language model: one for all copies
    unbuilt = "checkpoint has weights but no topology/in_features in its config"
    bounds = {**TorchSurrogate.bounds, "gcn_layers": MAX_LAYERS, "tf_heads": MAX_LAYERS, "tf_layers": MAX_LAYERS,
              "tf_ff": MAX_WIDTH, "head_hidden": MAX_WIDTH, "llm_layers": MAX_LAYERS, "patch_len": MAX_WIDTH,
              "stride": MAX_WIDTH, "d_model": MAX_WIDTH, "n_heads": MAX_LAYERS, "d_keys": MAX_WIDTH,
              "n_prototypes": MAX_WIDTH, "top_k_lags": MAX_WIDTH, "prompt_decimals": 16, "batch_windows": MAX_BATCH,
              "ranks_per_window": MAX_BATCH, "tune_steps": MAX_EPOCHS, "in_features": MAX_WIDTH}

    def __init__(self, lookback: int = 8, graph_lookback: int = 2, hidden: int = 64, gcn_layers: int = 3,
                 tf_heads: int = 4, tf_layers: int = 1, tf_ff: int = 128, head_hidden: int = 0,
                 llm_path: str | None = None,
                 llm_layers: int | None = 1, llm_dtype: str = "bfloat16", patch_len: int = 4, stride: int = 4,
                 d_model: int = 32,
                 n_heads: int = 4, d_keys: int = 16, n_prototypes: int = 64, top_k_lags: int = 3,
                 prompt_decimals: int = 1, epochs: int = 60, lr: float = 2e-3, batch_windows: int = 8,
                 ranks_per_window: int = 64, patience: int = 8, weight_decay: float = 1e-4, tune_steps: int = 4,
                 tune_lr: float = 1e-4, seed: int = 0, topology: dict | None = None, in_features: int | None = None,
                 job_context: bool = True, use_graph: bool = True, port_features: bool = True):
        self.lookback, self.graph_lookback = int(lookback), int(graph_lookback)
        if self.lookback < 1 or self.graph_lookback < 1:
            raise SurrogateError(f"{self.name}: lookback and graph_lookback must be >= 1")
        self.arch = dict(hidden=int(hidden), gcn_layers=int(gcn_layers), tf_heads=int(tf_heads),
                         tf_layers=int(tf_layers), tf_ff=int(tf_ff), head_hidden=int(head_hidden),
                         job_context=bool(job_context), use_graph=bool(use_graph),
                         port_features=bool(port_features))
        self.llm_path = None if llm_path is None else str(llm_path)
        self.llm_layers = None if llm_layers is None else int(llm_layers)
        self.llm_dtype = str(llm_dtype)
        self.timellm_kw = dict(patch_len=int(patch_len), stride=int(stride), d_model=int(d_model),
                               n_heads=int(n_heads), d_keys=int(d_keys), n_prototypes=int(n_prototypes),
                               top_k_lags=int(top_k_lags), prompt_decimals=int(prompt_decimals))
        self.train_kw = dict(epochs=int(epochs), lr=float(lr), batch_windows=int(batch_windows),
                             ranks_per_window=int(ranks_per_window), patience=int(patience),
                             weight_decay=float(weight_decay), tune_steps=int(tune_steps), tune_lr=float(tune_lr),
                             seed=int(seed))
        self.topology = dict(topology) if topology else None
        self.in_features = None if in_features is None else int(in_features)
        self.net: SmartNet | None = None
        self.lm = None
        self._rng = np.random.default_rng(self.train_kw["seed"])
        self._logy_src = None  # the series.y the log cache was computed from
        if self.topology is not None and self.in_features is not None:
            self._build()

    # ------------------------------------------------------------------------------------------------ setup
    def config(self) -> dict:
        cfg = {"lookback": self.lookback, "graph_lookback": self.graph_lookback, **self.arch}
        if self.use_llm:
            cfg.update(llm_path=self.llm_path, llm_layers=self.llm_layers, llm_dtype=self.llm_dtype, **self.timellm_kw)
        cfg.update(self.train_kw)
        cfg.update(topology=self.topology, in_features=self.in_features)
        return cfg

    def _build(self) -> None:
        from hybridsim_common.topology import Dragonfly

        from ..graphs import normalized_adjacency, shape_from_dict

        topo = Dragonfly(shape_from_dict(self.topology))
        self.n_ports = topo.n_ports
        if self.use_llm:
            self.lm = frozen_lm(self.llm_path, self.llm_layers, self.llm_dtype)
        with torch.random.fork_rng():
            torch.manual_seed(self.train_kw["seed"])
            self.net = SmartNet(self.in_features, normalized_adjacency(topo), lookback=self.lookback, lm=self.lm,
                                timellm_kw=self.timellm_kw if self.use_llm else None, **self.arch)
        self.net.eval()

    def _bind(self, series) -> None:
        from ..graphs import shape_dict

        F = int(series.n_features)
        if series.shape is None:  # e.g. the gRPC service's series: the model must already be built for a topology
            if self.net is None:
                raise SurrogateError(f"{self.name}: job {series.job!r}'s series does not give its topology; create "
                                     "the model with topology and in_features in its config")
            if F != self.in_features:
                raise SurrogateError(f"{self.name}: model was built for {self.in_features} features; job "
                                     f"{series.job!r} has {F}")
            return
        topo = shape_dict(series.shape)
        if self.net is not None:
            if topo != self.topology or F != self.in_features:
                raise SurrogateError(f"{self.name}: model was built for topology {self.topology} with "
                                     f"{self.in_features} features; job {series.job!r} has {topo} with {F}")
            return
        self.topology, self.in_features = topo, F
        self._build()

    # ------------------------------------------------------------------------------------------- batching
    def _history(self, logy: np.ndarray, t: int) -> np.ndarray:
        """log y of columns t-L+1..t (left edge clamped to 0 = back-fill with the first value) -> (R, L)."""
        cols = np.clip(np.arange(t - self.lookback + 1, t + 1), 0, None)
        return logy[:, cols]

    def _batch(self, series, items: np.ndarray, ranks: np.ndarray):
        """Target iterations ``items`` -> graphs (B, Lg, P, F), logh rel (B, r, L), target log rel (B, r), last log
        (B, r), job mean look-back rel (B, r, L) (the mean over all the job's ranks, also when ``ranks`` is a
        sample, as :meth:`predict` sees it)."""
        arrays = self._batch_arrays(series, items, ranks, graphs=self.arch["use_graph"])
        return tuple(None if a is None else torch.from_numpy(a).float() for a in arrays)

    def _batch_arrays(self, series, items: np.ndarray, ranks: np.ndarray, graphs: bool = True):
        logy = self._logy_cache(series)
        jm = self._logy_jobmean
        g, h, tgt, last, jh = [], [], [], [], []
        for t in np.asarray(items, dtype=np.int64):
            c = int(t) - 1
            if graphs:
                gi = np.clip(np.arange(c - self.graph_lookback + 1, c + 1), 0, series.T - 1)
                g.append(series.x[gi])
            hh = self._history(logy, c)[ranks]
            h.append(hh - hh[:, -1:])
            tgt.append(logy[ranks, t] - hh[:, -1])
            last.append(hh[:, -1])
            jh.append(self._history(jm[None], c) - hh[:, -1:])
        return (np.stack(g) if graphs else None, np.stack(h), np.stack(tgt), np.stack(last), np.stack(jh))

    def _logy_cache(self, series):
        if self._logy_src is not series.y:
            y = np.asarray(series.y, dtype=np.float64)
            if not np.isfinite(y).all() or (y <= 0).any():
                raise SurrogateError(f"job {series.job!r}: iteration times must be positive and finite")
            self._logy, self._logy_src = np.log(y), series.y
            self._logy_jobmean = self._logy.mean(axis=0)
        return self._logy

    def _loss_fn(self, series, ranks_per_step: int):
        R = series.R
        ports_all = np.asarray(series.rank_port, dtype=np.int64)

        def loss(items):
            if self.net.training and R > ranks_per_step:
                ranks = np.sort(self._rng.choice(R, ranks_per_step, replace=False))
            else:
                ranks = np.arange(R)
            g, h, tgt, last, jh = self._batch(series, items, ranks)
            pred = self.net(g, ports_all[ranks], h, series.workload, last, jh)
            return (pred - tgt).abs().mean()

        return loss

    @staticmethod
    def _items(series, idx) -> np.ndarray:
        idx = np.asarray(idx if idx is not None else [], dtype=np.int64)
        return idx[(idx >= 1) & (idx < series.T)]

    # ------------------------------------------------------------------------------------------- interface
    def fit(self, dataset, train_idx, val_idx=None, progress: bool = False, seed: int | None = None, **kw) -> dict:
        self._bind(dataset)
        self._check_features(dataset.x[np.unique(np.clip(self._items(dataset, train_idx) - 1, 0, None))],
                             f"job {dataset.job!r} train graphs")
        items = self._items(dataset, train_idx)
        if items.size == 0:
            raise SurrogateError(f"{self.name}: no training targets for job {dataset.job!r} (need iterations >= 1)")
        val = self._items(dataset, val_idx)
        tk = self.train_kw
        tr = np.unique(np.clip(np.concatenate([items - 1, items]), 0, dataset.T - 1))
        self.net.log_scale.fill_(float(np.median(self._logy_cache(dataset)[:, tr])))
        if not val.size and items.size < MIN_UNVALIDATED_TARGETS:
            self.net.eval()
            return {"epochs": 0, "kept_prior": True, "targets": int(items.size)}
        base = self._fit_base(dataset, items, val) if self.net.job_context else None
        loss_fn = self._loss_fn(dataset, tk["ranks_per_window"])
        init_val, init_state = None, None
        if val.size:  # the untrained net predicts the linear base (or the look-back's geometric mean); keep the better
            init_val = evaluate_loss(self.net, loss_fn, val, tk["batch_windows"])
            init_state = copy.deepcopy(self.net.state_dict())
        info = fit_loop(self.net, loss_fn, items, val if val.size else None,
                        epochs=tk["epochs"], lr=tk["lr"], batch_size=tk["batch_windows"], patience=tk["patience"],
                        seed=tk["seed"] if seed is None else seed, progress=progress, desc=f"{self.name} {dataset.job}",
                        weight_decay=tk["weight_decay"])
        info["init_val"] = init_val
        if base is not None:
            info["base"] = base
        if init_val is not None and info.get("best_val") is not None and info["best_val"] > init_val:
            self.net.load_state_dict(init_state)
            info["restored_init"] = True
        self.net.eval()
        return info

    #: ridge penalties tried for the linear base (relative to the mean diagonal of X'X); the largest is the prior
    BASE_RIDGE = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 1e4)

    def _fit_base(self, series, items: np.ndarray, val: np.ndarray) -> dict:
        """Closed-form ridge fit of the job-relative linear base on the training targets (all ranks), in the same
        log-relative frame as the network: target log y[t] - log y[t-1], inputs each rank's look-back and the job's
        mean look-back relative to log y[t-1]. The weights shrink towards the prior "look-back mean" (own weights
        1/L, job weights 0: what the network predicts without the base), so a large penalty gives back the plain
        model. Only the newest ``k`` lags of each look-back are refitted (the rest keep the prior); ``k`` (2, 4, ..., L)
        and the penalty (relative to the mean diagonal of X'X, from :attr:`BASE_RIDGE`) are chosen by the mean
        absolute error on the validation targets. Without validation targets (the hybrid loop's fit) the base stays at
        the prior: an unchosen fit did worse than the plain model in the loop (benchmarks/RESULTS.md)."""
        L = self.lookback
        prior = np.concatenate([np.full(L, 1.0 / L), np.zeros(L + 1)])
        if not val.size:  # nothing to choose lags and penalty on (e.g. the hybrid loop's fit): the plain model
            w, k, lam, errs = prior, 0, float("inf"), {}
        else:
            w, k, lam, errs = self._solve_base(series, items, val, prior)
        self.net.base_w.copy_(torch.from_numpy(w[:-1]).float())
        self.net.base_b.fill_(float(w[-1]))
        return {"lags": k, "ridge": lam, "val_mae": errs.get((k, lam))}

    def _solve_base(self, series, items: np.ndarray, val: np.ndarray, prior: np.ndarray):
        """The grid of :meth:`_fit_base`: -> (weights, lags, penalty, validation MAE per (lags, penalty))."""
        L = self.lookback

        def design(idx):
            _, h, tgt, _, jh = self._batch_arrays(series, idx, np.arange(series.R), graphs=False)
            X = np.concatenate([h, jh, np.ones(h.shape[:2] + (1,))], axis=-1).reshape(-1, 2 * L + 1)
            return X, tgt.reshape(-1)

        X, y = design(items)
        A_all, rhs_all = X.T @ X, X.T @ (y - X @ prior)
        scale = float(np.mean(np.diag(A_all)[:L])) + 1e-12

        def solve(k, lam):
            cols = np.r_[np.arange(L - k, L), np.arange(2 * L - k, 2 * L), 2 * L]
            A, rhs = A_all[np.ix_(cols, cols)], rhs_all[cols]
            reg = np.full(len(cols), lam * scale)
            reg[-1] = 1e-9 * scale  # the bias is (almost) not penalised
            w = prior.copy()
            w[cols] += np.linalg.solve(A + np.diag(reg), rhs)
            return w

        Xv, yv = design(val)
        ks = sorted({min(k, L) for k in (2, 4, L)})
        errs = {(k, lam): float(np.mean(np.abs(Xv @ solve(k, lam) - yv))) for k in ks for lam in self.BASE_RIDGE}
        k, lam = min(errs, key=errs.get)
        return solve(k, lam), k, lam, errs

    # online tuning (TorchSurrogate.tune): ``tune_steps`` Adam steps on the target iterations of the window, all of
    # them per step, in their order
    def _tune_targets(self, series, window_idx) -> np.ndarray:
        self._bind(series)
        return self._items(series, window_idx)

    def _tune_loss(self, series):
        return self._loss_fn(series, TUNE_RANKS_FACTOR * self.train_kw["ranks_per_window"])

    def _tune_plan(self) -> dict:
        tk = self.train_kw
        return {"epochs": tk["tune_steps"], "lr": tk["tune_lr"], "seed": tk["seed"], "shuffle": False}

    def _check_features(self, x: np.ndarray, what: str) -> None:
        if not np.isfinite(x).all():
            bad = np.argwhere(~np.isfinite(x))[0]
            where = tuple(int(v) for v in bad)
            raise SurrogateError(f"{self.name}: non-finite node feature in {what} at index {where}")

    def predict(self, ctx: Context) -> np.ndarray:
        if self.net is None:
            raise SurrogateError(f"{self.name}: predict before fit (or load a checkpoint)")
        if ctx.graphs is None or ctx.rank_port is None:
            raise SurrogateError(f"{self.name}: needs graphs and rank_port in the context (job {ctx.job!r})")
        g = np.asarray(ctx.graphs)
        if g.ndim != 3 or g.shape[1] != self.n_ports or g.shape[2] != self.in_features:
            raise SurrogateError(f"{self.name}: graphs of shape {g.shape} do not fit the model ({self.n_ports} ports "
                                 f"x {self.in_features} features, topology {self.topology}); dataset of another "
                                 f"topology?")
        self._check_features(g, f"job {ctx.job!r} graphs")
        if g.shape[0] >= self.graph_lookback:
            g = g[-self.graph_lookback:]
        else:
            g = np.concatenate([np.repeat(g[:1], self.graph_lookback - g.shape[0], axis=0), g])
        h = np.asarray(ctx.history, dtype=np.float64)
        ports = np.asarray(ctx.rank_port, dtype=np.int64)
        if h.ndim != 2 or h.shape[0] != ports.shape[0]:
            raise SurrogateError(f"{self.name}: history {h.shape} does not match {ports.shape[0]} ranks")
        if ports.size and (ports.min() < 0 or ports.max() >= self.n_ports):
            raise SurrogateError(f"{self.name}: rank_port outside 0..{self.n_ports - 1}")
        h = _backfill(h, self.lookback, ctx.job)
        logh = np.log(h)
        rel = logh - logh[:, -1:]
        jobh = logh.mean(axis=0)[None, :] - logh[:, -1:]
        t = lambda a: torch.from_numpy(a).float()[None]  # noqa: E731
        with torch.no_grad():
            graphs = t(g) if self.arch["use_graph"] else None
            out = self.net(graphs, ports, t(rel), ctx.workload, t(logh[:, -1]), t(jobh))[0]
        return np.exp(out.double().numpy() + logh[:, -1])


def _backfill(h: np.ndarray, L: int, job: str) -> np.ndarray:
    """Last L columns of h (R, L'); NaN on the left replaced by each row's first valid value; checks positivity."""
    if h.shape[1] >= L:
        h = h[:, -L:]
    else:
        h = np.concatenate([np.full((h.shape[0], L - h.shape[1]), np.nan), h], axis=1)
    ok = np.isfinite(h)
    if not ok.any(axis=1).all():
        r = int(np.argmin(ok.any(axis=1)))
        raise SurrogateError(f"job {job!r}: rank {r} has no finite iteration time in its history")
    if (h[ok] <= 0).any():
        raise SurrogateError(f"job {job!r}: iteration times must be positive")
    cols = np.where(ok, np.arange(h.shape[1])[None, :], -1)
    cols = np.maximum.accumulate(cols, axis=1)  # forward fill gaps with the previous valid value
    first = np.argmax(ok, axis=1)
    cols = np.where(cols < 0, first[:, None], cols)  # leading NaN: back-fill with the first valid value
    h = np.take_along_axis(h, cols, axis=1)
    return h


#: Smart's options of the Time-LLM branch (what :class:`SmartNoLLM` does not take)
LLM_OPTIONS = ("llm_path", "llm_layers", "llm_dtype", "patch_len", "stride", "d_model", "n_heads", "d_keys",
               "n_prototypes", "top_k_lags", "prompt_decimals")


class SmartNoLLM(Smart):
    """SMART without the Time-LLM branch (ablation): GCN + temporal transformer + a linear map of the look-back. Takes
    :class:`Smart`'s options but those of the LLM (:data:`LLM_OPTIONS`)."""

    name = "smart-nollm"
    use_llm = False
    __signature__ = inspect.signature(Smart).replace(
        parameters=[p for p in inspect.signature(Smart).parameters.values() if p.name not in LLM_OPTIONS])

    def __init__(self, **options):
        llm = [k for k in options if k in LLM_OPTIONS]
        if llm:
            raise SurrogateError(f"{self.name}: unknown config key {llm[0]!r} (it has no LLM branch)")
        super().__init__(**options)
