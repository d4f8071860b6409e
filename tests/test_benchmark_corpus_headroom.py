"""benchmarks/corpus_headroom.py: LAST's and MEAN's job-level MAPE at a horizon and the co-runner-change share, on
series whose answers are worked out by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hr():
    spec = importlib.util.spec_from_file_location("corpus_headroom_bench", ROOT / "benchmarks" / "corpus_headroom.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def test_a_step_after_a_co_runner_change(hr):
    # time 1.0 for three iterations beside co-runner "a", then 2.0 once "a" has ended
    a, none = frozenset({"a"}), frozenset()
    job = {"y": np.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0]), "sets": [a, a, a, none, none, none]}
    one = hr.job_scores(job, 1)
    # one step: LAST misses only t = 3 (1 for 2: 50 %), over t = 1..5
    assert one["n"] == 5 and one["changed"] == 1
    assert one["last"] == pytest.approx(100 * 0.5 / 5)
    # MEAN (the mean of the times up to t - 1): t = 3: 1 for 2 (50 %); t = 4: 5/4 for 2; t = 5: 7/5 for 2
    mean = [0, 0, 0.5, 1 - (5 / 4) / 2, 1 - (7 / 5) / 2]
    assert one["mean"] == pytest.approx(100 * np.mean(mean))
    assert one["mean_changed"] == pytest.approx(50.0)
    assert one["mean_steady"] == pytest.approx(100 * np.mean([0, 0, 1 - (5 / 4) / 2, 1 - (7 / 5) / 2]))
    # horizon 3: t = 3, 4, 5 predicted from t - 3 = 0, 1, 2 (all beside "a"): every one is a change and off by half
    three = hr.job_scores(job, 3)
    assert three["n"] == 3 and three["changed"] == 3
    assert three["last"] == pytest.approx(50.0) and three["mean"] == pytest.approx(50.0)
    # nothing at or past the horizon: no score
    assert hr.job_scores(job, 6) is None


def test_the_run_bootstrap_interval_holds_the_mean(hr):
    ci = hr._bootstrap([1.0, 2.0, 3.0, 4.0], [0, 0, 1, 2], 3)
    assert ci[0] <= 2.5 <= ci[1] and 1.0 <= ci[0] and ci[1] <= 4.0
    assert hr._bootstrap([2.0, 2.0], [0, 1], 2) == [2.0, 2.0]


def test_the_shift_at_a_change_compares_the_steady_iterations_on_both_sides(hr):
    a, b = frozenset({"a"}), frozenset({"b"})
    job = {"y": np.array([1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 1.5]), "sets": [a, a, a, b, b, b, b]}
    assert hr.shifts(job, 3) == [pytest.approx(0.5)]
    assert hr.shifts(job, 4) == []  # only three iterations beside "a"
