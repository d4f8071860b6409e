"""A queue plug-in and a backend plug-in from a package that is not the project: a scratch package with a
``*.dist-info`` (its entry points) in a temporary folder on ``PYTHONPATH``, as ``pip install --target`` leaves one.
Named in a scenario, both validate and run through the ``hybridsim`` CLI, with no file of the project edited: the
queue name and the backend kind are checked against the one registry (:class:`hybridsim_common.plugins.Registry`),
``backend.toy`` against the backend's own options model, with located "did you mean" errors; the same package in
the working directory instead is not a plug-in source (neither its module nor its dist-info)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PACKAGE = '''
"""A plug-in package: a queue policy and a backend (the embedded engine under another name, with options)."""
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hybridsim.queues import QueuePolicy
from hybridsim_common.backend import Backend


class LastComeFirstServed(QueuePolicy):
    """The latest arrival first, no backfilling."""
    name, backfill = "lcfs", "none"

    def key(self, job):
        return (-job.arrival,)


class ToyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = "toy"
    core: Literal["python", "native", "auto"] = "python"
    scale: float = Field(1.0, gt=0)


class ToyBackend(Backend):
    """Runs the embedded engine on the core its options name, and leaves its label in the run directory."""
    options = ToyOptions

    def __init__(self, scenario, run_dir, progress=True, mode="simulate"):
        from hybridsim.engine import Engine

        opts = scenario.backend.toy
        self.label, self.run_dir = opts.label, Path(run_dir)
        scenario = scenario.model_copy(deep=True)
        scenario.backend.embedded.core = opts.core
        self.engine = Engine(scenario, progress=False)

    def run(self, director=None, on_record=None, on_samples=None):
        result = self.engine.run(director=director, on_record=on_record, on_samples=on_samples)
        (self.run_dir / "toy.txt").write_text(f"{self.label} {result.stats['core']}")
        return result
'''

ENTRY_POINTS = """[hybridsim.queues]
lcfs = h34toy:LastComeFirstServed

[hybridsim.backends]
toy = h34toy:ToyBackend
"""

#: three whole-machine jobs: A runs first; B (arrives 10 ns) and C (20 ns) wait; FCFS starts B next, LCFS C
SCENARIO = """
name: plug
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
scheduler: {queue: %(queue)s}
sampling: {ports: false}
jobs:
  - {name: a, ranks: 72, iterations: 1, arrival: 0, workload: {kind: allreduce}}
  - {name: b, ranks: 72, iterations: 1, arrival: 10, workload: {kind: allreduce}}
  - {name: c, ranks: 72, iterations: 1, arrival: 20, workload: {kind: allreduce}}
backend: %(backend)s
"""


def _install(site: Path) -> None:
    """The package as an installer leaves it: the module and its dist-info with the entry points."""
    (site / "h34toy").mkdir(parents=True)
    (site / "h34toy" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    info = site / "h34toy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: h34toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)


def _hybridsim(args, cwd: Path, pythonpath: list[Path]):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "hybridsim", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugpkg")
    _install(root / "site")
    (root / "scen").mkdir()
    return root


def _write(root: Path, name: str, queue: str, backend: str) -> Path:
    path = root / "scen" / name
    path.write_text(SCENARIO % {"queue": queue, "backend": backend})
    return path


def _starts(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {name: job["start"] for name, job in summary["jobs"].items()}


def test_installed_queue_and_backend_plugins_validate_and_run(scratch):
    scen = _write(scratch, "plug.yaml", "lcfs", "{kind: toy, toy: {label: hello, core: python}}")
    path = [scratch / "site", REPO]
    val = _hybridsim(["validate", str(scen)], scratch / "scen", path)
    assert val.returncode == 0, val.stderr
    out = scratch / "runs" / "plug"
    run = _hybridsim(["run", str(scen), "-o", str(out)], scratch / "scen", path)
    assert run.returncode == 0, run.stderr
    assert (out / "toy.txt").read_text() == "hello python"  # the backend got its validated options
    starts = _starts(out)
    assert starts["a"] == 0 and starts["c"] < starts["b"]  # last come, first served
    # the same scenario under fcfs on the embedded backend: B before C (the plug-in's order was its own)
    ref = _write(scratch, "ref.yaml", "fcfs", "{kind: embedded, embedded: {core: python}}")
    out2 = scratch / "runs" / "ref"
    run2 = _hybridsim(["run", str(ref), "-o", str(out2)], scratch / "scen", path)
    assert run2.returncode == 0, run2.stderr
    ref_starts = _starts(out2)
    assert ref_starts["b"] < ref_starts["c"] and ref_starts["b"] == starts["c"]


@pytest.mark.parametrize("queue, backend, where, message", [
    ("lcsf", "{kind: toy}", ":4:", "scheduler.queue: unknown queue policy 'lcsf'; did you mean 'lcfs'?"),
    ("lcfs", "{kind: tyo}", ":10:", "backend.kind: unknown backend 'tyo'; did you mean 'toy'?"),
    ("lcfs", "{kind: toy, toy: {lable: x}}", ":10:", "backend.toy.lable: unknown key 'lable'; did you mean 'label'?"),
    ("lcfs", "{kind: toy, toy: {scale: 0}}", ":10:", "backend.toy.scale: Input should be greater than 0"),
    ("lcfs", "{kind: toy, toi: {}}", ":10:", "backend.toi: unknown key 'toi'; did you mean 'toy'?"),
])
def test_a_misnamed_plugin_or_option_is_a_located_error_with_the_closest_name(scratch, queue, backend, where,
                                                                                 message):
    scen = _write(scratch, "bad.yaml", queue, backend)
    val = _hybridsim(["validate", str(scen)], scratch / "scen", [scratch / "site", REPO])
    assert val.returncode == 2
    assert f"bad.yaml{where}" in val.stderr and message in val.stderr, val.stderr
    assert not (scratch / "scen" / "results").exists()


def test_the_package_in_the_working_directory_is_not_a_plugin_source(scratch):
    """Run from the folder that holds the package and its dist-info (not on PYTHONPATH): neither is read."""
    scen = _write(scratch, "plug.yaml", "lcfs", "{kind: embedded}")
    val = _hybridsim(["validate", str(scen)], scratch / "site", [REPO])
    assert val.returncode == 2 and "unknown queue policy 'lcfs'" in val.stderr, val.stderr
    scen = _write(scratch, "spec.yaml", "h34toy:LastComeFirstServed", "{kind: embedded}")
    run = _hybridsim(["run", str(scen), "-o", str(scratch / "runs" / "spec")], scratch / "site", [REPO])
    assert run.returncode == 2 and "working directory" in run.stderr and "--plugin-path" in run.stderr, run.stderr
