"""Offline volume normalisation (surrogate.volumes, evaluate(volume_scaling=...)): a series whose iteration time is
exactly proportional to a known volume pattern is predicted exactly by LAST with scaling; constant-volume jobs are
untouched; the volumes of a LAMMPS job come from the scenario's workload definition (through the run description)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybridsim_common.topology import DragonflyShape
from surrogate.dataset import JobSeries, SurrogateDataset
from surrogate.evaluate import evaluate, run_online
from surrogate.models.history import Last
from surrogate.volumes import dataset_volumes, relative_volumes

SHAPE = DragonflyShape(groups=3, routers_per_group=2, terminals_per_router=2, global_channels_per_router=1)


def _series(name, y):
    T = y.shape[1]
    return JobSeries(job=name, workload="lammps", x=np.zeros((T, 1, 1), np.float32), feature_names=["f"],
                     mask=np.ones(1, bool), rank_port=np.zeros(y.shape[0], np.int64), y=y,
                     split={"train": (0, 6), "val": (6, 8), "test": (8, T)}, shape=SHAPE)


def test_relative_volumes_rule():
    np.testing.assert_allclose(relative_volumes([1.0, 3.0]), [0.5, 1.5])
    assert relative_volumes([2.0, 2.0]) is None          # constant: not scaled
    assert relative_volumes([]) is None and relative_volumes([1.0, 0.0]) is None


def test_last_exact_with_scaling():
    # volume: 1 every iteration, 4/3 every 5th (t = 4, 9, 14, 19); time = 100 ns (rank 0) / 200 ns (rank 1) per unit
    vol = np.where(np.arange(20) % 5 == 4, 4.0, 3.0)
    v = vol / vol.mean()                                    # mean 1
    y = np.outer([100.0, 200.0], vol)
    js = _series("lammps", y)
    raw = run_online(Last(), js, ft=math.inf)
    # without scaling LAST predicts 3 for a heavy step (true 4: error 1/4) and 4 for the step after (true 3: 1/3):
    # test targets 8..19 hold heavy 9, 14, 19 and the steps after 9, 14 (10, 15) -> (3/4 + 2/3) / 12 * 100
    assert raw["mape"] == pytest.approx((3 * 25 + 2 * 100 / 3) / 12)
    sc = run_online(Last(), js, ft=math.inf, volumes=v)
    assert sc["mape"] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(sc["pred"], y[:, 8:])
    np.testing.assert_array_equal(sc["true"], y[:, 8:])   # MAPE on raw times


def test_evaluate_volume_scaling_option():
    vol = np.where(np.arange(20) % 5 == 4, 4.0, 3.0)
    ds = SurrogateDataset(shape=SHAPE, jobs={"lammps": _series("lammps", np.outer([100.0], vol)),
                                             "milc": _series("milc", np.full((1, 20), 50.0) + np.arange(20))},
                          port_features=["f"])
    v = {"lammps": vol / vol.mean()}
    off = {r["job"]: r["mape"] for r in evaluate(ds, ["last", "mean"], [8, "inf"])["results"] if r["model"] == "last"}
    rep = evaluate(ds, ["last", "mean"], [8, "inf"], volume_scaling=True, volumes=v)
    on = {r["job"]: r["mape"] for r in rep["results"] if r["model"] == "last"}
    assert on["lammps"] == pytest.approx(0.0, abs=1e-9) and off["lammps"] > 10
    assert on["milc"] == off["milc"]                      # no volumes: identical
    assert rep["volume_scaled_jobs"] == ["lammps"]
    # MEAN is fitted on the scaled train split: constant 300 ns/unit -> exact too
    assert all(r["mape"] == pytest.approx(0.0, abs=1e-9) for r in rep["results"]
               if r["model"] == "mean" and r["job"] == "lammps")


def test_dataset_volumes_from_scenario(repo):
    from hybridsim.description import describe_scenario
    from hybridsim.scenario import load_scenario

    scen = load_scenario(repo / "examples" / "hybrid-72-long.yaml")
    jobs = {j.name: j for j in scen.jobs if not j.is_background}
    lam = next(n for n, j in jobs.items() if j.workload.kind == "lammps")
    mil = next(n for n, j in jobs.items() if j.workload.kind == "milc")
    ds = SurrogateDataset(shape=SHAPE, jobs={lam: _series(lam, np.ones((1, 24))), mil: _series(mil, np.ones((1, 24)))},
                          port_features=["f"])
    v = dataset_volumes(ds, describe_scenario(scen))
    assert list(v) == [lam]                               # MILC's volume is constant
    assert v[lam].mean() == pytest.approx(1.0)
    heavy = np.flatnonzero(v[lam] > 1.1)
    np.testing.assert_array_equal(heavy, [10, 20])        # neighbour exchange every 10 steps
    assert v[lam][10] / v[lam][0] == pytest.approx(1.33, abs=0.02)


@pytest.mark.parametrize("path", ["benchmarks/scenarios/mix-72-600.yaml", "examples/stream-72.yaml"])
def test_a_workloads_bytes_sent_is_the_sum_of_its_send_ops(path):
    """``JobWorkload.bytes_sent`` (what the controller's volumes read) is the ISEND/SEND bytes of ``ops``, also where
    a workload computes it without the ops (nearest neighbour, MILC)."""
    from pathlib import Path

    from hybridsim.scenario import load_scenario
    from hybridsim.workloads import ISEND, SEND, build_workload

    sc = load_scenario(Path(__file__).resolve().parents[1] / path)
    for j, job in enumerate(sc.jobs):
        if job.is_background:
            continue
        wl = build_workload(job, j, sc.seed, scenario=sc)
        for rank in sorted({0, job.ranks // 2, job.ranks - 1}):
            for it in sorted({0, 1, wl.iterations - 1}):
                ops = build_workload(job, j, sc.seed, scenario=sc).ops(rank, it)
                assert wl.bytes_sent(rank, it) == sum(op[2] for op in ops if op[0] in (ISEND, SEND))
