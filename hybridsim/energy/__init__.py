"""Node model: compute time (roofline / ECM) and energy of a job's iterations on a described machine.

After the ESCAPE D3.5 / DCworms models: a kernel does ``W`` floating-point operations and moves ``Q_l`` bytes through
memory level ``l``; its time is ``max(W*tau_flop, max_l Q_l*tau_l)`` (roofline) or ``max(W*tau_flop, sum_l
Q_l*tau_l)`` (ECM-style), and its energy ``W*eps_flop + sum_l Q_l*eps_l`` plus static power ``P0`` over the whole
iteration. See ``docs/energy.md``.

Modules: :mod:`.machine` (machine files), :mod:`.roofline` (kernels, compute time), :mod:`.energy` (energy report),
:mod:`.overlap` (the perfect-overlap check), :mod:`.calibrate` (NNLS fit of the coefficients), :mod:`.cli`.
"""

from __future__ import annotations

_EXPORTS = {"Machine": "machine", "MachineError": "machine", "load_machine": "machine",
            "machine_for_scenario": "machine", "Kernel": "roofline", "compute_phase_ns": "roofline",
            "job_kernels": "roofline", "kernel_time_s": "roofline"}
__all__ = list(_EXPORTS)


def __getattr__(name):  # lazy: importing hybridsim.energy.cli (the CLI's command table) stays cheap
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
