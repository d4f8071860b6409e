"""The surrogate plug-in example (``examples/surrogates/median.py``, the how-to in its docstring and the README):
its predictions against hand-computed medians, and the model registered from a scratch package's ``*.dist-info``
(entry point ``hybridsim.surrogates``, no project file edited) validates and runs in the hybrid loop; a misspelt
model name is a located error with the closest name."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from examples.surrogates.median import Median
from surrogate.base import Context, SurrogateError
from surrogate.registry import check_config

REPO = Path(__file__).resolve().parents[1]
NAN = math.nan


def _ctx(history):
    return Context(job="a", workload="milc", history=np.asarray(history, dtype=np.float64))


def test_median_of_the_last_k_truths_per_rank():
    ctx = _ctx([[1.0, 2.0, 10.0, 4.0],     # last 3: 2, 10, 4 -> 4
                [NAN, NAN, 5.0, 7.0],      # last 3: 5, 7 -> 6
                [3.0, NAN, NAN, NAN],      # the 3 is older than the last 3: nothing -> NaN
                [NAN, 8.0, 1.0, 6.0]])     # 8, 1, 6 -> 6
    got = Median(k=3).predict(ctx)
    assert got.dtype == np.float64 and got.shape == (4,)
    assert np.array_equal(got, [4.0, 6.0, NAN, 6.0], equal_nan=True)
    assert np.array_equal(Median(k=1).predict(ctx), [4.0, 7.0, NAN, 6.0], equal_nan=True)


def test_a_stretch_is_the_prediction_repeated_and_the_options_are_checked():
    ctx = _ctx([[1.0, 2.0, 3.0], [10.0, 30.0, 20.0]])
    m = Median(k=5)
    assert m.lookback == 5 and m.config() == {"k": 5}
    many = m.predict_many(ctx, 3)
    assert many.shape == (3, 2) and np.array_equal(many, np.array([[2.0, 20.0]] * 3))
    assert m.predict_many(ctx, 0).shape == (0, 2)
    with pytest.raises(SurrogateError):
        Median.check_config({"k": 0})
    with pytest.raises(SurrogateError):  # over the bound: refused before anything is built
        Median.check_config({"k": 10**9})


SCENARIO = """\
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 12, workload: {kind: milc, dimension_sizes: [2, 2], msg_size: 4096}}
controller: {policy: periodic, params: {warmup: 4, ft: 4, truth: 2}}
surrogate: {model: %s, config: {k: 3}}
sampling: {ports: false}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A scratch package that registers the example as ``median`` (only a dist-info: the module is the checkout's)."""
    root = tmp_path_factory.mktemp("surplug")
    info = root / "site" / "h34median-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: h34median\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text('[hybridsim.surrogates]\nmedian = examples.surrogates.median:Median\n')
    (root / "scen").mkdir()
    return root


def _hybridsim(args, root: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "site"), str(REPO)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "hybridsim", *args], cwd=root / "scen", env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_registered_example_runs_in_the_hybrid_loop(site):
    scen = site / "scen" / "median.yaml"
    scen.write_text(SCENARIO % "median")
    val = _hybridsim(["validate", str(scen)], site)
    assert val.returncode == 0, val.stderr
    out = site / "runs" / "median"
    run = _hybridsim(["run", str(scen), "-o", str(out), "--mode", "hybrid", "--no-progress"], site)
    assert run.returncode == 0, run.stderr
    hybrid = json.loads((out / "summary.json").read_text())["hybrid"]
    assert hybrid["surrogate"] == "median"
    # periodic, warm-up 4, Ft 4 with 2 of truth: 0-3 simulated, then 2 predicted / 2 simulated (4-5, 8-9 predicted)
    assert (hybrid["jobs"]["a"]["simulated_iterations"], hybrid["jobs"]["a"]["predicted_iterations"]) == (8, 4)


def test_a_misspelt_model_is_a_located_error_with_the_closest_name(site):
    scen = site / "scen" / "typo.yaml"
    scen.write_text(SCENARIO % "medain")
    val = _hybridsim(["validate", str(scen)], site)
    assert val.returncode == 2
    assert "typo.yaml:5:" in val.stderr and "unknown surrogate model 'medain'; did you mean 'median'?" in val.stderr, \
        val.stderr


def test_check_config_reaches_a_registered_plugin_through_the_registry(monkeypatch):
    import importlib.metadata
    from importlib.metadata import EntryPoint

    real = importlib.metadata.entry_points
    ep = EntryPoint("median", "examples.surrogates.median:Median", "hybridsim.surrogates")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: list(real(**kw)) + ([ep] if kw.get("group") == "hybridsim.surrogates" else []))
    assert check_config("median", {"k": 4}) is Median
