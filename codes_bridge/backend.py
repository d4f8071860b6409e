"""The CODES backend: scenario -> CODES inputs -> ``model-net-mpi-replay`` -> :class:`SimulationResult`.

:class:`CodesBackend` (its ``run()`` is :func:`run_codes`) is the :class:`~hybridsim_common.backend.Backend` the runner builds
for ``backend.kind: codes`` (found through the ``hybridsim.backends`` entry point ``codes``)::

    run_dir/codes/            CODES' working folder
        dfdally-<N>.conf, dfdally-<N>-intra/-inter, <job>.json, workloads.conf, alloc.conf   (codes_bridge.writers)
        command.txt, model-output.txt, model-output.stderr.txt                               (codes_bridge.launcher)
        iteration-logs/, lp-io/, ross-stats/, ross.csv, ...                                  (written by CODES)

then parses that folder with :func:`codes_bridge.importer.read_codes_run` and converts what it found
(:meth:`CodesRun.to_simulation_result <codes_bridge.importer.CodesRun.to_simulation_result>`). CODES cannot be
paused from outside, so this backend streams one whole run; a hybrid run (``mode="hybrid"``) hands the switching to
CODES' own director, with the scenario's policy as its window(s) and the scenario's surrogate served in-process by
:mod:`codes_bridge.director` (:mod:`codes_bridge.hybrid`). Job names and ids in
the result are the scenario's (CODES numbers jobs by their line in the workload file, which is scenario order).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable

from hybridsim_common.backend import Backend, SimulationResult

from .launcher import CodesRunError, run_inputs
from .options import CODES_NO_STREAMS, HYBRID_ONLY, CodesOptions, scenario_problems
from .writers import CodesInputError, write_codes_inputs

CODES_SUBDIR = "codes"


class CodesBackend(Backend):
    """CODES as a :class:`~hybridsim_common.backend.Backend`: ``run()`` is :func:`run_codes` into ``run_dir``."""

    runs_policy = True          # hybrid mode: the scenario's policy becomes CODES' director window(s)
    streams_samples = False     # CODES writes its port samples to files, read after the run
    reports_job_end = True      # CODES prints per-job completion times
    no_streams = f"scheduler: {CODES_NO_STREAMS}"
    options = CodesOptions      # backend.codes: the scenario schema validates it against this model
    hybrid_only_options = HYBRID_ONLY

    @classmethod
    def scenario_problems(cls, scenario) -> list[tuple[tuple, str]]:
        return scenario_problems(scenario)

    @classmethod
    def hybrid_refusal(cls, scenario) -> str | None:
        if scenario.backend.codes.synch != "sequential":
            return (f"backend.codes.synch: {scenario.backend.codes.synch}: CODES' director needs synch: sequential "
                    "(optimistic CODES asks for predictions before it sends the records they depend on, so the "
                    "first ranks get the server's fallback, and rolled-back events ask again and may get another "
                    "answer: measured MILC +12.6 % against +0.02 % sequential, docs/codes.md)")
        from controllers import PolicyError, load_policy
        from controllers.base import ahead_form

        try:
            policy = load_policy(scenario.controller.policy, scenario.controller.params)
        except PolicyError:
            return None   # an unknown policy is reported where every backend checks it (preflight.check_hybrid)
        if ahead_form(policy) is None:
            return (f"controller.policy: {scenario.controller.policy} follows what the run measures and has no "
                    "plan-ahead form (Policy.ahead), and CODES' director fixes its windows before CODES starts, from "
                    "a dry run where nothing is measured; leave the controller section out (the default, confident, "
                    "has one) or name a policy whose schedule is known in advance, e.g. controller: {policy: "
                    "aligned, params: {ft: 16}} (docs/codes.md)")
        from .hybrid import standin_refusal

        return standin_refusal(scenario)

    @classmethod
    def never_predicted(cls, scenario) -> dict[str, str]:
        from .hybrid import never_predicted

        return never_predicted(scenario)

    def __init__(self, scenario, run_dir: Path, progress: bool | Callable = True, **options):
        self.scenario, self.run_dir, self.progress, self.options = scenario, Path(run_dir), progress, options

    def run(self, director=None, on_record=None, on_samples=None) -> SimulationResult:
        if director is not None:  # CODES cannot be paused: it takes the policy as its own director's window(s)
            raise CodesRunError("the CODES backend takes no in-process director: run it with mode='hybrid', which "
                                "hands the scenario's policy to CODES' own director (docs/codes.md)",
                                cause="bad-config")
        if isinstance(self.progress, str):  # a label (hybridsim bench: "run k/N: NAME"): said once, then ROSS' lines
            import sys

            print(f"codes: {self.progress}", file=sys.stderr, flush=True)
        result = run_codes(self.scenario, self.run_dir, bool(self.progress) if isinstance(self.progress, str)
                           else self.progress, **self.options)
        if on_record is not None:
            for rec, sim in zip(result.records, result.simulated):
                on_record(rec, sim)
        return result


def run_codes(scenario, run_dir: Path, progress: bool | Callable = True, *, env: dict | None = None,
              mode: str = "simulate", **writer_options) -> SimulationResult:
    """Write CODES inputs for ``scenario`` into ``run_dir/codes``, run CODES there, import and return its results.

    Raises :class:`~codes_bridge.writers.CodesInputError` for a scenario CODES cannot run (nothing is started) and
    :class:`~codes_bridge.launcher.CodesRunError` when CODES is missing or fails, including an exit status 0 without
    ROSS' end-of-run statistics (its files stay in ``run_dir/codes``; ``hybridsim import-codes`` reads them as a
    partial run).
    ``writer_options`` go to :func:`~codes_bridge.writers.write_codes_inputs` (``vt_samp_end``, ``end_time``, ...).
    ``mode="hybrid"``: the scenario's policy becomes CODES' director window(s) and the scenario's surrogate serves
    CODES' predictions from a thread of this process while CODES runs (:mod:`codes_bridge.hybrid`); the result's
    ``stats["director"]`` says which windows, how far they are from the policy, and what the server did.
    ``mode="floor"``: the director LPs and server of a hybrid run, but a window that never opens: nothing is
    predicted, so the run differs from ``simulate`` only by what adding the director does to CODES (the perturbation
    floor a hybrid CODES run's error is read against; docs/codes.md).
    """
    from .importer import read_codes_run  # the parsers' package; imported late so writing/launching need not it
    from .parsers.common import shown, shown_as

    if scenario.is_stream:
        raise CodesInputError(CodesBackend.no_streams)
    if mode == "hybrid" and (why := CodesBackend.hybrid_refusal(scenario)) is not None:
        raise CodesInputError(why)
    codes_dir = Path(run_dir) / CODES_SUBDIR
    director, plan, startup_s, truth_only = None, None, 0.0, None
    if mode not in ("simulate", "hybrid", "floor"):
        raise ValueError(f"mode must be simulate, hybrid or floor, got {mode!r}")
    if mode in ("hybrid", "floor"):
        from .hybrid import (STANDIN_MISSING, DirectorPlan, DirectorThread, check_standin, director_section,
                             executable_has_standin, plan_director, standin_record, truth_only_reason)
        from .launcher import find_executable

        plan = plan_director(scenario) if mode == "hybrid" else DirectorPlan([], [], {})
        truth_only = truth_only_reason(scenario, plan) if mode == "hybrid" and not plan.windows else None
        if truth_only is not None and (say := _progress_log(progress) or _stderr_line) is not None:
            say(truth_only)
        standin = scenario.backend.codes.standin
        if plan.windows and standin != "none":
            exe = find_executable(scenario.backend.codes, env)
            if not executable_has_standin(exe, standin):
                raise CodesRunError(f"backend.codes.standin: {standin}, but CODES {exe} cannot stand in: "
                                    + STANDIN_MISSING, cause="bad-config")
        if plan.windows or mode == "floor":
            t_load = time.monotonic()
            director = DirectorThread(scenario, log=_progress_log(progress))
            startup_s = time.monotonic() - t_load  # the surrogate's loading, before CODES starts
            codes = scenario.backend.codes
            writer_options["director"] = director_section(plan.windows, standin=codes.standin,
                                                          standin_scale=codes.standin_scale)
    inputs = write_codes_inputs(scenario, codes_dir, **writer_options)
    if director is not None and scenario.controller.sync != "rank":
        # skew (the default) and job: every rank of a predicted job advances by the job's iteration time
        director.service.set_groups({int(t): j for j, row in enumerate(inputs.placement) for t in row})
    t0 = time.monotonic()
    with director or contextlib.nullcontext():
        if director is not None:
            env = dict(os.environ if env is None else env, ZMQML_ENDPOINT=director.endpoint)
        launched = run_inputs(scenario, inputs, progress=progress, env=env)
    wall = time.monotonic() - t0
    if director is not None:
        from .importer import DIRECTOR_ANSWERS, write_director_answers

        if plan.windows and (why := check_standin(launched.stdout.read_text(errors="replace"),
                                                  scenario.backend.codes.standin)) is not None:
            raise CodesRunError(why, cause="bad-config", run_dir=codes_dir)

        write_director_answers(codes_dir / DIRECTOR_ANSWERS, director.service.answers)
    try:  # messages name CODES' files by their place in the run directory (run_dir may be a staging folder)
        with shown_as(codes_dir, CODES_SUBDIR):
            run = read_codes_run(codes_dir)
    except CodesRunError:
        raise
    except Exception as exc:  # a parse error names file and line; say that CODES did run
        with shown_as(codes_dir, CODES_SUBDIR):
            why = shown(str(exc))
        raise CodesRunError(f"CODES finished (exit 0 after {launched.wall_s:.1f} s) but its output could not be "
                            f"read: {why}", cause="no-output", run_dir=codes_dir) from exc
    result = run.to_simulation_result(scenario, wall)
    if director is not None and plan.windows:  # something was predicted: say what stood in for its traffic
        result.standin = standin_record(scenario.backend.codes)
    if plan is not None:
        result.stats["director"] = dict(plan.describe(), **(director.stats() if director is not None else {}),
                                        startup_s=startup_s)
        if truth_only is not None:
            result.stats["director"]["truth_only"] = truth_only
        result.stats["startup_s"] = startup_s
    if result.partial:
        why = "; ".join(result.stats.get("warnings", [])[:5])
        raise CodesRunError(f"CODES exited with status 0 after {launched.wall_s:.1f} s but did not finish the run "
                            f"({why})", cause="no-output", run_dir=codes_dir,
                            stderr_tail="\n".join(launched.stderr.read_text(errors="replace").splitlines()[-20:]))
    return result


def _progress_log(progress):
    """Where the director server's notes go: the progress callback, stderr for ``True``, nowhere for ``False``."""
    if callable(progress):
        return progress
    if progress:
        import sys

        return lambda s: print(f"codes-director: {s}", file=sys.stderr, flush=True)
    return None


def _stderr_line(s: str) -> None:
    import sys

    print(f"codes: {s}", file=sys.stderr, flush=True)
