"""GCN encoder over the router-port graph, with a pre-normalised sparse CSR adjacency and receptive-field pruning.

One layer (Kipf & Welling)::

    H' = σ( Â H W + b ),        Â = D^{-1/2} (A + I) D^{-1/2}

``Â`` is built once per topology (:func:`surrogate.graphs.normalized_adjacency`, or :func:`gcn_norm` from an edge
index) and applied with ``torch.sparse.mm`` on a CSR
tensor; all graphs of a batch share it, so they are propagated in one sparse product (features of the ``B`` graphs
side by side in the dense operand). σ = ReLU after every layer but the last.

Only a few ports are needed at the output (the active ports of the ranks being predicted), so :class:`GCNPlan`
prunes the computation to the receptive field: with ``K`` layers, layer ``k`` is evaluated only on the ports within
``K - k`` hops of the targets, and reads its input on the ``K - k + 1``-hop set. The result at the targets is
identical to the full-graph GCN.

Shapes (B graphs, P ports, F input features, H hidden, n targets)::

    x        (B, P, F) float32 node features
    targets  (n,) int64 port ids
    output   (B, n, H)
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn


def gcn_norm(edge_index: np.ndarray, n_nodes: int) -> sp.csr_matrix:
    """``D^{-1/2} (A + I) D^{-1/2}`` as scipy CSR (float32) from a directed ``(2, E)`` edge index (made symmetric,
    duplicates merged)."""
    ei = np.asarray(edge_index, dtype=np.int64)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {ei.shape}")
    if ei.size and (ei.min() < 0 or ei.max() >= n_nodes):
        raise ValueError(f"edge_index refers to nodes outside 0..{n_nodes - 1}")
    loops = np.arange(n_nodes)
    rows = np.concatenate([ei[0], ei[1], loops])
    cols = np.concatenate([ei[1], ei[0], loops])
    A = sp.coo_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n_nodes, n_nodes)).tocsr()
    A.data[:] = 1.0  # merge duplicates to weight 1
    deg = np.asarray(A.sum(axis=1)).ravel()
    dinv = 1.0 / np.sqrt(deg)
    return sp.csr_matrix(sp.diags(dinv) @ A @ sp.diags(dinv), dtype=np.float32)


def scipy_csr(adj) -> sp.csr_matrix:
    """A torch sparse CSR tensor or any scipy sparse matrix -> scipy CSR float32."""
    if isinstance(adj, torch.Tensor):
        if adj.layout != torch.sparse_csr:
            adj = adj.to_sparse_csr()
        return sp.csr_matrix((adj.values().numpy().astype(np.float32), adj.col_indices().numpy(),
                              adj.crow_indices().numpy()), shape=tuple(adj.shape))
    return sp.csr_matrix(adj, dtype=np.float32)


def _to_torch_csr(m: sp.csr_matrix) -> torch.Tensor:
    m = m.tocsr()
    m.sort_indices()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta", "invariant checks disabled"
        return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                       torch.from_numpy(m.indices.astype(np.int64)),
                                       torch.from_numpy(m.data.astype(np.float32)), size=m.shape)


class GCNPlan:
    """Receptive-field sub-adjacencies for ``n_layers`` GCN layers ending at ``targets``.

    ``sets[j]`` = ports within j hops of the targets (``sets[0]`` = targets, in the given order); ``mats[k]`` =
    ``Â[sets[K-1-k]][:, sets[K-k]]`` (torch CSR), the operator of layer ``k`` (0-based)."""

    def __init__(self, adj: sp.csr_matrix, targets: np.ndarray, n_layers: int):
        targets = np.asarray(targets, dtype=np.int64)
        sets = [targets]
        cur = np.unique(targets)
        for _ in range(n_layers):
            cur = np.unique(np.concatenate([cur, adj[cur].indices]))
            sets.append(cur)
        self.sets = sets
        K = n_layers
        self.mats = [_to_torch_csr(adj[sets[K - 1 - k]][:, sets[K - k]]) for k in range(K)]
        self.input_index = torch.from_numpy(sets[K])


class GCNEncoder(nn.Module):
    """Stack of GCN layers on a fixed graph.

    Args:
        in_channels: node feature size F.
        hidden_channels: H (all layers).
        num_layers: K (default 3).
        adjacency: normalised adjacency (scipy or torch sparse CSR, P x P); may be set later with
            :meth:`set_adjacency`.
        plan_cache: number of target sets whose :class:`GCNPlan` is kept.
    """

    def __init__(self, in_channels: int, hidden_channels: int = 64, num_layers: int = 3,
                 adjacency: sp.csr_matrix | None = None, plan_cache: int = 64):
        super().__init__()
        self.in_channels, self.hidden_channels, self.num_layers = in_channels, hidden_channels, num_layers
        self.lins = nn.ModuleList(nn.Linear(in_channels if i == 0 else hidden_channels, hidden_channels)
                                  for i in range(num_layers))
        self.adj: sp.csr_matrix | None = None
        self._plans: OrderedDict = OrderedDict()
        self._plan_cache = plan_cache
        if adjacency is not None:
            self.set_adjacency(adjacency)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def __getstate__(self):  # plans hold sparse CSR tensors (not deep-copyable); they are rebuilt on demand
        state = self.__dict__.copy()
        state["_plans"] = OrderedDict()
        return state

    def set_adjacency(self, adjacency: sp.csr_matrix) -> None:
        self.adj = scipy_csr(adjacency)
        self._plans.clear()

    @property
    def n_nodes(self) -> int:
        return -1 if self.adj is None else self.adj.shape[0]

    def plan(self, targets: np.ndarray) -> GCNPlan:
        if self.adj is None:
            raise RuntimeError("GCNEncoder has no adjacency; call set_adjacency first")
        key = np.asarray(targets, dtype=np.int64).tobytes()
        p = self._plans.get(key)
        if p is None:
            p = GCNPlan(self.adj, targets, self.num_layers)
            self._plans[key] = p
            if len(self._plans) > self._plan_cache:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return p

    def _layer(self, k: int, A: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One layer on node-major features h (n_in, B, C) -> (n_out, B, H). ``Â h W`` is evaluated as ``(Â h) W``
        when C < H (cheaper sparse product), else as ``Â (h W)``; the bias is added after propagation."""
        lin = self.lins[k]
        n, B, C = h.shape
        if C < lin.out_features:
            h = torch.sparse.mm(A, h.reshape(n, B * C)).view(-1, B, C)
            h = torch.nn.functional.linear(h, lin.weight, lin.bias)
        else:
            h = torch.nn.functional.linear(h, lin.weight)
            H = h.shape[2]
            h = torch.sparse.mm(A, h.reshape(n, B * H)).view(-1, B, H) + lin.bias
        if k < self.num_layers - 1:
            h = torch.relu(h)
        return h

    def forward(self, x: torch.Tensor, targets: np.ndarray) -> torch.Tensor:
        """x (B, P, F) -> embeddings (B, n, H) at ``targets`` (n,)."""
        plan = self.plan(targets)
        h = x.transpose(0, 1).index_select(0, plan.input_index)  # (n_K, B, F) node-major, contiguous
        for k, A in enumerate(plan.mats):
            h = self._layer(k, A, h)
        return h.transpose(0, 1)

    def forward_full(self, x: torch.Tensor) -> torch.Tensor:
        """Reference: the GCN over all P nodes (B, P, H), no pruning."""
        A = _to_torch_csr(self.adj)
        h = x.transpose(0, 1).contiguous()
        for k in range(self.num_layers):
            h = self._layer(k, A, h)
        return h.transpose(0, 1)
