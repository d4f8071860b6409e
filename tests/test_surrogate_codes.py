"""Datasets from a real CODES run (reference run E: 72 nodes, MILC 36 x 1,600 + LAMMPS 32 x 230, random placement)
imported through codes_bridge: shapes, rank ports from the allocation file, iteration times, splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np

CODES = Path(__file__).resolve().parents[2] / "shared" / "data" / "codes"
RUN_E = CODES / "E-72node-milc-lammps-syn" / "hf-random-seq"


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
    alloc = [list(map(int, line.split())) for line in (RUN_E / "alloc-random.conf").read_text().splitlines()]
    exp = [(t // 2) * 7 + 5 + t % 2 for t in alloc[1]]
    assert lammps.rank_port.tolist() == exp
    assert milc.split == {"train": (0, 480), "val": (480, 640), "test": (640, 1600)}
    # README: MILC iterations ~357 us, LAMMPS steps ~2.6 ms
    assert 330e3 < milc.y.mean() < 380e3
    assert 2.3e6 < lammps.y.mean() < 2.8e6
    assert np.isfinite(milc.x).all() and milc.mask.sum() == 36
