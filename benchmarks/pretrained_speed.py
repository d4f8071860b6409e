"""One prediction step of the shipped pretrained surrogate for 512 ranks (issue 16: <= 50 ms on one core), and one
online tune on a 64-iteration window.

    OMP_NUM_THREADS=1 python benchmarks/pretrained_speed.py [--ranks 512] [--calls 300] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import surrogate  # noqa: E402
from surrogate.base import Context, JobInfo  # noqa: E402
from surrogate.online import OnlineSeries  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "pretrained_speed.json"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    shape = type("Shape", (), {"groups": 33, "routers_per_group": 8, "terminals_per_router": 4})
    info = JobInfo.of("milc", args.ranks, 100, [49152.0], rng.choice(1056, args.ranks, replace=False), shape)
    m = surrogate.load("pretrained").new()
    hist = 3.6e5 * (1 + 0.03 * rng.standard_normal((args.ranks, 8)))
    ctx = Context("milc", "milc", hist, iteration=40, columns=np.arange(33, 41), info=info,
                  load=np.full(8, 0.5), load_now=0.5)
    m.predict(ctx)
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        m.predict(ctx)
        times.append((time.perf_counter() - t0) * 1e3)
    y = 3.6e5 * (1 + 0.03 * rng.standard_normal((args.ranks, 100)))
    y[:, 10:74] = np.nan
    s = OnlineSeries("milc", "milc", y, info=info, load=np.full(100, 0.5))
    t0 = time.perf_counter()
    m.tune(s, range(74, 80))
    tune_ms = (time.perf_counter() - t0) * 1e3
    res = {"ranks": args.ranks, "calls": args.calls, "predict_ms_median": float(np.median(times)),
           "predict_ms_p99": float(np.percentile(times, 99)), "tune_6_iterations_ms": tune_ms}
    print(f"{'ranks':>6} {'predict median ms':>18} {'p99 ms':>8} {'tune (6 truths) ms':>19}")
    print(f"{args.ranks:>6} {res['predict_ms_median']:>18.3f} {res['predict_ms_p99']:>8.3f} {tune_ms:>19.2f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
