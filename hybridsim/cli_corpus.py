"""``hybridsim corpus``: the command of :mod:`hybridsim.corpus`, apart from it so that the CLI lists it without
importing the corpus machinery (pydantic models, numpy, the run-directory format)."""

from __future__ import annotations

import sys
from pathlib import Path

from hybridsim_common.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, CliError


def cmd_corpus(args) -> int:
    from .corpus import CORPUS_FILE, CorpusError, build_corpus
    from hybridsim_common.rundir import RunDirError

    if args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    try:
        m = build_corpus(args.spec, args.output, workers=args.workers, force=args.force,
                         progress=not args.no_progress)
    except (CorpusError, RunDirError) as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except OSError as exc:
        raise CliError(f"{exc.filename or args.output}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
    c = m["counts"]
    print(f"{args.output}: {c['completed']} completed, {c['failed']} failed, {c['pending']} pending "
          f"(manifest {Path(args.output) / CORPUS_FILE})")
    failed = [r for r in m["runs"] if r["status"] == "failed"]
    for r in failed[:10]:
        print(f"  {r['dir']}: failed: {r.get('error')}", file=sys.stderr)
    return EXIT_FAIL if failed else EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("corpus", help="many embedded-engine runs drawn from a declared space (a training corpus); "
                                      "resumable")
    p.add_argument("spec", metavar="SPEC.yaml")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="corpus folder (runs/NNNN + corpus.json)")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="runs in parallel (processes), default 1")
    p.add_argument("--force", action="store_true", help="run every run again, completed or not")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_corpus)
