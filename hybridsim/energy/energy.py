"""Energy of a run: per rank and iteration, ``E = sum_k (W_k*eps_flop + sum_l Q_kl*eps_l) + P0*T``.

``T`` is the rank's whole iteration time as simulated (``end - start``), so time spent waiting on communication costs
static power: energy does not overlap. A node with a GPU adds ``P_idle*T + (P_active - P_idle)*T_gpu_busy`` per
device (the ESCAPE D3.5 GPU model ``E = T*(E_idle + S*E_gpu)`` written with powers). The network adds
``eps_net * byte_hops`` (bytes times links traversed, terminal links included) when the backend reports link bytes.

Per job: time-to-solution (last iteration end - first iteration start), energy-to-solution (sum over its ranks'
iterations) and the energy-delay product ``E * T``; and the same for the whole run.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

import numpy as np

from .machine import Machine, machine_for_scenario
from .roofline import ComputePhase, compute_phase


def dynamic_energy_J(machine: Machine, phase: ComputePhase) -> dict:
    """Dynamic CPU energy of one iteration's kernels, split into ``flops`` and per-level ``memory``."""
    flops = 0.0
    memory: dict[str, float] = {name: 0.0 for name in machine.levels()}
    for kt in phase.kernels:
        k = kt.kernel
        if k.device != "cpu":
            continue
        flops += k.count * k.W * machine.eps_flop(k.precision)
        for name, q in k.Q.items():
            memory[name] += k.count * q * machine.eps_level(name)
    return {"flops": flops, "memory": memory}


def _byte_hops(link_bytes: Any) -> tuple[dict[str, float], float]:
    """(per-job byte-hops, unattributed byte-hops) from what a backend reports.

    A hop is one router output port traversed (router-router links and the ejection link to the terminal), so the
    byte-hops of a run are the sum of the bytes sent out of every router port. Accepted: ``None``; a number (total
    byte-hops); an array of bytes per port (summed); the engine's ``SimulationResult.link_totals`` (a mapping with a
    ``"bytes"`` array); a mapping with ``"jobs"`` (job name -> byte-hops) and optionally ``"bytes"``/``"total"`` (the
    rest is unattributed); or a plain mapping job name -> byte-hops."""
    if link_bytes is None:
        return {}, 0.0
    if isinstance(link_bytes, (int, float, np.number)):
        return {}, float(link_bytes)
    if isinstance(link_bytes, Mapping):
        total = None
        for key in ("bytes", "total"):
            if key in link_bytes:
                total = float(np.sum(np.asarray(link_bytes[key], dtype=np.float64)))
                break
        if "jobs" in link_bytes and isinstance(link_bytes["jobs"], Mapping):
            per_job = {str(k): float(np.sum(v)) for k, v in link_bytes["jobs"].items()}
            rest = max(0.0, total - sum(per_job.values())) if total is not None else 0.0
            return per_job, rest
        if total is not None:
            return {}, total
        return {str(k): float(np.sum(v)) for k, v in link_bytes.items()}, 0.0
    return {}, float(np.sum(np.asarray(link_bytes, dtype=np.float64)))


def energy_report(scenario, records, link_bytes=None, machine: Machine | None = None) -> dict:
    """Time-to-solution, energy-to-solution and energy-delay product per job and in total.

    ``records``: the run's :class:`~hybridsim_common.records.IterationRecord` s (simulated and predicted alike).
    ``link_bytes``: optional network traffic (see :func:`_byte_hops`). Times in s, energies in J, EDP in J*s.
    Without a ``machine:`` section energies are ``None`` and only times are reported."""
    if machine is None:
        machine = machine_for_scenario(scenario)
    by_job: dict[str, list] = defaultdict(list)
    for r in records:
        by_job[r.job].append(r)
    net_jobs, net_rest = _byte_hops(link_bytes)
    eps_net = machine.network.energy_per_byte_per_hop if machine is not None else 0.0
    notes: list[str] = []
    if machine is None:
        notes.append("no machine: section: energies not computed")
    if link_bytes is None and machine is not None and eps_net > 0:
        notes.append("no link byte counts from the backend: network energy not included")

    jobs_out: dict[str, dict] = {}
    t0_all, t1_all = np.inf, -np.inf
    e_total = 0.0 if machine is not None else None
    for j, job in enumerate(scenario.jobs):
        recs = by_job.get(job.name, [])
        phase = compute_phase(scenario, j, machine) if machine is not None or not job.compute.kernels else None
        n = len(recs)
        if n:
            starts = np.fromiter((r.start for r in recs), np.float64, n)
            ends = np.fromiter((r.end for r in recs), np.float64, n)
            t0, t1 = float(starts.min()), float(ends.max())
            busy_s = float(np.sum(ends - starts)) * 1e-9
            t0_all, t1_all = min(t0_all, t0), max(t1_all, t1)
            tts = (t1 - t0) * 1e-9
            iters = len({r.iteration for r in recs})
        else:
            busy_s, tts, iters = 0.0, 0.0, 0
        out: dict[str, Any] = {
            "ranks": job.ranks, "iterations": iters, "records": n,
            "time_to_solution_s": tts,
            "mean_iteration_s": busy_s / n if n else None,
            "compute_phase_s": phase.total_ns * 1e-9 if phase is not None else None,
        }
        if machine is not None:
            dyn = dynamic_energy_J(machine, phase)
            static = machine.static_power.total * busy_s
            gpu = 0.0
            if machine.gpu is not None:
                g = machine.gpu
                gpu = g.count * (g.idle_power * busy_s + (g.active_power - g.idle_power) * phase.gpu_busy_s * n)
            net = eps_net * net_jobs.get(job.name, 0.0)
            flops_e = dyn["flops"] * n
            mem_e = {k: v * n for k, v in dyn["memory"].items()}
            e = flops_e + sum(mem_e.values()) + static + gpu + net
            out.update({
                "energy_to_solution_J": e,
                "edp_Js": e * tts,
                "breakdown_J": {"flops": flops_e, "memory": mem_e, "static": static, "gpu": gpu, "network": net},
                "mean_power_W": e / tts if tts > 0 else None,
            })
            e_total += e
        else:
            out.update({"energy_to_solution_J": None, "edp_Js": None})
        jobs_out[job.name] = out
    unknown = sorted(set(by_job) - {j.name for j in scenario.jobs})
    if unknown:
        notes.append(f"records of unknown jobs ignored: {', '.join(unknown)}")
    tts_all = (t1_all - t0_all) * 1e-9 if np.isfinite(t0_all) else 0.0
    total: dict[str, Any] = {"time_to_solution_s": tts_all}
    if machine is not None:
        net_rest_e = eps_net * (net_rest + sum(v for k, v in net_jobs.items() if k not in jobs_out))
        e_total += net_rest_e
        total.update({"energy_to_solution_J": e_total, "edp_Js": e_total * tts_all,
                      "network_unattributed_J": net_rest_e})
    else:
        total.update({"energy_to_solution_J": None, "edp_Js": None})
    return {"machine": machine.model_name if machine is not None else None, "jobs": jobs_out, "total": total,
            "notes": notes}


def format_energy_table(report: dict) -> str:
    """Plain-text table of an :func:`energy_report`."""
    rows = [("job", "ranks", "iters", "TTS (s)", "E (J)", "EDP (J*s)", "mean P (W)")]
    for name, j in report["jobs"].items():
        rows.append((name, str(j["ranks"]), str(j["iterations"]), f"{j['time_to_solution_s']:.6g}",
                     _fmt(j.get("energy_to_solution_J")), _fmt(j.get("edp_Js")), _fmt(j.get("mean_power_W"))))
    t = report["total"]
    rows.append(("total", "", "", f"{t['time_to_solution_s']:.6g}", _fmt(t.get("energy_to_solution_J")),
                 _fmt(t.get("edp_Js")), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.6g}"
