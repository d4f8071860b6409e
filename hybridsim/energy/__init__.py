"""Node model: compute time (roofline / ECM) and energy of a job's iterations on a described machine.

After the ESCAPE D3.5 / DCworms models: a kernel does ``W`` floating-point operations and moves ``Q_l`` bytes through
memory level ``l``; its time is ``max(W*tau_flop, max_l Q_l*tau_l)`` (roofline) or ``max(W*tau_flop, sum_l
Q_l*tau_l)`` (ECM-style), and its energy ``W*eps_flop + sum_l Q_l*eps_l`` plus static power ``P0`` over the whole
iteration. See ``docs/energy.md``.

Modules: :mod:`.machine` (machine files), :mod:`.roofline` (kernels, compute time), :mod:`.energy` (energy report),
:mod:`.overlap` (the perfect-overlap check), :mod:`.calibrate` (NNLS fit of the coefficients), :mod:`.cli`.
"""

from .machine import Machine, MachineError, load_machine, machine_for_scenario
from .roofline import Kernel, compute_phase_ns, job_kernels, kernel_time_s

__all__ = ["Machine", "MachineError", "load_machine", "machine_for_scenario", "Kernel", "compute_phase_ns",
           "job_kernels", "kernel_time_s"]
