"""Which inputs the pretrained surrogate uses, decided on validation runs only: ``hybridsim pretrain``'s training with
each combination of feature groups (surrogate.models.pretrained.INPUT_GROUPS), scored on the corpus' validation runs
(the test runs are not read).

    OMP_NUM_THREADS=1 python benchmarks/pretrain_inputs.py CORPUS [CORPUS ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from surrogate.pretrain import pretrain  # noqa: E402

VARIANTS = ["history", "history,kind", "history,kind,job", "history,kind,load", "history,kind,job,load"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="+")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "pretrain_inputs.json"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    print(f"{'inputs':<24} {'best ep':>7} {'job MAPE model':>14} {'base':>6} {'last':>6} {'rank model':>10} "
          f"{'base':>6} {'last':>6} {'warm-up 1 job model':>19} {'last':>6}")
    for inputs in VARIANTS:
        _, rep = pretrain(args.corpus, inputs=inputs, score_test=False)
        v = rep["val"]
        z = v["zero_shot"]["job"]
        rows.append({"inputs": inputs, "best_epoch": rep["best_epoch"], "val": v})
        print(f"{inputs:<24} {rep['best_epoch']:>7} {v['job']['model']:>14.2f} {v['job']['base']:>6.2f} "
              f"{v['job']['last']:>6.2f} {v['rank']['model']:>10.2f} {v['rank']['base']:>6.2f} "
              f"{v['rank']['last']:>6.2f} {z['model']:>19.2f} {z['last']:>6.2f}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
