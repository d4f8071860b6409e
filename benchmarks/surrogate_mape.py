"""Surrogate accuracy benchmark on real CODES data: MAPE per job per model, with and without online tuning.

One command (from the repository root)::

    OMP_NUM_THREADS=1 python benchmarks/surrogate_mape.py              # runs E (72 nodes) and F (1,056 nodes)
    OMP_NUM_THREADS=1 python benchmarks/surrogate_mape.py --runs E --models last,lstm
    OMP_NUM_THREADS=1 python benchmarks/surrogate_mape.py --runs e1056-random --prepare-only   # engine run + dataset

Steps: import the CODES run (``codes_bridge.importer.import_codes_run``) into ``benchmarks/out/<run>-import``, build
the dataset (``surrogate.dataset.build_dataset``, default splits 30 % train / 10 % val / 60 % test) into
``benchmarks/out/<run>-ds``, fit every model on each job's train split (validation for early stopping), then
evaluate on the test split with ``Ft = 8`` and ``Ft = inf`` (``surrogate.evaluate``; ``--volume-scaling on|both``:
with the workload volume normalisation of :mod:`surrogate.volumes`). Writes a table to stdout and
``benchmarks/out/surrogate_mape.json``. SMART / SMART-noLLM are included when ``surrogate.models.smart`` is present.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.reference_data import CODES, require  # noqa: E402
RUNS = {
    "E": CODES / "E-72node-milc-lammps-syn" / "hf-random-seq",
    "F": CODES / "F-1056node-milc-lammps-syn" / "hf-random-opt-np2",
}
OUT = ROOT / "benchmarks" / "out"
#: embedded-engine runs, name -> (example scenario, placement policy), each run as pure simulation with port samples:
#: e72-*: examples/hybrid-72-long.yaml (MILC 36 x 240, LAMMPS 32 x 36, uniform-random background, 72 nodes);
#: e1056-*: the 1,056-node three-job scenario (MILC 512 x 100, LAMMPS 256 x 24, NN 256 x 100)
ENGINE = {
    "e72-random": ("hybrid-72-long.yaml", "random"),
    "e72-contiguous": ("hybrid-72-long.yaml", "contiguous"),
    "e1056-random": ("dragonfly-1056-3jobs-long.yaml", "random"),
    "e1056-contiguous": ("dragonfly-1056-3jobs-long-contiguous.yaml", "contiguous"),
}


def engine_scenario(name: str) -> dict:
    """The scenario of engine run ``name``: its example without surrogate/controller (pure simulation), with port
    samples written and the run's placement policy."""
    import yaml

    example, placement = ENGINE[name]
    d = yaml.safe_load((ROOT / "examples" / example).read_text())
    d.pop("surrogate", None)
    d.pop("controller", None)
    d["output"] = {"ports": True}
    d["placement"] = {"policy": placement}
    d["name"] = f"surrogate-{name}"
    return d


def engine_run(name: str, outdir: Path) -> None:
    import subprocess

    import yaml

    scen = OUT / f"{name}-scenario.yaml"
    scen.write_text(yaml.safe_dump(engine_scenario(name), sort_keys=False))
    subprocess.run([sys.executable, "-m", "hybridsim", "run", str(scen), "-o", str(outdir), "--mode", "simulate",
                    "--force", "--no-progress"], check=True)


def main(argv=None) -> int:
    import torch

    from surrogate.dataset import build_dataset, load_dataset
    from surrogate.evaluate import evaluate, format_table
    from hybridsim_common.rundir import git_revision
    from surrogate.registry import available

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="E,F", help="comma list of E (72 nodes), F (1,056 nodes) (CODES runs), "
                    "e72-random, e72-contiguous, e1056-random, e1056-contiguous (embedded-engine runs made here)")
    ap.add_argument("--models", default=None,
                    help="comma list (default: last,mean,ewma,ridge,lstm,dcrnn + smart,smart-nollm if present)")
    ap.add_argument("--ft", default="8,inf")
    ap.add_argument("--rebuild", action="store_true", help="re-import and rebuild datasets even if present")
    ap.add_argument("--prepare-only", action="store_true", help="only make the runs and datasets, evaluate nothing")
    ap.add_argument("--volume-scaling", choices=["off", "on", "both"], default="off",
                    help="workload volume normalisation (surrogate.volumes): off, on, or both (every model twice, "
                         "the scaled rows labelled MODEL+vol)")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--json", default=str(OUT / "surrogate_mape.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    models = args.models.split(",") if args.models else \
        ["last", "mean", "ewma", "ridge", "lstm", "dcrnn"] + [m for m in ("smart-nollm", "smart") if m in available()]
    fts = args.ft.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"command": " ".join(["python", "benchmarks/surrogate_mape.py"] + (argv or sys.argv[1:])),
              "git_revision": git_revision(), "host": platform.node(), "torch_threads": torch.get_num_threads(), "runs": {}}
    tables = []
    if any(run in RUNS for run in args.runs.split(",")):
        require()  # the CODES runs E, F
    for run in args.runs.split(","):
        src = RUNS.get(run, Path(f"engine/{run}"))
        imp, dsdir = OUT / f"{run}-import", OUT / f"{run}-ds"
        t0 = time.perf_counter()
        # runs made before run directories described themselves (no description.json) are made again
        remake = args.rebuild or not (imp / "description.json").is_file()
        if remake:
            if run in ENGINE:
                engine_run(run, imp)
            else:
                from codes_bridge.importer import import_codes_run

                import_codes_run(src, imp, force=True)
        t_imp = time.perf_counter() - t0
        t0 = time.perf_counter()
        if remake or not (dsdir / "meta.json").is_file():
            build_dataset(imp, dsdir)
        t_ds = time.perf_counter() - t0
        print(f"[{run}] run/import {t_imp:.0f} s, dataset {t_ds:.0f} s", file=sys.stderr, flush=True)
        if args.prepare_only:
            continue
        ds = load_dataset(dsdir)
        rows = []
        scalings = {"off": [False], "on": [True], "both": [False, True]}[args.volume_scaling]
        for m, vs in [(m, vs) for m in models for vs in scalings]:
            t0 = time.perf_counter()
            rep = evaluate(ds, [m], fts, progress=args.progress, volume_scaling=vs)
            wall = time.perf_counter() - t0
            for r in rep["results"]:
                r["fit_s"] = (rep["fit"].get(m, {}).get(r["job"], {}) or {}).get("seconds")
                r["fit_epochs"] = (rep["fit"].get(m, {}).get(r["job"], {}) or {}).get("epochs")
                if vs and args.volume_scaling == "both":
                    r["model"] += "+vol"
            rows += rep["results"]
            print(f"[{run}] {m}{' +vol' if vs else ''}: done in {wall:.0f} s", file=sys.stderr, flush=True)
            # write partial results as we go (long runs)
            report["runs"][run] = {"source": str(src), "import_s": t_imp, "dataset_s": t_ds,
                                   "jobs": {n: {"workload": j.workload, "ranks": j.R, "iterations": j.T,
                                                "split": j.split} for n, j in ds.jobs.items()},
                                   "results": rows}
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        tables.append(f"== run {run}: {src.parent.name}/{src.name} ==\n" + format_table({"results": rows}))
    print("\n\n".join(tables))
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
