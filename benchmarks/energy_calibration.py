"""Calibration accuracy on synthetic measurements (hybridsim.energy.calibrate).

For each example machine (its CPU) and time model, synthetic kernels are "measured" on the machine with
multiplicative Gaussian noise on time and energy; the fit starts from a machine file that is wrong by 20-40 % and
reports the largest coefficient error and the in-sample / leave-one-out prediction errors. A transfer check fits on
Haswell-EP and predicts a part with 1.5x the peak and different bandwidths (same efficiencies).

    python benchmarks/energy_calibration.py        # prints a table, writes benchmarks/out/energy_calibration.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsim.energy.calibrate import calibrate, fitted_machine, parse_measurements, predict_rows, \
    synthetic_csv, synthetic_kernels, transfer_machine  # noqa: E402
from hybridsim.energy.machine import Machine, load_machine  # noqa: E402

MACHINES = ["haswell-ep.yaml", "cpu-gpu-node.yaml"]


def scaled(m: Machine, peak=1.0, bw=None, eps=1.0, name=None) -> Machine:
    d = m.model_dump(by_alias=True)
    d["clock"] *= peak
    for e in d["memory hierarchy"]:
        e["bandwidth"] *= (bw or {}).get(e["level"], 1.0)
        e["energy per byte"] *= eps
    d["energy per flop"] = {k: v * eps for k, v in d["energy per flop"].items()}
    if name:
        d["model name"] = name
    return Machine.model_validate(d)


def truth(m: Machine, levels):
    tau = np.array([m.tau_flop()] + [m.tau(lv) for lv in levels])
    eps = np.array([m.eps_flop()] + [m.eps_level(lv) for lv in levels] + [m.static_power.total])
    return tau, eps


def main() -> int:
    rows = []
    n = 200
    for fname in MACHINES:
        m = load_machine(ROOT / "examples" / "machines" / fname)
        prior = scaled(m, peak=1.3, bw={"L1": 0.7, "L2": 1.4, "L3": 0.8, "DRAM": 0.6}, eps=2.0)
        for model in ("roofline", "ecm"):
            X = synthetic_kernels(m, n, seed=1, model=model)
            for noise in (0.0, 0.005, 0.02):
                meas = parse_measurements(synthetic_csv(m, X, noise=noise, seed=1, model=model), prior)
                t0 = time.perf_counter()
                res = calibrate(meas, prior, model=model)
                wall = time.perf_counter() - t0
                tau, eps = truth(m, meas.levels)
                rows.append({
                    "machine": m.model_name, "model": model, "rows": n, "noise_pct": noise * 100,
                    "max_tau_err_pct": float(np.max(np.abs(res.tau / tau - 1)) * 100),
                    "max_eps_err_pct": float(np.max(np.abs(res.eps / eps - 1)) * 100),
                    **{f"{k}_mean_pct": v["mean_abs_pct"] for k, v in res.errors.items()},
                    "fit_wall_s": wall,
                })
    # transfer: fit on Haswell-EP, predict a part with other peak/bandwidths and the same efficiencies
    sheet_a = load_machine(ROOT / "examples" / "machines" / "haswell-ep.yaml")
    sheet_b = scaled(sheet_a, peak=1.5, bw={"L1": 1.2, "L2": 1.3, "L3": 1.1, "DRAM": 1.7}, name="B")
    eff = {"L1": 0.8, "L2": 0.6, "L3": 0.7, "DRAM": 0.85}
    real_a, real_b = scaled(sheet_a, peak=0.9, bw=eff), scaled(sheet_b, peak=0.9, bw=eff)
    transfer = []
    for noise in (0.0, 0.005, 0.02):
        X = synthetic_kernels(real_a, n, seed=3)
        meas = parse_measurements(synthetic_csv(real_a, X, noise=noise, seed=3), sheet_a)
        pred_b = transfer_machine(fitted_machine(sheet_a, calibrate(meas, sheet_a, loo=False)), sheet_a, sheet_b)
        Xb = synthetic_kernels(real_b, 100, seed=4)
        lv = list(real_b.levels())
        t_true, e_true = predict_rows(real_b, Xb, lv)
        t_pred, e_pred = predict_rows(pred_b, Xb, lv)
        t_sheet, e_sheet = predict_rows(sheet_b, Xb, lv)
        transfer.append({
            "noise_pct": noise * 100,
            "time_mean_err_pct": float(np.mean(np.abs(t_pred / t_true - 1)) * 100),
            "time_max_err_pct": float(np.max(np.abs(t_pred / t_true - 1)) * 100),
            "energy_mean_err_pct": float(np.mean(np.abs(e_pred / e_true - 1)) * 100),
            "datasheet_only_time_mean_err_pct": float(np.mean(np.abs(t_sheet / t_true - 1)) * 100),
        })

    print(f"{'machine':<38}  {'model':<8}  {'noise%':>6}  {'max tau err%':>12}  {'max eps err%':>12}  "
          f"{'time in%':>8}  {'time LOO%':>9}  {'E in%':>7}  {'E LOO%':>7}  {'fit s':>5}")
    for r in rows:
        print(f"{r['machine'][:38]:<38}  {r['model']:<8}  {r['noise_pct']:>6.1f}  {r['max_tau_err_pct']:>12.3f}  "
              f"{r['max_eps_err_pct']:>12.3f}  {r['time_in_sample_mean_pct']:>8.3f}  "
              f"{r['time_leave_one_out_mean_pct']:>9.3f}  {r['energy_in_sample_mean_pct']:>7.3f}  "
              f"{r['energy_leave_one_out_mean_pct']:>7.3f}  {r['fit_wall_s']:>5.2f}")
    print("\ntransfer Haswell-EP fit -> part B (1.5x peak, 1.1-1.7x bandwidths, same efficiencies), 100 new kernels")
    print("noise%  time mean err%  time max err%  energy mean err%  datasheet-only time mean err%")
    for t in transfer:
        print(f"{t['noise_pct']:>5.1f}  {t['time_mean_err_pct']:>14.3f}  {t['time_max_err_pct']:>13.3f}  "
              f"{t['energy_mean_err_pct']:>16.3f}  {t['datasheet_only_time_mean_err_pct']:>29.2f}")
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "energy_calibration.json").write_text(json.dumps({"fits": rows, "transfer": transfer}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
