"""Energy report: a hand-computed case (CPU and GPU kernels, static power over waiting time, network)."""

import pytest

from hybridsim.energy.energy import energy_report, format_energy_table
from hybridsim_common.records import IterationRecord
from hybridsim.scenario import parse_scenario

SCEN = """\
jobs:
  - name: a
    ranks: 2
    iterations: 2
    workload: {kind: allreduce}
    compute:
      kernels:
        - {name: k, W: 1.0e9, Q: {L1: 1.0e9, DRAM: 1.0e8}}
        - {name: g, device: gpu, W: 1.0e9}
  - name: b
    ranks: 1
    iterations: 1
    workload: {kind: allreduce}
machine:
  cores per socket: 10
  clock: 1 GHz
  FLOPs per cycle: {DP: 10}
  memory hierarchy:
    - {level: L1, bandwidth: 1000 GB/s, energy per byte: 1 pJ}
    - {level: DRAM, bandwidth: 50 GB/s, energy per byte: 100 pJ}
  energy per flop: {DP: 100 pJ}
  static power: {package: 50 W, DRAM: 10 W}
  network: {energy per byte per hop: 1 nJ}
  gpu: {SM count: 10, clock: 1 GHz, FLOPs per cycle: {DP: 100}, memory bandwidth: 1000 GB/s,
        idle power: 50 W, active power: 250 W, host link bandwidth: 10 GB/s}
"""

MS = 1e6  # ns


def _records():
    R = IterationRecord
    return [R("a", 0, 0, 0, 0.0, 20 * MS), R("a", 0, 0, 1, 20 * MS, 45 * MS),
            R("a", 0, 1, 0, 0.0, 22 * MS), R("a", 0, 1, 1, 22 * MS, 40 * MS),
            R("b", 1, 0, 0, 5 * MS, 15 * MS)]


def test_hand_case():
    s = parse_scenario(SCEN)
    rep = energy_report(s, _records(), link_bytes={"jobs": {"a": 1e6}, "bytes": [1e6, 5e5, 5e5]})
    a = rep["jobs"]["a"]
    # dynamic per iteration: 1e9 FLOP x 100 pJ + 1e9 B x 1 pJ + 1e8 B x 100 pJ = 0.111 J; 4 rank-iterations
    assert a["breakdown_J"]["flops"] == pytest.approx(4 * 0.1)
    assert a["breakdown_J"]["memory"] == pytest.approx({"L1": 4 * 0.001, "DRAM": 4 * 0.01})
    # static: 60 W over 20 + 25 + 22 + 18 = 85 ms of iterations (waiting included)
    assert a["breakdown_J"]["static"] == pytest.approx(60 * 0.085)
    # GPU: idle 50 W x 85 ms + (250 - 50) W x 1 ms busy x 4 rank-iterations
    assert a["breakdown_J"]["gpu"] == pytest.approx(50 * 0.085 + 200 * 1e-3 * 4)
    assert a["breakdown_J"]["network"] == pytest.approx(1e-9 * 1e6)
    e_a = 0.444 + 5.1 + 4.25 + 0.8 + 1e-3
    assert a["energy_to_solution_J"] == pytest.approx(e_a)
    assert a["time_to_solution_s"] == pytest.approx(0.045)
    assert a["edp_Js"] == pytest.approx(e_a * 0.045)
    assert a["iterations"] == 2 and a["records"] == 4
    # compute phase: 10 ms CPU kernel (FLOP-bound) + 1 ms GPU kernel
    assert a["compute_phase_s"] == pytest.approx(11e-3)
    b = rep["jobs"]["b"]
    assert b["energy_to_solution_J"] == pytest.approx(60 * 0.010 + 50 * 0.010)
    t = rep["total"]
    assert t["time_to_solution_s"] == pytest.approx(0.045)
    # unattributed network: 2e6 total - 1e6 of job a
    assert t["network_unattributed_J"] == pytest.approx(1e-3)
    assert t["energy_to_solution_J"] == pytest.approx(e_a + 1.1 + 1e-3)
    assert t["edp_Js"] == pytest.approx((e_a + 1.1 + 1e-3) * 0.045)
    table = format_energy_table(rep)
    assert "total" in table and "a" in table


def test_engine_link_totals_format():
    s = parse_scenario(SCEN)
    import numpy as np
    rep = energy_report(s, _records(), link_bytes={"radix": 15, "bytes": np.array([1000, 3000], dtype=np.int64)})
    assert rep["total"]["network_unattributed_J"] == pytest.approx(4000 * 1e-9)


def test_without_machine_only_times():
    s = parse_scenario(SCEN.split("machine:")[0].replace(
        "      kernels:\n        - {name: k, W: 1.0e9, Q: {L1: 1.0e9, DRAM: 1.0e8}}\n"
        "        - {name: g, device: gpu, W: 1.0e9}\n", "      delay: 1us\n"))
    rep = energy_report(s, _records())
    assert rep["machine"] is None
    assert rep["jobs"]["a"]["energy_to_solution_J"] is None
    assert rep["jobs"]["a"]["time_to_solution_s"] == pytest.approx(0.045)
    assert rep["total"]["edp_Js"] is None
