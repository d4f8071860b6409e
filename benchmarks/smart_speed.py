"""SMART speed on one CPU core: prediction latency per step (all active ranks of a job) and training time per epoch.

Random inputs of the real shapes: the 72-node system (g=9, a=4, p=2, h=2; 252 ports) and the 1,056-node system
(g=33, a=8, p=4, h=4; 3,960 ports), 114 node features (19 port features x 6 statistics, as the dataset builder makes),
ranks placed on random terminals. Iteration times follow a noisy periodic pattern so the prompt statistics change
from step to step like real data (the prompt cache is exercised, not bypassed). Inference is timed after a warm-up of
``--warmup`` steps (first steps build the GCN plan and fill the prompt cache); every timed step uses a new look-back.

    OMP_NUM_THREADS=1 python benchmarks/smart_speed.py            # table + benchmarks/out/smart_speed.json
    OMP_NUM_THREADS=1 python benchmarks/smart_speed.py --llm-layers 1 2 6 --full-fit 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim_common.topology import Dragonfly, DragonflyShape  # noqa: E402
from surrogate.dataset import JobSeries  # noqa: E402
from surrogate.graphs import shape_dict  # noqa: E402
from surrogate.registry import create  # noqa: E402

SYSTEMS = {
    "72-node": (DragonflyShape(9, 4, 2, 2), 32),
    "1056-node": (DragonflyShape(33, 8, 4, 4), 512),
}
F = 114


def make_series(shape: DragonflyShape, ranks: int, T: int, seed: int = 0) -> JobSeries:
    rng = np.random.default_rng(seed)
    topo = Dragonfly(shape)
    terms = np.sort(rng.choice(topo.n_terminals, ranks, replace=False))
    ports = topo.terminal_port_ids[terms]
    mask = np.zeros(topo.n_ports, bool)
    mask[ports] = True
    x = rng.standard_normal((T, topo.n_ports, F)).astype(np.float32)
    t = np.arange(T)
    base = 4.3e5 * (1 + 0.05 * rng.random(ranks))[:, None]
    y = base * (1 + 0.1 * np.sin(2 * np.pi * t / 7)[None, :]) * (1 + 0.02 * rng.standard_normal((ranks, T)))
    a, b = int(0.3 * T), int(0.4 * T)
    return JobSeries(job="bench", workload="milc", x=x, feature_names=[f"f{i}" for i in range(F)], mask=mask,
                     rank_port=ports.astype(np.int64), y=y, split={"train": (0, a), "val": (a, b), "test": (b, T)},
                     shape=shape)


def time_inference(model, series, steps: int, warmup: int) -> dict:
    lat, cpu = [], []
    t_first = None
    for i in range(warmup + steps):
        t = (series.T // 2 + i) % (series.T - 1) + 1
        ctx = series.context(t, model.lookback, model.graph_lookback)
        t0, c0 = time.perf_counter(), time.process_time()
        p = model.predict(ctx)
        dt = (time.perf_counter() - t0) * 1e3
        dc = (time.process_time() - c0) * 1e3
        assert p.shape == (series.R,) and np.isfinite(p).all()
        if i == 0:
            t_first = dt
        if i >= warmup:
            lat.append(dt)
            cpu.append(dc)
    lat, cpu = np.asarray(lat), np.asarray(cpu)
    return {"median_ms": float(np.median(lat)), "p99_ms": float(np.percentile(lat, 99)),
            "mean_ms": float(lat.mean()), "cpu_median_ms": float(np.median(cpu)),
            "cpu_p99_ms": float(np.percentile(cpu, 99)), "first_ms": t_first, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["smart", "smart-nollm"])
    ap.add_argument("--llm-layers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=100, help="T of the training-time series (train = 30 %%)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs timed for the training figure")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--full-fit", type=int, default=0, metavar="T",
                    help="also time one complete default SMART fit (60 epochs, no early stop) of a 512-rank 1,056-node "
                         "job with T iterations (30 %% train, 10 %% validation)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "smart_speed.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} cores (wall times include contention; "
          f"CPU time = this process's own compute)")

    rows = []
    for sysname, (shape, ranks) in SYSTEMS.items():
        series = make_series(shape, ranks, args.iterations)
        for model_name in args.models:
            layer_opts = args.llm_layers if model_name == "smart" else [None]
            for nl in layer_opts:
                kw = {"topology": shape_dict(shape), "in_features": F, "epochs": args.epochs,
                      "patience": args.epochs + 1}
                if nl is not None:
                    kw["llm_layers"] = nl
                model = create(model_name, **kw)
                inf = time_inference(model, series, args.steps, args.warmup)
                t0 = time.perf_counter()
                info = model.fit(series, series.indices("train"), series.indices("val"))
                fit_s = time.perf_counter() - t0
                per_epoch = fit_s / max(1, info["epochs"])
                row = {"system": sysname, "ports": int(series.n_ports), "ranks": ranks, "model": model_name,
                       "llm_layers": nl, **inf, "train_windows": int(len(series.indices("train")) - 1),
                       "epoch_s": per_epoch, "epochs_default": 60,
                       "train_s_60_epochs_est": per_epoch * 60}
                rows.append(row)
                print(f"{sysname:10s} {model_name:12s} layers={str(nl):4s} median {inf['median_ms']:7.1f} ms  "
                      f"p99 {inf['p99_ms']:7.1f} ms  cpu median {inf['cpu_median_ms']:7.1f} ms  "
                      f"first {inf['first_ms']:7.1f} ms  epoch {per_epoch:6.2f} s", flush=True)
    full = None
    if args.full_fit:
        shape, ranks = SYSTEMS["1056-node"]
        series = make_series(shape, ranks, args.full_fit, seed=1)
        model = create("smart", topology=shape_dict(shape), in_features=F, patience=1000)
        t0, c0 = time.perf_counter(), time.process_time()
        info = model.fit(series, series.indices("train"), series.indices("val"))
        full = {"iterations": args.full_fit, "ranks": ranks, "epochs": info["epochs"],
                "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        print(f"full SMART fit, 1056-node, {ranks} ranks, T={args.full_fit}: {info['epochs']} epochs in "
              f"{full['wall_s']:.0f} s wall, {full['cpu_s']:.0f} s CPU", flush=True)
    print()
    hdr = (f"| system | model | LLM layers | ranks | wall median ms | wall p99 ms | CPU-time median ms | CPU p99 ms | "
           f"first step ms | s/epoch ({args.iterations} it., 30 % train) |")
    print(hdr)
    print("|" + "---|" * 10)
    for r in rows:
        print(f"| {r['system']} | {r['model']} | {r['llm_layers'] if r['llm_layers'] else '-'} | {r['ranks']} | "
              f"{r['median_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_median_ms']:.1f} | {r['cpu_p99_ms']:.1f} | "
              f"{r['first_ms']:.1f} | {r['epoch_s']:.2f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"threads": args.threads, "loadavg": os.getloadavg(), "torch": torch.__version__, "rows": rows, "full_fit": full}, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
