"""Compute time of a job's iteration from its kernels (roofline or ECM-style), on the CPU or the GPU of a node.

A job's ``compute:`` section may list kernels run by every rank at the start of every iteration::

    compute:
      delay: 2us                  # fixed part, still added
      kernels:
        - {name: stencil, W: 2.0e8, Q: {L1: 3.2e9, L2: 1.6e9, L3: 8.0e8, DRAM: 4.0e8}}
        - {name: fft, device: gpu, W: 5.0e9, precision: SP, Q: {DRAM: 2.0e9}, h2d: 6.4e7, d2h: 6.4e7, count: 2}

Per kernel (``count`` repetitions; ``tau_flop = 1 / peak``, ``tau_l = 1 / bandwidth_l``):

* roofline: ``t = max(W*tau_flop, max_l Q_l*tau_l)``
* ecm:      ``t = max(W*tau_flop, sum_l Q_l*tau_l)`` (in-core work overlaps, data transfers between levels do not;
  the ECM model of Treibig and Hager with the L1 term standing for the non-overlapping loads)
* a GPU kernel adds ``launch latency + (h2d + d2h) / host link bandwidth`` (transfers are not overlapped).

The compute phase of an iteration is ``delay + sum over kernels of count * t`` (kernels run one after another).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Optional

from pydantic import Field, ValidationError, model_validator

from hybridsim_common.yamlio import format_validation_error
from .machine import LEVEL_SYNONYMS, Machine, MachineError, Precision, _M, _node_for, _scenario_text, \
    machine_for_scenario


class Kernel(_M):
    """One kernel of a compute phase: ``W`` FLOPs and ``Q[level]`` bytes per execution."""

    name: Optional[str] = None
    device: Literal["cpu", "gpu"] = "cpu"
    W: float = Field(0.0, ge=0, allow_inf_nan=False, description="floating-point operations per execution")
    precision: Precision = "DP"
    Q: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="bytes per memory level per execution")
    count: float = Field(1.0, ge=0, allow_inf_nan=False, description="executions per iteration")
    model: Optional[Literal["roofline", "ecm"]] = Field(None, description="default: the machine's compute model")
    h2d: float = Field(0.0, ge=0, description="bytes copied host -> device per execution (gpu kernels)")
    d2h: float = Field(0.0, ge=0, description="bytes copied device -> host per execution (gpu kernels)")

    @model_validator(mode="after")
    def _check(self) -> "Kernel":
        canon: dict[str, float] = {}
        for k, v in self.Q.items():
            name = LEVEL_SYNONYMS.get(k, k)
            if name in canon:
                raise ValueError(f"Q: level {name} given twice (MEM, HBM and DRAM are the same level)")
            canon[name] = float(v)
        self.Q = canon
        if self.device == "cpu" and (self.h2d or self.d2h):
            raise ValueError("h2d/d2h transfers only apply to device: gpu kernels")
        return self

    @property
    def label(self) -> str:
        return self.name or "<unnamed>"


@dataclass(frozen=True)
class KernelTiming:
    """Time of one kernel (all its ``count`` executions) in seconds, and what bounds it."""

    kernel: Kernel
    time_s: float          # count * (max(...) + launch + transfers)
    busy_s: float          # count * max(...): the part where the device computes
    transfer_s: float      # count * (h2d + d2h) / link
    bound: str             # 'FLOP', a level name, or 'data' (ecm sum)
    terms_s: dict          # per execution: 'FLOP' and each level's Q*tau


def _device(machine: Machine, kernel: Kernel):
    """(peak FLOP/s, level bandwidths) of the device a kernel runs on; raises ``KeyError``/``ValueError``."""
    if kernel.device == "gpu":
        if machine.gpu is None:
            raise ValueError("device: gpu but the machine has no gpu section")
        g = machine.gpu
        if kernel.precision not in g.precisions:
            raise ValueError(f"the machine's gpu has no peak for precision {kernel.precision} "
                             f"(has {', '.join(g.precisions)})")
        return g.peak(kernel.precision), g.levels()
    if kernel.precision not in machine.precisions:
        raise ValueError(f"the machine has no peak for precision {kernel.precision} "
                         f"(has {', '.join(machine.precisions)})")
    return machine.peak(kernel.precision), machine.levels()


def check_kernel(machine: Machine, kernel: Kernel) -> None:
    """Raise ``ValueError`` if ``kernel`` names a level or precision the machine (or its GPU) lacks."""
    _, levels = _device(machine, kernel)
    unknown = [k for k in kernel.Q if k not in levels]
    if unknown:
        raise ValueError(f"Q: unknown memory level(s) {', '.join(unknown)} for the {kernel.device} "
                         f"(levels: {', '.join(levels)})")


def kernel_timing(machine: Machine, kernel: Kernel, model: str | None = None) -> KernelTiming:
    peak, levels = _device(machine, kernel)
    terms = {"FLOP": kernel.W / peak}
    for name, q in kernel.Q.items():
        if name not in levels:
            raise ValueError(f"kernel {kernel.label!r}: unknown memory level {name!r} (levels: {', '.join(levels)})")
        terms[name] = q / levels[name]
    model = model or kernel.model or machine.compute_model
    data = {k: v for k, v in terms.items() if k != "FLOP"}
    if model == "roofline":
        bound = max(terms, key=lambda k: terms[k])
        t = terms[bound]
    elif model == "ecm":
        sdata = sum(data.values())
        bound = "FLOP" if terms["FLOP"] >= sdata else "data"
        t = max(terms["FLOP"], sdata)
    else:
        raise ValueError(f"unknown compute model {model!r} (roofline, ecm)")
    transfer = 0.0
    launch = 0.0
    if kernel.device == "gpu":
        g = machine.gpu
        transfer = (kernel.h2d + kernel.d2h) / (g.host_link_bandwidth * g.count)
        launch = g.launch_latency
    n = kernel.count
    return KernelTiming(kernel, n * (t + launch + transfer), n * t, n * transfer, bound, terms)


def kernel_time_s(machine: Machine, kernel: Kernel, model: str | None = None) -> float:
    """Seconds for all ``count`` executions of ``kernel`` (including GPU launch and host transfers)."""
    return kernel_timing(machine, kernel, model).time_s


# --------------------------------------------------------------------------------------------------------- scenarios
def job_kernels(scenario, job_index: int, machine: Machine | None = None) -> list[Kernel]:
    """Validated kernels of job ``job_index`` (empty if it has none). Errors name the file, line, job and kernel."""
    job = scenario.jobs[job_index]
    raw = job.compute.kernels
    if not raw:
        return []
    root = None
    filename = "<scenario>"
    problems: list[str] = []
    kernels: list[Kernel] = []
    located = False

    def locate():
        nonlocal root, filename, located
        if not located:
            root, filename = _scenario_text(scenario)
            located = True

    if machine is None:
        machine = machine_for_scenario(scenario)
    for k, item in enumerate(raw):
        prefix = ("jobs", job_index, "compute", "kernels", k)
        kname = item.get("name") if isinstance(item, dict) else None
        label = f"(job {job.name!r}, kernel {kname!r})" if kname else f"(job {job.name!r}, kernel #{k})"
        try:
            kern = Kernel.model_validate(item)
        except ValidationError as exc:
            locate()
            problems.extend(format_validation_error(exc, root, filename, Kernel, prefix, label))
            continue
        if machine is None:
            locate()
            node = _node_for(root, prefix) if root is not None else None
            where = f"{filename}:{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node else filename
            problems.append(f"{where}: {'.'.join(map(str, prefix))} {label}: the job has compute kernels but the "
                            f"scenario has no machine: section")
            break
        try:
            check_kernel(machine, kern)
        except ValueError as exc:
            locate()
            node = _node_for(root, prefix) if root is not None else None
            where = f"{filename}:{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node else filename
            problems.append(f"{where}: {'.'.join(map(str, prefix))} {label}: {exc}")
            continue
        kernels.append(kern)
    if problems:
        raise MachineError("\n".join(problems), problems)
    return kernels


class _Cache:
    """Compute phases per (scenario object, job): the scenario's sections are re-checked by identity, so a caller
    that replaces ``machine`` or a job's ``compute`` gets fresh values."""

    def __init__(self):
        self._d: dict = {}

    def get(self, scenario, job_index: int):
        ent = self._d.get((id(scenario), job_index))
        if ent is None:
            return None
        sc, machine_sec, compute, delay, kernels, value = ent
        job = scenario.jobs[job_index]
        if sc is scenario and machine_sec is scenario.machine and compute is job.compute \
                and delay == job.compute.delay and kernels is job.compute.kernels:
            return value
        return None

    def put(self, scenario, job_index: int, value) -> None:
        if len(self._d) > 4096:
            self._d.clear()
        job = scenario.jobs[job_index]
        self._d[(id(scenario), job_index)] = (scenario, scenario.machine, job.compute, job.compute.delay,
                                              job.compute.kernels, value)


_cache = _Cache()


@dataclass(frozen=True)
class ComputePhase:
    """Modelled compute phase of one iteration of one rank of a job."""

    delay_ns: float
    kernels: tuple[KernelTiming, ...]

    @property
    def kernels_ns(self) -> float:
        return sum(k.time_s for k in self.kernels) * 1e9

    @property
    def total_ns(self) -> float:
        return self.delay_ns + self.kernels_ns

    @property
    def gpu_busy_s(self) -> float:
        return sum(k.busy_s for k in self.kernels if k.kernel.device == "gpu")


def compute_phase(scenario, job_index: int, machine: Machine | None = None) -> ComputePhase:
    explicit = machine
    cached = _cache.get(scenario, job_index) if machine is None else None
    if cached is not None:
        return cached
    job = scenario.jobs[job_index]
    if machine is None and job.compute.kernels:
        machine = machine_for_scenario(scenario)
    kernels = job_kernels(scenario, job_index, machine)
    phase = ComputePhase(float(job.compute.delay), tuple(kernel_timing(machine, k) for k in kernels))
    if explicit is None:
        _cache.put(scenario, job_index, phase)
    return phase


def compute_phase_ns(scenario, job_index: int) -> float:
    """Compute time (ns) every rank of job ``job_index`` spends at the start of each iteration:
    ``job.compute.delay`` plus its kernels on the scenario's machine. Raises :class:`MachineError` (a
    ``ScenarioError``) for bad kernels or machine sections."""
    return compute_phase(scenario, job_index).total_ns


def check_scenario(scenario) -> Machine | None:
    """Validate the machine section and every job's kernels up front (raises :class:`MachineError`)."""
    machine = machine_for_scenario(scenario)
    problems: list[str] = []
    for j in range(len(scenario.jobs)):
        try:
            job_kernels(scenario, j, machine)
        except MachineError as exc:
            problems.extend(exc.problems)
    if problems:
        raise MachineError("\n".join(problems), problems)
    return machine
