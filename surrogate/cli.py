"""Surrogate commands: ``hybridsim dataset build|info``, ``hybridsim train``, ``hybridsim evaluate``,
``hybridsim pretrain`` (:mod:`surrogate.pretrain`).

Exit status 2 for bad input (missing/corrupt files, wrong topology, checkpoint of another model, NaN features).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _cli_error(msg: str):
    from hybridsim_common.errors import CliError

    return CliError(msg)


def _threads(n: int | None) -> None:
    import torch

    torch.set_num_threads(int(n) if n else 1)


def _parse_set(items: list[str] | None) -> dict:
    """``--set key=value`` pairs; values parsed as JSON when possible."""
    out = {}
    for it in items or []:
        if "=" not in it:
            raise _cli_error(f"--set {it!r}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _is_dataset(path: Path) -> bool:
    from .dataset import FORMAT

    try:
        return json.loads((path / "meta.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _is_checkpoint(path: Path) -> bool:
    return (path / "train.json").is_file() or (path / "config.json").is_file()


def _write_staged(out, force: bool, what: str, recognise, write) -> None:
    """``write(folder)`` into a staging folder beside ``out`` that replaces ``out`` only once complete (see
    :class:`hybridsim_common.rundir.StagedDir`): an interrupted or failed write leaves ``out`` as it was."""
    from hybridsim_common.rundir import RunDirError, StagedDir

    try:
        staged = StagedDir(out, force=force, what=what, recognise=recognise)
    except RunDirError as exc:
        raise _cli_error(str(exc)) from None
    try:
        write(staged.path)
        staged.commit()
    except BaseException as exc:
        staged.discard()
        if isinstance(exc, OSError):
            raise _cli_error(f"{exc.filename or out}: {exc.strerror or exc}") from None
        if isinstance(exc, RunDirError):
            raise _cli_error(str(exc)) from None
        raise


def cmd_dataset_build(args) -> int:
    from .base import SurrogateError
    from .dataset import build_dataset

    out = Path(args.output)
    built = []

    def write(folder):
        built.append(build_dataset(args.run_dir, folder, train_frac=args.train_frac, val_frac=args.val_frac,
                                   jobs=args.job, min_iterations=args.min_iterations))

    try:
        _write_staged(out, args.force, "dataset", _is_dataset, write)
    except (SurrogateError, ValueError) as exc:
        raise _cli_error(str(exc)) from None
    ds = built[0]
    print(f"dataset {out}: topology {ds.shape}, {ds.n_ports} ports, {len(ds.port_features)} port features -> "
          f"{len(next(iter(ds.jobs.values())).feature_names)} node features")
    for name, js in ds.jobs.items():
        print(f"  {name:<16} {js.workload:<12} {js.R:>5} ranks x {js.T:>5} iterations  split {js.split}")
    return 0


def cmd_dataset_info(args) -> int:
    from .base import SurrogateError
    from .dataset import load_dataset

    try:
        ds = load_dataset(args.dataset)
    except SurrogateError as exc:
        raise _cli_error(str(exc)) from None
    info = {"path": str(ds.path), "topology": ds.meta.get("topology"), "n_ports": ds.n_ports,
            "features": ds.meta.get("feature_names"),
            "jobs": {n: {"workload": j.workload, "ranks": j.R, "iterations": j.T, "split": j.split,
                         "mean_iteration_ns": float(j.y.mean())} for n, j in ds.jobs.items()}}
    print(json.dumps(info, indent=2))
    return 0


def cmd_train(args) -> int:
    from .base import SurrogateError
    from .dataset import load_dataset
    from .train import save_checkpoints, train_dataset

    _threads(args.threads)
    try:
        ds = load_dataset(args.dataset)
    except SurrogateError as exc:
        raise _cli_error(str(exc)) from None
    res = {}

    def write(folder):
        res.update(train_dataset(ds, args.model, None, jobs=args.job, config=_parse_set(args.set),
                                 progress=not args.no_progress and sys.stderr.isatty() or args.progress,
                                 seed=args.seed))
        save_checkpoints(res["models"], folder, ds, args.model, res["info"])

    try:
        # an existing checkpoint folder is replaced (as retraining always did), anything else is refused
        _write_staged(args.output, True, "checkpoint folder", _is_checkpoint, write)
    except (SurrogateError, ValueError, TypeError) as exc:
        raise _cli_error(str(exc)) from None
    for job, fi in res["info"].items():
        extra = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in fi.items()
                          if isinstance(v, (int, float)))
        print(f"{args.model} {job}: {extra}")
    print(f"checkpoint written to {args.output}")
    return 0


def cmd_evaluate(args) -> int:
    from .base import SurrogateError
    from .dataset import load_dataset
    from .evaluate import evaluate, format_table

    _threads(args.threads)
    fts = args.ft or ["8"]
    try:
        ds = load_dataset(args.dataset)
        report = evaluate(ds, args.model, fts, jobs=args.job, progress=args.progress, seed=args.seed,
                          volume_scaling=args.volume_scaling)
    except (SurrogateError, ValueError, TypeError) as exc:
        raise _cli_error(str(exc)) from None
    print(format_table(report))
    out = Path(args.json) if args.json else Path(args.dataset) / "evaluation.json"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    except OSError as exc:
        raise _cli_error(f"cannot write {out}: {exc}") from None
    print(f"results written to {out}")
    return 0


def cmd_pretrain(args) -> int:
    from hybridsim_common.rundir import finite_json

    from .base import SurrogateError
    from .pretrain import check_options, pretrain

    try:  # before anything is written
        check_options(epochs=args.epochs, val_frac=args.val_frac, test_frac=args.test_frac, hidden=args.hidden)
    except SurrogateError as exc:
        raise _cli_error(str(exc)) from None
    _threads(args.threads)
    res = {}

    def write(folder):
        m, report = pretrain(args.corpus, args.model, seed=args.seed, epochs=args.epochs,
                             val_frac=args.val_frac, test_frac=args.test_frac, hidden=args.hidden,
                             inputs=args.inputs, score_test=not args.no_test,
                             progress=not args.no_progress)
        m.save(folder)
        (Path(folder) / "pretrain.json").write_text(json.dumps(finite_json(report), indent=1, allow_nan=False) + "\n")
        res.update(report)

    try:
        _write_staged(args.output, args.force, "checkpoint folder", _is_checkpoint, write)
    except (SurrogateError, ValueError) as exc:
        raise _cli_error(str(exc)) from None
    given = {Path(c).name: c for c in args.corpus}  # the report names each corpus by its folder's name
    for corpus, runs in res.get("left_out", {}).items():
        print(f"hybridsim: warning: {given.get(corpus, corpus)}: {len(runs)} run(s) not completed, left out: {', '.join(runs[:5])}"
              + (" ..." if len(runs) > 5 else ""), file=sys.stderr)

    def f(x):
        return "-" if x is None else f"{x:.2f}"

    for part in ("val", "test"):
        s = res.get(part)
        if s and s.get("examples"):
            zs = s.get("zero_shot") or {"job": {"model": None, "last": None}}
            print(f"{part}: {s['examples']} examples, job MAPE % model {f(s['job']['model'])}  base "
                  f"{f(s['job']['base'])}  last {f(s['job']['last'])}  mean {f(s['job']['mean'])}; one-iteration "
                  f"warm-up: model "
                  f"{f(zs['job']['model'])}  last {f(zs['job']['last'])}")
    print(f"{args.model}: {res['epochs_run']} epochs (best {res['best_epoch']}), {res['train_s']:.1f} s; "
          f"checkpoint written to {args.output}")
    return 0


def register_pretrain(subparsers) -> None:
    from .registry import PRETRAINABLE

    p = subparsers.add_parser("pretrain", help="train one surrogate across the runs of a corpus (whole runs held "
                                               "out for validation and test)")
    p.add_argument("corpus", metavar="CORPUS", nargs="+", help="corpus folder(s) written by `hybridsim corpus` (each "
                                                               "split into train/validation/test on its own)")
    p.add_argument("-o", "--output", required=True, metavar="CKPT", help="checkpoint folder to write")
    p.add_argument("--model", default="pretrained", help=f"model to train (one of: {', '.join(PRETRAINABLE)})")
    p.add_argument("--epochs", type=int, default=300, help="at most this many epochs (early stopping on validation)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width (default 64)")
    p.add_argument("--inputs", metavar="GROUPS", help="feature groups, comma-separated, of history, kind, job, "
                                                      "load (default history,kind)")
    p.add_argument("--val-frac", type=float, default=0.2, help="share of runs held out for validation (0.2)")
    p.add_argument("--test-frac", type=float, default=0.15, help="share of runs held out for test (0.15)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-test", action="store_true", help="leave the test runs untouched (design choices are made on "
                                                           "validation; score the test runs once, for the final model)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint folder")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_pretrain)


def register(subparsers) -> None:
    p = subparsers.add_parser("dataset", help="build or inspect surrogate datasets (temporal port graphs)")
    sub = p.add_subparsers(dest="dataset_command", metavar="ACTION")
    sub.required = True
    b = sub.add_parser("build", help="build a dataset from a run directory (engine run or CODES import)")
    b.add_argument("run_dir", metavar="RUN_DIR")
    b.add_argument("-o", "--output", required=True, metavar="DATASET")
    b.add_argument("--train-frac", type=float, default=0.3, help="chronological train share (default 0.3)")
    b.add_argument("--val-frac", type=float, default=0.1, help="validation share after train (default 0.1)")
    b.add_argument("--job", action="append", help="only this job (repeatable)")
    b.add_argument("--min-iterations", type=int, default=10, help="skip jobs with fewer complete iterations")
    b.add_argument("--force", action="store_true", help="overwrite a non-empty output folder")
    b.set_defaults(func=cmd_dataset_build)
    i = sub.add_parser("info", help="print a dataset's jobs, shapes and splits")
    i.add_argument("dataset", metavar="DATASET")
    i.set_defaults(func=cmd_dataset_info)

    t = subparsers.add_parser("train", help="train a surrogate per job of a dataset (early stopping on validation)")
    t.add_argument("dataset", metavar="DATASET")
    t.add_argument("--model", required=True, help="model name (see `hybridsim evaluate --help`)")
    t.add_argument("-o", "--output", required=True, metavar="CKPT")
    t.add_argument("--job", action="append", help="only this job (repeatable)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="model option, e.g. --set epochs=20")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    t.add_argument("--progress", action="store_true", help="always show progress bars")
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train)

    e = subparsers.add_parser("evaluate", help="MAPE per job with online tuning (every Ft test iterations)")
    e.add_argument("dataset", metavar="DATASET")
    e.add_argument("--model", action="append", required=True, metavar="CKPT|NAME|NAME=CKPT",
                   help="checkpoint folder, model name (fitted on the train split here) or NAME=CKPT; repeatable")
    e.add_argument("--ft", action="append", metavar="FT", help="online tuning period, or 'inf' (default 8); repeatable")
    e.add_argument("--job", action="append", help="only this job (repeatable)")
    e.add_argument("--json", metavar="FILE", help="write results here (default DATASET/evaluation.json)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--volume-scaling", action="store_true",
                   help="divide iteration times by the iteration's relative message volume (from the source run's "
                        "scenario) before fitting/tuning/predicting, multiply predictions back (as the hybrid loop's "
                        "surrogate.volume_scaling); MAPE stays on raw times")
    e.add_argument("--progress", action="store_true")
    e.set_defaults(func=cmd_evaluate)

    register_pretrain(subparsers)
