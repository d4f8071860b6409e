"""PyTorch Geometric's GCNConv against hybridsim's CSR GCN (surrogate/models/gcn.py) on the 1,056-node port graph.

Both run a 3-layer GCN (hidden 64) over a batch of graphs with the same pre-normalised adjacency
``D^-1/2 (A + I) D^-1/2``, one thread, in one process, the variants interleaved round by round so machine load hits
them alike; the figure is the median over rounds, and the ratio is PyG / hybridsim (> 1: PyG slower).

* ``csr full``: :meth:`GCNEncoder.forward_full` (all ports, node-major ``torch.sparse.mm``).
* ``csr pruned``: :meth:`GCNEncoder.forward` at one job's rank ports (the receptive-field plan, what SMART runs).
* ``pyg``: ``torch_geometric.nn.GCNConv(normalize=False)`` x 3 on the batch as PyG batches graphs (a block-diagonal
  sparse CSR adjacency of the B graphs, x ``(B*P, F)``).

A training step is forward + L1 loss at the job's ports + backward + Adam step.

    OMP_NUM_THREADS=1 python benchmarks/gcn_pyg.py [--rounds 15] [--json benchmarks/out/gcn_pyg.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from hybridsim_common.topology import Dragonfly, DragonflyShape
from surrogate.graphs import normalized_adjacency
from surrogate.models.gcn import GCNEncoder, scipy_csr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batch", type=int, default=16, help="graphs per batch (SMART: 8 windows x look-back 2)")
    ap.add_argument("--features", type=int, default=48)
    ap.add_argument("--ranks", type=int, default=512, help="ports at the output of the pruned GCN (one job)")
    ap.add_argument("--json", default="benchmarks/out/gcn_pyg.json")
    args = ap.parse_args(argv)

    from torch_geometric.nn import GCNConv

    torch.set_num_threads(1)
    torch.manual_seed(0)
    topo = Dragonfly(DragonflyShape(33, 8, 4, 4))
    P, B, F, H, K = topo.n_ports, args.batch, args.features, 64, 3
    adj = scipy_csr(normalized_adjacency(topo))
    targets = np.sort(np.random.default_rng(0).choice(topo.terminal_port_ids, args.ranks, replace=False))
    x = torch.randn(B, P, F)
    y = torch.randn(B, len(targets), H)

    ours = GCNEncoder(F, H, K, adjacency=adj)
    convs = torch.nn.ModuleList(GCNConv(F if i == 0 else H, H, normalize=False) for i in range(K))
    blk = sp.block_diag([adj] * B, format="csr").astype(np.float32)
    blk.sort_indices()
    adj_pyg = torch.sparse_csr_tensor(torch.from_numpy(blk.indptr.astype(np.int64)),
                                      torch.from_numpy(blk.indices.astype(np.int64)),
                                      torch.from_numpy(blk.data), size=blk.shape)
    tgt_flat = torch.from_numpy((np.arange(B)[:, None] * P + targets[None, :]).ravel())

    def pyg_forward(xb):
        h = xb.reshape(B * P, F)
        for i, conv in enumerate(convs):
            h = conv(h, adj_pyg)
            if i < K - 1:
                h = torch.relu(h)
        return h

    variants = {
        "csr full": (lambda: ours.forward_full(x), lambda out: out[:, targets], ours),
        "csr pruned": (lambda: ours(x, targets), lambda out: out, ours),
        "pyg": (lambda: pyg_forward(x), lambda out: out[tgt_flat].view(B, len(targets), H), convs),
    }
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-3) for k, (_, _, m) in variants.items()}
    ours(x, targets)   # build the pruning plan once (cached, as in SMART)

    def fwd(k):
        f, _, _ = variants[k]
        with torch.no_grad():
            t0 = time.perf_counter()
            f()
            return time.perf_counter() - t0

    def step(k):
        f, pick, _ = variants[k]
        t0 = time.perf_counter()
        opts[k].zero_grad()
        loss = (pick(f()) - y).abs().mean()
        loss.backward()
        opts[k].step()
        return time.perf_counter() - t0

    # same numbers: PyG with our weights gives our full-graph output
    with torch.no_grad():
        for conv, lin in zip(convs, ours.lins):
            conv.lin.weight.copy_(lin.weight)
            conv.bias.copy_(lin.bias)
        ref = ours.forward_full(x)
        got = pyg_forward(x).view(B, P, H)
        max_diff = float((ref - got).abs().max())
    for k in variants:   # warm-up
        fwd(k), step(k)
    times = {k: {"forward": [], "train_step": []} for k in variants}
    for _ in range(args.rounds):
        for k in variants:
            times[k]["forward"].append(fwd(k))
            times[k]["train_step"].append(step(k))
    med = {k: {op: statistics.median(v) for op, v in d.items()} for k, d in times.items()}
    rows = []
    print(f"1,056-node port graph: P={P} ports, B={B} graphs, F={F}, hidden {H}, {K} layers, "
          f"{len(targets)} output ports (pruned), 1 thread, {args.rounds} rounds; max |pyg - csr full| = {max_diff:.2e}")
    print(f"{'variant':<12} {'forward ms':>11} {'train step ms':>14}")
    for k in variants:
        print(f"{k:<12} {med[k]['forward'] * 1e3:>11.1f} {med[k]['train_step'] * 1e3:>14.1f}")
        rows.append({"variant": k, "forward_s": med[k]["forward"], "train_step_s": med[k]["train_step"]})
    ratios = {f"pyg/{k} {op}": med["pyg"][op] / med[k][op] for k in ("csr full", "csr pruned")
              for op in ("forward", "train_step")}
    for name, r in ratios.items():
        print(f"{name}: {r:.2f}x")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"P": P, "B": B, "F": F, "hidden": H, "layers": K, "output_ports": len(targets),
                               "rounds": args.rounds, "max_abs_diff": max_diff, "median": rows, "ratios": ratios,
                               "torch": torch.__version__}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
