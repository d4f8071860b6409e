"""Port graphs of a Dragonfly and the per-iteration node features built on them.

The graph (SMART's rule): nodes are router ports (global port id ``router * radix + port``); all ports of a router are
fully connected, plus both directions of every local and global link (:meth:`hybridsim_common.topology.Dragonfly.port_graph_edges`).

Node features of one iteration: for every port feature, the min, max, mean, 25 % and 75 % quantiles (linear
interpolation, as ``numpy.quantile``) and the last value of the port samples whose sampling window overlaps the
iteration window *and ends by the iteration's end* (causal: a rank's next iteration starts no earlier than this one
ends, so the graph that helps predict iteration t+1 holds no sample of t+1's time). When no window ends inside the
iteration (an iteration shorter than the sampling interval), the latest window ending before it stands in; before the
first window ends, the features are 0. A port with a rank of the job attached (active) uses that rank's iteration
window; any other port uses the window of its nearest active port (fewest port-graph hops, ties: lower port id).

Normalisation (:func:`fit_normaliser`, :func:`normalise`): ``x = (slog1p(raw) - mean) / std`` per feature with
``slog1p(v) = sign(v) log(1 + |v|)``; the offline dataset builder fits mean/std on its training split, the hybrid
loop (:mod:`surrogate.online_graphs`) on the warm-up truth. A graph that observed nothing (all zero: built before the
first window ended) is left out of the fit and normalises to 0.

Everything here is vectorised over ports and iterations (no per-port Python loops). :func:`window_ranks` and
:func:`node_features` are the one implementation of the node features: ``surrogate.dataset.build_dataset`` (offline,
from a run directory) and ``surrogate.online_graphs`` (online, from the engine's sample blocks) both call them.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np
import torch

from hybridsim_common.topology import Dragonfly, DragonflyShape


def _csr(crow, col, val, n) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta", "invariant checks disabled"
        return torch.sparse_csr_tensor(crow, col, val, size=(n, n))

#: statistics computed per port feature, in the order of the feature axis
STATS: tuple[str, ...] = ("min", "max", "mean", "q25", "q75", "last")


def _key(topo: Dragonfly) -> tuple:
    return (topo.shape, tuple(tuple(x) for x in topo.global_targets))


def port_edges(topo: Dragonfly) -> np.ndarray:
    """``(2, E)`` int64 directed edge index of the port graph (symmetric, no self loops)."""
    return _edges_cached(_TopoRef(topo))


class _TopoRef:
    """Hashable wrapper so lru_cache keys on the topology's shape and global wiring."""

    def __init__(self, topo: Dragonfly):
        self.topo = topo
        self.key = _key(topo)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _TopoRef) and self.key == other.key


@lru_cache(maxsize=8)
def _edges_cached(ref: _TopoRef) -> np.ndarray:
    e = ref.topo.port_graph_edges()
    e.setflags(write=False)
    return e


def normalized_adjacency(topo: Dragonfly, self_loops: bool = True) -> torch.Tensor:
    """GCN-normalised adjacency ``D^-1/2 (A + I) D^-1/2`` of the port graph as a float32 ``torch.sparse_csr_tensor``
    of shape ``(P, P)``. Pre-normalised CSR is several times faster than ``edge_index`` message passing on CPU."""
    crow, col, val, n = _norm_adj_cached(_TopoRef(topo), bool(self_loops))
    return _csr(crow, col, val, n)


@lru_cache(maxsize=8)
def _norm_adj_cached(ref: _TopoRef, self_loops: bool):
    import scipy.sparse as sp

    n = ref.topo.n_ports
    e = port_edges(ref.topo)
    A = sp.coo_matrix((np.ones(e.shape[1]), (e[0], e[1])), shape=(n, n)).tocsr()
    A.data[:] = 1.0  # no duplicate edge weights
    if self_loops:
        A = A + sp.eye(n, format="csr")
    deg = np.asarray(A.sum(axis=1)).ravel()
    dinv = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
    M = (sp.diags(dinv) @ A @ sp.diags(dinv)).tocsr()
    M.sort_indices()
    return (torch.from_numpy(M.indptr.astype(np.int64)), torch.from_numpy(M.indices.astype(np.int64)),
            torch.from_numpy(M.data.astype(np.float32)), n)


def random_walk_matrix(topo: Dragonfly) -> torch.Tensor:
    """Row-stochastic transition matrix ``D^-1 A`` of the port graph (float32 sparse CSR, ``(P, P)``), the diffusion
    operator of DCRNN. The port graph is symmetric, so forward and backward diffusion use the same matrix."""
    crow, col, val, n = _rw_cached(_TopoRef(topo))
    return _csr(crow, col, val, n)


@lru_cache(maxsize=8)
def _rw_cached(ref: _TopoRef):
    import scipy.sparse as sp

    n = ref.topo.n_ports
    e = port_edges(ref.topo)
    A = sp.coo_matrix((np.ones(e.shape[1]), (e[0], e[1])), shape=(n, n)).tocsr()
    A.data[:] = 1.0
    deg = np.asarray(A.sum(axis=1)).ravel()
    M = (sp.diags(1.0 / np.maximum(deg, 1e-12)) @ A).tocsr()
    M.sort_indices()
    return (torch.from_numpy(M.indptr.astype(np.int64)), torch.from_numpy(M.indices.astype(np.int64)),
            torch.from_numpy(M.data.astype(np.float32)), n)


def nearest_active_port(topo: Dragonfly, active_ports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every port, the nearest active port (fewest hops in the port graph; ties: lower port id) and that hop
    count. Active ports map to themselves (distance 0). Returns ``(nearest int64 (P,), dist int64 (P,))``; ports
    not connected to any active port get ``-1`` for both.

    Level-synchronous multi-source BFS: a node first reached at level d+1 takes the minimum label among its
    neighbours at level d, which is the minimum over all active ports at distance d+1.
    """
    n = topo.n_ports
    active = np.unique(np.asarray(active_ports, dtype=np.int64))
    if active.size == 0:
        raise ValueError("nearest_active_port: no active ports")
    if active.min() < 0 or active.max() >= n:
        raise ValueError(f"nearest_active_port: port ids outside 0..{n - 1}")
    e = port_edges(topo)
    src, dst = e[0], e[1]
    big = np.iinfo(np.int64).max
    label = np.full(n, big, np.int64)
    dist = np.full(n, -1, np.int64)
    label[active] = active
    dist[active] = 0
    frontier = np.zeros(n, bool)
    frontier[active] = True
    d = 0
    while frontier.any():
        sel = frontier[src] & (dist[dst] < 0)
        if not sel.any():
            break
        cand = np.full(n, big, np.int64)
        np.minimum.at(cand, dst[sel], label[src[sel]])
        new = cand < big
        d += 1
        label[new] = cand[new]
        dist[new] = d
        frontier = new
    label[dist < 0] = -1
    return label, dist


# ------------------------------------------------------------------------------------------------------------ windows
def window_bounds(t_end: np.ndarray, interval: float, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Causal sample index range ``[lo, hi)`` for the time interval ``[start, end]`` (arrays of any equal shape): the
    sampling windows ``(t_end[s] - interval, t_end[s]]`` that overlap it and end by ``end``; when none does, the
    latest window ending by ``end``. ``lo == hi`` (empty) where no window ends by ``end``. ``interval`` is part of
    the sample format; the causal rule needs only the window ends."""
    t_end = np.asarray(t_end, dtype=np.float64)
    if len(t_end) == 0:
        raise ValueError("no port samples")
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    lo = np.searchsorted(t_end, start, side="right")   # first window ending after start
    hi = np.searchsorted(t_end, end, side="right")     # windows ending by end
    lo = np.minimum(lo, np.maximum(hi - 1, 0))
    return lo.astype(np.int64), hi.astype(np.int64)


def window_stats(values: np.ndarray, port_idx: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 max_elems: int = 16_000_000) -> np.ndarray:
    """Statistics :data:`STATS` of ``values[lo:hi, port, :]`` for many (port, window) pairs at once.

    Args:
        values: ``(S, P, F)`` float32 port samples.
        port_idx: ``(N,)`` port of each pair; ``lo``, ``hi``: ``(N,)`` sample ranges (``hi > lo``).
    Returns:
        ``(N, F * len(STATS))`` float32, feature-major: column ``f * 6 + k`` is statistic ``STATS[k]`` of feature f.
    """
    values = np.asarray(values)
    S, P, F = values.shape
    port_idx = np.asarray(port_idx, dtype=np.int64).ravel()
    lo = np.asarray(lo, dtype=np.int64).ravel()
    hi = np.asarray(hi, dtype=np.int64).ravel()
    N = port_idx.size
    out = np.empty((N, F, len(STATS)), np.float32)
    if N == 0:
        return out.reshape(0, F * len(STATS))
    length = hi - lo
    K = int(length.max())
    chunk = max(1, max_elems // max(1, K * F))
    ar = np.arange(K)
    for a in range(0, N, chunk):
        b = min(N, a + chunk)
        pl, ll, nl, pp = lo[a:b], hi[a:b], length[a:b], port_idx[a:b]
        sidx = pl[:, None] + ar[None, :]                      # (n, K)
        valid = ar[None, :] < nl[:, None]
        sidx = np.where(valid, sidx, pl[:, None])
        g = values[sidx, pp[:, None], :].astype(np.float64)   # (n, K, F)
        vmask = valid[:, :, None]
        gs = np.where(vmask, g, np.inf)
        srt = np.sort(gs, axis=1)                             # valid first, ascending
        n = nl[:, None].astype(np.float64)                    # (n, 1)
        o = out[a:b]
        o[:, :, 0] = srt[:, 0, :]
        o[:, :, 1] = np.take_along_axis(srt, (nl - 1)[:, None, None].repeat(F, axis=2), axis=1)[:, 0, :]
        o[:, :, 2] = np.where(vmask, g, 0.0).sum(axis=1) / n
        for k, q in ((3, 0.25), (4, 0.75)):
            pos = q * (nl - 1).astype(np.float64)
            fl = np.floor(pos).astype(np.int64)
            ce = np.minimum(fl + 1, nl - 1)
            frac = (pos - fl)[:, None]
            vf = np.take_along_axis(srt, fl[:, None, None].repeat(F, axis=2), axis=1)[:, 0, :]
            vc = np.take_along_axis(srt, ce[:, None, None].repeat(F, axis=2), axis=1)[:, 0, :]
            o[:, :, k] = vf + (vc - vf) * frac
        o[:, :, 5] = values[ll - 1, pp, :]
    return out.reshape(N, F * len(STATS))


def window_ranks(topo: Dragonfly, rank_port: np.ndarray) -> np.ndarray:
    """``(P,)`` int64: the rank whose iteration window each port's features use (its own rank for an active port,
    else the rank of its nearest active port); ``-1`` for ports not connected to any active port."""
    rank_port = np.asarray(rank_port, dtype=np.int64)
    nearest, _ = nearest_active_port(topo, rank_port)
    rank_of_port = np.full(topo.n_ports, -1, np.int64)
    rank_of_port[rank_port] = np.arange(len(rank_port))
    return np.where(nearest >= 0, rank_of_port[np.maximum(nearest, 0)], -1)


def node_features(t_end: np.ndarray, interval: float, values: np.ndarray, wrank: np.ndarray, start: np.ndarray,
                  end: np.ndarray) -> np.ndarray:
    """Raw (un-normalised) node features of T iterations of one job.

    Args:
        t_end, interval, values: port samples (``(S,)``, ns, ``(S, P, F)``), as :class:`hybridsim_common.records.PortSamples`.
        wrank: ``(P,)`` rank whose window each port uses (:func:`window_ranks`, all ``>= 0``).
        start, end: ``(R, T)`` iteration windows of each rank.
    Returns:
        ``(T, P, F * len(STATS))`` float32 (:func:`window_stats` per port and iteration).
    """
    P = values.shape[1]
    start = np.asarray(start, dtype=np.float64)
    T = start.shape[1]
    lo, hi = window_bounds(t_end, interval, start, end)   # (R, T)
    lo_p = lo[wrank, :].T  # (T, P)
    hi_p = hi[wrank, :].T
    empty = hi_p <= lo_p   # no window has ended yet: nothing observed, features 0
    ports = np.broadcast_to(np.arange(P), (T, P))
    out = window_stats(values, ports.ravel(), lo_p.ravel(), np.maximum(hi_p, lo_p + 1).ravel()).reshape(T, P, -1)
    out[empty] = 0.0
    return out


def slog1p(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.log1p(np.abs(v))


def observed(raw: np.ndarray) -> np.ndarray:
    """``(T,)`` bool: which graphs of ``raw`` (T, P, F) hold anything; an all-zero graph is one built before any
    sampling window had ended (causal windows, :func:`node_features`)."""
    raw = np.asarray(raw)
    return raw.reshape(len(raw), -1).any(axis=1)


def fit_normaliser(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std (float64 ``(F,)``) of ``slog1p(raw)`` over all ports of the graphs ``raw`` (T, P, F);
    a std under 1e-6 becomes 1. Graphs with nothing observed (:func:`observed`) are left out unless all are: their
    zeros say nothing of the features' scale."""
    raw = np.asarray(raw)
    seen = observed(raw)
    if seen.any():
        raw = raw[seen]
    z = slog1p(np.asarray(raw, dtype=np.float64)).reshape(-1, raw.shape[-1])
    mu = z.mean(axis=0)
    sd = z.std(axis=0)
    return mu, np.where(sd < 1e-6, 1.0, sd)


def normalise(raw: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``(slog1p(raw) - mu) / sd`` as float32, for one graph (P, F) or many (T, P, F). A graph with nothing observed
    (:func:`observed`) becomes 0, the features' mean: no data yet, not an idle network."""
    raw = np.asarray(raw, dtype=np.float64)
    out = ((slog1p(raw) - mu) / sd).astype(np.float32)
    if raw.ndim == 2:
        return out if raw.any() else np.zeros_like(out)
    out[~observed(raw)] = 0.0
    return out


def feature_names(port_features) -> list[str]:
    return [f"{f}_{s}" for f in port_features for s in STATS]


def shape_dict(shape: DragonflyShape) -> dict:
    return {"groups": shape.groups, "routers_per_group": shape.routers_per_group,
            "terminals_per_router": shape.terminals_per_router,
            "global_channels_per_router": shape.global_channels_per_router}


def shape_from_dict(d: dict) -> DragonflyShape:
    return DragonflyShape(int(d["groups"]), int(d["routers_per_group"]), int(d["terminals_per_router"]),
                          int(d["global_channels_per_router"]))
