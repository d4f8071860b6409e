"""Fit a machine's time and energy coefficients to measurements by non-negative least squares.

Input: a CSV file, one measured kernel per row, header on the first line::

    name,W,Q_L1,Q_L2,Q_L3,Q_DRAM,time,energy
    triad-8M,1.6e7,4.0e8,2.0e8,1.9e8,1.9e8,2.1e-3,0.62

``W`` FLOPs, ``Q_<level>`` bytes through each memory level of the machine (``Q_MEM`` = ``Q_DRAM``), ``time`` seconds,
``energy`` joules (node package + DRAM, e.g. RAPL). ``time`` or ``energy`` may be absent (that fit is skipped); text
columns ``name``/``kernel``/``note`` are ignored; blank lines and lines starting with ``#`` are skipped.

Time (the machine's roofline or ECM model, ``tau_flop``, ``tau_l`` >= 0)::

    roofline: t = max(W*tau_flop, max_l Q_l*tau_l)      ecm: t = max(W*tau_flop, sum_l Q_l*tau_l)

is piecewise linear, so it is fitted by alternating the assignment of each row to its binding term with an NNLS fit of
the coefficients on those terms (rows weighted by 1/t: relative errors), until the assignment stops changing; a term
that never binds keeps the machine's value (reported as not identified). Energy is linear::

    E = W*eps_flop + sum_l Q_l*eps_l + P0*t

and fitted by one NNLS (rows weighted by 1/E). Errors are reported in-sample and leave-one-out (each row predicted by
the fit on all other rows).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from .machine import LEVEL_SYNONYMS, Machine, MachineError

TEXT_COLUMNS = ("name", "kernel", "note")


class CalibrationError(ValueError):
    """Bad measurements file; ``problems`` lists each located problem (``file:line: message``)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


@dataclass
class Measurements:
    """Parsed measurement rows: ``X`` (n, 1 + levels) = [W, Q_level...], ``time``/``energy`` (n,) or ``None``."""

    levels: list[str]
    X: np.ndarray
    time: np.ndarray | None
    energy: np.ndarray | None
    names: list[str]
    lines: list[int]

    @property
    def columns(self) -> list[str]:
        return ["FLOP"] + self.levels

    def __len__(self) -> int:
        return self.X.shape[0]


def read_measurements(path: str | Path, machine: Machine) -> Measurements:
    """Parse and check a measurements CSV against ``machine``'s memory levels. Every bad cell is reported with its
    line number (the header is line 1) in one :class:`CalibrationError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CalibrationError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{path}: cannot read: {exc}") from None
    return parse_measurements(text, machine, str(path))


def parse_measurements(text: str, machine: Machine, filename: str = "<csv>") -> Measurements:
    reader = csv.reader(text.splitlines())
    header = None
    header_line = 0
    for row in reader:
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        header, header_line = [c.strip() for c in row], reader.line_num
        break
    if header is None:
        raise CalibrationError(f"{filename}:1: empty measurements file (expected a header like W,Q_DRAM,time)")
    machine_levels = list(machine.levels())
    problems = []
    col_index: dict[str, int] = {}
    levels: list[str] = []
    for i, name in enumerate(header):
        if name in TEXT_COLUMNS:
            col_index[name] = i
        elif name in ("W", "time", "energy"):
            col_index[name] = i
        elif name.startswith("Q_"):
            lvl = LEVEL_SYNONYMS.get(name[2:], name[2:])
            if lvl not in machine_levels:
                problems.append(f"{filename}:{header_line}: column {name!r}: the machine has no memory level "
                                f"{name[2:]!r} (levels: {', '.join(machine_levels)})")
                continue
            if lvl in levels:
                problems.append(f"{filename}:{header_line}: column {name!r}: level {lvl} appears twice")
                continue
            levels.append(lvl)
            col_index["Q_" + lvl] = i
        else:
            problems.append(f"{filename}:{header_line}: unknown column {name!r} (expected W, Q_<level> for levels "
                            f"{', '.join(machine_levels)}, time, energy, and optional name)")
        if name in ("W", "time", "energy") and header.count(name) > 1:
            problems.append(f"{filename}:{header_line}: column {name!r} appears twice")
    if "W" not in col_index:
        problems.append(f"{filename}:{header_line}: missing column 'W' (FLOPs)")
    if not levels:
        problems.append(f"{filename}:{header_line}: no Q_<level> column (bytes per memory level)")
    if "time" not in col_index and "energy" not in col_index:
        problems.append(f"{filename}:{header_line}: need a 'time' (s) and/or an 'energy' (J) column")
    if problems:
        raise CalibrationError("\n".join(problems), problems)
    levels = [lv for lv in machine_levels if lv in levels]  # machine order
    num_cols = ["W"] + ["Q_" + lv for lv in levels] + [c for c in ("time", "energy") if c in col_index]
    rows, names, lines = [], [], []
    for row in reader:
        line = reader.line_num
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if len(row) != len(header):
            problems.append(f"{filename}:{line}: expected {len(header)} fields, got {len(row)}")
            continue
        vals, bad = [], False
        for c in num_cols:
            cell = row[col_index[c]].strip()
            if cell == "":
                problems.append(f"{filename}:{line}: {c}: missing value")
                bad = True
                continue
            try:
                v = float(cell)
            except ValueError:
                problems.append(f"{filename}:{line}: {c}: not a number: {cell!r}")
                bad = True
                continue
            if not math.isfinite(v):
                problems.append(f"{filename}:{line}: {c}: not finite: {cell!r}")
                bad = True
            elif v < 0:
                problems.append(f"{filename}:{line}: {c}: negative value {v:g}")
                bad = True
            elif v == 0 and c in ("time", "energy"):
                problems.append(f"{filename}:{line}: {c}: must be > 0")
                bad = True
            vals.append(v)
        if bad:
            continue
        rows.append(vals)
        names.append(row[col_index["name"]].strip() if "name" in col_index else
                     row[col_index["kernel"]].strip() if "kernel" in col_index else f"line {line}")
        lines.append(line)
    if problems:
        raise CalibrationError("\n".join(problems), problems)
    if len(rows) < 2:
        raise CalibrationError(f"{filename}: need at least 2 measurement rows, got {len(rows)}")
    arr = np.asarray(rows, dtype=np.float64)
    m = 1 + len(levels)
    k = m
    time = energy = None
    if "time" in col_index:
        time = arr[:, k]
        k += 1
    if "energy" in col_index:
        energy = arr[:, k]
    return Measurements(levels, arr[:, :m], time, energy, names, lines)


# --------------------------------------------------------------------------------------------------------- fitting
def _groups(model: str, m: int) -> list[list[int]]:
    if model == "roofline":
        return [[c] for c in range(m)]
    if model == "ecm":
        return [[0], list(range(1, m))]
    raise ValueError(f"unknown model {model!r} (roofline, ecm)")


def predict_time(X: np.ndarray, tau: np.ndarray, model: str) -> np.ndarray:
    """``max`` over the model's term groups of ``sum_{c in group} X[:, c] * tau[c]``."""
    return np.max(np.stack([X[:, g] @ tau[g] for g in _groups(model, X.shape[1])], axis=1), axis=1)


def _nnls_weighted(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NNLS of ``A x ~ y`` in relative terms (rows / y), columns scaled for conditioning; zero columns give 0."""
    w = 1.0 / y
    Aw = A * w[:, None]
    norms = np.linalg.norm(Aw, axis=0)
    live = norms > 0
    x = np.zeros(A.shape[1])
    if live.any():
        sol, _ = nnls(Aw[:, live] / norms[live], np.ones_like(y), maxiter=50 * A.shape[1] + 100)
        x[live] = sol / norms[live]
    return x


def fit_time(X: np.ndarray, t: np.ndarray, prior: np.ndarray, model: str = "roofline",
             max_iter: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Fit ``tau`` of a roofline/ECM time model. Returns ``(tau, identified)``: coefficients and a boolean mask of
    those the data determined (the others keep ``prior``)."""
    groups = _groups(model, X.shape[1])
    starts = [np.asarray(prior, dtype=np.float64)]
    # a second start from the data alone: each coefficient as if its column alone explained the time
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(X > 0, t[:, None] / X, np.nan)
    alt = np.nanmedian(np.where(np.isfinite(ratio), ratio, np.nan), axis=0) if np.isfinite(ratio).any() else None
    if alt is not None:
        alt = np.where(np.isfinite(alt), alt, starts[0])
        starts.append(alt * 0.5)
    best = None
    for start in starts:
        tau = start.copy()
        ident = np.zeros(X.shape[1], dtype=bool)
        assign = None
        for _ in range(max_iter):
            terms = np.stack([X[:, g] @ tau[g] for g in groups], axis=1)
            new_assign = np.argmax(terms, axis=1)
            if assign is not None and np.array_equal(new_assign, assign):
                break
            assign = new_assign
            A = np.zeros_like(X)
            for gi, g in enumerate(groups):
                rows = assign == gi
                A[np.ix_(rows, g)] = X[np.ix_(rows, g)]
            sol = _nnls_weighted(A, t)
            ident = np.linalg.norm(A, axis=0) > 0
            tau = np.where(ident, sol, start)
        loss = float(np.sum(((predict_time(X, tau, model) - t) / t) ** 2))
        if best is None or loss < best[0]:
            best = (loss, tau, ident)
    return best[1], best[2]


def fit_energy(X: np.ndarray, t: np.ndarray, e: np.ndarray) -> np.ndarray:
    """NNLS of ``E = X @ eps + P0 * t``; returns ``[eps_flop, eps_levels..., P0]``."""
    return _nnls_weighted(np.column_stack([X, t]), e)


def _errors(pred: np.ndarray, meas: np.ndarray) -> dict:
    rel = np.abs(pred - meas) / meas * 100
    return {"mean_abs_pct": float(rel.mean()), "max_abs_pct": float(rel.max()),
            "rms_pct": float(np.sqrt(np.mean(rel ** 2)))}


@dataclass
class CalibrationResult:
    levels: list[str]
    model: str
    precision: str
    tau: np.ndarray | None = None          # [tau_flop, tau_level...] s/FLOP, s/B
    tau_identified: np.ndarray | None = None
    eps: np.ndarray | None = None          # [eps_flop, eps_level..., P0] J/FLOP, J/B, W
    errors: dict = field(default_factory=dict)
    n: int = 0

    def summary(self) -> dict:
        cols = ["FLOP"] + self.levels
        out: dict = {"rows": self.n, "model": self.model, "precision": self.precision, "errors": self.errors}
        if self.tau is not None:
            out["time"] = {c: {"tau": float(self.tau[i]), "identified": bool(self.tau_identified[i]),
                               "rate": (1.0 / self.tau[i]) if self.tau[i] > 0 else None}
                           for i, c in enumerate(cols)}
        if self.eps is not None:
            out["energy"] = {**{c: float(self.eps[i]) for i, c in enumerate(cols)}, "P0": float(self.eps[-1])}
        return out


def calibrate(meas: Measurements, machine: Machine, model: str | None = None, precision: str = "DP",
              loo: bool = True) -> CalibrationResult:
    """Fit the time (if measured) and energy (if measured) coefficients; in-sample and leave-one-out errors."""
    model = model or machine.compute_model
    if precision not in machine.precisions:
        raise CalibrationError(f"the machine has no peak for precision {precision} "
                               f"(has {', '.join(machine.precisions)})")
    res = CalibrationResult(meas.levels, model, precision, n=len(meas))
    X, n = meas.X, len(meas)
    if meas.time is not None:
        prior = np.array([machine.tau_flop(precision)] + [machine.tau(lv) for lv in meas.levels])
        res.tau, res.tau_identified = fit_time(X, meas.time, prior, model)
        res.errors["time_in_sample"] = _errors(predict_time(X, res.tau, model), meas.time)
        if loo:
            pred = np.empty(n)
            for i in range(n):
                keep = np.arange(n) != i
                tau_i, _ = fit_time(X[keep], meas.time[keep], res.tau, model)
                pred[i] = predict_time(X[i:i + 1], tau_i, model)[0]
            res.errors["time_leave_one_out"] = _errors(pred, meas.time)
    if meas.energy is not None:
        if meas.time is None:
            raise CalibrationError("an energy fit needs the measured 'time' column (static power P0 * t)")
        res.eps = fit_energy(X, meas.time, meas.energy)
        A = np.column_stack([X, meas.time])
        res.errors["energy_in_sample"] = _errors(A @ res.eps, meas.energy)
        if loo:
            pred = np.empty(n)
            for i in range(n):
                keep = np.arange(n) != i
                pred[i] = A[i] @ fit_energy(X[keep], meas.time[keep], meas.energy[keep])
            res.errors["energy_leave_one_out"] = _errors(pred, meas.energy)
    return res


def fitted_machine(machine: Machine, res: CalibrationResult) -> Machine:
    """``machine`` with the fitted coefficients: peak and bandwidths from ``tau`` (identified, non-zero ones),
    energy per FLOP / per byte, and static power scaled to the fitted ``P0`` (package:DRAM split kept)."""
    d = machine.model_dump(by_alias=True, exclude_none=True)
    d["compute model"] = res.model
    if res.tau is not None:
        if res.tau_identified[0] and res.tau[0] > 0:
            d.setdefault("peak FLOP/s", {})[res.precision] = 1.0 / res.tau[0]
        for i, lv in enumerate(res.levels, start=1):
            if res.tau_identified[i] and res.tau[i] > 0:
                for entry in d["memory hierarchy"]:
                    if entry["level"] == lv:
                        entry["bandwidth"] = 1.0 / res.tau[i]
    if res.eps is not None:
        d.setdefault("energy per flop", {})[res.precision] = float(res.eps[0])
        for i, lv in enumerate(res.levels, start=1):
            for entry in d["memory hierarchy"]:
                if entry["level"] == lv:
                    entry["energy per byte"] = float(res.eps[i])
        p0 = float(res.eps[-1])
        sp = machine.static_power
        share = sp.package / sp.total if sp.total > 0 else 1.0
        d["static power"] = {"package": p0 * share, "DRAM": p0 * (1 - share)}
    d["source"] = (d.get("source", "") + " | " if d.get("source") else "") + \
        f"coefficients fitted by hybridsim calibrate ({res.model}, {res.n} rows)"
    try:
        return Machine.model_validate(d)
    except Exception as exc:  # pragma: no cover - the fitted values are positive by construction
        raise MachineError(f"fitted machine is invalid: {exc}") from None


def transfer_machine(fitted: Machine, reference: Machine, target: Machine) -> Machine:
    """Carry a fit made on ``reference`` to ``target``, a machine that differs in peak and bandwidths: each fitted
    rate keeps its efficiency (fitted / reference datasheet value) and is applied to the target's datasheet value;
    energies, static power and the compute model come from the fit."""
    d = target.model_dump(by_alias=True, exclude_none=True)
    d["compute model"] = fitted.compute_model
    d["energy per flop"] = dict(fitted.energy_per_flop)
    d["static power"] = fitted.static_power.model_dump(by_alias=True)
    d["network"] = fitted.network.model_dump(by_alias=True)
    peaks = {}
    for p in target.precisions:
        if p in fitted.precisions and p in reference.precisions:
            peaks[p] = target.peak(p) * fitted.peak(p) / reference.peak(p)
    d["peak FLOP/s"] = peaks
    ref_bw, fit_bw = reference.levels(), fitted.levels()
    for entry in d["memory hierarchy"]:
        lv = entry["level"]
        if lv in ref_bw and lv in fit_bw:
            entry["bandwidth"] = entry["bandwidth"] * fit_bw[lv] / ref_bw[lv]
            entry["energy per byte"] = fitted.eps_level(lv)
    d["source"] = f"transferred from a fit on {reference.model_name} by hybridsim calibrate"
    return Machine.model_validate(d)


def format_calibration(res: CalibrationResult) -> str:
    lines = [f"{res.n} rows, {res.model} time model, precision {res.precision}"]
    cols = ["FLOP"] + res.levels
    if res.tau is not None:
        lines.append("time coefficients:")
        for i, c in enumerate(cols):
            rate = (1.0 / res.tau[i]) if res.tau[i] > 0 else float("inf")
            unit = "GFLOP/s" if c == "FLOP" else "GB/s"
            tag = "" if res.tau_identified[i] else "   (not identified: kept from the machine file)"
            lines.append(f"  tau_{c:<6} = {res.tau[i]:.6g} s/{'FLOP' if c == 'FLOP' else 'B'}"
                         f"  ({rate / 1e9:.6g} {unit}){tag}")
    if res.eps is not None:
        lines.append("energy coefficients:")
        for i, c in enumerate(cols):
            lines.append(f"  eps_{c:<6} = {res.eps[i] * 1e12:.6g} pJ/{'FLOP' if c == 'FLOP' else 'B'}")
        lines.append(f"  P0         = {res.eps[-1]:.6g} W")
    lines.append("errors (|predicted - measured| / measured):")
    for k, v in res.errors.items():
        lines.append(f"  {k:<22} mean {v['mean_abs_pct']:.3f} %   max {v['max_abs_pct']:.3f} %   "
                     f"rms {v['rms_pct']:.3f} %")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------- synthetic
def predict_rows(machine: Machine, X: np.ndarray, levels: list[str], precision: str = "DP",
                 model: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Time (s) and energy (J) of each row ``[W, Q_level...]`` run as a CPU kernel on ``machine``, through
    :mod:`.roofline` (not the fitting code): ``E = W*eps_flop + sum Q*eps + P0*t``."""
    from .roofline import Kernel, kernel_time_s

    t = np.empty(len(X))
    e = np.empty(len(X))
    for i, row in enumerate(X):
        k = Kernel(W=float(row[0]), precision=precision, Q={lv: float(q) for lv, q in zip(levels, row[1:])})
        t[i] = kernel_time_s(machine, k, model)
        e[i] = k.W * machine.eps_flop(precision) + sum(q * machine.eps_level(lv) for lv, q in k.Q.items()) \
            + machine.static_power.total * t[i]
    return t, e


def synthetic_kernels(machine: Machine, n: int, seed: int = 0, precision: str = "DP",
                      model: str = "roofline") -> np.ndarray:
    """``n`` rows ``[W, Q_level...]`` (machine levels, in order) spread so that every term of ``model`` binds for
    about the same share of rows on ``machine``: the binding term takes the row's whole time (log-uniform in
    [0.1, 10] ms), the others 5-90 % of it."""
    rng = np.random.default_rng(seed)
    levels = list(machine.levels())
    tau = np.array([machine.tau_flop(precision)] + [machine.tau(lv) for lv in levels])
    m = len(tau)
    groups = _groups(model, m)
    X = np.empty((n, m))
    for i in range(n):
        t = 10 ** rng.uniform(-4, -2)
        b = int(rng.integers(len(groups)))
        share = np.empty(len(groups))
        share[:] = rng.uniform(0.05, 0.9, len(groups))
        share[b] = 1.0
        for gi, g in enumerate(groups):
            split = rng.dirichlet(np.ones(len(g))) if len(g) > 1 else np.ones(1)
            for c, s in zip(g, split):
                X[i, c] = t * share[gi] * s / tau[c]
    return X


def synthetic_csv(machine: Machine, X: np.ndarray, noise: float = 0.0, seed: int = 0, precision: str = "DP",
                  model: str | None = None) -> str:
    """A measurements CSV for kernels ``X`` run on ``machine``, time and energy with multiplicative Gaussian noise
    of relative size ``noise``."""
    rng = np.random.default_rng(seed + 1)
    levels = list(machine.levels())
    t, _ = predict_rows(machine, X, levels, precision, model)
    t = t * (1 + noise * rng.standard_normal(len(t)))
    e = X[:, 0] * machine.eps_flop(precision) + X[:, 1:] @ np.array([machine.eps_level(lv) for lv in levels]) \
        + machine.static_power.total * t
    e = e * (1 + noise * rng.standard_normal(len(e)))
    lines = ["name,W," + ",".join(f"Q_{lv}" for lv in levels) + ",time,energy"]
    for i in range(len(X)):
        lines.append(f"k{i}," + ",".join(f"{v:.17g}" for v in X[i]) + f",{t[i]:.17g},{e[i]:.17g}")
    return "\n".join(lines) + "\n"
