"""Calibration: NNLS recovers known coefficients, transfers to a machine differing in peak and bandwidth, and reports
bad measurement rows with their line numbers."""

from pathlib import Path

import numpy as np
import pytest

from hybridsim.cli import main
from hybridsim.energy.calibrate import CalibrationError, calibrate, fitted_machine, parse_measurements, \
    predict_rows, synthetic_csv, synthetic_kernels, transfer_machine
from hybridsim.energy.machine import Machine, load_machine

ROOT = Path(__file__).resolve().parents[1]
HASWELL = ROOT / "examples" / "machines" / "haswell-ep.yaml"


def _scaled(m: Machine, peak=1.0, bw=None, eps=1.0, name=None) -> Machine:
    """``m`` with its peak and level bandwidths multiplied (``bw``: level -> factor) and energies scaled."""
    d = m.model_dump(by_alias=True)
    d["clock"] = d["clock"] * peak
    for e in d["memory hierarchy"]:
        e["bandwidth"] *= (bw or {}).get(e["level"], 1.0)
        e["energy per byte"] *= eps
    d["energy per flop"] = {k: v * eps for k, v in d["energy per flop"].items()}
    if name:
        d["model name"] = name
    return Machine.model_validate(d)


def _true(m):
    levels = list(m.levels())
    tau = np.array([m.tau_flop()] + [m.tau(lv) for lv in levels])
    eps = np.array([m.eps_flop()] + [m.eps_level(lv) for lv in levels] + [m.static_power.total])
    return tau, eps


@pytest.mark.parametrize("model", ["roofline", "ecm"])
def test_recovers_known_coefficients_within_1pct(model):
    truth = load_machine(HASWELL)
    # start from a machine file that is wrong by 20-40 %
    prior = _scaled(truth, peak=1.3, bw={"L1": 0.7, "L2": 1.4, "L3": 0.8, "DRAM": 0.6}, eps=2.0)
    X = synthetic_kernels(truth, 150, seed=11, model=model)
    meas = parse_measurements(synthetic_csv(truth, X, noise=0.001, seed=11, model=model), prior)
    res = calibrate(meas, prior, model=model)
    tau, eps = _true(truth)
    assert res.tau_identified.all()
    np.testing.assert_allclose(res.tau, tau, rtol=0.01)
    np.testing.assert_allclose(res.eps, eps, rtol=0.01)
    for key in ("time_in_sample", "time_leave_one_out", "energy_in_sample", "energy_leave_one_out"):
        assert res.errors[key]["mean_abs_pct"] < 0.5


def test_noise_free_fit_is_exact_and_written_machine_reproduces_it(tmp_path):
    truth = load_machine(HASWELL)
    prior = _scaled(truth, peak=0.8, bw={"DRAM": 1.5})
    X = synthetic_kernels(truth, 60, seed=2)
    meas = parse_measurements(synthetic_csv(truth, X, seed=2), prior)
    res = calibrate(meas, prior, loo=False)
    fm = fitted_machine(prior, res)
    assert fm.peak("DP") == pytest.approx(truth.peak("DP"), rel=1e-9)
    assert fm.levels()["DRAM"] == pytest.approx(115e9, rel=1e-9)
    assert fm.static_power.total == pytest.approx(86.0, rel=1e-9)
    # split of P0 between package and DRAM kept from the prior (70:16)
    assert fm.static_power.package / fm.static_power.DRAM == pytest.approx(70 / 16)
    t, e = predict_rows(fm, meas.X, meas.levels)
    np.testing.assert_allclose(t, meas.time, rtol=1e-9)
    np.testing.assert_allclose(e, meas.energy, rtol=1e-9)


def test_fit_on_one_machine_predicts_another_differing_in_peak_and_bandwidth():
    sheet_a = load_machine(HASWELL)
    # machine B: a different part with 1.5x the peak and other bandwidths (its datasheet)
    sheet_b = _scaled(sheet_a, peak=1.5, bw={"L1": 1.2, "L2": 1.3, "L3": 1.1, "DRAM": 1.7}, name="B")
    # what the hardware really sustains: the same efficiencies on both parts
    eff = {"L1": 0.8, "L2": 0.6, "L3": 0.7, "DRAM": 0.85}
    real_a = _scaled(sheet_a, peak=0.9, bw=eff)
    real_b = _scaled(sheet_b, peak=0.9, bw=eff)
    X = synthetic_kernels(real_a, 120, seed=5)
    meas_a = parse_measurements(synthetic_csv(real_a, X, noise=0.001, seed=5), sheet_a)
    fit_a = fitted_machine(sheet_a, calibrate(meas_a, sheet_a, loo=False))
    pred_b = transfer_machine(fit_a, sheet_a, sheet_b)
    # new kernels, measured on B (noise-free truth)
    Xb = synthetic_kernels(real_b, 80, seed=6)
    t_true, e_true = predict_rows(real_b, Xb, list(real_b.levels()))
    t_pred, e_pred = predict_rows(pred_b, Xb, list(pred_b.levels()))
    assert np.max(np.abs(t_pred / t_true - 1)) < 0.01
    assert np.max(np.abs(e_pred / e_true - 1)) < 0.01
    # the datasheet of B alone (no fitted efficiencies) is far off on the same kernels
    t_sheet, _ = predict_rows(sheet_b, Xb, list(sheet_b.levels()))
    assert np.mean(np.abs(t_sheet / t_true - 1)) > 0.1


BAD = """\
name,W,Q_L1,Q_MEM,time,energy
ok1,1e9,1e9,1e8,0.01,1.0
neg,-1e9,1e9,1e8,0.01,1.0
# a comment line
missing,1e9,,1e8,0.01,1.0

text,1e9,1e9,lots,0.01,1.0
short,1e9,1e9
zero,1e9,1e9,1e8,0,1.0
ok2,2e9,1e9,1e8,0.02,2.0
"""


def test_bad_rows_reported_with_line_numbers(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text(BAD)
    with pytest.raises(CalibrationError) as ei:
        from hybridsim.energy.calibrate import read_measurements
        read_measurements(p, load_machine(HASWELL))
    assert ei.value.problems == [
        f"{p}:3: W: negative value -1e+09",
        f"{p}:5: Q_L1: missing value",
        f"{p}:7: Q_DRAM: not a number: 'lots'",
        f"{p}:8: expected 6 fields, got 3",
        f"{p}:9: time: must be > 0",
    ]


def test_bad_header():
    m = load_machine(HASWELL)
    with pytest.raises(CalibrationError) as ei:
        parse_measurements("W,Q_L4,walltime\n1,2,3\n", m, "x.csv")
    probs = ei.value.problems
    assert probs[0].startswith("x.csv:1: column 'Q_L4': the machine has no memory level 'L4'")
    assert probs[1].startswith("x.csv:1: unknown column 'walltime'")
    assert "x.csv:1: need a 'time' (s) and/or an 'energy' (J) column" in probs


def test_cli_calibrate_writes_fitted_machine(tmp_path, capsys):
    truth = load_machine(HASWELL)
    X = synthetic_kernels(truth, 40, seed=9)
    csv = tmp_path / "meas.csv"
    csv.write_text(synthetic_csv(truth, X, seed=9))
    out = tmp_path / "fit.yaml"
    assert main(["calibrate", str(csv), "--machine", str(HASWELL), "-o", str(out), "--no-loo"]) == 0
    printed = capsys.readouterr().out
    assert "tau_DRAM" in printed and "P0" in printed
    fit = load_machine(out)
    assert fit.levels()["DRAM"] == pytest.approx(115e9, rel=1e-6)
    bad = tmp_path / "bad.csv"
    bad.write_text(BAD)
    assert main(["calibrate", str(bad), "--machine", str(HASWELL)]) == 2
    assert f"{bad}:3: W: negative value" in capsys.readouterr().err
