"""Overlap check: alpha fitted from iteration records; `hybridsim overlap` end to end on a tiny scenario."""

import json

import numpy as np
import pytest

from hybridsim.cli import main
from hybridsim.energy.overlap import comm_only_scenario, fit_alpha, overlap_prediction, overlap_report
from hybridsim_common.records import IterationRecord
from hybridsim.scenario import parse_scenario


def test_prediction_formula():
    assert overlap_prediction(3.0, 5.0, 1.0) == pytest.approx(5.0)
    assert overlap_prediction(3.0, 5.0, 0.0) == pytest.approx(8.0)
    assert overlap_prediction([3.0, 6.0], [5.0, 2.0], 0.5).tolist() == pytest.approx([6.5, 7.0])


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.75, 1.0])
def test_fit_recovers_known_alpha(alpha):
    rng = np.random.default_rng(4)
    tc = rng.uniform(10, 100, 400)
    tm = rng.uniform(10, 100, 400)
    ts = overlap_prediction(tc, tm, alpha) * (1 + 0.002 * rng.standard_normal(400))
    fit = fit_alpha(tc, tm, ts)
    assert fit["alpha"] == pytest.approx(alpha, abs=0.01)
    assert fit["mape"] < 0.5


def test_fit_clips_and_flags_unidentified():
    tc, tm = np.array([10.0, 20.0]), np.array([30.0, 40.0])
    assert fit_alpha(tc, tm, tc + tm + 5)["alpha"] == 0.0          # slower than no overlap
    assert fit_alpha(tc, tm, np.maximum(tc, tm) - 5)["alpha"] == 1.0  # faster than perfect overlap
    f = fit_alpha([0.0, 0.0], [5.0, 6.0], [5.0, 6.0])
    assert f["alpha"] == 1.0 and f["alpha_unclipped"] is None


SCEN = """\
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
jobs:
  - name: a
    ranks: 2
    iterations: 3
    workload: {kind: allreduce}
    compute: {delay: 40us}
"""


def test_report_from_synthetic_records():
    s = parse_scenario(SCEN)
    rng = np.random.default_rng(1)
    alpha, tc = 0.6, 40e3
    full, comm = [], []
    for r in range(2):
        for it in range(3):
            tm = rng.uniform(20e3, 60e3)
            comm.append(IterationRecord("a", 0, r, it, 0.0, tm))
            full.append(IterationRecord("a", 0, r, it, 0.0, float(overlap_prediction(tc, tm, alpha))))
    rep = overlap_report(s, full, comm)["a"]
    assert rep["alpha"] == pytest.approx(alpha, abs=1e-9)
    assert rep["t_comp_us"] == pytest.approx(40.0)
    assert rep["mape_fitted_pct"] == pytest.approx(0.0, abs=1e-9)
    assert rep["mape_alpha1_pct"] > 1.0


def test_comm_only_copy_leaves_original():
    s = parse_scenario(SCEN)
    c = comm_only_scenario(s)
    assert c.jobs[0].compute.delay == 0 and s.jobs[0].compute.delay == 40e3


def test_overlap_command_end_to_end(tmp_path, capsys):
    p = tmp_path / "tiny.yaml"
    p.write_text(SCEN.replace("compute: {delay: 40us}", "compute:\n      kernels: [{name: k, W: 4.0e7}]") +
                 "machine:\n  cores per socket: 1\n  clock: 1 GHz\n  FLOPs per cycle: {DP: 1}\n"
                 "  memory hierarchy: [{level: DRAM, bandwidth: 10 GB/s}]\n")
    assert main(["overlap", str(p), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["jobs"]["a"]
    # the kernel: 4e7 FLOP at 1 GFLOP/s = 40 ms of compute before the allreduce
    assert rep["t_comp_us"] == pytest.approx(40e3)
    assert rep["records"] == 6
    # the engine runs the compute phase and then communicates: no overlap, alpha ~ 0, T_sim ~ T_comp + T_comm
    assert rep["alpha"] < 0.05
    assert rep["t_sim_mean_us"] == pytest.approx(rep["t_alpha0_mean_us"], rel=0.01)
    assert rep["t_alpha1_mean_us"] == pytest.approx(40e3)
