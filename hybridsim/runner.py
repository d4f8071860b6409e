"""The controller loop: scenario -> backend (+ director) -> records -> run directory."""

from __future__ import annotations

import os
from pathlib import Path


class RunError(RuntimeError):
    """The run started but failed; the run directory's manifest says why."""


def default_outdir(scenario, path: str | os.PathLike) -> Path:
    if scenario.output.dir is not None:
        return scenario.resolve(scenario.output.dir)
    return Path("results") / Path(path).stem


def run_scenario_file(path, outdir=None, force=False, mode="simulate", progress=True, argv=None):
    from .rundir import RunDir
    from .scenario import load_scenario, scenario_to_dict

    scenario = load_scenario(path)
    out = Path(outdir) if outdir else default_outdir(scenario, path)
    raise RunError("no backend yet: the embedded engine has not landed")
