"""The CODES backend: scenario -> CODES inputs -> ``model-net-mpi-replay`` -> :class:`SimulationResult`.

:func:`run_codes` is what the runner calls for ``backend.kind: codes``::

    run_dir/codes/            CODES' working folder
        dfdally-<N>.conf, dfdally-<N>-intra/-inter, <job>.json, workloads.conf, alloc.conf   (codes_bridge.writers)
        command.txt, model-output.txt, model-output.stderr.txt                               (codes_bridge.launcher)
        iteration-logs/, lp-io/, ross-stats/, ross.csv, ...                                  (written by CODES)

then parses that folder with :func:`codes_bridge.importer.read_codes_run` and converts what it found. CODES cannot be
paused from outside, so this backend streams one whole run; there is no director here (hybrid runs on CODES use
CODES' own application surrogate with :mod:`codes_bridge.director` as its predictor service). Job names and ids in
the result are the scenario's (CODES numbers jobs by their line in the workload file, which is scenario order).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import numpy as np

from hybridsim.backend import SimulationResult

from .launcher import CodesRunError, run_inputs
from .writers import write_codes_inputs

CODES_SUBDIR = "codes"


def _get(obj, *names, default=None):
    for n in names:
        if isinstance(obj, dict) and n in obj:
            return obj[n]
        if hasattr(obj, n):
            return getattr(obj, n)
    return default


def _events(stats) -> int:
    """Committed (net) events from the importer's ROSS statistics (object or dict, whatever key spelling)."""
    if stats is None:
        return 0
    for key in ("events_committed", "net_events", "net_events_processed", "committed_events", "events"):
        v = _get(stats, key)
        if v is not None:
            try:
                return int(v)
            except (TypeError, ValueError):
                pass
    return 0


def _stats_dict(stats) -> dict:
    if stats is None:
        return {}
    if isinstance(stats, dict):
        return dict(stats)
    if dataclasses.is_dataclass(stats):
        return dataclasses.asdict(stats)
    return {k: v for k, v in vars(stats).items() if not k.startswith("_")}


def to_simulation_result(run, scenario, wall_s: float) -> SimulationResult:
    """Convert the importer's ``CodesRun`` into the result every backend returns, with the scenario's job names."""
    names = [j.name for j in scenario.jobs]
    records = list(_get(run, "records", default=[]) or [])
    simulated = _get(run, "simulated")
    if simulated is None or len(simulated) != len(records):
        simulated = [True] * len(records)
    renamed = []
    for r in records:
        if not 0 <= r.job_id < len(names):
            raise CodesRunError(f"CODES reported job id {r.job_id}, but the scenario has {len(names)} jobs",
                                cause="no-output")
        renamed.append(r if r.job == names[r.job_id] else dataclasses.replace(r, job=names[r.job_id]))
    job_end_raw = _get(run, "job_end", default={}) or {}
    codes_names = list(_get(run, "job_names", default=[]) or [])
    job_end: dict[str, float] = {}
    for k, v in job_end_raw.items():
        if isinstance(k, str) and k in codes_names and codes_names.index(k) < len(names):
            job_end[names[codes_names.index(k)]] = float(v)
        elif isinstance(k, (int, np.integer)) and 0 <= int(k) < len(names):
            job_end[names[int(k)]] = float(v)
        elif isinstance(k, str) and k in names:
            job_end[k] = float(v)
        elif isinstance(k, str) and k.isdigit() and int(k) < len(names):
            job_end[names[int(k)]] = float(v)
        else:
            job_end[str(k)] = float(v)
    ross = _get(run, "ross", "ross_stats", "stats")
    events = _get(run, "events")
    events = int(events) if isinstance(events, (int, np.integer)) else _events(ross)
    end_candidates = list(job_end.values()) + ([max(r.end for r in renamed)] if renamed else [])
    stats = {"backend": "codes", "ross": _stats_dict(ross)}
    warns = _get(run, "warnings")
    if warns:
        stats["warnings"] = list(warns)
    return SimulationResult(
        records=renamed,
        simulated=list(simulated),
        ports=_get(run, "ports"),
        events=events,
        end_time=max(end_candidates) if end_candidates else 0.0,
        job_end=job_end,
        wall_s=wall_s,
        partial=bool(_get(run, "partial", default=False)),
        link_totals=_get(run, "link_totals"),
        stats=stats,
    )


def run_codes(scenario, run_dir: Path, progress: bool | Callable = True, *, env: dict | None = None,
              **writer_options) -> SimulationResult:
    """Write CODES inputs for ``scenario`` into ``run_dir/codes``, run CODES there, import and return its results.

    Raises :class:`~codes_bridge.writers.CodesInputError` for a scenario CODES cannot run (nothing is started) and
    :class:`~codes_bridge.launcher.CodesRunError` when CODES is missing or fails, including an exit status 0 without
    ROSS' end-of-run statistics (its files stay in ``run_dir/codes``; ``hybridsim import-codes`` reads them as a
    partial run).
    ``writer_options`` go to :func:`~codes_bridge.writers.write_codes_inputs` (``vt_samp_end``, ``end_time``, ...).
    """
    from .importer import read_codes_run  # the parsers' package; imported late so writing/launching need not it

    codes_dir = Path(run_dir) / CODES_SUBDIR
    inputs = write_codes_inputs(scenario, codes_dir, **writer_options)
    t0 = time.monotonic()
    launched = run_inputs(scenario, inputs, progress=progress, env=env)
    wall = time.monotonic() - t0
    try:
        run = read_codes_run(codes_dir)
    except CodesRunError:
        raise
    except Exception as exc:  # a parse error names file and line; say that CODES did run
        raise CodesRunError(f"CODES finished (exit 0 after {launched.wall_s:.1f} s) but its output could not be "
                            f"read: {exc}", cause="no-output", run_dir=codes_dir) from exc
    result = to_simulation_result(run, scenario, wall)
    if result.partial:
        why = "; ".join(result.stats.get("warnings", [])[:5])
        raise CodesRunError(f"CODES exited with status 0 after {launched.wall_s:.1f} s but did not finish the run "
                            f"({why})", cause="no-output", run_dir=codes_dir,
                            stderr_tail="\n".join(launched.stderr.read_text(errors="replace").splitlines()[-20:]))
    return result
