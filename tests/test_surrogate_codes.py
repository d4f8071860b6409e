"""Datasets from a real CODES run (reference run E: 72 nodes, MILC 36 x 1,600 + LAMMPS 32 x 230, random placement)
imported through codes_bridge: shapes, rank ports from the allocation file, iteration times, splits, and the run
description the import writes (with and without an equivalent hybridsim scenario)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from refdata import CODES, REFERENCE_CODES

RUN_E = REFERENCE_CODES / "E-72node-milc-lammps-syn" / "hf-random-seq"  # its VT tables are not in tests/data
RUN_B = CODES / "B-72node-milc" / "hf-seq"


def _alloc(run_dir, name):
    return [list(map(int, line.split())) for line in (run_dir / name).read_text().splitlines() if line.strip()]


@pytest.mark.reference_data
def test_dataset_from_codes_run_e(tmp_path):
    from codes_bridge.importer import import_codes_run
    from surrogate.dataset import build_dataset

    import_codes_run(RUN_E, tmp_path / "imp")
    ds = build_dataset(tmp_path / "imp")
    assert list(ds.jobs) == ["milc-36", "lammps-32"]  # the background job has no iterations
    milc, lammps = ds["milc-36"], ds["lammps-32"]
    assert (milc.R, milc.T) == (36, 1600) and (lammps.R, lammps.T) == (32, 230)
    assert milc.x.shape == (1600, 252, 36)  # 36 routers x radix 7
    assert milc.workload == "milc" and lammps.workload == "lammps"
    # alloc-random.conf line 1 starts with node 43: router 21, terminal port 6 -> port id 21 * 7 + 6
    assert milc.rank_port[0] == 153
    alloc = _alloc(RUN_E, "alloc-random.conf")
    exp = [(t // 2) * 7 + 5 + t % 2 for t in alloc[1]]
    assert lammps.rank_port.tolist() == exp
    assert milc.split == {"train": (0, 480), "val": (480, 640), "test": (640, 1600)}
    # README: MILC iterations ~357 us, LAMMPS steps ~2.6 ms
    assert 330e3 < milc.y.mean() < 380e3
    assert 2.3e6 < lammps.y.mean() < 2.8e6
    assert np.isfinite(milc.x).all() and milc.mask.sum() == 36

    # the import's description: terminals from the allocation file, volumes from the equivalent scenario's workloads
    from codes_bridge.scenario_from_codes import scenario_from_codes
    from hybridsim_common.rundir import read_description
    from hybridsim.runner import workload_volumes
    from surrogate.volumes import dataset_volumes, relative_volumes

    desc = read_description(tmp_path / "imp")
    sc = scenario_from_codes(RUN_E)
    assert [(j.name, j.workload, j.ranks, j.iterations) for j in desc.jobs] == \
        [("milc-36", "milc", 36, 1600), ("lammps-32", "lammps", 32, 230), ("synthetic1", "uniform_random", 4, None)]
    assert [j.terminals for j in desc.jobs] == alloc[:3]
    for i in (0, 1):
        assert desc.jobs[i].volumes == workload_volumes(sc, i, desc.jobs[i].iterations).tolist()
    assert desc.jobs[2].volumes is None
    v = dataset_volumes(ds)
    assert list(v) == ["lammps-32"]
    np.testing.assert_array_equal(v["lammps-32"], relative_volumes(workload_volumes(sc, 1, 230)))


def test_import_without_an_equivalent_scenario(tmp_path, monkeypatch):
    """When no hybridsim scenario matches the CODES inputs, the description comes from them alone: the .conf shape,
    the allocation file, the workload kind the job name says; no volumes, which volume scaling then names."""
    import codes_bridge.scenario_from_codes as sfc
    from codes_bridge.importer import import_codes_run
    from hybridsim_common.rundir import read_description
    from surrogate.base import SurrogateError
    from surrogate.dataset import build_dataset
    from surrogate.volumes import dataset_volumes

    def refuse(_d):
        raise sfc.ScenarioFromCodesError("no equivalent here")

    monkeypatch.setattr(sfc, "scenario_from_codes", refuse)
    src = Path(shutil.copytree(RUN_B, tmp_path / "codes", copy_function=shutil.copyfile))
    order = np.random.default_rng(0).permutation(72)           # a placement whose order matters
    (src / "alloc-72.conf").write_text(" ".join(map(str, order)) + " \n")
    run = import_codes_run(src, tmp_path / "imp")
    assert any("no equivalent hybridsim scenario" in w for w in run.warnings)
    desc = read_description(tmp_path / "imp")
    assert (desc.shape.groups, desc.shape.routers_per_group, desc.shape.terminals_per_router) == (9, 4, 2)
    assert [(j.name, j.workload, j.params, j.ranks, j.iterations, j.volumes) for j in desc.jobs] == \
        [("milc-72", "milc", {}, 72, None, None)]
    assert desc.jobs[0].terminals == order.tolist()
    ds = build_dataset(tmp_path / "imp")
    assert ds["milc-72"].rank_port.tolist() == [(t // 2) * 7 + 5 + t % 2 for t in order]
    with pytest.raises(SurrogateError, match=r"'jobs\[0\]\.volumes' is null"):
        dataset_volumes(ds)
