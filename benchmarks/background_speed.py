"""Cost of what a predicted job leaves in the network (``controller.keep_background``) in the engine: events per CPU
second of the embedded engine's hybrid run (the engine's loop with its director callbacks, surrogate LAST, the
scenario's policy), best of ``--repeat`` runs, each stand-in back to back in one process::

    nice -n 5 python benchmarks/background_speed.py examples/quickstart.yaml --modes false,true,profile --repeat 3

Run it from another checkout (``PYTHONPATH=OTHER``) with ``--modes false,true`` for a before/after.
"""

from __future__ import annotations

import argparse
import gc
import time

import sys
from pathlib import Path as _Path

sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # this checkout's hybridsim

from hybridsim.bench import with_surrogate  # noqa: E402
from hybridsim.engine import Engine  # noqa: E402
from hybridsim.runner import build_controller  # noqa: E402
from hybridsim.scenario import load_scenario  # noqa: E402

MODES = {"false": False, "true": True, "profile": "profile"}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--modes", default="false,true,profile")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    base = with_surrogate(load_scenario(args.scenario), "last")
    print("| keep_background | events | events per CPU s (best) | CPU s (best) |")
    print("|---|---|---|---|")
    for mode in args.modes.split(","):
        sc = base.model_copy(deep=True)
        sc.controller.keep_background = MODES[mode]
        best = None
        for _ in range(args.repeat):
            gc.collect()
            eng = Engine(sc)
            ctl = build_controller(sc)
            c0 = time.process_time()
            res = eng.run(director=ctl, on_record=ctl.on_record)
            cpu = time.process_time() - c0
            best = (res.events, cpu) if best is None or cpu < best[1] else best
        print(f"| {mode} | {best[0]:,} | {best[0] / best[1]:,.0f} | {best[1]:.2f} |")


if __name__ == "__main__":
    main()
